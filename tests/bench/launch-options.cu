// SPDX-License-Identifier: MIT
// launch-options: host time per launch of one near-empty kernel through launchfit::launch with each launch
// option, against the raw launch of the same kernel, grid and block: `<<<>>>` for the plain options, and
// cuLaunchKernelEx with the same launch attribute for .cluster({2, 1, 1}) and .pdl(). Options: none
// (max_occupancy().items(n)), items({nx, ny}), .blocks(power_of_two()), a family of four members, a
// from_plan() argument, .cluster({2, 1, 1}) and .pdl() (these two and no option also with the spec built once,
// outside the loop). cuLaunchKernelEx without attributes is shown beside the plain launch: <<<>>> goes through the runtime.
// Three more raw rows take launchfit's hit path apart against it: the same launch after the context identity
// launchfit reads (cuCtxGetCurrent + cuCtxGetId), after the same identity read in one call (cuCtxGetId(NULL):
// does the second call cost anything?), and through the pointer cuGetProcAddress gives; and the launches with the
// PDL and the cluster attribute after the same context identity (what the driver's calls cost beside each).
//
// Two batch shapes, as launch-overhead: 10,000 back-to-back async launches (once the driver's queue fills
// this measures the queue, so paths converge) and 100-launch batches with the stream drained in between (the
// host cost while the queue has room). Interleaved rounds; medians over batches. Every path is checked to run
// every launch (and the from_plan() argument to be the plan's block).
//
//   launch-options [--quick] [--json PATH] [--batches N] [--device N]
//   launch-options --profile ROW [--seconds S]   nothing checked: only ROW's long batches (10,000 launches;
//                                                1,000 with --quick) for S seconds (default 5), a sampling
//                                                profiler's target (ROW: the row's name as the table prints)

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "launchfit/family.hpp"
#include "launchfit/launch.hpp"

namespace lf = launchfit;

namespace {

// The timed kernel does nothing (counter == nullptr); the check passes a counter and block (0, 0, 0) adds
// `add` once per launch.
__global__ void probe(unsigned long long* counter, int add) {
  if (counter && threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.x == 0 && blockIdx.y == 0 &&
      blockIdx.z == 0)
    atomicAdd(counter, static_cast<unsigned long long>(add));
}

// A family: the same body written for four block sizes.
template <int Block>
__global__ void __launch_bounds__(Block) probe_member(unsigned long long* counter, int add) {
  if (counter && threadIdx.x == 0 && blockIdx.x == 0)
    atomicAdd(counter, static_cast<unsigned long long>(add));
}

using probe_fn = void (*)(unsigned long long*, int);

const lf::family<void(unsigned long long*, int)>& probe_family() {
  static const auto& f = *new lf::family<void(unsigned long long*, int)>{{128, probe_member<128>},
                                                                         {256, probe_member<256>},
                                                                         {512, probe_member<512>},
                                                                         {1024, probe_member<1024>}};
  return f;
}

probe_fn member_for(int block) {
  switch (block) {
    case 128:
      return probe_member<128>;
    case 256:
      return probe_member<256>;
    case 512:
      return probe_member<512>;
    case 1024:
      return probe_member<1024>;
    default:
      throw bench::cuda_failure("the family launched a block it has no member for: " + std::to_string(block));
  }
}

void check_cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  throw bench::cuda_failure(std::string(what) + " failed: " + (name ? name : "unknown CUresult"));
}

CUfunction function_of(const void* stub) {
  cudaFunction_t f = nullptr;
  BENCH_CUDA(cudaGetFuncBySymbol(&f, stub));
  return reinterpret_cast<CUfunction>(f);
}

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// Host microseconds per launch for each of `batches` batches of `batch` launches, after a warm-up of up to
// 100 launches; the stream is drained between batches, outside the timed region.
template <class F>
std::vector<double> host_us_per_launch(F&& launch, int batch, int batches, cudaStream_t s) {
  std::vector<double> per;
  for (int b = -1; b < batches; ++b) {
    const int count = b < 0 ? std::min(batch, 100) : batch;
    const auto t0 = clock_type::now();
    for (int i = 0; i < count; ++i) launch();
    const double us = us_since(t0);
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(s));
    if (b >= 0) per.push_back(us / count);
  }
  return per;
}

std::string dims_text(dim3 g, dim3 b) {
  auto d = [](dim3 x) {
    std::string s = std::to_string(x.x);
    if (x.y > 1 || x.z > 1) s += "x" + std::to_string(x.y);
    if (x.z > 1) s += "x" + std::to_string(x.z);
    return s;
  };
  return "<<<" + d(g) + ", " + d(b) + ">>>";
}

dim3 to_dim3(lf::dims d) { return dim3(d.x, d.y, d.z); }

enum class path {
  chevron,          // <<<grid, block>>> of `kernel`
  ex_plain,         // cuLaunchKernelEx without attributes
  ex_cluster,       // cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION {2, 1, 1}
  ex_pdl,           // cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
  ex_context,       // cuCtxGetCurrent + cuCtxGetId, then cuLaunchKernelEx without attributes: the driver calls of
                    // launchfit's hit path, without launchfit
  ex_pdl_context,   // cuCtxGetCurrent + cuCtxGetId, then cuLaunchKernelEx with the PDL attribute
  ex_cluster_context,  // cuCtxGetCurrent + cuCtxGetId, then cuLaunchKernelEx with the cluster attribute
  ex_context_id,    // cuCtxGetId(NULL) (the current context's identity in one call), then cuLaunchKernelEx without
                    // attributes
  ex_proc_address,  // cuLaunchKernelEx without attributes through the pointer cuGetProcAddress gives for CUDA_VERSION
                    // (how launchfit calls the driver)
  lf_items,         // launchfit max_occupancy().items(n)
  lf_items_once,    // the same, the spec built once outside the loop
  lf_items_2d,      // launchfit max_occupancy().items({nx, ny})
  lf_pow2,          // launchfit max_occupancy().blocks(power_of_two()).items(n)
  lf_family,        // launchfit family, max_occupancy().items(n)
  lf_from_plan,     // launchfit max_occupancy().items(n), one argument from_plan()
  lf_cluster,       // launchfit max_occupancy().cluster({2, 1, 1}).items(n)
  lf_pdl,           // launchfit max_occupancy().items(n).pdl()
  lf_cluster_once,  // launchfit .cluster({2, 1, 1}), the spec built once outside the loop
  lf_pdl_once,      // launchfit .pdl(), the spec built once outside the loop
};

struct variant {
  std::string name;
  path how;
  probe_fn kernel = probe;  // chevron rows
  dim3 grid, block;
  int baseline = -1;  // the raw launch with the same kernel, grid, block and attributes (-1: raw)
  int also = -1;      // a second raw launch to compare with (<<<>>>, or cuLaunchKernelEx without attributes)
  double us_long = 0, us_short = 0;
};

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", r);
  return buf;
}

int run(int argc, char** argv) {
  const auto start = clock_type::now();
  const bench::args a(argc, argv);
  const bool quick = a.flag("--quick");
  const int batches = std::max(1, a.int_value("--batches", quick ? 2 : 10));
  const int long_batch = quick ? 1000 : 10000;
  const int short_batch = 100;
  const int short_batches = quick ? 20 : 200;
  const std::string json_path = a.value("--json");
  const bench::device_info dev = bench::open_device(a.int_value("--device", 0));
  int failures = 0;

  std::printf("# launchfit launch options: host cost per launch\n\ndevice: %s\n", dev.describe().c_str());
  if (dev.prop.major < 9) {
    throw bench::cuda_failure(
        "clusters and programmatic dependent launch need compute capability 9.0 or newer");
  }
  if (std::getenv("LAUNCHFIT_POLICY")) std::printf("note: LAUNCHFIT_POLICY is set; overrides apply\n");

  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::uint64_t n = std::uint64_t{1} << 16;
  const lf::extent e2{256, 256};  // the same 2^16 threads, in 2-D
  const lf::dims cluster2{2, 1, 1};
  auto from_block = [](const lf::plan& p) { return p.block_threads; };

  const auto s_items = lf::max_occupancy().items(n).on(stream);
  const auto s_2d = lf::max_occupancy().items(e2).on(stream);
  const auto s_pow2 = lf::max_occupancy().blocks(lf::block_rule::power_of_two()).items(n).on(stream);
  const auto s_cluster = lf::max_occupancy().cluster(cluster2).items(n).on(stream);
  const auto s_pdl = lf::max_occupancy().items(n).on(stream).pdl();
  const auto& fam = probe_family();

  // What each launchfit option launches (planned now; this also warms the cache and logs each plan once).
  struct launch_dims {
    dim3 grid, block;
  };
  auto dims_of = [](const lf::launched& l) { return launch_dims{to_dim3(l.grid), to_dim3(l.block)}; };
  unsigned long long* none = nullptr;
  const launch_dims d_items = dims_of(lf::launch(probe, s_items, none, 1));
  const launch_dims d_2d = dims_of(lf::launch(probe, s_2d, none, 1));
  const launch_dims d_pow2 = dims_of(lf::launch(probe, s_pow2, none, 1));
  const lf::launched fam_ran = lf::launch(fam, s_items, none, 1);
  const launch_dims d_fam = dims_of(fam_ran);
  const probe_fn fam_member = member_for(fam_ran.plan().block_threads);
  const launch_dims d_from = dims_of(lf::launch(probe, s_items, none, lf::from_plan(from_block)));
  const lf::launched cluster_ran = lf::launch(probe, s_cluster, none, 1);
  const launch_dims d_cluster = dims_of(cluster_ran);
  const launch_dims d_pdl = dims_of(lf::launch(probe, s_pdl, none, 1));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  if (cluster_ran.plan().options.cluster != cluster2) {
    throw bench::cuda_failure("the cluster plan has cluster " + cluster_ran.plan().options.cluster.to_string());
  }

  const CUfunction probe_cu = function_of(reinterpret_cast<const void*>(&probe));
  std::vector<variant> variants;
  // The <<<>>> row for a kernel, grid and block (one row per distinct launch).
  auto chevron_row = [&](probe_fn k, launch_dims d) {
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const variant& v = variants[i];
      if (v.how == path::chevron && v.kernel == k && v.grid.x == d.grid.x && v.grid.y == d.grid.y &&
          v.grid.z == d.grid.z && v.block.x == d.block.x && v.block.y == d.block.y && v.block.z == d.block.z)
        return static_cast<int>(i);
    }
    variant v{k == probe ? "<<<>>>" : "<<<>>> member " + std::to_string(d.block.x * d.block.y * d.block.z),
              path::chevron, k, d.grid, d.block};
    variants.push_back(v);
    return static_cast<int>(variants.size() - 1);
  };
  auto add = [&](const std::string& name, path how, launch_dims d, int baseline, int also) {
    variant v{name, how, probe, d.grid, d.block, baseline, also};
    variants.push_back(v);
  };
  int base = chevron_row(probe, d_items);
  variants.push_back(
      variant{"cuLaunchKernelEx (no attributes)", path::ex_plain, probe, d_items.grid, d_items.block});
  const int ex_plain_row = static_cast<int>(variants.size() - 1);
  // What launchfit's hit path asks the driver besides the launch, and how it reaches the launch: raw rows.
  add("cuCtxGetCurrent + cuCtxGetId + cuLaunchKernelEx", path::ex_context, d_items, ex_plain_row, -1);
  add("cuCtxGetId(NULL) + cuLaunchKernelEx", path::ex_context_id, d_items, ex_plain_row, -1);
  add("cuLaunchKernelEx through cuGetProcAddress", path::ex_proc_address, d_items, ex_plain_row, -1);
  add("launchfit max_occupancy().items(n)", path::lf_items, d_items, base, ex_plain_row);
  add("launchfit max_occupancy().items(n), spec built once", path::lf_items_once, d_items, base, ex_plain_row);
  base = chevron_row(probe, d_2d);
  add("launchfit max_occupancy().items({nx, ny})", path::lf_items_2d, d_2d, base, -1);
  base = chevron_row(probe, d_pow2);
  add("launchfit .blocks(power_of_two())", path::lf_pow2, d_pow2, base, -1);
  base = chevron_row(fam_member, d_fam);
  add("launchfit family (4 members)", path::lf_family, d_fam, base, -1);
  base = chevron_row(probe, d_from);
  add("launchfit from_plan() argument", path::lf_from_plan, d_from, base, -1);
  variants.push_back(variant{"cuLaunchKernelEx + cluster attribute {2,1,1}", path::ex_cluster, probe,
                             d_cluster.grid, d_cluster.block});
  base = static_cast<int>(variants.size() - 1);
  add("cuCtxGetCurrent + cuCtxGetId + cuLaunchKernelEx + cluster attribute", path::ex_cluster_context, d_cluster, base,
      -1);
  add("launchfit .cluster({2, 1, 1})", path::lf_cluster, d_cluster, base, chevron_row(probe, d_cluster));
  add("launchfit .cluster({2, 1, 1}), spec built once", path::lf_cluster_once, d_cluster, base, -1);
  variants.push_back(
      variant{"cuLaunchKernelEx + PDL attribute", path::ex_pdl, probe, d_pdl.grid, d_pdl.block});
  base = static_cast<int>(variants.size() - 1);
  add("cuCtxGetCurrent + cuCtxGetId + cuLaunchKernelEx + PDL attribute", path::ex_pdl_context, d_pdl, base, -1);
  add("launchfit .pdl()", path::lf_pdl, d_pdl, base, chevron_row(probe, d_pdl));
  add("launchfit .pdl(), spec built once", path::lf_pdl_once, d_pdl, base, -1);

  // Raw cuLaunchKernelEx configurations, built once (as a caller would).
  CUlaunchAttribute cluster_attr{};
  cluster_attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster_attr.value.clusterDim.x = cluster2.x;
  cluster_attr.value.clusterDim.y = cluster2.y;
  cluster_attr.value.clusterDim.z = cluster2.z;
  CUlaunchAttribute pdl_attr{};
  pdl_attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  pdl_attr.value.programmaticStreamSerializationAllowed = 1;
  auto ex_config = [&](launch_dims d, CUlaunchAttribute* attr) {
    CUlaunchConfig c{};
    c.gridDimX = d.grid.x;
    c.gridDimY = d.grid.y;
    c.gridDimZ = d.grid.z;
    c.blockDimX = d.block.x;
    c.blockDimY = d.block.y;
    c.blockDimZ = d.block.z;
    c.hStream = stream;
    c.attrs = attr;
    c.numAttrs = 1;
    return c;
  };
  CUlaunchConfig plain_config = ex_config(d_items, nullptr);
  plain_config.numAttrs = 0;
  CUlaunchConfig cluster_config = ex_config(d_cluster, &cluster_attr);
  CUlaunchConfig pdl_config = ex_config(d_pdl, &pdl_attr);
  // cuLaunchKernelEx as launchfit's driver table gets it: the newest ABI for this CUDA version.
  using launch_ex_fn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  launch_ex_fn launch_ex = nullptr;
  {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    check_cu(cuGetProcAddress("cuLaunchKernelEx", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found),
             "cuGetProcAddress");
    if (!fn || found != CU_GET_PROC_ADDRESS_SUCCESS)
      throw bench::cuda_failure("cuGetProcAddress(cuLaunchKernelEx) found nothing");
    launch_ex = reinterpret_cast<launch_ex_fn>(fn);
  }
  // The context identity launchfit's hit path reads before each launch.
  auto context_identity = [] {
    CUcontext ctx = nullptr;
    unsigned long long id = 0;
    check_cu(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    check_cu(cuCtxGetId(ctx, &id), "cuCtxGetId");
  };
  // The same identity in one call: cuCtxGetId(NULL) answers for the current context.
  auto context_identity_one_call = [] {
    unsigned long long id = 0;
    check_cu(cuCtxGetId(nullptr, &id), "cuCtxGetId");
  };

  // One launch of variant v, with `counter` (nullptr when timed) and the add value.
  auto launch_one = [&](const variant& v, unsigned long long* counter) {
    int one = 1;
    void* params[] = {&counter, &one};
    switch (v.how) {
      case path::chevron:
        v.kernel<<<v.grid, v.block, 0, stream>>>(counter, 1);
        break;
      case path::ex_plain:
        check_cu(cuLaunchKernelEx(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::ex_cluster:
        check_cu(cuLaunchKernelEx(&cluster_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::ex_pdl:
        check_cu(cuLaunchKernelEx(&pdl_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::ex_context:
        context_identity();
        check_cu(cuLaunchKernelEx(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::ex_pdl_context:
        context_identity();
        check_cu(cuLaunchKernelEx(&pdl_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::ex_cluster_context:
        context_identity();
        check_cu(cuLaunchKernelEx(&cluster_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::ex_context_id:
        context_identity_one_call();
        check_cu(cuLaunchKernelEx(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::ex_proc_address:
        check_cu(launch_ex(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
        break;
      case path::lf_items:
      case path::lf_items_once:
        lf::launch(probe, s_items, counter, 1);
        break;
      case path::lf_items_2d:
        lf::launch(probe, s_2d, counter, 1);
        break;
      case path::lf_pow2:
        lf::launch(probe, s_pow2, counter, 1);
        break;
      case path::lf_family:
        lf::launch(fam, s_items, counter, 1);
        break;
      case path::lf_from_plan:
        lf::launch(probe, s_items, counter, lf::from_plan(from_block));
        break;
      case path::lf_cluster:
        lf::launch(probe, s_cluster, counter, 1);
        break;
      case path::lf_pdl:
      case path::lf_pdl_once:
        lf::launch(probe, s_pdl, counter, 1);
        break;
      case path::lf_cluster_once:
        lf::launch(probe, s_cluster, counter, 1);
        break;
    }
  };
  // Each variant is timed in its own loop (no type-erased call in the timed loop).
  auto measure = [&](const variant& v, int batch, int nb) -> std::vector<double> {
    unsigned long long* c = nullptr;
    int one = 1;
    void* params[] = {&c, &one};
    switch (v.how) {
      case path::chevron: {
        const probe_fn k = v.kernel;
        const dim3 g = v.grid, b = v.block;
        return host_us_per_launch([&] { k<<<g, b, 0, stream>>>(c, 1); }, batch, nb, stream);
      }
      case path::ex_plain:
        return host_us_per_launch(
            [&] { check_cu(cuLaunchKernelEx(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx"); },
            batch, nb, stream);
      case path::ex_cluster:
        return host_us_per_launch(
            [&] {
              check_cu(cuLaunchKernelEx(&cluster_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
            },
            batch, nb, stream);
      case path::ex_pdl:
        return host_us_per_launch(
            [&] { check_cu(cuLaunchKernelEx(&pdl_config, probe_cu, params, nullptr), "cuLaunchKernelEx"); },
            batch, nb, stream);
      case path::ex_context:
        return host_us_per_launch(
            [&] {
              context_identity();
              check_cu(cuLaunchKernelEx(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
            },
            batch, nb, stream);
      case path::ex_pdl_context:
        return host_us_per_launch(
            [&] {
              context_identity();
              check_cu(cuLaunchKernelEx(&pdl_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
            },
            batch, nb, stream);
      case path::ex_cluster_context:
        return host_us_per_launch(
            [&] {
              context_identity();
              check_cu(cuLaunchKernelEx(&cluster_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
            },
            batch, nb, stream);
      case path::ex_context_id:
        return host_us_per_launch(
            [&] {
              context_identity_one_call();
              check_cu(cuLaunchKernelEx(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx");
            },
            batch, nb, stream);
      case path::ex_proc_address:
        return host_us_per_launch(
            [&] { check_cu(launch_ex(&plain_config, probe_cu, params, nullptr), "cuLaunchKernelEx"); }, batch, nb,
            stream);
      case path::lf_items:
        return host_us_per_launch([&] { lf::launch(probe, lf::max_occupancy().items(n).on(stream), c, 1); },
                                  batch, nb, stream);
      case path::lf_items_once:
        return host_us_per_launch([&] { lf::launch(probe, s_items, c, 1); }, batch, nb, stream);
      case path::lf_items_2d:
        return host_us_per_launch([&] { lf::launch(probe, lf::max_occupancy().items(e2).on(stream), c, 1); },
                                  batch, nb, stream);
      case path::lf_pow2:
        return host_us_per_launch(
            [&] {
              lf::launch(probe,
                         lf::max_occupancy().blocks(lf::block_rule::power_of_two()).items(n).on(stream), c,
                         1);
            },
            batch, nb, stream);
      case path::lf_family:
        return host_us_per_launch([&] { lf::launch(fam, lf::max_occupancy().items(n).on(stream), c, 1); },
                                  batch, nb, stream);
      case path::lf_from_plan:
        return host_us_per_launch(
            [&] { lf::launch(probe, lf::max_occupancy().items(n).on(stream), c, lf::from_plan(from_block)); },
            batch, nb, stream);
      case path::lf_cluster:
        return host_us_per_launch(
            [&] { lf::launch(probe, lf::max_occupancy().cluster(cluster2).items(n).on(stream), c, 1); },
            batch, nb, stream);
      case path::lf_pdl:
        return host_us_per_launch(
            [&] { lf::launch(probe, lf::max_occupancy().items(n).on(stream).pdl(), c, 1); }, batch, nb,
            stream);
      case path::lf_cluster_once:
        return host_us_per_launch([&] { lf::launch(probe, s_cluster, c, 1); }, batch, nb, stream);
      case path::lf_pdl_once:
        return host_us_per_launch([&] { lf::launch(probe, s_pdl, c, 1); }, batch, nb, stream);
    }
    return {};
  };

  // A profiler's target: one row's loop, nothing else timed.
  if (const std::string only = a.value("--profile"); !only.empty()) {
    const int seconds = std::max(1, a.int_value("--seconds", 5));
    for (const variant& v : variants) {
      if (v.name != only) continue;
      const auto t0 = clock_type::now();
      std::vector<double> us;
      while (us.empty() || bench::seconds_since(t0) < seconds)
        for (double x : measure(v, long_batch, 1)) us.push_back(x);
      std::printf("profiled %s: %zu batches of %d, median %.3f us/launch\n", v.name.c_str(), us.size(),
                  long_batch, bench::median(us));
      return 0;
    }
    std::printf("no row named '%s'\n", only.c_str());
    return 2;
  }

  // Interleaved: each round times one long batch and a few short ones of every variant, starting at a
  // different variant each round.
  std::vector<std::vector<double>> long_runs(variants.size()), short_runs(variants.size());
  const int shorts_per_round = std::max(1, short_batches / batches);
  for (int round = 0; round < batches; ++round) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::size_t v = (k + static_cast<std::size_t>(round)) % variants.size();
      for (double x : measure(variants[v], long_batch, 1)) long_runs[v].push_back(x);
      for (double x : measure(variants[v], short_batch, shorts_per_round)) short_runs[v].push_back(x);
    }
    std::printf("round %d of %d done (%.1f s)\n", round + 1, batches, bench::seconds_since(start));
  }
  for (std::size_t v = 0; v < variants.size(); ++v) {
    variants[v].us_long = bench::median(long_runs[v]);
    variants[v].us_short = bench::median(short_runs[v]);
  }

  // ---- every path really launches, and from_plan() passes the plan's block ----
  {
    bench::device_buffer<unsigned long long> counter(1);
    const int reps = 1000;
    for (const variant& v : variants) {
      BENCH_CUDA(cudaMemsetAsync(counter.get(), 0, sizeof(unsigned long long), stream));
      for (int i = 0; i < reps; ++i) launch_one(v, counter.get());
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaStreamSynchronize(stream));
      const unsigned long long per = v.how == path::lf_from_plan ? v.block.x * v.block.y * v.block.z : 1ULL;
      const unsigned long long got = counter.download()[0];
      if (got != per * reps) {
        ++failures;
        std::printf("FAILED: %s %s: counted %llu, expected %d launches x %llu\n", v.name.c_str(),
                    dims_text(v.grid, v.block).c_str(), got, reps, per);
      }
    }
  }

  const double total_s = bench::seconds_since(start);
  auto ratio = [&](const variant& v, int other, bool long_batches) {
    if (other < 0) return 1.0;
    const variant& o = variants[static_cast<std::size_t>(other)];
    return long_batches ? v.us_long / o.us_long : v.us_short / o.us_short;
  };
  if (!json_path.empty()) {
    std::ostringstream js;
    js << "{\n\"benchmark\":\"launch-options\",\n\"device\":" << dev.json()
       << ",\n\"long_batch\":" << long_batch << ",\n\"short_batch\":" << short_batch << ",\n\"variants\":[";
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const variant& v = variants[i];
      js << (i ? ",\n" : "\n") << "{\"name\":" << bench::json_string(v.name)
         << ",\"dims\":" << bench::json_string(dims_text(v.grid, v.block))
         << ",\"us_per_launch_long\":" << bench::json_number(v.us_long)
         << ",\"us_per_launch_short\":" << bench::json_number(v.us_short) << ",\"baseline\":"
         << (v.baseline >= 0 ? bench::json_string(variants[static_cast<std::size_t>(v.baseline)].name + " " +
                                                  dims_text(v.grid, v.block))
                             : std::string("null"))
         << ",\"ratio_long\":" << bench::json_number(ratio(v, v.baseline, true))
         << ",\"ratio_short\":" << bench::json_number(ratio(v, v.baseline, false));
      if (v.also >= 0) {
        js << ",\"also\":" << bench::json_string(variants[static_cast<std::size_t>(v.also)].name)
           << ",\"ratio_also_long\":" << bench::json_number(ratio(v, v.also, true))
           << ",\"ratio_also_short\":" << bench::json_number(ratio(v, v.also, false));
      }
      js << "}";
    }
    js << "],\n\"failures\":" << failures << ",\n\"total_s\":" << bench::json_number(total_s) << "\n}\n";
    bench::write_file(json_path, js.str());
    std::printf("\nwrote %s\n", json_path.c_str());
  }

  std::printf(
      "\n## Summary: host time per launch, near-empty kernel (median; lower is better)\n\n"
      "| launch | grid, block | us/launch (%d-launch batches) | vs raw | us/launch (%d-launch batches) | "
      "vs raw |\n|---|---|---:|---:|---:|---:|\n",
      long_batch, short_batch);
  for (const variant& v : variants) {
    const bool raw = v.baseline < 0;
    std::printf("| %s | %s | %.3f | %s | %.3f | %s |\n", v.name.c_str(), dims_text(v.grid, v.block).c_str(),
                v.us_long, raw ? "-" : ratio_text(ratio(v, v.baseline, true)).c_str(), v.us_short,
                raw ? "-" : ratio_text(ratio(v, v.baseline, false)).c_str());
  }
  std::printf(
      "\nratios (launchfit / the raw launch of the same kernel, grid, block and attributes; %d-launch / "
      "%d-launch batches):\n",
      long_batch, short_batch);
  for (const variant& v : variants) {
    if (v.baseline < 0) continue;
    const variant& b = variants[static_cast<std::size_t>(v.baseline)];
    std::printf("ratio %-42s vs %-44s %s / %s", v.name.c_str(), b.name.c_str(),
                ratio_text(ratio(v, v.baseline, true)).c_str(),
                ratio_text(ratio(v, v.baseline, false)).c_str());
    if (v.also >= 0) {
      std::printf("  (vs %s: %s / %s)", variants[static_cast<std::size_t>(v.also)].name.c_str(),
                  ratio_text(ratio(v, v.also, true)).c_str(), ratio_text(ratio(v, v.also, false)).c_str());
    }
    std::printf("\n");
  }
  std::printf("\ntarget: launchfit / raw <= 1.03 on a warm cache. verification: %s; total time %.1f s\n",
              bench::verification_summary(failures, "every launch path ran every launch").c_str(), total_s);
  BENCH_CUDA(cudaStreamDestroy(stream));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("launch-options", run, argc, argv); }
