// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief launch() and plan_for() for runtime-API `__global__` functions, the spec and its factories: the
/// cheapest include that launches.
///
// launchfit/base.hpp — launch(kernel, spec, args...) for runtime-API __global__ functions, at the least
// compile cost: the spec, its factories (max_occupancy, bytes_in_flight, cooperative, fixed), launch() and
// plan_for(). It includes no `<string>`, `<memory>` or `<functional>`. launchfit/launch.hpp adds driver-API
// kernels, use(policy), planned(plan) and what plans and policies are made of (launchfit/plan.hpp,
// launchfit/policy.hpp).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "launchfit/builtin_policies.hpp"
#include "launchfit/detail/callable.hpp"
#include "launchfit/detail/launch_request.hpp"
#include "launchfit/detail/throw_error.hpp"
#include "launchfit/export.hpp"
#include "launchfit/launch_options.hpp"
#include "launchfit/work.hpp"

// The default stream is the translation unit's, as for <<<>>>: a file compiled with --default-stream
// per-thread (nvcc defines CUDA_API_PER_THREAD_DEFAULT_STREAM) launches on the per-thread stream when no
// stream is given (or 0 is given), any other file on the legacy stream. spec and its factories live in an
// inline namespace named after that choice, so every template that takes a spec (launch, plan_for, the
// request made from it) is a different symbol in files compiled each way and the linker never merges one into
// the other.
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#define LAUNCHFIT_DEFAULT_STREAM_NS default_stream_per_thread
#else
#define LAUNCHFIT_DEFAULT_STREAM_NS default_stream_legacy
#endif

namespace launchfit {

namespace detail {
// A class whose get() gives a cudaStream_t (cuda::stream_ref, cuda::stream, a unique_ptr holding a stream).
template <class S, class = void>
struct is_stream_wrapper : std::false_type {};
// Detected on get() alone, without enable_if_t around the void_t: nvcc's front end rewrote that form into one whose
// get() is always formed, so a class converting to cudaStream_t without a get() (rmm's cuda_stream_view, a
// program's own wrapper) was a hard error instead of the plain cudaStream_t overload.
template <class S>
struct is_stream_wrapper<S, std::void_t<decltype(std::declval<const S&>().get())>>
    : std::is_same<std::decay_t<decltype(std::declval<const S&>().get())>, cudaStream_t> {};

// A dimension as a policy parameter (int): one above INT_MAX throws launchfit::error naming it.
constexpr int int_parameter(unsigned v, const char* what) {
  if (v > 0x7fffffffu) throw_too_large(what, v, 0x7fffffffu);
  return static_cast<int>(v);
}
// An integer policy parameter of any type as an int: never wrapped (out of range: launchfit::error naming
// it).
template <class T>
constexpr int int_parameter(T v, const char* what) {
  if constexpr (std::is_signed_v<T>) {
    if (v < -0x7fffffffLL - 1) throw_negative(what, static_cast<long long>(v));
  }
  if (v > static_cast<T>(0) && static_cast<unsigned long long>(v) > 0x7fffffffULL)
    throw_too_large(what, static_cast<unsigned long long>(v), 0x7fffffffULL);
  return static_cast<int>(v);
}

template <class F, class = void>
struct has_target_type : std::false_type {};
template <class F>
struct has_target_type<F, std::void_t<decltype(std::declval<const F&>().target_type())>> : std::true_type {};

// Whether f is a null function pointer or an empty std::function (what std::function treats as empty).
template <class F>
bool is_empty_function(const F& f) noexcept {
  if constexpr (std::is_pointer_v<F> || std::is_member_pointer_v<F>) {
    return f == nullptr;
  } else if constexpr (has_target_type<F>::value) {
    return !static_cast<bool>(f);
  } else {
    return false;
  }
}
}  // namespace detail

inline namespace LAUNCHFIT_DEFAULT_STREAM_NS {

// A policy plus everything about one launch that is not a kernel argument. Build it with the factories
// below and chain: max_occupancy().items(n).on(stream).smem(bytes). A setter called on a temporary returns
// a new spec by value (so `const auto& s = fixed(256).items(n);` holds a live spec); on a named spec it
// changes that spec and returns a reference to it; on a const spec (`static const auto base =
// bytes_in_flight(16);`, then `base.items(n)` per launch) it returns a refined copy and leaves the spec as it is.
template <class Policy>
class spec {
 public:
  // A spec with this policy and nothing else (no work: one full wave). The factories below make these.
  explicit spec(Policy p) : policy_(std::move(p)) {}

  // A floating-point or bool count, size or number of waves or SMs is none (items(1000.7f) would truncate,
  // items(true) launch one item): it does not compile.
#define LAUNCHFIT_NOT_A_COUNT(setter)                                                                   \
  template <class F, std::enable_if_t<std::is_floating_point_v<F> || std::is_same_v<F, bool>, int> = 0> \
  spec setter(F) && = delete;                                                                           \
  template <class F, std::enable_if_t<std::is_floating_point_v<F> || std::is_same_v<F, bool>, int> = 0> \
  spec setter(F) const& = delete;                                                                       \
  template <class F, std::enable_if_t<std::is_floating_point_v<F> || std::is_same_v<F, bool>, int> = 0> \
  spec& setter(F) & = delete;
  LAUNCHFIT_NOT_A_COUNT(items)
  LAUNCHFIT_NOT_A_COUNT(grid_stride)
  LAUNCHFIT_NOT_A_COUNT(per_thread)
  LAUNCHFIT_NOT_A_COUNT(waves)
  LAUNCHFIT_NOT_A_COUNT(smem)
  LAUNCHFIT_NOT_A_COUNT(sms)
#undef LAUNCHFIT_NOT_A_COUNT

  // One thread per item: grid = ceil(n / block). A negative n (an int) throws launchfit::error naming it.
  [[nodiscard]] spec items(std::uint64_t n) && { return std::move(items(n)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec items(std::uint64_t n) const& { return copy_of_const().items(n); }
  spec& items(std::uint64_t n) & {
    one_dimension();
    work_.kind = work::shape::items;
    work_.n = n;
    return *this;
  }
  // The same with a signed count (an int variable): a negative one throws launchfit::error naming it.
  template <class N, std::enable_if_t<std::is_integral_v<N> && std::is_signed_v<N>, int> = 0>
  [[nodiscard]] spec items(N n) && {
    return std::move(items(detail::size_value(n, "items n")));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class N, std::enable_if_t<std::is_integral_v<N> && std::is_signed_v<N>, int> = 0>
  [[nodiscard]] spec items(N n) const& { return copy_of_const().items(n); }
  // The same, on a named spec (changed in place and returned).
  template <class N, std::enable_if_t<std::is_integral_v<N> && std::is_signed_v<N>, int> = 0>
  spec& items(N n) & {
    return items(detail::size_value(n, "items n"));
  }
  // 2-D or 3-D work, items({nx, ny}) or items({nx, ny, nz}): the policy's block is shaped {32, threads / 32}
  // (rows of one warp), or as block_y() / block_x_multiple() say, unless it chose a shape itself (fixed({32,
  // 32})), and grid = ceil(n / block) per dimension (y: per_thread_y() rows per thread), each checked against
  // the device (y and z at most 65535).
  [[nodiscard]] spec items(extent e) && { return std::move(items(e)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec items(extent e) const& { return copy_of_const().items(e); }
  spec& items(extent e) & {
    work_.kind = work::shape::items;
    work_.n = e.x;
    work_.ny = e.y;
    work_.nz = e.z;
    work_.rank = static_cast<std::uint8_t>(e.z > 1 ? 3 : 2);
    return *this;
  }
  // k items per thread: grid = ceil(n / (block x k)). An integer of another type than std::uint32_t: a negative
  // k, or one above 2^32 - 1, throws launchfit::error naming it (never wrapped: per_thread(-1) launched one block
  // for any n); an enum constant or a class converting to an integer takes the std::uint32_t overloads.
  [[nodiscard]] spec per_thread(std::uint32_t k) && { return std::move(per_thread(k)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec per_thread(std::uint32_t k) const& { return copy_of_const().per_thread(k); }
  spec& per_thread(std::uint32_t k) & {
    work_.per_thread = k;
    return *this;
  }
  // The same with another integer type, checked.
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  [[nodiscard]] spec per_thread(N k) && {
    return std::move(per_thread(k));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  [[nodiscard]] spec per_thread(N k) const& {
    return copy_of_const().per_thread(k);
  }
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  spec& per_thread(N k) & {
    return per_thread(static_cast<std::uint32_t>(detail::dimension(k, "per_thread k")));
  }
  // The kernel loops over n items: grid = min(ceil(n / block), the resident blocks the policy wants).
  [[nodiscard]] spec grid_stride(std::uint64_t n) && { return std::move(grid_stride(n)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec grid_stride(std::uint64_t n) const& { return copy_of_const().grid_stride(n); }
  spec& grid_stride(std::uint64_t n) & {
    one_dimension();
    work_.kind = work::shape::grid_stride;
    work_.n = n;
    return *this;
  }
  // The same with a signed count (an int variable): a negative one throws launchfit::error naming it.
  template <class N, std::enable_if_t<std::is_integral_v<N> && std::is_signed_v<N>, int> = 0>
  [[nodiscard]] spec grid_stride(N n) && {
    return std::move(grid_stride(detail::size_value(n, "grid_stride n")));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class N, std::enable_if_t<std::is_integral_v<N> && std::is_signed_v<N>, int> = 0>
  [[nodiscard]] spec grid_stride(N n) const& { return copy_of_const().grid_stride(n); }
  // The same, on a named spec (changed in place and returned).
  template <class N, std::enable_if_t<std::is_integral_v<N> && std::is_signed_v<N>, int> = 0>
  spec& grid_stride(N n) & {
    return grid_stride(detail::size_value(n, "grid_stride n"));
  }
  // grid_stride(n) only: cap the grid at k waves of resident blocks. Without it every static policy launches
  // one wave (a tuned plan may launch more, see plan::full_grid): a block's epilogue (global atomics, a
  // per-block reduction) costs per block, which no policy can see. A kernel without one whose elements are
  // wide (12 B or more per thread) may run faster with more blocks: give waves(k), or launch items(n).
  [[nodiscard]] spec waves(std::uint32_t k) && { return std::move(waves(k)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec waves(std::uint32_t k) const& { return copy_of_const().waves(k); }
  spec& waves(std::uint32_t k) & {
    options_.waves = k > 0 ? k : 1;
    return *this;
  }
  // The same with another integer type: a negative k, or one above 2^32 - 1, throws launchfit::error naming it.
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  [[nodiscard]] spec waves(N k) && {
    return std::move(waves(k));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  [[nodiscard]] spec waves(N k) const& {
    return copy_of_const().waves(k);
  }
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  spec& waves(N k) & {
    return waves(static_cast<std::uint32_t>(detail::dimension(k, "waves k")));
  }
  // The caller's grid (e.g. a cooperative solver's), launched as given: checked against the device, for whole
  // clusters and, cooperative, for co-residency, or refused. The policy still chooses the block. {gx, gy} of
  // any integer types, or a dim3.
  [[nodiscard]] spec grid(dims g) && { return std::move(grid(g)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec grid(dims g) const& { return copy_of_const().grid(g); }
  spec& grid(dims g) & {
    one_dimension();
    work_.kind = work::shape::grid;
    work_.grid = g;
    return *this;
  }
  // Block sizes the kernel can run with: block_rule::power_of_two(), multiple_of(64), one_of({128, 256}).
  // Every policy (autotune too) chooses among them; a plan from elsewhere that does not fit is refused.
  [[nodiscard]] spec blocks(block_rule rule) && { return std::move(blocks(rule)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec blocks(block_rule rule) const& { return copy_of_const().blocks(rule); }
  spec& blocks(block_rule rule) & {
    blocks_ = rule;
    return *this;
  }
  // The block's y as the kernel indexes it (e.g. 3 dimensions in threadIdx.y): blocks are {x, y, z} with x
  // chosen by the policy (a multiple of 32, or of block_x_multiple(m)); 0: free. Above 1024: no block fits
  // (refused). 1-D work (items(n), grid_stride(n)) then runs along x, one block row of y per block.
  [[nodiscard]] spec block_y(unsigned y) && { return std::move(block_y(y)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec block_y(unsigned y) const& { return copy_of_const().block_y(y); }
  spec& block_y(unsigned y) & {
    shape_.y = static_cast<std::uint16_t>(y > 1024 ? 1024 : y);
    shape_.invalid = shape_.invalid || y > 1024;
    return *this;
  }
  // The block's z as the kernel indexes it (1 by default; above 64 no block fits).
  [[nodiscard]] spec block_z(unsigned z) && { return std::move(block_z(z)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec block_z(unsigned z) const& { return copy_of_const().block_z(z); }
  spec& block_z(unsigned z) & {
    shape_.z = static_cast<std::uint16_t>(z == 0 ? 1 : z > 64 ? 64 : z);
    shape_.invalid = shape_.invalid || z > 64;
    return *this;
  }
  // Block x is a multiple of m (a tile width); with a free y the block is {m, threads / m}. 0: 32.
  [[nodiscard]] spec block_x_multiple(unsigned m) && { return std::move(block_x_multiple(m)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec block_x_multiple(unsigned m) const& { return copy_of_const().block_x_multiple(m); }
  spec& block_x_multiple(unsigned m) & {
    shape_.x_multiple = static_cast<std::uint16_t>(m > 1024 ? 1024 : m);
    shape_.invalid = shape_.invalid || m > 1024;
    return *this;
  }
  // 2-D and 3-D work: the block may be wider than block_x_multiple (32 by default) along x, any multiple of
  // it with y >= 2 ({64, t/64}, {128, t/128}, ...), where a policy chooses so; autotune times them. Opt-in,
  // for a kernel that indexes with blockDim.x/y and sizes nothing (shared memory above all) by the block's
  // shape: an smem rule is given the thread count only. Without it launchfit never picks another shape by
  // itself: plugins (autotune), stored and remote plans keep {32, threads/32}; a policy that names its own
  // 2-D block (fixed({32, 32}), an override) is launched as named. 1-D work and a fixed y or z: no effect.
  [[nodiscard]] spec block_x_free() && { return std::move(block_x_free()); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec block_x_free() const& { return copy_of_const().block_x_free(); }
  spec& block_x_free() & {
    shape_.free_x = true;
    return *this;
  }
  // k rows along y per thread (a 32x32 tile with 32x8 blocks: 4): grid y = ceil(ny / (block y x k)).
  [[nodiscard]] spec per_thread_y(std::uint32_t k) && { return std::move(per_thread_y(k)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec per_thread_y(std::uint32_t k) const& { return copy_of_const().per_thread_y(k); }
  spec& per_thread_y(std::uint32_t k) & {
    shape_.per_thread_y = k > 0 ? k : 1;
    return *this;
  }
  // The same with another integer type: a negative k, or one above 2^32 - 1, throws launchfit::error naming it.
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  [[nodiscard]] spec per_thread_y(N k) && {
    return std::move(per_thread_y(k));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  [[nodiscard]] spec per_thread_y(N k) const& {
    return copy_of_const().per_thread_y(k);
  }
  template <class N, std::enable_if_t<detail::is_integer_v<N>, int> = 0>
  spec& per_thread_y(N k) & {
    return per_thread_y(static_cast<std::uint32_t>(detail::dimension(k, "per_thread_y k")));
  }
  // The whole block shape at once (what plan::shape_rule holds; planned(p) passes it on).
  [[nodiscard]] spec shape(block_shape b) && { return std::move(shape(b)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec shape(block_shape b) const& { return copy_of_const().shape(b); }
  spec& shape(block_shape b) & {
    shape_ = b;
    return *this;
  }
  // Size resident grids (no work, grid_stride, cooperative) for k SMs, so the kernel can run beside others
  // (e.g. communication kernels); k above the context's SMs is the context's SMs. 0: all; a negative k throws.
  [[nodiscard]] spec sms(int k) && { return std::move(sms(k)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec sms(int k) const& { return copy_of_const().sms(k); }
  spec& sms(int k) & {
    if (k < 0) detail::throw_negative("sms k", k);  // never "every SM" by accident
    options_.sm_budget = k;
    return *this;
  }
  // Programmatic dependent launch (sm_90+): this kernel may start while the previous kernel in the stream is
  // still running; it must call cudaGridDependencySynchronize() before reading that kernel's output. Opt-in.
  [[nodiscard]] spec pdl() && { return std::move(pdl()); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec pdl() const& { return copy_of_const().pdl(); }
  spec& pdl() & {
    options_.programmatic = true;
    return *this;
  }
  // The stream to launch on: a cudaStream_t or a CUstream (the same type). None (or 0): this file's default
  // stream, as <<<>>> here (the legacy stream, or the per-thread stream in a file compiled with
  // --default-stream per-thread).
  [[nodiscard]] spec on(cudaStream_t s) && { return std::move(on(s)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec on(cudaStream_t s) const& { return copy_of_const().on(s); }
  spec& on(cudaStream_t s) & {
    stream_ = s;
    return *this;
  }
  // A stream wrapper whose get() gives its cudaStream_t: CCCL's cuda::stream_ref and cuda::stream (included
  // by the caller: launchfit does not include CCCL), or any such handle. Not owned: it must outlive the
  // launch.
  template <class S, std::enable_if_t<detail::is_stream_wrapper<S>::value, int> = 0>
  [[nodiscard]] spec on(const S& s) && {
    return std::move(on(static_cast<cudaStream_t>(s.get())));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class S, std::enable_if_t<detail::is_stream_wrapper<S>::value, int> = 0>
  [[nodiscard]] spec on(const S& s) const& { return copy_of_const().on(s); }
  // The same, on a named spec (changed in place and returned).
  template <class S, std::enable_if_t<detail::is_stream_wrapper<S>::value, int> = 0>
  spec& on(const S& s) & {
    return on(static_cast<cudaStream_t>(s.get()));
  }
  // Fixed dynamic shared memory per block.
  [[nodiscard]] spec smem(std::size_t bytes) && { return std::move(smem(bytes)); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec smem(std::size_t bytes) const& { return copy_of_const().smem(bytes); }
  spec& smem(std::size_t bytes) & {
    options_.smem_bytes = bytes;
    options_.smem_rule = 0;
    smem_fn_ = nullptr;  // no allocation for a small lambda, on every launch that builds a spec
    return *this;
  }
  // Dynamic shared memory as a function of the block size (capturing lambdas welcome). The plan cache
  // tells rules apart by their type plus `key`: give a different key when captured state changes the result.
  template <class F>
  [[nodiscard]] spec smem_per_block(F f, std::uint64_t key = 0) && {
    return std::move(smem_per_block(std::move(f), key));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class F>
  [[nodiscard]] spec smem_per_block(F f, std::uint64_t key = 0) const& {
    return copy_of_const().smem_per_block(std::move(f), key);
  }
  // The same, on a named spec (changed in place and returned).
  template <class F>
  spec& smem_per_block(F f, std::uint64_t key = 0) & {
    static_assert(std::is_invocable_r_v<std::size_t, F&, int>, "smem_per_block(f): f(int block) -> bytes");
    if (detail::is_empty_function(f)) {
      smem_fn_ = nullptr;  // as std::function made from an empty one: no rule to call
    } else {
      smem_fn_ = std::move(f);
    }
    options_.smem_bytes = 0;
    // Never 0, never a number of bytes.
    options_.smem_rule = detail::mix_hash(typeid(F).hash_code(), key) | 1ULL << 63;
    return *this;
  }
  // Thread-block cluster dimensions (sm_90+). The grid is rounded up to whole clusters and sized by the
  // clusters that co-reside (cuOccupancyMaxActiveClusters); sizes above 8 blocks need allow_non_portable,
  // which sets the kernel's non-portable cluster attribute. A kernel with __cluster_dims__ needs no call.
  [[nodiscard]] spec cluster(dims c, bool allow_non_portable = false) && {
    return std::move(cluster(c, allow_non_portable));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec cluster(dims c, bool allow_non_portable = false) const& {
    return copy_of_const().cluster(c, allow_non_portable);
  }
  spec& cluster(dims c, bool allow_non_portable = false) & {
    options_.cluster = c;
    options_.non_portable_cluster = allow_non_portable;
    return *this;
  }
  // The kernel needs a cooperative launch (it calls grid.sync()): whatever policy decides, the launch stays
  // cooperative and its grid is checked for co-residency, or it is refused. cooperative() implies it.
  [[nodiscard]] spec cooperative() && { return std::move(cooperative()); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec cooperative() const& { return copy_of_const().cooperative(); }
  spec& cooperative() & {
    options_.cooperative = true;
    return *this;
  }
  // The kernel may be run several times, back to back, on the same arguments: lets a tuning policy time
  // candidate plans on the real arguments. With reset(f) as well: re-running is memory-safe but changes the
  // data (e.g. it accumulates); trials then run back to back after f, and f restores the data at the end.
  [[nodiscard]] spec rerunnable() && { return std::move(rerunnable()); }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  [[nodiscard]] spec rerunnable() const& { return copy_of_const().rerunnable(); }
  spec& rerunnable() & {
    rerunnable_ = true;
    return *this;
  }
  // Called before every tuning sample to restore the kernel's inputs/outputs (implies tunable); without
  // rerunnable(), each sample is a single launch after f.
  template <class F>
  [[nodiscard]] spec reset(F f) && {
    return std::move(reset(std::move(f)));
  }
  // The same, on a const spec: a refined copy (the spec is left as it is).
  template <class F>
  [[nodiscard]] spec reset(F f) const& { return copy_of_const().reset(std::move(f)); }
  // The same, on a named spec (changed in place and returned).
  template <class F>
  spec& reset(F f) & {
    static_assert(std::is_invocable_v<F&>, "reset(f): f() restores the kernel's data");
    reset_ = std::move(f);
    has_reset_ = true;
    return *this;
  }

  // ---- what the spec says (read by launch() and plan_for()) ----
  // The policy as given.
  const Policy& policy_value() const noexcept { return policy_; }
  // The policy as a launchfit::policy, whatever holds it.
  const launchfit::policy& get_policy() const noexcept {
    if constexpr (std::is_base_of_v<launchfit::policy, Policy>) {
      return policy_;
    } else {
      return *policy_;
    }
  }
  // The work as policies and the grid rule see it: with the waves cap of the launch options.
  work work_shape() const noexcept {
    work w = work_;
    w.waves = options_.waves;
    return w;
  }
  // The work as given, its waves cap aside (options().waves): what a launch reads in place.
  const work& work_as_given() const noexcept { return work_; }
  // The stream (nullptr: this file's default stream).
  cudaStream_t stream() const noexcept { return stream_; }
  // Fixed dynamic smem per block (when there is no smem_per_block rule).
  std::size_t smem_bytes() const noexcept { return options_.smem_bytes; }
  // The smem_per_block rule, or nullptr.
  const detail::smem_rule_fn* smem_fn() const noexcept { return smem_fn_ ? &smem_fn_ : nullptr; }
  // The smem rule's identity in plan keys (the fixed bytes, or the rule's type and key).
  std::uint64_t smem_rule() const noexcept { return options_.smem_identity(); }
  // What the launch requires as the spec says it (make_request adds cooperative for a cooperative policy).
  const launch_options& options() const noexcept { return options_; }
  // Cluster dims (1x1x1: none).
  dims cluster_dims() const noexcept { return options_.cluster; }
  // Cluster sizes above 8 are allowed.
  bool allows_non_portable_cluster() const noexcept { return options_.non_portable_cluster; }
  // .cooperative() was called, or the policy is cooperative().
  bool requires_cooperative() const noexcept {
    return options_.cooperative || std::is_same_v<Policy, cooperative_policy>;
  }
  // .pdl() was called.
  bool is_programmatic() const noexcept { return options_.programmatic; }
  // SMs resident grids are sized for (0: all of the context's).
  int sm_budget() const noexcept { return options_.sm_budget; }
  // The block rule (any by default).
  const block_rule& block_sizes() const noexcept { return blocks_; }
  // The block shape (the default: rows of 32 for multi-dimensional work).
  const block_shape& shape_rule() const noexcept { return shape_; }
  // A tuning policy may time candidates on this launch (rerunnable() or reset()).
  bool is_rerunnable() const noexcept { return rerunnable_ || has_reset_; }
  // rerunnable() was called: trials may run back to back.
  bool runs_back_to_back() const noexcept { return rerunnable_; }
  // The reset(f) function, or nullptr.
  const detail::reset_fn* reset_fn() const noexcept { return has_reset_ ? &reset_ : nullptr; }

 private:
  // A 1-D work setter replaces a named spec's earlier items({nx, ny[, nz]}) whole: no 2-D block, no rows.
  void one_dimension() noexcept {
    work_.rank = 1;
    work_.ny = 1;
    work_.nz = 1;
  }
  // The copy a setter on a const spec refines.
  spec copy_of_const() const {
    static_assert(std::is_copy_constructible_v<Policy>,
                  "launchfit::spec: a setter on a const spec refines a copy, and this spec's policy cannot be "
                  "copied (a std::unique_ptr): refine a spec of your own, or hold the policy by shared_ptr");
    return *this;
  }

  Policy policy_;
  work work_{};
  cudaStream_t stream_ = nullptr;
  detail::smem_rule_fn smem_fn_;  // the rule options_.smem_rule identifies (a function, so not in the value)
  launch_options options_{};
  block_rule blocks_{};
  block_shape shape_{};
  bool rerunnable_ = false;
  bool has_reset_ = false;
  detail::reset_fn reset_;  // held only when has_reset_
};

// ---- factories --------------------------------------------------------------------------------------
// Most resident threads; of the block sizes that reach it, the one nearest prefer_block (0: the largest,
// exactly cuOccupancyMaxPotentialBlockSize's block). block_limit > 0 caps the block size.
inline spec<max_occupancy_policy> max_occupancy(int prefer_block = max_occupancy_params{}.prefer_block,
                                                int block_limit = 0) {
  return spec<max_occupancy_policy>(max_occupancy_policy{max_occupancy_params{prefer_block, block_limit}});
}
// Little's law sizing; target_per_sm 0 uses the device default (32 KB on sm_90).
inline spec<bytes_in_flight_policy> bytes_in_flight(
    int per_thread_bytes, int target_per_sm = 0, int prefer_block = bytes_in_flight_params{}.prefer_block) {
  return spec<bytes_in_flight_policy>(
      bytes_in_flight_policy{bytes_in_flight_params{per_thread_bytes, target_per_sm, prefer_block}});
}
// Co-resident grid, launched cooperatively; blocks_per_sm 0 = as many as fit; block 0 = the max-occupancy block,
// or with blocks_per_sm given, the largest block with the most threads resident at that many per SM.
inline spec<cooperative_policy> cooperative(int blocks_per_sm = 0, int block = 0) {
  return spec<cooperative_policy>(cooperative_policy{cooperative_params{blocks_per_sm, block}});
}
// Today's <<<grid, block>>>, validated. fixed(block): the grid from the work (items(n), grid_stride(n)), or one
// wave without work. fixed(block, grid): that grid, as <<<grid, block>>> gives it; a grid of 0 (one computed
// from an empty input, (n + 255) / 256 for n = 0) launches nothing, as items(0) does, never a wave. The empty grid
// is the spec's work (grid({0, 1, 1})): a work setter called after it gives the launch that work instead
// (fixed(256, 0).items(n) launches ceil(n / 256) blocks), where a grid above 0 stays the launch's grid. (In a
// policy string, "fixed(block=256,grid=0)", grid=0 still means "from the work".)
inline spec<fixed_policy> fixed(int block) { return spec<fixed_policy>(fixed_policy{fixed_params{block, 0}}); }
inline spec<fixed_policy> fixed(int block, int grid) {
  spec<fixed_policy> s(fixed_policy{fixed_params{block, grid}});
  if (grid == 0) s.grid(dims{0, 1, 1});  // the caller's grid is empty: nothing to launch
  return s;
}
// The same with other integer types (unsigned, size_t): a value above INT_MAX throws launchfit::error naming
// it.
template <class B, std::enable_if_t<detail::is_integer_v<B> && !std::is_same_v<B, int>, int> = 0>
spec<fixed_policy> fixed(B block) {
  return fixed(detail::int_parameter(block, "fixed block"));
}
// fixed(block, grid) with other integer types: that grid (0: nothing launched), each value at most INT_MAX.
template <class B, class G,
          std::enable_if_t<detail::is_integer_v<B> && detail::is_integer_v<G> &&
                               !(std::is_same_v<B, int> && std::is_same_v<G, int>),
                           int> = 0>
spec<fixed_policy> fixed(B block, G grid) {
  return fixed(detail::int_parameter(block, "fixed block"), detail::int_parameter(grid, "fixed grid"));
}
// A 2-D or 3-D block: fixed({32, 32}) (of any integer types, or a dim3), the grid from the work per dimension.
// fixed(block, grid): that grid, as <<<grid, block>>> gives it; one with a dimension of 0 launches nothing.
inline spec<fixed_dims_policy> fixed(dims block) {
  return spec<fixed_dims_policy>(fixed_dims_policy{fixed_dims_params{
      detail::int_parameter(block.x, "fixed block x"), detail::int_parameter(block.y, "fixed block y"),
      detail::int_parameter(block.z, "fixed block z"), 0, 1, 1}});
}
inline spec<fixed_dims_policy> fixed(dims block, dims grid) {
  // An empty grid launches nothing: its policy is given the empty grid along x only (one of 0 along y or z is
  // no grid it could plan), and the work says there is none.
  const bool empty = grid.x == 0 || grid.y == 0 || grid.z == 0;
  spec<fixed_dims_policy> s(fixed_dims_policy{fixed_dims_params{
      detail::int_parameter(block.x, "fixed block x"), detail::int_parameter(block.y, "fixed block y"),
      detail::int_parameter(block.z, "fixed block z"), empty ? 0 : detail::int_parameter(grid.x, "fixed grid x"),
      empty ? 1 : detail::int_parameter(grid.y, "fixed grid y"),
      empty ? 1 : detail::int_parameter(grid.z, "fixed grid z")}});
  if (empty) s.grid(dims{0, 1, 1});
  return s;
}
}  // namespace LAUNCHFIT_DEFAULT_STREAM_NS

namespace detail {

// A runtime-API __global__ function's CUfunction in the current context, resolved through the caller's
// CUDA runtime (so the kernel registered by the caller's module is found). Called on cache misses only.
inline cudaFunction_t resolve_runtime_kernel(const void* stub) {
  cudaFunction_t f = nullptr;
  const cudaError_t st = cudaGetFuncBySymbol(&f, stub);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    throw_error("cudaGetFuncBySymbol", cudaGetErrorName(st), cudaGetErrorString(st));
  }
  return f;
}

// Copies a spec's policy for the library to own (policy_copy): a launch captured into a CUDA graph is planned
// again by tune_graph() after the launch has returned. A policy held by pointer is shared, not copied.
template <class Policy>
policy_copy copy_policy_of(const void* holder) {
  // A raw pointer's policy may be gone by then: not copied (its launches are left as they are).
  if constexpr (std::is_copy_constructible_v<Policy> && !std::is_pointer_v<Policy>) {
    auto* owner = new Policy(*static_cast<const Policy*>(holder));
    policy_copy c;
    c.owner = owner;
    c.free_owner = [](void* o) noexcept { delete static_cast<Policy*>(o); };
    if constexpr (std::is_base_of_v<launchfit::policy, Policy>) {
      c.policy = owner;
    } else {
      c.policy = &**owner;  // a shared_ptr shares the policy
    }
    return c;
  } else {
    (void)holder;
    return policy_copy{};
  }
}

// The one place that decides whether the launch is cooperative beyond what the spec says: its policy is
// cooperative() (also when it came from use("cooperative") or a pointer). No later step adds or drops it.
template <class Policy>
bool is_cooperative_policy(const launchfit::policy& p) noexcept {
  if constexpr (std::is_same_v<Policy, launchfit::cooperative_policy>) {
    (void)p;
    return true;
  } else if constexpr (!std::is_base_of_v<launchfit::policy, Policy>) {
    // cooperative_policy is final: its exact type, without dynamic_cast's walk of the policy's bases.
    return typeid(p) == typeid(launchfit::cooperative_policy);
  } else {
    (void)p;
    return false;
  }
}
// A built-in policy held by value: its hash() is inline and its bucket a constexpr rule, so a launch of constant
// parameters computes its key's policy parts at compile time. Any other policy is asked through launchfit::policy
// (its overrides may be private).
template <class Policy>
constexpr bool is_inline_builtin = std::is_same_v<Policy, max_occupancy_policy> ||
                                   std::is_same_v<Policy, bytes_in_flight_policy> ||
                                   std::is_same_v<Policy, launchfit::cooperative_policy> ||
                                   std::is_same_v<Policy, fixed_policy> || std::is_same_v<Policy, fixed_dims_policy> ||
                                   std::is_same_v<Policy, planned_policy>;
// The spec's policy's hash, part of every plan key.
template <class Policy>
std::uint64_t policy_hash_of(const spec<Policy>& s) {
  if constexpr (is_inline_builtin<Policy>) {
    return s.policy_value().hash();
  } else {
    return s.get_policy().hash();
  }
}
// The size bucket a spec's plan is keyed by: the policy's, and the row width's octave where the block may widen.
template <class Policy>
std::uint64_t bucket_of(const spec<Policy>& s, const work& shape) {
  std::uint64_t bucket = 0;
  if constexpr (std::is_same_v<Policy, max_occupancy_policy> || std::is_same_v<Policy, bytes_in_flight_policy>) {
    bucket = Policy::bucket_of(s.policy_value().parameters(), shape);
  } else {
    bucket = s.get_policy().work_bucket(shape);
  }
  return s.shape_rule().free_x ? plan_bucket(bucket, shape, s.shape_rule()) : bucket;
}
// The stream a spec launches on: 0 means what <<<>>> means in this file.
template <class Policy>
cudaStream_t stream_of(const spec<Policy>& s) noexcept {
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
  return s.stream() ? s.stream() : cudaStreamPerThread;
#else
  return s.stream();
#endif
}

// `policy_hash` and `bucket`: the key's policy parts, as policy_hash_of() and bucket_of() give them (a probe's,
// which asked the policy once already).
template <class Policy>
launch_request make_request(const spec<Policy>& s, std::uint64_t policy_hash, std::uint64_t bucket) {
  const launchfit::policy& p = s.get_policy();
  const work shape = s.work_shape();
  launch_options options = s.options();
  options.cooperative = options.cooperative || is_cooperative_policy<Policy>(p);
  // Every member given, in declaration order (launch_request.hpp; planner-test checks each): a request is made
  // on every launch, and one made from its defaults first was zeroed whole (about 350 bytes) before these
  // stores, about a quarter of a cached launch's own time. launch() and plan_for() set the kernel and arguments.
  return launch_request{/*kernel_id=*/0,
                        /*stub=*/nullptr,
                        /*resolve=*/nullptr,
                        /*driver_kernel=*/nullptr,
                        /*policy=*/&p,
                        /*policy_holder=*/&s.policy_value(),
                        /*copy_policy=*/&copy_policy_of<Policy>,
                        /*policy_hash=*/policy_hash,
                        /*bucket=*/bucket,
                        /*smem_fn=*/s.smem_fn(),
                        /*shape=*/shape,
                        /*stream=*/stream_of(s),
                        /*options=*/options,
                        /*blocks=*/s.block_sizes(),
                        /*shape_rule=*/s.shape_rule(),
                        /*family=*/nullptr,
                        /*family_size=*/0,
                        /*bind=*/nullptr,
                        /*bind_self=*/nullptr,
                        /*args=*/nullptr,
                        /*arg_sizes=*/nullptr,
                        /*arg_count=*/0,
                        /*rerunnable=*/s.is_rerunnable(),
                        /*back_to_back=*/s.runs_back_to_back(),
                        /*reset=*/s.reset_fn(),
                        /*has_arguments=*/false,
                        /*node=*/nullptr};
}
// The request of a launch or plan_for() of this spec: what launchfit plans and launches by.
template <class Policy>
launch_request make_request(const spec<Policy>& s) {
  return make_request(s, policy_hash_of(s), bucket_of(s, s.work_shape()));
}

// The whole request of the spec at `s`, for a probe that did not hit. A template of the spec's own type, whose
// name carries the file's default stream (LAUNCHFIT_DEFAULT_STREAM_NS): one of the policy alone would be one
// symbol in files compiled either way, and the linker would keep one file's for both.
template <class Spec>
launch_request request_of_spec(const void* s, std::uint64_t policy_hash, std::uint64_t bucket) {
  return make_request(*static_cast<const Spec*>(s), policy_hash, bucket);
}

// The probe of a launch of this spec (launch_request.hpp): the key's parts as make_request() makes them, computed
// here (a spec of constant options keys its plan at compile time), the work by address. launch() sets the kernel
// and arguments.
template <class Policy>
inline launch_probe make_probe(const spec<Policy>& s) {
  const launchfit::policy& p = s.get_policy();
  const launch_options& o = s.options();
  const work shape = s.work_shape();
  return launch_probe{/*kernel_id=*/0,
                      /*stub=*/nullptr,
                      /*resolve=*/nullptr,
                      /*driver_kernel=*/nullptr,
                      /*policy=*/&p,
                      /*policy_hash=*/policy_hash_of(s),
                      /*bucket=*/bucket_of(s, shape),
                      /*smem_identity=*/o.smem_identity(),
                      /*launch_bits=*/key_bits(o, is_cooperative_policy<Policy>(p)),
                      /*shape_bits=*/shape_bits(s.block_sizes(), s.shape_rule(), o, shape),
                      /*stream=*/stream_of(s),
                      /*shape=*/&s.work_as_given(),
                      /*waves=*/o.waves,
                      /*in_full=*/s.smem_fn() != nullptr || !keyable_cluster(o.cluster),
                      /*rerunnable=*/s.is_rerunnable(),
                      /*args=*/nullptr,
                      /*arg_sizes=*/nullptr,
                      /*arg_count=*/0,
                      /*spec=*/&s,
                      /*make=*/&request_of_spec<spec<Policy>>};
}

}  // namespace detail

// An argument computed from the plan at launch time, for arguments that depend on the chosen block (an
// n-body kernel's tile count, a padded size): launch(k, spec, from_plan([n](const plan& p) { return n /
// p.block_threads; }), ...). Called once per launch, and for each candidate a tuning policy times.
template <class F>
struct plan_argument {
  F f;  // plan -> the argument's value
};
// Makes a plan_argument from f(const plan&).
template <class F>
plan_argument<std::decay_t<F>> from_plan(F&& f) {
  return plan_argument<std::decay_t<F>>{std::forward<F>(f)};
}

namespace detail {

template <class T>
struct is_plan_argument : std::false_type {};
template <class F>
struct is_plan_argument<plan_argument<F>> : std::true_type {};

template <class Param, class Arg, bool = is_plan_argument<std::decay_t<Arg>>::value>
struct argument_converts : std::is_convertible<Arg, Param> {};
template <class Param, class Arg>
struct argument_converts<Param, Arg, true>
    : std::is_convertible<decltype(std::declval<std::decay_t<Arg>&>().f(std::declval<const plan&>())),
                          Param> {};

// A kernel parameter copy-initialised from its argument: the implicit conversions <<<>>> makes (a constructor
// marked explicit is never chosen, where a static_cast chose it). A narrowing one (size_t to int, double to
// float) is warned of by -Wconversion only where launchfit's headers are not system headers: a consumer of the
// CMake package or pkg-config gets them as -isystem, and the compiler then stays silent, as it would not for
// <<<>>>.
template <class Param, class Arg>
Param implicit_argument(Arg&& a) {
  return std::forward<Arg>(a);
}

// One kernel argument: a value converted once, or a plan_argument evaluated for each plan.
template <class Param, class Arg, bool = is_plan_argument<std::decay_t<Arg>>::value>
struct argument_slot {
  Param value;
  explicit argument_slot(Arg&& a) : value(implicit_argument<Param>(std::forward<Arg>(a))) {}
  void bind(const plan&) noexcept {}
};
template <class Param, class Arg>
struct argument_slot<Param, Arg, true> {
  std::decay_t<Arg> from;
  Param value{};
  explicit argument_slot(Arg&& a) : from(std::forward<Arg>(a)) {}
  void bind(const plan& p) { value = implicit_argument<Param>(from.f(p)); }
};

// The converted arguments (or their slots) of one launch, one member each, without std::tuple.
template <std::size_t I, class T>
struct pack_member {
  T item;
};
template <class Indices, class... Ts>
struct pack;
template <std::size_t... I, class... Ts>
struct pack<std::index_sequence<I...>, Ts...> : pack_member<I, Ts>... {
  template <class... Us>
  explicit pack(Us&&... us) : pack_member<I, Ts>{Ts(std::forward<Us>(us))}... {}
  // Writes address_of(member) for each member, in order, to out[0..N).
  template <class F>
  void addresses(void** out, F&& address_of) {
    ((out[I] = address_of(static_cast<pack_member<I, Ts>&>(*this).item)), ...);
  }
  template <class F>
  void each(F&& f) {
    (f(static_cast<pack_member<I, Ts>&>(*this).item), ...);
  }
};
template <class... Ts>
using pack_of = pack<std::index_sequence_for<Ts...>, Ts...>;

template <class... Slots>
void bind_arguments(void* self, const plan& p) {
  static_cast<pack_of<Slots...>*>(self)->each([&p](auto& slot) { slot.bind(p); });
}

// Launches a runtime-API kernel (or a family member chosen by the planner) with converted arguments.
// `R`: a launch_request, or a launch_probe where no argument is computed from the plan.
template <class... Params, class R, class... Args>
inline launched launch_runtime(R& r, Args&&... args) {
  static_assert(!(std::is_reference_v<Params> || ...),
                "launchfit::launch: the kernel takes a parameter by reference, which a kernel cannot read (nvcc "
                "passes the host address): take it by value, or by device pointer");
  static_assert(sizeof...(Params) == sizeof...(Args), "launchfit::launch: wrong number of kernel arguments");
  static_assert((argument_converts<Params, Args&&>::value && ...),
                "launchfit::launch: an argument does not convert to the kernel's parameter type");
  r.resolve = &resolve_runtime_kernel;
  if constexpr (std::is_same_v<R, launch_request>) r.has_arguments = true;  // a probe is always a launch's
  void* ptrs[sizeof...(Params) + 1] = {};  // + 1: never a zero-length array
  static constexpr std::size_t sizes[sizeof...(Params) + 1] = {sizeof(std::decay_t<Params>)..., 0};
  r.args = ptrs;
  r.arg_sizes = sizes;
  r.arg_count = sizeof...(Params);
  if constexpr ((is_plan_argument<std::decay_t<Args>>::value || ...)) {
    static_assert(std::is_same_v<R, launch_request>, "from_plan() arguments are bound through a launch_request");
    pack_of<argument_slot<std::decay_t<Params>, Args&&>...> slots{std::forward<Args>(args)...};
    slots.addresses(ptrs, [](auto& slot) { return static_cast<void*>(&slot.value); });
    r.bind = &bind_arguments<argument_slot<std::decay_t<Params>, Args&&>...>;
    r.bind_self = &slots;
    return launch(r);
  } else {
    pack_of<std::decay_t<Params>...> converted{implicit_argument<std::decay_t<Params>>(std::forward<Args>(args))...};
    converted.addresses(ptrs, [](auto& a) { return static_cast<void*>(&a); });
    return launch(r);
  }
}

}  // namespace detail

// Runtime-API kernel: argument count and convertibility checked at compile time; every argument is
// converted to the kernel's parameter type (implicitly, as <<<>>> converts) before its address is passed.
// Arguments are taken by value, as <<<>>> takes them (a bit-field, a packed struct's member or a static const
// member without a definition are arguments too). Returns what was launched.
template <class... Params, class Policy, class... Args>
inline launched launch(void (*k)(Params...), const spec<Policy>& s, Args... args) {
  if (!k) detail::throw_null_kernel("launchfit::launch");
  if constexpr ((detail::is_plan_argument<std::decay_t<Args>>::value || ...)) {
    detail::launch_request r = detail::make_request(s);
    r.kernel_id = reinterpret_cast<std::uintptr_t>(k);
    r.stub = reinterpret_cast<const void*>(k);
    return detail::launch_runtime<Params...>(r, std::forward<Args>(args)...);
  } else {
    detail::launch_probe r = detail::make_probe(s);
    r.kernel_id = reinterpret_cast<std::uintptr_t>(k);
    r.stub = reinterpret_cast<const void*>(k);
    return detail::launch_runtime<Params...>(r, std::forward<Args>(args)...);
  }
}

// The plan a launch would use, without launching (computed and cached on first use).
template <class... Params, class Policy>
const plan& plan_for(void (*k)(Params...), const spec<Policy>& s) {
  detail::launch_request r = detail::make_request(s);
  r.kernel_id = reinterpret_cast<std::uintptr_t>(k);
  r.stub = reinterpret_cast<const void*>(k);
  r.resolve = &detail::resolve_runtime_kernel;
  return detail::plan_for(r);
}
}  // namespace launchfit
