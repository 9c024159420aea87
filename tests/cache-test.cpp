// SPDX-License-Identifier: MIT
// The in-memory plan cache: one plan per key under concurrency, snapshots, clear, forget; retired plans freed
// once no thread can reach them, what callers keep outliving them.

#include "launchfit/cache.hpp"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "asymmetric_fence.hpp"
#include "captured_log.hpp"
#include "fault.hpp"
#include "launchfit/error.hpp"
#include "plan_cache.hpp"
#include "plan_inputs.hpp"

namespace lf = launchfit;

namespace {

// Keys as the launch makes them: under the current generation of the process-wide inputs.
lf::plan_key key_of(int kernel, int policy, std::uintptr_t ctx = 0x1000) {
  lf::plan_key k{ctx, static_cast<std::uintptr_t>(0x5000 + kernel), static_cast<std::uint64_t>(policy), 0, 0};
  k.inputs = launchfit::detail::plan_inputs_generation();
  return k;
}

}  // namespace

TEST(PlanCache, ConcurrentFirstLaunchesBuildOnePlanPerKey) {
  lf::cache().clear();
  constexpr int threads = 16, kernels = 25, policies = 3, rounds = 20;
  std::mutex m;
  std::map<std::pair<int, int>, int> builds;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < kernels * policies; ++i) {
          const int k = (i + t) % kernels, p = (i / kernels + t) % policies;
          const lf::detail::plan_entry& e = *lf::detail::find_or_build(key_of(k, p), [&] {
            {
              std::lock_guard<std::mutex> lock(m);
              ++builds[{k, p}];
            }
            std::this_thread::sleep_for(std::chrono::microseconds(200));  // widen the race window
            lf::detail::plan_entry out;
            out.key = key_of(k, p);
            out.plan.block = {static_cast<unsigned>(32 * (k + 1)), 1, 1};
            out.plan.blocks_per_sm = p + 1;
            return out;
          });
          if (e.plan.block.x != static_cast<unsigned>(32 * (k + 1)) || e.plan.blocks_per_sm != p + 1)
            ++mismatches;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(builds.size(), static_cast<std::size_t>(kernels * policies));
  for (const auto& [key, count] : builds) EXPECT_EQ(count, 1) << key.first << "/" << key.second;
  EXPECT_EQ(lf::cache().size(), static_cast<std::size_t>(kernels * policies));
}

TEST(PlanCache, AFailedBuildIsRetriedByTheNextCaller) {
  lf::cache().clear();
  EXPECT_THROW(lf::detail::find_or_build(key_of(1, 1),
                                         []() -> lf::detail::plan_entry { throw std::runtime_error("x"); }),
               std::runtime_error);
  EXPECT_EQ(lf::detail::find(key_of(1, 1)), nullptr);
  const auto& e = *lf::detail::find_or_build(key_of(1, 1), [] {
    lf::detail::plan_entry out;
    out.plan.block_threads = 64;
    return out;
  });
  EXPECT_EQ(e.plan.block_threads, 64);
}

TEST(PlanCache, KeysDifferByContextKernelPolicySmemAndBucket) {
  lf::cache().clear();
  std::vector<lf::plan_key> keys = {key_of(1, 1), key_of(1, 1, 0x2000), key_of(2, 1), key_of(1, 2)};
  keys.push_back(key_of(1, 1));
  keys.back().smem_rule = 4096;
  keys.push_back(key_of(1, 1));
  keys.back().bucket = 20;
  int n = 0;
  for (const auto& k : keys) {
    const int id = ++n;
    const auto& e = *lf::detail::find_or_build(k, [id] {
      lf::detail::plan_entry out;
      out.plan.block_threads = id;
      return out;
    });
    EXPECT_EQ(e.plan.block_threads, id);
  }
  EXPECT_EQ(lf::cache().size(), keys.size());
}

TEST(PlanCache, SnapshotClearAndForget) {
  lf::cache().clear();
  static lf::device_limits dev;  // an entry's device outlives it, as limits_for()'s do
  dev.name = "dev";
  dev.ordinal = 0;
  for (int k = 0; k < 4; ++k) {
    lf::detail::find_or_build(key_of(k, 0), [k] {
      lf::detail::plan_entry out;
      out.kernel.demangled = "k" + std::to_string(k);
      out.device = &dev;
      return out;
    });
  }
  const auto snap = lf::cache().plans();
  ASSERT_EQ(snap.size(), 4u);
  EXPECT_EQ(snap[0].device, "dev #0");
  lf::detail::forget_kernel(key_of(2, 0).kernel);
  EXPECT_EQ(lf::cache().size(), 3u);
  EXPECT_EQ(lf::detail::find(key_of(2, 0)), nullptr);
  EXPECT_NE(lf::detail::find(key_of(1, 0)), nullptr);
  lf::cache().clear();
  EXPECT_EQ(lf::cache().size(), 0u);
  EXPECT_EQ(lf::detail::find(key_of(1, 0)), nullptr);  // the thread-local front is invalidated too
}

// A miss that logs nothing leaves the name mangled; the cache's listing still shows it readable, and
// naming it later fills it once.
TEST(PlanCache, APlanBuiltWithoutDemanglingIsListedByItsReadableName) {
  lf::cache().clear();
  lf::detail::find_or_build(key_of(7, 0), [] {
    lf::detail::plan_entry out;
    out.kernel.name = "_Z5saxpyfPKfPfi";  // demangled left empty, as a quiet miss leaves it
    return out;
  });
  const auto snap = lf::cache().plans();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].kernel, "saxpy(float, float const*, float*, int)");

  lf::kernel_resources k;
  k.name = "_Z5saxpyfPKfPfi";
  EXPECT_EQ(lf::detail::display_name(k), "saxpy(float, float const*, float*, int)");
  EXPECT_TRUE(k.demangled.empty());  // display_name does not change the entry
  EXPECT_EQ(lf::detail::name_kernel(k), "saxpy(float, float const*, float*, int)");
  EXPECT_EQ(k.demangled, "saxpy(float, float const*, float*, int)");
  k.name = "extern_c_kernel";  // already named: name_kernel keeps what is there
  EXPECT_EQ(lf::detail::name_kernel(k), "saxpy(float, float const*, float*, int)");
  lf::cache().clear();
}

// ---- retired plans are freed once no thread can reach them ------------------------------------------------

namespace {

namespace ld = launchfit::detail;

// An entry whose strings live on the heap (so a use after free is one AddressSanitizer sees).
ld::plan_entry entry_named(int kernel, int block) {
  ld::plan_entry out;
  out.kernel.name = "retired_plan_kernel_" + std::to_string(kernel) + std::string(48, 'k');
  out.plan.block = {static_cast<unsigned>(block), 1, 1};
  out.plan.block_threads = block;
  out.plan.reason = "reason of kernel " + std::to_string(kernel) + std::string(48, 'r');
  return out;
}

// Every entry of the current inputs is the one built for its kernel.
bool entry_is_whole(const ld::plan_entry& e, int kernel, int block) {
  return e.kernel.name == "retired_plan_kernel_" + std::to_string(kernel) + std::string(48, 'k') &&
         e.plan.block_threads == block && e.kept && e.kept->plan.reason == e.plan.reason &&
         e.kept->kernel_name == e.kernel.name;
}

// One thread's signal to another (no sleeps: the waiting side waits for exactly this).
class latch {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [this] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Frees what can be freed now: the retired entries left.
std::uint64_t retired_after_a_pass() {
  ld::free_retired_plans();
  return ld::stats().retired;
}

// Clears the cache and frees what an earlier test left.
void settle() {
  lf::cache().clear();
  ld::free_retired_plans();
}

}  // namespace

TEST(RetiredPlans, AReaderKeepsWhatItFoundAndNothingElse) {
  settle();
  const std::uint64_t freed = ld::stats().freed;
  latch found, retired, done;
  std::atomic<bool> whole{false};
  std::thread reader([&] {
    const ld::plan_reader reading;
    const ld::plan_entry* e = ld::find_or_build(key_of(1, 0), [] { return entry_named(1, 64); });
    found.open();
    retired.wait();
    whole = entry_is_whole(*e, 1, 64);  // retired meanwhile, not freed: this thread may still use it
    done.open();
  });
  found.wait();
  ld::plan_input_changed(ld::register_plan_input("test retired plans"));
  ld::find_or_build(key_of(2, 0), [] { return entry_named(2, 128); });  // a miss under the new inputs sweeps
  EXPECT_GE(retired_after_a_pass(), 1u);
  // A reader that enters after the entry left the map cannot reach it, and keeps nothing alive.
  {
    latch in, out;
    std::thread late([&] {
      const ld::plan_reader reading;
      in.open();
      out.wait();
    });
    in.wait();
    const std::uint64_t before = ld::stats().retired;
    retired.open();
    done.wait();
    reader.join();
    EXPECT_LT(retired_after_a_pass(), before);  // the first reader is gone: its entry is freed
    out.open();
    late.join();
  }
  EXPECT_TRUE(whole);
  EXPECT_EQ(retired_after_a_pass(), 0u);
  EXPECT_GE(ld::stats().freed, freed + 1);
  lf::cache().clear();
}

// The fault report names the last plan launched from what outlives its entry.
TEST(RetiredPlans, TheFaultReportNamesTheLastLaunchOnceItsEntryIsFreed) {
  settle();
  {
    const ld::plan_reader reading;  // as a launch
    const ld::plan_entry* e = ld::find_or_build(key_of(3, 0), [] {
      ld::plan_entry out = entry_named(3, 96);
      out.kernel.name = "_Z11faulty_stepPfi";  // demangled when the fault is reported
      return out;
    });
    ld::note_launched(*e->kept);
  }
  lf::cache().clear();
  EXPECT_EQ(retired_after_a_pass(), 0u);  // the entry is freed
  const lf::error sticky =
      ld::with_fault_note(lf::error(CUDA_ERROR_ILLEGAL_ADDRESS, "cuMemcpy", "illegal address"));
  EXPECT_NE(sticky.message().find("(last launched: faulty_step(float*, int) with block=96"),
            std::string::npos)
      << sticky.message();
}

// plan_for()'s reference and launched::plan() are the entry's kept plan: it outlives the entry, and a plan
// made again after an input change is the same object, so memory does not grow with the changes.
TEST(RetiredPlans, APlanACallerKeepsOutlivesItsEntryAndIsKeptOnce) {
  settle();
  static int run = 0;  // a kernel of its own on each run (--gtest_repeat): kept plans are never dropped
  const int k = 500 + 2 * run++;
  const auto make = [k] { return entry_named(k, 224); };
  const lf::plan* kept = &ld::find_or_build(key_of(k, 0), make)->kept->plan;
  const std::uint64_t plans = ld::stats().kept_plans;
  lf::cache().clear();
  EXPECT_EQ(retired_after_a_pass(), 0u);
  EXPECT_EQ(kept->block_threads, 224);  // the entry is freed; the caller's plan is not
  EXPECT_EQ(kept->reason, "reason of kernel " + std::to_string(k) + std::string(48, 'r'));
  EXPECT_EQ(&ld::find_or_build(key_of(k, 0), make)->kept->plan, kept);
  EXPECT_EQ(ld::stats().kept_plans, plans);
  // Any field that differs is another plan, the floating-point ones bit for bit; another kernel another one.
  const ld::plan_entry made = make();
  lf::plan p = made.plan;
  EXPECT_EQ(&ld::keep_plan(p, made.kernel).plan, kept);
  p.tuning_ms = 0.5;
  EXPECT_NE(&ld::keep_plan(p, made.kernel).plan, kept);
  p = made.plan;
  p.occupancy.why_no_block = "x";
  EXPECT_NE(&ld::keep_plan(p, made.kernel).plan, kept);
  p = made.plan;
  p.match = "cache-file";
  EXPECT_NE(&ld::keep_plan(p, made.kernel).plan, kept);
  // Text alone differs (the kept plans' hash is of the numbers): another plan, and each found again as itself.
  p = made.plan;
  p.reason += " (again)";
  const lf::plan* other_reason = &ld::keep_plan(p, made.kernel).plan;
  EXPECT_NE(other_reason, kept);
  EXPECT_EQ(&ld::keep_plan(p, made.kernel).plan, other_reason);
  EXPECT_EQ(&ld::keep_plan(made.plan, made.kernel).plan, kept);
  EXPECT_NE(&ld::keep_plan(made.plan, entry_named(k + 1, 224).kernel).plan, kept);
  EXPECT_EQ(ld::stats().kept_plans, plans + 5);
  lf::cache().clear();
}

// The stress: readers look plans up (as launches do) while another thread changes the inputs 10,000 times.
// Every entry a reader reads is whole (AddressSanitizer: no use after free; ThreadSanitizer: no race), and
// the retired entries do not pile up: afterwards none is left. `fenced`: readers announce with a plain store
// that the freeing pass fences (where the process can be registered for it), else with a locked exchange.
void ten_thousand_input_changes(bool fenced) {
  settle();
  { const ld::plan_reader first; }  // the process's way of fencing readers is decided by the first reader
  const bool was = ld::readers_fenced();
  if (ld::fence_readers(fenced) != fenced) {
    ld::fence_readers(was);
    GTEST_SKIP() << "this process cannot be registered for membarrier(2) (the kernel, a sandbox, or TSan)";
  }
  constexpr int readers = 4, kernels = 4, changes = 10000;
  const ld::plan_input input = ld::register_plan_input("test retired plans stress");
  const std::uint64_t freed = ld::stats().freed;
  const std::uint64_t plans_before = ld::stats().kept_plans;
  std::atomic<bool> stop{false};
  std::atomic<int> broken{0};
  std::atomic<std::uint64_t> lookups{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < readers; ++t) {
    pool.emplace_back([&, t] {
      const lf::plan* kept[kernels] = {};
      for (std::uint64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
        const int k = static_cast<int>((n + t) % kernels);
        {
          const ld::plan_reader reading;
          // As a launch: the thread's front first (the path a fenced reader relies on the pass's fence for),
          // then the map.
          const ld::plan_entry* e = ld::find(key_of(k, 0));
          if (!e) e = ld::find_or_build(key_of(k, 0), [k] { return entry_named(k, 32 * (k + 1)); });
          if (!e || !entry_is_whole(*e, k, 32 * (k + 1))) ++broken;
          if (e) {
            ld::note_launched(*e->kept);
            kept[k] = &e->kept->plan;
          }
        }
        // What a caller keeps is valid outside any reader, whatever was freed meanwhile.
        if (kept[k] && kept[k]->block_threads != 32 * (k + 1)) ++broken;
        lookups.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::uint64_t peak = 0;
  for (int c = 0; c < changes; ++c) {
    ld::plan_input_changed(input);
    const ld::plan_reader reading;  // a launch in between, on this thread too
    ld::find_or_build(key_of(c % kernels, 0),
                      [c] { return entry_named(c % kernels, 32 * (c % kernels + 1)); });
    peak = std::max(peak, ld::stats().retired);
  }
  stop = true;
  for (auto& th : pool) th.join();
  EXPECT_EQ(broken.load(), 0);
  EXPECT_GT(lookups.load(), 0u);
  // Every generation's entries were retired and freed but the last ones: nothing piles up.
  ld::plan_input_changed(input);
  ld::find_or_build(key_of(0, 0), [] { return entry_named(0, 32); });
  EXPECT_EQ(retired_after_a_pass(), 0u);
  EXPECT_GE(ld::stats().freed - freed, static_cast<std::uint64_t>(changes));
  // The plans callers keep are one per distinct plan, however often each was made again.
  EXPECT_LE(ld::stats().kept_plans - plans_before, static_cast<std::uint64_t>(kernels));
  std::printf("retired entries: peak %llu during %d input changes, %llu lookups (readers %s)\n",
              static_cast<unsigned long long>(peak), changes, static_cast<unsigned long long>(lookups.load()),
              fenced ? "fenced by the freeing pass" : "announcing with an exchange");
  lf::cache().clear();
  ld::fence_readers(was);
}

TEST(RetiredPlans, TenThousandInputChangesWithFencedReadersLeaveNothingBehind) { ten_thousand_input_changes(true); }

TEST(RetiredPlans, TenThousandInputChangesWithExchangingReadersLeaveNothingBehind) {
  ten_thousand_input_changes(false);
}

// A launch announces itself without a locked instruction wherever the kernel offers membarrier(2): the fast way
// is not lost to a failed registration unnoticed.
TEST(RetiredPlans, ReadersAreFencedByTheFreeingPassWhereTheKernelOffersMembarrier) {
#if defined(LAUNCHFIT_THREAD_SANITIZER)
  GTEST_SKIP() << "under ThreadSanitizer readers announce with an exchange (it does not model membarrier)";
#else
  // membarrier(2)'s query (0) and its MEMBARRIER_CMD_PRIVATE_EXPEDITED bit (8), the kernel's ABI.
  const long offered = syscall(__NR_membarrier, 0, 0u, 0);
  if (offered < 0 || (offered & 8) == 0) GTEST_SKIP() << "this kernel does not offer MEMBARRIER_CMD_PRIVATE_EXPEDITED";
  { const ld::plan_reader first; }
  EXPECT_TRUE(ld::readers_fenced());
  EXPECT_EQ(ld::stats().fence_failures, 0u);
#endif
}

// Where the fence fails (a seccomp filter installed after the process registered), a pass frees nothing a fenced
// reader might still hold: the retired entries wait, each failed pass is counted, and the next pass whose fence
// works frees them.
TEST(RetiredPlans, APassWhoseFenceFailsFreesNothingAndIsCounted) {
  settle();
  { const ld::plan_reader first; }
  if (!ld::readers_fenced()) GTEST_SKIP() << "readers announce with an exchange here: no fence to fail";
  ld::find_or_build(key_of(7, 0), [] { return entry_named(7, 64); });
  const std::uint64_t failures = ld::stats().fence_failures;
  const std::uint64_t freed = ld::stats().freed;
  const launchfit_test::captured_log log(spdlog::level::warn);
  ld::fail_reader_fence_for_test(true);
  lf::cache().clear();
  const std::size_t left = ld::free_retired_plans();
  EXPECT_EQ(ld::free_retired_plans(), left);  // a second failed pass: counted, not said again
  ld::fail_reader_fence_for_test(false);
  EXPECT_GE(left, 1u);
  EXPECT_EQ(ld::stats().freed, freed);
  EXPECT_GE(ld::stats().fence_failures, failures + 2);
  lf::logger()->flush();
  EXPECT_EQ(log.warnings(), 1) << log.text();  // said once, as a warning naming the failed fence
  EXPECT_TRUE(launchfit_test::has(log.text(), "membarrier(2) failed")) << log.text();
  EXPECT_EQ(ld::free_retired_plans(), 0u);
  EXPECT_GT(ld::stats().freed, freed);
}

// The fence itself, as a litmus test of the store-buffering pattern: one thread stores x then loads y with only
// light() between them, the other stores y, calls heavy(), then loads x; in no round may both loads miss the other
// thread's store.
namespace {
// Rounds of the store-buffering pattern between two threads: one stores x[i] then loads y[i] with only a compiler
// barrier between them, the other stores y[i], calls `between` (heavy() or another compiler barrier), then loads
// x[i]. Returns the rounds in which both loads missed the other thread's store; false in `fenced` where heavy()
// failed. GCC's atomic builtins: plain instructions even where the tests are built without optimisation (a call
// per std::atomic operation would drain the store buffer the pattern is about).
int rounds_both_missed(int rounds, bool heavy, bool& fenced) {
  std::vector<int> x(rounds), y(rounds), seen_y(rounds), seen_x(rounds);
  int done_a = -1, done_b = -1;
  bool failed = false;
  int* const xs = x.data();
  int* const ys = y.data();
  int* const got_y = seen_y.data();
  int* const got_x = seen_x.data();
  std::thread a([=, &done_a, &done_b] {
    for (int i = 0; i < rounds; ++i) {
      while (__atomic_load_n(&done_b, __ATOMIC_ACQUIRE) < i - 1) {
      }
      __atomic_store_n(&xs[i], 1, __ATOMIC_RELAXED);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // asymmetric_fence::light()
      got_y[i] = __atomic_load_n(&ys[i], __ATOMIC_RELAXED);
      __atomic_store_n(&done_a, i, __ATOMIC_RELEASE);
    }
  });
  std::thread b([=, &done_a, &done_b, &failed] {
    for (int i = 0; i < rounds; ++i) {
      while (__atomic_load_n(&done_a, __ATOMIC_ACQUIRE) < i - 1) {
      }
      __atomic_store_n(&ys[i], 1, __ATOMIC_RELAXED);
      if (heavy) {
        if (!ld::asymmetric_fence::heavy()) failed = true;
      } else {
        std::atomic_signal_fence(std::memory_order_seq_cst);
      }
      got_x[i] = __atomic_load_n(&xs[i], __ATOMIC_RELAXED);
      __atomic_store_n(&done_b, i, __ATOMIC_RELEASE);
    }
  });
  a.join();
  b.join();
  fenced = !failed;
  int both = 0;
  for (int i = 0; i < rounds; ++i) both += seen_y[i] == 0 && seen_x[i] == 0;
  return both;
}
}  // namespace

TEST(AsymmetricFence, NoRoundInWhichBothSidesMissEachOthersStore) {
  if (!ld::asymmetric_fence::register_process()) GTEST_SKIP() << "this process cannot be registered for membarrier(2)";
  bool fenced = false;
  EXPECT_EQ(rounds_both_missed(50000, true, fenced), 0);
  EXPECT_TRUE(fenced);
  // The same rounds without heavy(): where the two threads ran at once, some rounds missed (the test above can fail).
  std::printf("rounds in which both sides missed: 0 of 50000 with heavy(), %d of 50000 with a compiler barrier alone\n",
              rounds_both_missed(50000, false, fenced));
}

// In a child of fork() only the forking thread exists: a thread of the parent that was inside a lookup at the
// fork keeps nothing alive in the child.
TEST(RetiredPlans, AReaderOfTheParentKeepsNothingAliveInAChildOfFork) {
  settle();
  latch inside, leave;
  std::thread reader([&] {
    const ld::plan_reader reading;
    ld::find_or_build(key_of(6, 0), [] { return entry_named(6, 64); });
    inside.open();
    leave.wait();
  });
  inside.wait();
  lf::cache().clear();
  const pid_t child = fork();
  if (child == 0) {
    ld::free_retired_plans();
    _exit(ld::stats().retired == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(retired_after_a_pass(), 1u);  // in the parent the reader is still inside
  leave.open();
  reader.join();
  EXPECT_EQ(retired_after_a_pass(), 0u);
}
