// The launch path. Hit: cuCtxGetCurrent, a thread-local plan lookup, integer grid arithmetic and
// cuLaunchKernelEx. Miss: resolve the kernel, query device and kernel, pick the policy (LAUNCHFIT_POLICY
// override, cache file, or the spec's), validate, log once, cache.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "driver.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "log_internal.hpp"
#include "plan_cache.hpp"
#include "policy_string.hpp"

namespace launchfit::detail {
namespace {

// The most recently launched plan: named when a later call reports a sticky (asynchronous) fault.
std::atomic<const plan_entry*> last_launched{nullptr};

// Errors after which the context is unusable: every later call returns them.
constexpr CUresult sticky_errors[] = {CUDA_ERROR_ILLEGAL_ADDRESS,      CUDA_ERROR_LAUNCH_FAILED,
                                      CUDA_ERROR_MISALIGNED_ADDRESS,   CUDA_ERROR_ILLEGAL_INSTRUCTION,
                                      CUDA_ERROR_INVALID_PC,           CUDA_ERROR_HARDWARE_STACK_ERROR,
                                      CUDA_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_ASSERT,
                                      CUDA_ERROR_LAUNCH_TIMEOUT};

bool is_sticky(CUresult r) {
  return std::find(std::begin(sticky_errors), std::end(sticky_errors), r) != std::end(sticky_errors);
}

std::string sticky_note() {
  std::string note = "; the context is unusable after an earlier kernel faulted";
  if (const plan_entry* last = last_launched.load(std::memory_order_relaxed))
    note += " (last launched: " + display_name(last->kernel) + " with " + last->plan.to_string() + ")";
  return note;
}

bool is_sticky_name(const std::string& name) {
  return std::any_of(std::begin(sticky_errors), std::end(sticky_errors),
                     [&](CUresult r) { return name == error_name(r); });
}

[[noreturn]] void throw_launch_error(CUresult r, const plan_entry& e, dims grid) {
  std::string message = error_string(r);
  if (is_sticky(r)) message += sticky_note();
  throw error("cuLaunchKernelEx", error_name(r), message, display_name(e.kernel),
              "launch grid " + grid.to_string() + ", " + e.plan.to_string());
}

CUcontext current_context(const launch_request& r) {
  const driver_api& d = driver();
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx && r.resolve) {
    // A thread that has not used the runtime yet: resolving the kernel makes the primary context current.
    r.resolve(r.stub);
    check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  }
  if (!ctx) {
    throw error("cuCtxGetCurrent", "CUDA_ERROR_INVALID_CONTEXT",
                "no current CUDA context (cuCtxSetCurrent / cudaSetDevice first)");
  }
  return ctx;
}

// Device limits per context, queried once.
const device_limits& limits_for(CUcontext ctx) {
  static std::mutex m;
  static auto* by_ctx = new std::unordered_map<CUcontext, device_limits>();
  std::lock_guard<std::mutex> lock(m);
  auto it = by_ctx->find(ctx);
  if (it == by_ctx->end()) it = by_ctx->emplace(ctx, device_limits::query_current()).first;
  return it->second;
}

// Every launch attribute goes through here (cooperative, cluster), for real launches and tuning trials alike.
void fill_launch_config(CUlaunchConfig& cfg, std::array<CUlaunchAttribute, 2>& attrs, const plan& p, dims grid,
                        const launch_request& r) {
  const dims cluster = r.cluster.count() > 1 ? r.cluster : p.cluster;
  cfg = CUlaunchConfig{};
  cfg.gridDimX = grid.x;
  cfg.gridDimY = grid.y;
  cfg.gridDimZ = grid.z;
  cfg.blockDimX = p.block.x;
  cfg.blockDimY = p.block.y;
  cfg.blockDimZ = p.block.z;
  cfg.sharedMemBytes = static_cast<unsigned>(p.dynamic_smem_bytes);
  cfg.hStream = r.stream;
  unsigned n = 0;
  if (p.cooperative) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n].value.cooperative = 1;
    ++n;
  }
  if (cluster.count() > 1) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = cluster.x;
    attrs[n].value.clusterDim.y = cluster.y;
    attrs[n].value.clusterDim.z = cluster.z;
    ++n;
  }
  cfg.attrs = n ? attrs.data() : nullptr;
  cfg.numAttrs = n;
}

void raise_smem_limit(CUfunction f, kernel_resources& k, const plan& p) {
  if (p.dynamic_smem_bytes <= k.max_dynamic_smem_bytes) return;
  const CUresult st = driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                  static_cast<int>(p.dynamic_smem_bytes));
  if (st != CUDA_SUCCESS)
    check(st, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", display_name(k), p.to_string());
  k.max_dynamic_smem_bytes = p.dynamic_smem_bytes;
}

std::string smem_rule_text(const launch_request& r) {
  if (r.smem_fn) return "fn=" + std::to_string(r.smem_rule);
  return "bytes=" + std::to_string(r.smem_bytes);
}

// Holds a stream while a sample's launches are queued (nvbench's method): a cuStreamWaitValue32 on a mapped
// host word, released by the host once the stop event is queued. The events then time back-to-back GPU
// execution, not the host's launch rate (an empty launch costs the host ~3.5 us on an H200 machine, longer
// than a small kernel runs). Without stream memory operations the gate is simply off.
class stream_gate {
 public:
  stream_gate() {
    // With blocking launches (CUDA_LAUNCH_BLOCKING, or a profiler that serialises them) the first launch
    // behind a held stream would wait for ever: no gate.
    if (const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING"); blocking && *blocking && std::strcmp(blocking, "0") != 0)
      return;
    const driver_api& d = driver();
    if (!d.cuMemHostAlloc || !d.cuMemHostGetDevicePointer || !d.cuMemFreeHost || !d.cuStreamWaitValue32) return;
    void* p = nullptr;
    if (d.cuMemHostAlloc(&p, sizeof(std::uint32_t), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) !=
        CUDA_SUCCESS)
      return;
    word_ = static_cast<volatile std::uint32_t*>(p);
    if (d.cuMemHostGetDevicePointer(&device_word_, p, 0) != CUDA_SUCCESS) {
      d.cuMemFreeHost(p);
      word_ = nullptr;
      return;
    }
    // Watchdog: a gate still closed 100 ms after hold() (a launch that blocked, a full queue) is opened, so
    // the worst case is a slow sample, never a hang.
    watchdog_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(watch_mutex_);
      while (!stopping_) {
        if (armed_) {
          if (watch_cv_.wait_until(lock, deadline_, [this] { return stopping_ || !armed_; })) continue;
          release();  // deadline passed with the gate still closed
          armed_ = false;
        } else {
          watch_cv_.wait(lock, [this] { return stopping_ || armed_; });
        }
      }
    });
  }
  ~stream_gate() {
    if (watchdog_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(watch_mutex_);
        stopping_ = true;
      }
      watch_cv_.notify_all();
      watchdog_.join();
    }
    if (!word_) return;
    drain();  // a wait still queued must see the word before it is freed
    driver().cuMemFreeHost(const_cast<std::uint32_t*>(word_));
  }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;

  // Queues the wait; false (nothing queued) when the gate is off or the driver refuses.
  bool hold(CUstream s) {
    if (!word_) return false;
    drain();  // before re-arming
    store(0);
    if (driver().cuStreamWaitValue32(s, device_word_, 1, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS) {
      pending_ = true;
      pending_stream_ = s;
      {
        std::lock_guard<std::mutex> lock(watch_mutex_);
        armed_ = true;
        deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      }
      watch_cv_.notify_all();
      return true;
    }
    store(1);
    driver().cuMemFreeHost(const_cast<std::uint32_t*>(word_));
    word_ = nullptr;  // refused once: off for the rest of this tuning
    return false;
  }
  // Opens the gate (the host thread once the sample is queued, or the watchdog).
  void release() {
    if (word_) store(1);
  }
  // The host has queued the sample: open the gate and disarm the watchdog.
  void open() {
    release();
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      armed_ = false;
    }
    watch_cv_.notify_all();
  }
  // The stream has passed the wait (its stop event completed).
  void settled() noexcept { pending_ = false; }

 private:
  // A wait still queued by a sample that threw before its stop event was synchronised: open the gate and let
  // the stream pass it.
  void drain() {
    if (!pending_) return;
    release();
    driver().cuStreamSynchronize(pending_stream_);
    pending_ = false;
  }

  // The host thread and the watchdog may both open the gate: the word is written atomically (a plain
  // sequentially consistent store, which the GPU sees in host memory).
  void store(std::uint32_t v) { __atomic_store_n(const_cast<std::uint32_t*>(word_), v, __ATOMIC_SEQ_CST); }

  volatile std::uint32_t* word_ = nullptr;
  CUdeviceptr device_word_ = 0;
  bool pending_ = false;
  CUstream pending_stream_ = nullptr;
  std::thread watchdog_;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool armed_ = false, stopping_ = false;
  std::chrono::steady_clock::time_point deadline_{};
};

// Times one candidate plan on the real arguments: a warm-up launch (also the pilot), then the median of 5
// samples, each queued behind a stream gate. A kernel without a reset callback (or with one and rerunnable())
// runs back to back, up to 64 launches per sample, enough to fill ~0.3 ms (a microsecond kernel timed alone
// is mostly event and launch jitter); with only a reset, one launch per sample, after the reset.
double time_candidate(CUfunction f, const launch_request& r, const plan& p, long long max_grid_x,
                      stream_gate& gate) {
  const driver_api& d = driver();
  const dims grid = grid_for(p, r.shape, max_grid_x);
  if (grid.count() == 0) return 0;
  CUlaunchConfig cfg;
  std::array<CUlaunchAttribute, 2> attrs;
  fill_launch_config(cfg, attrs, p, grid, r);
  struct event {
    CUevent e = nullptr;
    ~event() {
      if (e) driver().cuEventDestroy(e);
    }
  } start, stop;  // released on every path, trials that throw included
  check(d.cuEventCreate(&start.e, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&stop.e, CU_EVENT_DEFAULT), "cuEventCreate");
  auto sample = [&](int launches, bool gated) {
    if (r.reset) (*r.reset)();
    struct opened {
      stream_gate* g = nullptr;
      ~opened() {
        if (g) g->open();  // on every path: a throwing launch must not leave the stream held
      }
    } open;
    if (gated && gate.hold(r.stream)) open.g = &gate;
    check(d.cuEventRecord(start.e, r.stream), "cuEventRecord");
    for (int i = 0; i < launches; ++i)
      check(d.cuLaunchKernelEx(&cfg, f, r.args, nullptr), "cuLaunchKernelEx(tuning trial)");
    check(d.cuEventRecord(stop.e, r.stream), "cuEventRecord");
    if (open.g) {
      open.g->open();
      open.g = nullptr;
    }
    check(d.cuEventSynchronize(stop.e), "cuEventSynchronize");
    gate.settled();
    float ms = 0;
    check(d.cuEventElapsedTime(&ms, start.e, stop.e), "cuEventElapsedTime");
    return static_cast<double>(ms) / launches;
  };
  // Back-to-back launches until a sample fills ~0.3 ms (a kernel under 0.3 ms runs at least twice: the steady
  // state of a kernel launched in a loop).
  constexpr double sample_target_ms = 0.3;
  constexpr int max_launches_per_sample = 64;  // well below the driver's queue depth while the stream is held
  const double pilot = sample(1, false);
  int per_sample = 1;
  const bool back_to_back = !r.reset || r.back_to_back;  // with a reset only if rerunnable() said so too
  if (back_to_back && pilot > 0) {
    per_sample = static_cast<int>(std::clamp(std::ceil(sample_target_ms / pilot), 1.0, double{max_launches_per_sample}));
    // The pilot is one cold, ungated launch (it overstates): anything near the target still runs twice.
    if (pilot < 1.5 * sample_target_ms) per_sample = std::max(per_sample, 2);
  }
  std::array<double, 5> times{};
  // Gated with a reset too: the reset runs before the gate is queued (a synchronous reset cannot wait on it),
  // and the one launch then starts as soon as the gate opens instead of when the host gets to it.
  for (double& t : times) t = sample(per_sample, true);
  std::sort(times.begin(), times.end());
  if (r.reset) (*r.reset)();  // leave the user's data as the real launch expects it
  return times[times.size() / 2];
}

plan_entry build_entry(const launch_request& r, CUcontext ctx, const plan_key& key) {
  const driver_api& d = driver();
  plan_entry e;
  e.key = key;
  e.function = r.resolve ? r.resolve(r.stub) : r.driver_kernel->function();
  e.kernel = query_resources(e.function, false);  // the readable name below, only where it is shown
  const device_limits& dev = limits_for(ctx);
  e.device_name = dev.name;
  e.device_uuid = dev.uuid;
  e.device_ordinal = dev.ordinal;
  e.max_grid_x = dev.max_grid_dim[0] > 0 ? dev.max_grid_dim[0] : 2147483647;
  if (r.driver_kernel) e.param_sizes = query_param_sizes(e.function);

  // Which policy decides: an operator's LAUNCHFIT_POLICY override wins over the code's. The name is demangled
  // where it is used: overrides match it, the log line shows it, a plugin or registered policy may read it; a
  // built-in policy names the kernel only in an error, which gets the name on its way out.
  const spdlog::logger& l = logger_fast();
  const bool logs_plan = l.should_log(spdlog::level::info);
  std::string override_glob;
  std::shared_ptr<const policy> overridden;
  if (policy_overrides_configured()) overridden = policy_override_for(name_kernel(e.kernel), &override_glob);
  const policy& chosen = overridden ? *overridden : *r.policy;
  if (logs_plan || !is_builtin_policy(chosen)) name_kernel(e.kernel);

  query q;
  q.device = dev;
  q.kernel = e.kernel;
  q.dynamic_smem_bytes = r.smem_bytes;
  if (r.smem_fn) q.smem_per_block = *r.smem_fn;
  q.work_hint = r.shape;
  q.bytes_in_flight_per_sm = default_bytes_in_flight_per_sm(dev);
  CUfunction f = e.function;
  kernel_resources* kres = &e.kernel;
  // The policy and the validation ask about the same block: the last answer is kept (one driver call less).
  // A plugin may call the oracle from several threads: the memo and the smem limit are guarded.
  struct oracle_state {
    std::mutex m;
    std::array<long long, 3> last{-1, -1, 0};  // block, smem, active blocks
  };
  q.active_blocks = [f, kres, &d, st = std::make_shared<oracle_state>()](int block, std::size_t smem) {
    std::lock_guard<std::mutex> lock(st->m);
    auto& last = st->last;
    if (last[0] == block && last[1] == static_cast<long long>(smem)) return static_cast<int>(last[2]);
    if (smem + kres->static_smem_bytes > 0 && smem > kres->max_dynamic_smem_bytes) {
      // The driver counts nothing as resident above the function's dynamic-smem limit: raise it first.
      if (d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)) ==
          CUDA_SUCCESS) {
        kres->max_dynamic_smem_bytes = smem;
      } else {
        return 0;
      }
    }
    int n = 0;
    if (d.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, block, smem, CU_OCCUPANCY_DEFAULT) !=
        CUDA_SUCCESS)
      return 0;
    last = {block, static_cast<long long>(smem), n};
    return n;
  };
  // Tuning trials re-run the kernel: only when the spec allows it, with real arguments, outside a capture.
  const bool may_tune = r.rerunnable && r.has_arguments;
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (may_tune && d.cuStreamIsCapturing) d.cuStreamIsCapturing(r.stream, &capturing);
  if (may_tune && capturing == CU_STREAM_CAPTURE_STATUS_NONE) {
    // One stream gate per tuning (a pinned word and a watchdog thread), made by the first trial. The trials
    // share the launch's stream: a plugin that times from several threads is served one trial at a time.
    struct tuning {
      std::mutex m;
      std::optional<stream_gate> gate;
    };
    q.time_plan = [f, &r, max_grid_x = e.max_grid_x, t = std::make_shared<tuning>()](const plan& p) {
      std::lock_guard<std::mutex> lock(t->m);
      if (!t->gate) t->gate.emplace();
      return time_candidate(f, r, p, max_grid_x, *t->gate);
    };
  }

  // The cache file, when one is in use: its key strings are built only then (a miss stays cheap without).
  std::optional<stored_key> sk;
  std::optional<plan> stored;
  if (cache_file_open()) {
    sk = stored_key{dev.uuid, dev.cc(), dev.sm_count, d.version, kernel_fingerprint(e.kernel), chosen.to_string(),
                    smem_rule_text(r), r.bucket};
    stored = find_stored_plan(*sk, true);
    // A plan for another size bucket beats a guess when this launch may not be tuned (not rerunnable).
    if (!stored && r.bucket != 0 && !q.time_plan) stored = find_stored_plan(*sk, false);
  }
  if (stored) {
    // A stored plan is re-validated like any other. One that fails (a hand-edited or stale file) is a bad
    // entry: warn, and compute a new plan instead of refusing a launch the policy can serve.
    try {
      validate_plan(q, *stored);
    } catch (const error& bad) {
      logger()->warn("plan cache file entry for {} ignored ({}: {}); computing a new plan",
                     display_name(e.kernel), bad.call(), bad.message());
      stored.reset();
    }
  }
  if (stored) {
    const std::string match = stored->match;  // cache-file, or cache-file-other-bucket
    e.plan = *stored;
    e.plan.match = match;
  } else {
    try {
      e.plan = chosen.choose(q);
    } catch (const error& bad) {
      if (!bad.kernel().empty() || !e.kernel.demangled.empty()) throw;
      throw error(bad.call(), bad.cuda_error(), bad.message(), display_name(e.kernel), bad.config());
    }
    if (sk) store_plan(*sk, e.plan);
  }
  raise_smem_limit(e.function, e.kernel, e.plan);

  // The report copies the plan and kernel: only when something will be logged (info, or a warning).
  const bool warns = !e.plan.warning.empty() || e.kernel.local_bytes_per_thread > 0;
  if (logs_plan || (warns && l.should_log(spdlog::level::warn))) {
    name_kernel(e.kernel);
    log_new_plan(plan_report{e.kernel, dev.name, dev.ordinal, dev.cc(), e.plan, r.shape, override_glob});
  }
  return e;
}

const plan_entry& entry_for(const launch_request& r) {
  if (!r.policy) throw error("launchfit::launch", "LAUNCHFIT_INVALID_POLICY", "no policy");
  if (r.kernel_id == 0 || (r.driver_kernel && !r.driver_kernel->valid())) {
    throw error("launchfit::launch", "CUDA_ERROR_INVALID_HANDLE", "null or empty kernel");
  }
  const CUcontext ctx = current_context(r);
  const plan_key key{reinterpret_cast<std::uintptr_t>(ctx), r.kernel_id, r.policy_hash, r.smem_rule, r.bucket};
  if (const plan_entry* hit = find(key)) return *hit;
  try {
    return find_or_build(key, [&] { return build_entry(r, ctx, key); });
  } catch (const error& e) {
    // A fault of an earlier kernel surfaces in whatever call comes next: say which kernel it probably was.
    if (!is_sticky_name(e.cuda_error())) throw;
    throw error(e.call(), e.cuda_error(), e.message() + sticky_note(), e.kernel(), e.config());
  }
}

void check_arguments(const launch_request& r, const plan_entry& e) {
  if (!r.arg_sizes || !e.param_sizes) return;
  const auto& expected = *e.param_sizes;
  if (expected.size() != r.arg_count) {
    throw error("launchfit::launch", "CUDA_ERROR_INVALID_VALUE",
                "kernel takes " + std::to_string(expected.size()) + " parameters, " +
                    std::to_string(r.arg_count) + " arguments given",
                display_name(e.kernel), e.plan.to_string());
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != r.arg_sizes[i]) {
      throw error("launchfit::launch", "CUDA_ERROR_INVALID_VALUE",
                  "argument " + std::to_string(i) + " is " + std::to_string(r.arg_sizes[i]) +
                      " bytes, the kernel's parameter is " + std::to_string(expected[i]) + " bytes",
                  display_name(e.kernel), e.plan.to_string());
    }
  }
}

}  // namespace

const plan& plan_for(const launch_request& r) { return entry_for(r).plan; }

void launch(const launch_request& r) {
  const plan_entry& e = entry_for(r);
  check_arguments(r, e);
  dims grid;
  try {
    grid = grid_for(e.plan, r.shape, e.max_grid_x);
  } catch (const error& err) {
    throw error(err.call(), err.cuda_error(), err.message(), display_name(e.kernel), e.plan.to_string());
  }
  if (grid.count() == 0) return;  // items(0) / grid_stride(0): nothing to do
  if (r.cluster.count() > 1 && grid.x % r.cluster.x != 0) {
    throw error("launchfit::launch", "CUDA_ERROR_INVALID_CLUSTER_SIZE",
                "grid " + grid.to_string() + " is not a multiple of cluster " + r.cluster.to_string(),
                display_name(e.kernel), e.plan.to_string());
  }
  CUlaunchConfig cfg;
  std::array<CUlaunchAttribute, 2> attrs;
  fill_launch_config(cfg, attrs, e.plan, grid, r);
  spdlog::logger& lf_logger = logger_fast();
  if (lf_logger.should_log(spdlog::level::trace)) {
    lf_logger.trace("launch {} grid={} {}", display_name(e.kernel), grid.to_string(), e.plan.to_string());
  }
  const CUresult st = driver().cuLaunchKernelEx(&cfg, e.function, r.args, nullptr);
  if (st != CUDA_SUCCESS) throw_launch_error(st, e, grid);
  last_launched.store(&e, std::memory_order_relaxed);
}

}  // namespace launchfit::detail
