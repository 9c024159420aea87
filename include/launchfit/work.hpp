// SPDX-License-Identifier: MIT
#pragma once
/// \file
/// \ingroup launch
/// \brief The work a launch covers and what it is shaped with: launchfit::work, launchfit::dims, block rules
/// and shapes, launchfit::launched.
///
// launchfit::work — the work a launch covers (items, grid-stride, a caller's grid), block and grid
// dimensions, the block sizes a kernel can run with, and what a launch ran with. Cheap to include: plans are
// in launchfit/plan.hpp.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "launchfit/detail/string_fwd.hpp"
#include "launchfit/export.hpp"

namespace launchfit {

struct plan;  // launchfit/plan.hpp
struct extent;

namespace detail {
// Throw launchfit::error (errc::invalid_argument) naming a dimension or size that does not fit: `what` is
// e.g. "dims x" or "items ny".
[[noreturn]] LAUNCHFIT_API void throw_negative(const char* what, long long value);
[[noreturn]] LAUNCHFIT_API void throw_too_large(const char* what, unsigned long long value,
                                                unsigned long long most);

template <class T>
inline constexpr bool is_integer_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;
// Whether every value of T is a valid unsigned dimension (no check needed).
template <class T>
inline constexpr bool fits_unsigned_v = std::is_unsigned_v<T> && sizeof(T) <= sizeof(unsigned);

// v as an unsigned dimension: never wrapped (a negative int, a size_t above 2^32 - 1 throw, naming it). In a
// constant expression such a value fails to compile.
template <class T>
constexpr unsigned dimension(T v, const char* what) {
  if constexpr (std::is_signed_v<T>) {
    if (v < 0) throw_negative(what, static_cast<long long>(v));
  }
  if constexpr (sizeof(T) > sizeof(unsigned)) {
    if (static_cast<unsigned long long>(v) > 0xffffffffULL)
      throw_too_large(what, static_cast<unsigned long long>(v), 0xffffffffULL);
  }
  return static_cast<unsigned>(v);
}
// v as a work size: a negative one throws, naming it.
template <class T>
constexpr std::uint64_t size_value(T v, const char* what) {
  if constexpr (std::is_signed_v<T>) {
    if (v < 0) throw_negative(what, static_cast<long long>(v));
  }
  return static_cast<std::uint64_t>(v);
}

// A dim3-like value: integer members x, y and z (dim3, uint3, int3, ...).
template <class D, class = void>
struct has_xyz : std::false_type {};
template <class D>
struct has_xyz<D, std::void_t<decltype(std::declval<const D&>().x), decltype(std::declval<const D&>().y),
                              decltype(std::declval<const D&>().z)>>
    : std::bool_constant<is_integer_v<std::decay_t<decltype(std::declval<const D&>().x)>> &&
                         is_integer_v<std::decay_t<decltype(std::declval<const D&>().y)>> &&
                         is_integer_v<std::decay_t<decltype(std::declval<const D&>().z)>>> {};
}  // namespace detail

// Block or grid dimensions, as dim3: {x}, {x, y} or {x, y, z} of any integer types (int, unsigned, size_t
// variables: no narrowing error under nvcc), or a dim3 (any value with integer x, y and z). A negative value,
// or one above 2^32 - 1, throws launchfit::error naming it; it is never wrapped.
struct LAUNCHFIT_API dims {
  unsigned x = 1;  // threads or blocks along x
  unsigned y = 1;  // along y
  unsigned z = 1;  // along z

  // 1 x 1 x 1.
  constexpr dims() noexcept = default;
  // {x}, {x, y} or {x, y, z}.
  template <class X, class Y = unsigned, class Z = unsigned,
            std::enable_if_t<detail::is_integer_v<X> && detail::is_integer_v<Y> && detail::is_integer_v<Z>,
                             int> = 0>
  constexpr dims(X nx, Y ny = 1, Z nz = 1) noexcept(
      detail::fits_unsigned_v<X>&& detail::fits_unsigned_v<Y>&& detail::fits_unsigned_v<Z>)
      : x(detail::dimension(nx, "dims x")),
        y(detail::dimension(ny, "dims y")),
        z(detail::dimension(nz, "dims z")) {}
  // A dim3 (or uint3, int3: any value with integer members x, y and z).
  template <class D,
            std::enable_if_t<
                detail::has_xyz<D>::value && !std::is_same_v<D, dims> && !std::is_same_v<D, extent>, int> = 0>
  constexpr dims(const D& d) : dims(d.x, d.y, d.z) {}

  // x * y * z.
  constexpr unsigned long long count() const noexcept { return static_cast<unsigned long long>(x) * y * z; }
  friend constexpr bool operator==(dims a, dims b) noexcept { return a.x == b.x && a.y == b.y && a.z == b.z; }
  friend constexpr bool operator!=(dims a, dims b) noexcept { return !(a == b); }
  std::string to_string() const;  // "256" or "16x16" or "8x8x4"
};

// Items per dimension of a multi-dimensional launch: items({nx, ny}) or items({nx, ny, nz}).
// The constructor takes any integer type, so items({n, m}) with int sizes is not a narrowing conversion
// (an error under nvcc, a warning under g++). A negative size throws launchfit::error naming it.
struct extent {
  std::uint64_t x = 1;  // items along x
  std::uint64_t y = 1;  // items along y
  std::uint64_t z = 1;  // items along z
  // One item.
  constexpr extent() noexcept = default;
  // {nx, ny} or {nx, ny, nz}, of any integer types.
  template <
      class X, class Y, class Z = std::uint64_t,
      class = std::enable_if_t<detail::is_integer_v<X> && detail::is_integer_v<Y> && detail::is_integer_v<Z>>>
  constexpr extent(X nx, Y ny,
                   Z nz = 1) noexcept(std::is_unsigned_v<X>&& std::is_unsigned_v<Y>&& std::is_unsigned_v<Z>)
      : x(detail::size_value(nx, "items nx")),
        y(detail::size_value(ny, "items ny")),
        z(detail::size_value(nz, "items nz")) {}
};

// The work a launch covers. The grid is computed from it per launch; the plan depends on it only through its
// policy's size bucket and the rank (see the plan contract above).
struct work {
  // How the grid follows from the work.
  enum class shape : std::uint8_t {
    none,         // no work given: one full wave of resident blocks (blocks_per_sm x SMs)
    items,        // one thread per `per_thread` items: grid = ceil(n / (block x per_thread)), per dimension
    grid_stride,  // the kernel loops: grid = min(ceil(n / (block x per_thread)), waves x resident blocks)
    grid,         // the caller's grid (`grid`), checked against the device and, cooperative, for co-residency
  };
  shape kind = shape::none;      // which of the shapes above
  std::uint64_t n = 0;           // items along x (the only dimension when rank is 1)
  std::uint32_t per_thread = 1;  // along x
  std::uint8_t rank = 1;    // 1, 2 or 3: items({nx, ny[, nz]}) plans a 2-D block and a grid per dimension
  std::uint32_t waves = 0;  // grid_stride: cap at this many waves of resident blocks (0: the plan's:
                            // one wave, or the full grid for a tuned plan that measured it, plan.full_grid)
  std::uint64_t ny = 1;     // items along y (rank 2 and 3)
  std::uint64_t nz = 1;     // items along z (rank 3)
  dims grid{0, 1, 1};       // shape::grid only
};

// Which block sizes a kernel can run with (block threads). A tree reduction that assumes a power of two, a
// kernel tiled by 64 threads, or an explicit set: every policy (and autotune, and a plan read from a file)
// chooses among these only, or the launch is refused.
struct LAUNCHFIT_API block_rule {
  // Which rule.
  enum class kind : std::uint8_t {
    any,           // every block size
    multiple_of,   // multiples of `multiple`
    power_of_two,  // 1, 2, 4, ... 1024
    one_of,        // the sizes in `values`
  };
  kind k = kind::any;             // which rule
  std::uint8_t count = 0;         // one_of: values used in `values`
  std::uint16_t multiple = 1;     // multiple_of
  std::uint16_t values[16] = {};  // one_of: block sizes, at most 16
  bool invalid = false;           // a multiple or a size outside 1..1024, or more than 16 sizes

  // Whether a block of this many threads may run.
  bool allows(int block_threads) const noexcept {
    if (block_threads <= 0) return false;
    switch (k) {
      case kind::any:
        return true;
      case kind::multiple_of:
        return !invalid && block_threads % multiple == 0;
      case kind::power_of_two:
        return (block_threads & (block_threads - 1)) == 0;
      case kind::one_of:
        if (invalid) return false;
        for (int i = 0; i < count; ++i)
          if (values[i] == block_threads) return true;
        return false;
    }
    return false;
  }
  // Power-of-two blocks only (a tree reduction's assumption).
  static block_rule power_of_two() noexcept {
    block_rule r;
    r.k = kind::power_of_two;
    return r;
  }
  // m in 1..1024 (no block has more threads); any other m allows no block (validation names it).
  static block_rule multiple_of(unsigned m) noexcept {
    block_rule r;
    r.k = kind::multiple_of;
    r.invalid = m == 0 || m > 1024;
    r.multiple = static_cast<std::uint16_t>(r.invalid ? 1024 : m);
    return r;
  }
  // At most 16 sizes, each 1..1024: a rule with any other allows no block (validation names it).
  static block_rule one_of(std::initializer_list<int> sizes) noexcept {
    block_rule r;
    r.k = kind::one_of;
    for (int v : sizes) {
      if (v <= 0 || v > 1024 || r.count >= 16) {
        r.count = 0;
        r.invalid = true;
        break;
      }
      r.values[r.count++] = static_cast<std::uint16_t>(v);
    }
    return r;
  }
  // The rule allows every block.
  bool is_any() const noexcept {
    return k == kind::any || (k == kind::multiple_of && multiple <= 1 && !invalid);
  }
  // Stable identity for plan keys (0: any).
  std::uint64_t hash() const noexcept;
  // "any", "power of two", "multiple of 64", "one of 64,128,256"
  std::string to_string() const;
};

// How a kernel needs its block shaped, for kernels that index more than x: a y the kernel fixes (a
// quasirandom generator indexing 3 dimensions with threadIdx.y: block {bx, 3}), an x that is a multiple of a
// tile width, and rows per thread along y (the cuda-samples transpose covers a 32x32 tile with a 32x8 block:
// 4 rows per thread). A policy chooses only the block's threads, among the totals the shape allows; the block
// follows: fixed y: {threads / (y z), y, z} with that x a multiple of x_multiple; free y: {x_multiple,
// threads / (x_multiple z), z}. The grid follows too: ceil(nx / block x) x ceil(ny / (block y x
// per_thread_y)) x ceil(nz / block z); 1-D work (items(n), grid_stride(n), none) runs along x, one block row
// of y.
struct LAUNCHFIT_API block_shape {
  std::uint16_t y = 0;             // block y the kernel needs; 0: free (the threads left after x and z)
  std::uint16_t z = 1;             // block z the kernel needs
  std::uint16_t x_multiple = 0;    // block x is a multiple of this; 0: 32 (rows of one warp)
  std::uint32_t per_thread_y = 1;  // rows along y each thread covers (0: 1)
  bool invalid = false;            // y or x_multiple above 1024, or z above 64: no block has that shape
  // With y free and z 1 (2-D and 3-D work): a policy may widen the block along x to any multiple of x_step()
  // with y >= 2 ({64, threads / 64}, {128, threads / 128}, ...; autotune times them). Only for a kernel that
  // indexes with blockDim and sizes nothing by the block's shape (an smem rule sees only the thread count).
  // Default: x is exactly x_step() (rows of one warp).
  bool free_x = false;

  // No shape asked for: multi-dimensional work gets rows of 32 ({32, threads / 32}), 1-D work a 1-D block.
  // free_x alone keeps that (it only lets a policy choose wider 2-D blocks of its own): see is_set().
  bool is_default() const noexcept {
    return y == 0 && z == 1 && x_step() == 32 && per_thread_y <= 1 && !invalid;
  }
  // Whether anything was asked for, free_x included: what keys, plan text and log lines carry.
  bool is_set() const noexcept { return !is_default() || free_x; }
  // What block x must be a multiple of.
  unsigned x_step() const noexcept { return x_multiple ? x_multiple : 32u; }
  // What the block's thread count must be a multiple of: y z x_step (fixed y) or x_step z (free y).
  unsigned thread_step() const noexcept { return (y ? y : 1u) * z * x_step(); }
  // Whether a block of this many threads can have this shape.
  bool allows(int threads) const noexcept {
    return !invalid && threads > 0 && static_cast<unsigned>(threads) % thread_step() == 0;
  }
  // The block of this many threads in this shape (threads must be allowed).
  dims block_for(int threads) const noexcept {
    const auto t = static_cast<unsigned>(threads);
    return y ? dims{t / (y * z), y, z} : dims{x_step(), t / (x_step() * z), z};
  }
  // Whether a block (a policy's own 2-D or 3-D block, a stored plan's) has this shape.
  bool fits(dims b) const noexcept {
    return !invalid && b.z == z && (y == 0 || b.y == y) && b.x % x_step() == 0;
  }
  // The same shape (x_multiple 0 and 32 are the same; per_thread_y 0 is 1).
  friend bool operator==(const block_shape& a, const block_shape& b) noexcept {
    return a.y == b.y && a.z == b.z && a.x_step() == b.x_step() &&
           (a.per_thread_y > 1 ? a.per_thread_y : 1) == (b.per_thread_y > 1 ? b.per_thread_y : 1) &&
           a.invalid == b.invalid && a.free_x == b.free_x;
  }
  friend bool operator!=(const block_shape& a, const block_shape& b) noexcept { return !(a == b); }
  // Stable identity for plan keys (0: the default shape).
  std::uint64_t hash() const noexcept;
  // "x=32n,y=3", "x=32n,y=8,per_thread_y=4", "x=32n,free_x" ("32n": a multiple of 32; y omitted when free):
  // no spaces, as stored keys and log lines hold it. "invalid(...)" for a shape out of range.
  std::string to_string() const;
};

// What a launch ran with: returned by launch(), so a host sizing buffers or the next pass need not plan
// again.
struct LAUNCHFIT_API launched {
  dims grid{0, 1, 1};                  // 0 blocks: the work was empty and nothing was launched
  dims block;                          // its block
  std::size_t dynamic_smem_bytes = 0;  // its dynamic shared memory per block
  // Valid as long as plan_for()'s reference (until the plans are dropped).
  const struct plan* plan_ptr = nullptr;

  // The plan it ran with.
  const struct plan& plan() const noexcept { return *plan_ptr; }
  // Waves of resident blocks its grid took (plan::waves).
  double waves() const noexcept;
};

}  // namespace launchfit
