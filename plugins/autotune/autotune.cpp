// SPDX-License-Identifier: MIT
// The autotune plugin: times candidate plans (block size x resident blocks per SM) on the kernel's real
// arguments through the query's time_plan callback and keeps the fastest. launchfit caches the result per
// (device, kernel, policy, smem rule, size bucket) and in the cache file, so a kernel is tuned once per
// bucket and a later process with the file tunes nothing.
//
// Only the C ABI of launchfit/plugin.h is used; no exception leaves this file.

#include <launchfit/plugin.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

constexpr const char* plugin_name = "autotune";
constexpr const char* plugin_version = "1.6.0";
// The noise rule, stated once: plans within max(the re-timing rounds' relative spread, min_noise) of the
// fastest are equally fast, and the fixed order of better_in_tie() decides among them, so two independent
// tunings of one kernel on one GPU model pick the same plan whichever of the near-equal plans their noise
// ranked first (three tunings of one axpy picked 64, 1024 and 256 threads when noise decided).
constexpr double min_noise = 0.01;
// And never wider than this: a plan whose median is more than 1.5% behind the fastest is not given the tie,
// however widely the re-timings spread. The spread is the range of three timings, which one disturbed timing
// widens: on an H100 a histogram's three confirmed plans spread by 3.9%, and the order then chose a plan timed
// 1.9% behind the fastest, which the benchmark's oracle ran 8% behind the best. The cap bounds what the order
// may give up for determinism; plans within it still tie, whatever order noise ranked them in.
constexpr double max_noise = 0.015;
constexpr std::size_t confirm_count = 3;  // fastest plans re-timed before deciding
// The search keeps confirm()'s time back where it is at most this share of max_ms (trials of a millisecond or
// two), never beyond: trials of several milliseconds would starve the coarse pass of the plans that matter.
constexpr double max_confirm_share = 0.25;

// ---- messages ----------------------------------------------------------------------------------------

void write_message(char* buf, std::size_t size, const char* fmt, ...) {
  if (!buf || size == 0) return;
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, size, fmt, args);
  va_end(args);
}

std::string format(const char* fmt, ...) {
  char buf[LAUNCHFIT_PLAN_REASON_SIZE * 2];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// Three significant digits: "0.412", "0.00312", "12.3".
std::string ms_text(double ms) { return format("%.3g ms", ms); }

constexpr const char* no_rerun_reason =
    "autotune times candidate plans by re-running the kernel, which this launch does not allow: mark the "
    "spec .rerunnable() if re-running is harmless, or give .reset(f) that restores the kernel's data "
    "(never while a stream is captured)";

// ---- parameters --------------------------------------------------------------------------------------

struct params {
  int max_trials = 64;  // timings at most: candidate plans, plus confirm()'s 6 when this is >= 16
  double max_ms = 50;   // no new trial starts once tuning has taken this long
  bool bucket = true;   // plans per size bucket (floor(log2 n) + 1); off: one plan for every n
  bool shapes = true;  // 2-D and 3-D work with a free block shape: time wider 2-D blocks of the best size too
};

bool parse_bool(const std::string& v, bool& out) {
  if (v == "on" || v == "true" || v == "1" || v == "yes") {
    out = true;
    return true;
  }
  if (v == "off" || v == "false" || v == "0" || v == "no") {
    out = false;
    return true;
  }
  return false;
}

bool parse_int(const std::string& v, long long lo, long long hi, int& out) {
  if (v.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || x < lo || x > hi) return false;
  out = static_cast<int>(x);
  return true;
}

// In the C locale whatever the program's (std::strtod reads "2.5" as 2 under a locale whose decimal point is a
// comma, and the policy string cannot hold "2,5").
bool parse_positive_double(const std::string& v, double& out) {
  if (v.empty()) return false;
  double x = 0;
  const char* end = v.data() + v.size();
  const auto [at, ec] = std::from_chars(v.data(), end, x);
  if (ec != std::errc() || at != end || !std::isfinite(x) || x <= 0) return false;
  out = x;
  return true;
}

// "k=v,k=v" as launchfit passes it (possibly ""); false with a message for an unknown key or a bad value.
bool parse_params(const char* text, params& p, std::string& message) {
  const std::string s = text ? text : "";
  std::size_t begin = 0;
  while (begin < s.size()) {
    std::size_t end = s.find(',', begin);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(begin, end - begin);
    begin = end + 1;
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? std::string() : item.substr(eq + 1);
    if (key == "max_trials") {
      if (!parse_int(value, 1, 100000, p.max_trials)) {
        message = "max_trials='" + value + "' is not an integer in 1..100000";
        return false;
      }
    } else if (key == "max_ms") {
      if (!parse_positive_double(value, p.max_ms)) {
        message = "max_ms='" + value + "' is not a positive number of milliseconds";
        return false;
      }
    } else if (key == "bucket") {
      if (!parse_bool(value, p.bucket)) {
        message = "bucket='" + value + "' is not on/off";
        return false;
      }
    } else if (key == "shapes") {
      if (!parse_bool(value, p.shapes)) {
        message = "shapes='" + value + "' is not on/off";
        return false;
      }
    } else {
      message = "unknown parameter '" + key + "' (known: bucket, max_ms, max_trials, shapes)";
      return false;
    }
  }
  return true;
}

// ---- state -------------------------------------------------------------------------------------------

struct state {
  params p;  // immutable after create(): choose() reads it without a lock
};

// ---- the search --------------------------------------------------------------------------------------

// One block size that fits, with the residency levels (blocks per SM) worth timing for it.
struct block_option {
  int threads = 0;
  int active = 0;  // resident blocks per SM at this size
  int warps_per_block = 0;
  std::vector<int> levels;  // blocks_per_sm values, ascending; {0} for items work (as many as fit)
  // grid_stride work whose capped grid is smaller than the work: the full grid (one loop iteration per
  // thread) is one more candidate, levels[full] == full_grid_level, after the residencies. -1: none.
  int full = -1;
};

constexpr int full_grid_level = -1;

struct trial {
  int block_index = 0;
  int level_index = 0;
  double ms = -1;          // < 0: could not run
  bool confirmed = false;  // re-timed by confirm(); ms is then the median of its timings
  int shape_x = 0;         // a 2-D block of its own: shape_x x (threads / shape_x); 0: launchfit's shape
  double host_ms = 0;      // how long its timing took on the host (launches and synchronisation included)
};

// The lower median: a plan timed twice is not penalised against one timed three times.
double lower_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

#ifdef LAUNCHFIT_AUTOTUNE_TEST_CLOCK
// A test build only (launchfit-autotune-test-clock, never installed): a test replaces the clock the budgets are
// measured by with one its fake trials advance, so max_ms's rules are tested without the host's scheduling.
std::atomic<double (*)()> test_clock{nullptr};
#endif

// Milliseconds on a monotonic clock: the search's time and each trial's.
double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The clock a search measures its time by, chosen once when it begins (a clock replaced meanwhile serves the
// next search: one search never mixes two clocks).
using clock_fn = double (*)();
clock_fn search_clock() {
#ifdef LAUNCHFIT_AUTOTUNE_TEST_CLOCK
  if (const clock_fn clock = test_clock.load(std::memory_order_acquire)) return clock;
#endif
  return &steady_ms;
}

class search {
 public:
  // `full_grid`: whether launchfit reads launchfit_plan::full_grid (ABI 1.1), so full grids can be timed.
  search(const launchfit_query& q, const params& p, bool full_grid)
      : q_(q),
        p_(p),
        full_grid_(full_grid),
        shapes_(p.shapes && LAUNCHFIT_HAS_FIELD(&q, launchfit_query, block_x_step) &&
                q.block_shape_free != 0 && q.block_x_step > 0),
        limit_ms_(p.max_ms),
        now_ms_(search_clock()),
        start_ms_(now_ms_()),
        setup_at_start_(setup_ms_so_far()) {}

  // Returns false with a message when there is nothing to tune.
  bool build(std::string& why) {
    const launchfit_device& d = *q_.device;
    const int warp = d.warp_size > 0 ? d.warp_size : 32;
    int max_block = q_.max_block_threads;
    if (max_block <= 0) {
      max_block = d.max_threads_per_block > 0 ? d.max_threads_per_block : 1024;
      if (q_.kernel && q_.kernel->max_threads_per_block > 0)
        max_block = std::min(max_block, q_.kernel->max_threads_per_block);
    }
    std::vector<int> sizes;
    for (int t = warp; t <= max_block; t += warp) sizes.push_back(t);
    if (sizes.empty() || sizes.back() != max_block) sizes.push_back(max_block);  // e.g. launch bounds of 1000

    const std::uint32_t kind = q_.work_kind;
    const std::uint64_t per_thread = std::max<std::uint32_t>(q_.work_per_thread, 1);
    const long long sms = std::max(d.sm_count, 1);
    for (int t : sizes) {
      std::size_t smem = static_cast<std::size_t>(q_.dynamic_smem_bytes);
      if (q_.has_smem_rule && q_.smem_for_block) {
        smem = q_.smem_for_block(q_.ctx, t);
        if (smem == SIZE_MAX) continue;  // the rule failed for this size
      }
      const int active = q_.active_blocks ? q_.active_blocks(q_.ctx, t, smem) : 0;
      if (active <= 0) continue;  // nothing fits: not a candidate
      block_option b;
      b.threads = t;
      b.active = active;
      b.warps_per_block = (t + warp - 1) / warp;
      if (kind == LAUNCHFIT_WORK_ITEMS) {
        b.levels = {0};  // grid from n: only the block matters
      } else {
        b.levels = residency_levels(active);
        if (kind == LAUNCHFIT_WORK_GRID_STRIDE && q_.work_n > 0) {
          // grid = min(blocks needed, blocks_per_sm x SMs): levels past the point where the grid stops
          // growing launch the same grid; keep the first of them.
          const std::uint64_t per_block = static_cast<std::uint64_t>(t) * per_thread;
          const std::uint64_t needed = q_.work_n / per_block + (q_.work_n % per_block != 0);
          std::vector<int> kept;
          for (int level : b.levels) {
            kept.push_back(level);
            if (static_cast<std::uint64_t>(level) * static_cast<std::uint64_t>(sms) >= needed) break;
          }
          b.levels = std::move(kept);
          // Wide elements can run faster one per thread than in a capped loop (on an H200 24-byte elements
          // over 256 MiB: 1.25x slower in one wave of 256-thread blocks); a block ending in atomics runs far
          // slower. Only a timing tells them apart.
          if (full_grid_ &&
              static_cast<std::uint64_t>(b.levels.back()) * static_cast<std::uint64_t>(sms) < needed) {
            b.full = static_cast<int>(b.levels.size());
            b.levels.push_back(full_grid_level);
          }
        }
      }
      blocks_.push_back(std::move(b));
    }
    if (blocks_.empty()) {
      why = "autotune: no block size up to " + std::to_string(max_block) + " threads fits on an SM";
      return false;
    }
    timed_.assign(blocks_.size(), {});
    for (std::size_t i = 0; i < blocks_.size(); ++i) timed_[i].assign(blocks_[i].levels.size(), untimed);
    return true;
  }

  // Coarse pass, then refinement around the fastest plans, within the trial and time budgets.
  void run() {
    // Wider 2-D blocks are timed after the search, which leaves them a quarter of the time budget and 7 of
    // the trials (two rounds of three widths and a re-timing of the plan they widen), where any can be made.
    shapes_ = shapes_ && any_width();
    if (shapes_) limit_ms_ = p_.max_ms * 0.75;
    explore();
    limit_ms_ = p_.max_ms;
    if (shapes_) time_shapes();
  }

  // A budget spent in the coarse pass ends the search there, not confirmation (whose time confirm_ms() kept).
  void explore() {
    bool spent = false;
    for (const auto& [bi, li] : coarse_plan()) {
      if (!budget_left()) {
        spent = true;
        break;
      }
      time(bi, li);
    }
    while (!spent && budget_left()) {
      const auto next = next_refinement();
      if (next.first < 0) break;  // the neighbourhoods of the fastest plans are all timed
      time(next.first, next.second);
    }
    confirm();
  }

  // The decision, or false when no candidate could run.
  bool decide(launchfit_plan& out, std::string& why) const {
    // After confirm(), only confirmed plans compete: an unconfirmed plan's single (possibly lucky) timing
    // must not beat medians.
    auto competes = [this](const trial& t) { return t.ms >= 0 && (confirmed_ == 0 || t.confirmed); };
    const trial* fastest = nullptr;
    for (const trial& t : trials_)
      if (competes(t) && (!fastest || t.ms < fastest->ms)) fastest = &t;
    if (!fastest) {
      why = "autotune: none of the " + std::to_string(trials_.size()) +
            " candidate plans could run (time_plan failed for each)";
      return false;
    }
    // Equally fast within the noise band: the fixed order decides (better_in_tie), never the timing.
    const double band = noise_band();
    const trial* chosen = nullptr;
    int tied = 0;
    for (const trial& t : trials_) {
      if (!competes(t) || t.ms > fastest->ms * (1 + band)) continue;
      ++tied;
      if (!chosen || better_in_tie(t, *chosen)) chosen = &t;
    }
    const trial* second = nullptr;
    int ran = 0;
    for (const trial& t : trials_) {
      if (t.ms < 0) continue;
      ++ran;
      if (competes(t) && &t != chosen && (!second || t.ms < second->ms)) second = &t;
    }

    const block_option& b = blocks_[chosen->block_index];
    out.block_x = static_cast<std::uint32_t>(chosen->shape_x > 0 ? chosen->shape_x : b.threads);
    out.block_y = static_cast<std::uint32_t>(chosen->shape_x > 0 ? b.threads / chosen->shape_x : 1);
    out.block_z = 1;
    out.blocks_per_sm = std::max(b.levels[chosen->level_index], 0);
    if (LAUNCHFIT_HAS_FIELD(&out, launchfit_plan, full_grid)) out.full_grid = chosen->level_index == b.full;
    out.dynamic_smem_bytes = LAUNCHFIT_SMEM_FROM_QUERY;
    out.grid_x = 0;
    out.grid_y = 1;
    out.grid_z = 1;
    out.cooperative = 0;

    const std::string timed_text = std::to_string(ran) + (ran == 1 ? " timed plan" : " timed plans");
    std::string reason;
    reason =
        (tied > 1 ? "tied with the fastest of " : "fastest of ") + timed_text + " (" + ms_text(chosen->ms);
    if (chosen->ms != fastest->ms) reason += " vs " + ms_text(fastest->ms);
    reason += ")";
    if (chosen->shape_x > 0) reason += format(" as %dx%d", chosen->shape_x, b.threads / chosen->shape_x);
    if (chosen->level_index == b.full) reason += ", the full grid";
    if (tied > 1) {
      reason += format("; tie of %d within %.2g%% (%s) broken by fixed order: %s", tied, band * 100,
                       band_source().c_str(), tie_order_text);
    } else if (second) {
      reason += ", 2nd " + ms_text(second->ms) + format(" (beyond %.2g%% noise)", band * 100);
    }
    if (confirmed_ > 0)
      reason += "; " + std::to_string(confirmed_) + " fastest confirmed by re-timing (median)";
    const int failed = static_cast<int>(trials_.size()) - ran;
    if (failed > 0) reason += "; " + std::to_string(failed) + " could not run";
    if (stopped_by_trials_) {
      reason += "; stopped at max_trials=" + std::to_string(p_.max_trials);
    } else if (stopped_by_time_) {
      reason += "; stopped at max_ms=" + format("%g", p_.max_ms);
    }
    // Said where it is large enough to matter to the budget (the reason holds 255 bytes).
    if (const double setup = setup_ms(); setup >= 1)
      reason += "; launchfit's setup " + ms_text(setup) + " not counted";
    if (shapes_timed_ > 0) {
      reason += "; " + std::to_string(shapes_timed_) +
                (shapes_timed_ == 1 ? " wider 2-D block timed" : " wider 2-D blocks timed");
    } else if (shapes_) {
      reason += shapes_fit_ ? "; no wider 2-D block timed (budget spent)"
                            : "; no wider 2-D block of this size fits these rows";
    }
    if (LAUNCHFIT_HAS_FIELD(&out, launchfit_plan, trials))
      out.trials = static_cast<std::int32_t>(trials_.size()) + extra_timings_;
    if (LAUNCHFIT_HAS_FIELD(&out, launchfit_plan, tuning_ms)) out.tuning_ms = elapsed_ms();
    if (LAUNCHFIT_HAS_FIELD(&out, launchfit_plan, reason))
      std::snprintf(out.reason, sizeof out.reason, "%s", reason.c_str());
    return true;
  }

  // The band within which plans count as equally fast: the re-timing rounds' relative spread (confirmation
  // and block shapes: the largest (max - min) / lower median of one plan's timings), at least min_noise and at
  // most max_noise.
  double noise_band() const { return std::clamp(spread_, min_noise, max_noise); }

  int trial_count() const { return static_cast<int>(trials_.size()) + extra_timings_; }
  // The tuning's time: the trials and the search's own work, not launchfit's one-off setup inside the first
  // trial (its tuning lease, the GPU's conditions), which would otherwise pass for a trial of that length and
  // stop the search by the rule of time_left() with a third of the budget unspent.
  double elapsed_ms() const {
    const double ms = now_ms_() - start_ms_ - setup_ms();
    return std::max(ms, 0.0);
  }
  // launchfit's setup inside this search's time_plan calls (ABI 1.3; 0 from an older launchfit): what the
  // query reports beyond what it had reported when the search began (a query asked twice reports both).
  double setup_ms() const { return std::max(setup_ms_so_far() - setup_at_start_, 0.0); }
  double setup_ms_so_far() const {
    if (!LAUNCHFIT_HAS_FIELD(&q_, launchfit_query, setup_ms) || !q_.setup_ms) return 0;
    const double ms = q_.setup_ms(q_.ctx);
    return std::isfinite(ms) && ms > 0 ? ms : 0;
  }

 private:
  static constexpr double untimed = -2;  // timed_[b][l] before its trial; -1 after a failed one

  // Every residency from 1 to `active` blocks per SM: the coarse pass picks full, 3/4, 5/8, ... of it and
  // the refinement walks one block per SM at a time (an H200 copy kernel peaked at 11 of 16 blocks of 128).
  static std::vector<int> residency_levels(int active) {
    std::vector<int> v;
    for (int level = 1; level <= active; ++level) v.push_back(level);
    return v;
  }

  int blocks_at(int bi, int li) const {
    const block_option& b = blocks_[bi];
    const int level = b.levels[li];
    return level > 0 ? level : b.active;
  }
  // Residency levels of block bi (its full-grid candidate, if any, comes after them).
  int residencies(int bi) const {
    const block_option& b = blocks_[bi];
    return b.full >= 0 ? b.full : static_cast<int>(b.levels.size());
  }
  int resident_warps(const trial& t) const {
    return blocks_at(t.block_index, t.level_index) * blocks_[t.block_index].warps_per_block;
  }

  // The fixed order among plans equally fast within the noise band, total over distinct plans: the most
  // resident warps per SM (a plan that hides latency best when the timings cannot tell), then the fewest
  // threads per block, then the smallest grid (fewest resident blocks per SM; a full grid last), then the
  // narrowest block row (launchfit's own shape, x = 0, first).
  bool better_in_tie(const trial& a, const trial& b) const {
    const block_option& ba = blocks_[a.block_index];
    const block_option& bb = blocks_[b.block_index];
    const auto grid_rank = [](const block_option& o, int li) {
      return li == o.full ? std::numeric_limits<long long>::max() : static_cast<long long>(o.levels[li]);
    };
    const auto key = [&](const trial& t, const block_option& o) {
      return std::make_tuple(-resident_warps(t), o.threads, grid_rank(o, t.level_index), t.shape_x);
    };
    return key(a, ba) < key(b, bb);
  }
  // The order as the reason names it (a plan's reason holds 255 bytes).
  static constexpr const char* tie_order_text = "most warps/SM, fewest threads, smallest grid";
  // Where the band came from: the 1% floor, the re-timing spread, or the cap on a wider spread (named).
  std::string band_source() const {
    if (spread_ <= min_noise) return "1% floor";
    if (spread_ <= max_noise) return "re-timing spread";
    return format("re-timing spread %.2g%%, capped", spread_ * 100);
  }
  // Notes the spread of one plan's re-timings (at least 2 timings).
  void note_spread(const std::vector<double>& ms) {
    if (ms.size() < 2) return;
    const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
    const double median = lower_median(ms);
    if (median > 0) spread_ = std::max(spread_, (*hi - *lo) / median);
  }

  int index_of_threads(int threads) const {
    for (std::size_t i = 0; i < blocks_.size(); ++i)
      if (blocks_[i].threads == threads) return static_cast<int>(i);
    return -1;
  }

  // The block cuOccupancyMaxPotentialBlockSize would pick: most resident threads, the larger block on a tie.
  int max_occupancy_index() const {
    int best = 0;
    for (int i = 1; i < static_cast<int>(blocks_.size()); ++i) {
      const long long t = 1LL * blocks_[i].threads * blocks_[i].active;
      const long long tb = 1LL * blocks_[best].threads * blocks_[best].active;
      if (t >= tb) best = i;
    }
    return best;
  }

  // Level of block bi whose resident threads per SM are closest to `threads` (the larger on a tie).
  int closest_level(int bi, long long threads) const {
    const block_option& b = blocks_[bi];
    int best = 0;
    long long best_diff = -1;
    for (int li = 0; li < residencies(bi); ++li) {
      const long long diff = std::llabs(1LL * blocks_at(bi, li) * b.threads - threads);
      if (best_diff < 0 || diff <= best_diff) {
        best = li;
        best_diff = diff;
      }
    }
    return best;
  }

  // The coarse pass, most informative first so a small budget still times the plans that matter: every
  // coarse block at full residency (the max-occupancy block first, then 256, 128, 512, 64, 1024), then
  // 3/4, 5/8, 7/8, 1/2, 3/8, 1/4, 1/8, ... residency, skipping a plan whose resident warps an earlier coarse
  // plan already has.
  std::vector<std::pair<int, int>> coarse_plan() const {
    std::vector<int> full_order = {max_occupancy_index()};
    std::vector<int> part_order;
    for (int threads : {256, 128, 512, 64, 1024}) {
      const int i = index_of_threads(threads);
      if (i >= 0) part_order.push_back(i);
    }
    if (part_order.empty()) {  // a kernel limited to a few odd sizes: the smallest and the largest
      part_order.push_back(0);
      part_order.push_back(static_cast<int>(blocks_.size()) - 1);
    }
    for (int i : part_order)
      if (std::find(full_order.begin(), full_order.end(), i) == full_order.end()) full_order.push_back(i);
    // Lower residency: the same blocks, the max-occupancy block last (256 stands for "typical").
    std::vector<int> lower_order;
    for (int i : full_order)
      if (i != full_order.front()) lower_order.push_back(i);
    lower_order.push_back(full_order.front());

    std::vector<std::pair<int, int>> out;
    std::vector<int> warps_seen;
    // A full grid's resident warps are not a residency level the capped plans then skip: it is a regime of
    // its own (the 32-thread block's full grid would otherwise hide every capped plan of 32 warps per SM).
    auto add = [&](int bi, int li, bool always) {
      for (const auto& [b, l] : out)
        if (b == bi && l == li) return;
      const int w = blocks_at(bi, li) * blocks_[bi].warps_per_block;
      if (!always && std::find(warps_seen.begin(), warps_seen.end(), w) != warps_seen.end()) return;
      if (li != blocks_[bi].full) warps_seen.push_back(w);
      out.emplace_back(bi, li);
    };
    for (int bi : full_order) add(bi, residencies(bi) - 1, true);
    // The full grid at the max-occupancy block, 256 and 128 threads: a regime of its own, which refinement
    // reaches only from a full grid that was timed.
    for (std::size_t k = 0; k < full_order.size() && k < 3; ++k)
      if (blocks_[full_order[k]].full >= 0) add(full_order[k], blocks_[full_order[k]].full, true);
    // And the smallest block's full grid, the far end of that regime, which refinement from those three
    // reaches only by walking every size between (an H100 ran maps of 32-byte elements fastest as full
    // grids of 32-thread blocks, 2.2-3.3% ahead of every plan a 50 ms search had reached from 128 or 256).
    if (!blocks_.empty() && blocks_.front().full >= 0) add(0, blocks_.front().full, true);
    // Then fractions of full residency: eighths from 3/4 down to 1/4, then halving. Memory-bound kernels
    // often peak between 5/8 and 7/8 of full occupancy, sometimes in a narrow dip (on an H200 a copy ran
    // fastest at 40-46 warps/SM and 3-4% slower at every level from 48 to 64): octaves alone can miss it, and
    // refinement only walks from the fastest plans the coarse pass found.
    std::vector<std::pair<int, int>> fractions = {{3, 4}, {5, 8}, {7, 8}, {1, 2}, {3, 8}, {1, 4}};
    for (int den = 8; den < (1 << 30); den *= 2) fractions.emplace_back(1, den);
    for (const auto& [num, den] : fractions) {
      bool any = false;
      for (int bi : lower_order) {
        const block_option& b = blocks_[bi];
        if (residencies(bi) < 2) continue;  // items work, or a single residency level
        const long long target_blocks = 1LL * blocks_at(bi, residencies(bi) - 1) * num / den;
        if (target_blocks < 1) continue;
        any = true;
        add(bi, closest_level(bi, target_blocks * b.threads), false);
      }
      if (!any && num == 1 && den > 4) break;  // every block is down to one resident block
    }
    return out;
  }

  // Untimed neighbours of a timed plan, nearest first: adjacent block sizes (±1 warp's worth in the list of
  // sizes that fit) at about the same resident threads, the adjacent residency levels of the same block, then
  // sizes ±2, ±4 and ±8 steps away.
  std::vector<std::pair<int, int>> neighbours(int bi, int li) const {
    std::vector<std::pair<int, int>> out;
    const long long threads = 1LL * blocks_at(bi, li) * blocks_[bi].threads;
    auto consider = [&](int b, int l) {
      if (b < 0 || b >= static_cast<int>(blocks_.size())) return;
      if (l < 0 || l >= static_cast<int>(blocks_[b].levels.size())) return;
      if (timed_[b][l] != untimed) return;
      for (const auto& [x, y] : out)
        if (x == b && y == l) return;
      out.emplace_back(b, l);
    };
    if (li == blocks_[bi].full) {  // a full grid: full grids of the nearby sizes, then this size's one wave
      for (int d : {-1, 1, -2, 2, -4, 4, -8, 8})
        if (bi + d >= 0 && bi + d < static_cast<int>(blocks_.size())) consider(bi + d, blocks_[bi + d].full);
      consider(bi, li - 1);
      return out;
    }
    for (int d : {-1, 1}) {
      if (bi + d >= 0 && bi + d < static_cast<int>(blocks_.size()))
        consider(bi + d, closest_level(bi + d, threads));
    }
    consider(bi, li - 1);
    consider(bi, li + 1);
    // The same block's full grid: the coarse pass times only a few sizes' full grids (an H100 ran a map of
    // 4-byte elements fastest as the full grid of 192-thread blocks, which its capped plans had found).
    if (blocks_[bi].full >= 0) consider(bi, blocks_[bi].full);
    // Then longer steps (4 and 8 warps' worth), so a shelf of near-equal sizes does not end the walk (on an
    // H200 a histogram ran 2% faster with 768-thread blocks than with 1024, and 960 and 992 no faster than
    // 1024).
    for (int d : {-2, 2, -4, 4, -8, 8}) {
      if (bi + d >= 0 && bi + d < static_cast<int>(blocks_.size()))
        consider(bi + d, closest_level(bi + d, threads));
    }
    return out;
  }

  // The fastest of many noisy timings is partly luck: the (up to) 3 fastest plans are timed twice more,
  // interleaved, and each keeps the median of its 3 timings: 6 timings kept back from max_trials (>= 16).
  void confirm() {
    std::vector<trial*> ranked;
    for (trial& t : trials_)
      if (t.ms >= 0) ranked.push_back(&t);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const trial* a, const trial* b) { return a->ms < b->ms; });
    if (ranked.size() < 2 || confirm_reserve() == 0) return;
    ranked.resize(std::min<std::size_t>(ranked.size(), confirm_count));
    std::vector<std::vector<double>> ms(ranked.size());
    for (std::size_t k = 0; k < ranked.size(); ++k) ms[k].push_back(ranked[k]->ms);
    for (int round = 0; round < 2; ++round) {
      for (std::size_t k = 0; k < ranked.size(); ++k) {
        if (!time_left()) break;  // the time budget holds for confirmation too
        const double t = timed_once(ranked[k]->block_index, ranked[k]->level_index);
        ++extra_timings_;
        if (t >= 0) ms[k].push_back(t);
      }
    }
    // Only plans that were re-timed count as confirmed (max_ms may stop confirmation early); each keeps the
    // lower median of its timings, so a plan with 2 timings is not penalised against one with 3.
    int confirmed = 0;
    for (std::size_t k = 0; k < ranked.size(); ++k) {
      if (ms[k].size() < 2) continue;
      note_spread(ms[k]);
      ranked[k]->ms = lower_median(ms[k]);
      ranked[k]->confirmed = true;
      timed_[ranked[k]->block_index][ranked[k]->level_index] = ranked[k]->ms;
      ++confirmed;
    }
    confirmed_ = confirmed;
  }

  // The next plan to time: an untimed neighbour of the fastest timed plan, else of the 2nd or 3rd fastest.
  std::pair<int, int> next_refinement() const {
    std::vector<const trial*> ranked;
    for (const trial& t : trials_)
      if (t.ms >= 0) ranked.push_back(&t);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const trial* a, const trial* b) { return a->ms < b->ms; });
    const std::size_t refine = std::min<std::size_t>(ranked.size(), 3);
    for (std::size_t k = 0; k < refine; ++k) {
      const auto n = neighbours(ranked[k]->block_index, ranked[k]->level_index);
      if (!n.empty()) return n.front();
    }
    return {-1, -1};
  }

  // Timings kept back from max_trials for confirm(): none for small budgets, where every trial should
  // explore.
  int confirm_reserve() const { return p_.max_trials >= 16 ? 2 * static_cast<int>(confirm_count) : 0; }

  bool budget_left() {
    if (static_cast<int>(trials_.size()) + confirm_reserve() + shape_reserve() >= p_.max_trials) {
      stopped_by_trials_ = more_to_do();
      return false;
    }
    if (!time_left(confirm_ms())) {
      stopped_by_time_ = more_to_do();
      return false;
    }
    return true;
  }
  // Whether one more trial, a quarter longer than the longest so far, ends within max_ms: tuning stays within its
  // budget instead of starting a trial at 49 ms of 50. The quarter: candidates of one kernel differ in how long
  // a trial takes (on an H100 a trial of 5.6 ms after shorter ones ended a tuning at 50.8 ms of 50).
  // `kept_back`: time kept for a later step (confirm_ms()).
  bool time_left(double kept_back = 0) const {
    return elapsed_ms() + 1.25 * longest_trial_ms_ + kept_back <= limit_ms_;
  }
  // The time confirm() will take (two more timings of each of the 3 fastest plans, each as long as its first),
  // kept back from the search where that is at most max_confirm_share of max_ms: without it a search that used
  // the whole budget chose by single timings (on an H100 a map of bytes at 2^24 kept a plan timed once at
  // 14.9 us, which runs at 16.1 us, 7% behind the best). Longer trials keep nothing back (autotune 1.5.0 kept it
  // always: a map of 32-byte elements at 2^26 then timed 6 plans and missed its full grid, 1.20 of the best).
  double confirm_ms() const {
    if (confirm_reserve() == 0) return 0;
    std::vector<const trial*> ranked;
    for (const trial& t : trials_)
      if (t.ms >= 0 && t.shape_x == 0) ranked.push_back(&t);
    const std::size_t n = std::min<std::size_t>(ranked.size(), confirm_count);
    if (n < 2) return 0;
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.end(),
                      [](const trial* a, const trial* b) { return a->ms < b->ms; });
    double ms = 0;
    for (std::size_t k = 0; k < n; ++k) ms += 2 * ranked[k]->host_ms;
    return ms <= max_confirm_share * p_.max_ms ? ms : 0;
  }
  // Whether the search would have timed another plan (so the reason mentions the budget only when it bit).
  bool more_to_do() const {
    for (const auto& [bi, li] : coarse_plan())
      if (timed_[bi][li] == untimed) return true;
    return next_refinement().first >= 0;
  }

  void time(int bi, int li) {
    double host_ms = 0;
    const double ms = timed_once(bi, li, 0, &host_ms);
    timed_[bi][li] = ms;
    trial t{bi, li, ms};
    t.host_ms = host_ms;
    trials_.push_back(t);
  }

  // time_once(), noting how long the trial took (the host's time, launches and synchronisation included).
  double timed_once(int bi, int li, int shape_x = 0, double* host_ms = nullptr) {
    const double before = elapsed_ms();
    const double ms = time_once(bi, li, shape_x);
    const double took = elapsed_ms() - before;
    longest_trial_ms_ = std::max(longest_trial_ms_, took);
    if (host_ms) *host_ms = took;
    return ms;
  }

  double time_once(int bi, int li, int shape_x = 0) const {
    launchfit_plan c{};
    c.struct_size = sizeof c;
    c.abi_version = LAUNCHFIT_PLUGIN_ABI_VERSION;
    c.block_x = static_cast<std::uint32_t>(shape_x > 0 ? shape_x : blocks_[bi].threads);
    c.block_y = static_cast<std::uint32_t>(shape_x > 0 ? blocks_[bi].threads / shape_x : 1);
    c.block_z = 1;
    c.blocks_per_sm = std::max(blocks_[bi].levels[li], 0);
    c.full_grid = li == blocks_[bi].full;
    c.dynamic_smem_bytes = LAUNCHFIT_SMEM_FROM_QUERY;
    c.grid_y = c.grid_z = 1;
    const double ms = q_.time_plan(q_.ctx, &c);
    return (ms >= 0 && std::isfinite(ms)) ? ms : -1;  // negative, NaN or infinite: cannot run
  }

  // Where the launch lets the block widen along x (block_x_free()): 2-D blocks of the fastest plan's size
  // wider than launchfit's rows of block_x_step ({64, t/64}, {128, t/128}, {256, t/256} for rows of 32; never
  // wider than a row of the work): an image streamed row by row reads longer runs of a row per block (on an
  // H200 an axpy over 8192^2 floats ran 3.6% slower in 32x8 blocks than in 64x4 or 128x2, where a 5-point
  // stencil through a shared tile ran best at 32x4 and 32x8, and its tile is sized by the shape: it must not
  // opt in). Each is timed three times, interleaved with the plan it widens, and keeps its lower median; a
  // shape competes like a confirmed plan.
  void time_shapes() {
    const trial* base = nullptr;
    for (const trial& t : trials_)
      if (t.ms >= 0 && t.shape_x == 0 && (confirmed_ == 0 || t.confirmed) && (!base || t.ms < base->ms))
        base = &t;
    if (!base) return;
    const int bi = base->block_index, li = base->level_index;
    const std::vector<int> widths = widths_for(blocks_[bi].threads);
    shapes_fit_ = !widths.empty();
    if (widths.empty()) return;
    std::vector<double> base_ms{base->ms};
    std::vector<std::vector<double>> ms(widths.size());
    auto room = [&] { return time_left() && trial_count() < p_.max_trials; };
    for (int round = 0; round < 3 && room(); ++round) {
      for (std::size_t k = 0; k < widths.size() && room(); ++k) {
        if (round > 0 && ms[k].empty()) continue;  // could not run: not timed again
        const double t = timed_once(bi, li, widths[k]);
        if (t >= 0 && round == 0) ++shapes_timed_;
        if (round == 0) {
          trials_.push_back(trial{bi, li, t, false, widths[k]});
        } else {
          ++extra_timings_;
        }
        if (t >= 0) ms[k].push_back(t);
      }
      if (round > 0 && room()) {  // the plan they widen, under the same conditions
        const double t = timed_once(bi, li);
        ++extra_timings_;
        if (t >= 0) base_ms.push_back(t);
      }
    }
    note_spread(base_ms);
    for (const auto& m : ms) note_spread(m);
    // Pointers into trials_ are stable from here on: nothing is added below.
    for (trial& t : trials_) {
      if (t.shape_x == 0 && t.block_index == bi && t.level_index == li && t.ms >= 0 && base_ms.size() > 1)
        t.ms = lower_median(base_ms);
      if (t.shape_x == 0) continue;
      for (std::size_t k = 0; k < widths.size(); ++k) {
        if (t.shape_x != widths[k] || ms[k].size() < 2) continue;
        t.ms = lower_median(ms[k]);
        t.confirmed = true;
      }
    }
  }

  // The widths worth timing for a block of `threads`: 2, 4 and 8 times block_x_step, with y at least 2, no
  // wider than the largest power of two within a row (so no wider than a row of any image launchfit keys
  // the plan for: the row width's octave is part of its bucket), and a grid y within the device's limit for
  // images up to 4 times as tall (those of the same bucket).
  std::vector<int> widths_for(int threads) const {
    std::vector<int> widths;
    const long long step = std::min<std::uint32_t>(q_.block_x_step, 1024);
    std::uint64_t row = 1;
    while (row * 2 <= q_.work_nx && row < (1ull << 62)) row *= 2;
    const launchfit_device& d = *q_.device;
    for (long long x = 2 * step; x <= threads / 2 && widths.size() < 3; x *= 2) {
      if (threads % x != 0 || static_cast<std::uint64_t>(x) > row) continue;
      const long long y = threads / x;
      if ((d.max_block_dim[0] > 0 && x > d.max_block_dim[0]) ||
          (d.max_block_dim[1] > 0 && y > d.max_block_dim[1]))
        continue;
      const std::uint64_t rows = q_.work_ny > (~0ull >> 3) ? ~0ull : q_.work_ny * 4;
      if (d.max_grid_dim[1] > 0 && (rows + y - 1) / y > static_cast<std::uint64_t>(d.max_grid_dim[1]))
        continue;
      widths.push_back(static_cast<int>(x));
    }
    return widths;
  }
  bool any_width() const {
    for (const block_option& b : blocks_)
      if (!widths_for(b.threads).empty()) return true;
    return false;
  }
  int shape_reserve() const { return shapes_ && p_.max_trials >= 16 ? 7 : 0; }

  const launchfit_query& q_;
  const params& p_;
  bool full_grid_ = false;
  bool shapes_ = false;  // the launch leaves the block's shape free (ABI 1.2) and shapes=on
  double limit_ms_ = 0;  // time_left()'s budget: max_ms, less a quarter while shapes are still to time
  int shapes_timed_ = 0;
  bool shapes_fit_ = true;  // time_shapes() found widths for the plan it widens
  clock_fn now_ms_;
  double start_ms_;
  std::vector<block_option> blocks_;
  std::vector<std::vector<double>> timed_;  // per block, per level: ms, -1 (failed) or untimed
  std::vector<trial> trials_;
  bool stopped_by_trials_ = false;
  bool stopped_by_time_ = false;
  int confirmed_ = 0;            // plans re-timed by confirm()
  double setup_at_start_ = 0;    // setup_ms_so_far() when the search began
  double longest_trial_ms_ = 0;  // the longest trial so far, host time
  int extra_timings_ = 0;        // confirm()'s timings: with trials_, every time_plan call
  double spread_ = 0;            // the re-timing rounds' relative spread (note_spread)
};

// ---- the C interface ---------------------------------------------------------------------------------

int create(const char* text, void** out, char* errbuf, size_t errbuf_size) {
  try {
    if (!out) {
      write_message(errbuf, errbuf_size, "autotune: create() given no state pointer");
      return LAUNCHFIT_PLUGIN_ERROR;
    }
    *out = nullptr;
    params p;
    std::string message;
    if (!parse_params(text, p, message)) {
      write_message(errbuf, errbuf_size, "%s", message.c_str());
      return LAUNCHFIT_PLUGIN_ERROR;
    }
    auto* s = new state;
    s->p = p;
    *out = s;
    return LAUNCHFIT_PLUGIN_OK;
  } catch (const std::exception& e) {
    write_message(errbuf, errbuf_size, "autotune: create failed: %s", e.what());
  } catch (...) {
    write_message(errbuf, errbuf_size, "autotune: create failed");
  }
  return LAUNCHFIT_PLUGIN_ERROR;
}

void destroy(void* s) { delete static_cast<state*>(s); }

int decline(launchfit_plan* plan, char* errbuf, size_t errbuf_size, const std::string& why) {
  write_message(errbuf, errbuf_size, "%s", why.c_str());
  if (plan && LAUNCHFIT_HAS_FIELD(plan, launchfit_plan, reason))
    std::snprintf(plan->reason, sizeof plan->reason, "%s", why.c_str());
  return LAUNCHFIT_PLUGIN_DECLINE;
}

int choose(void* raw, const launchfit_query* q, launchfit_plan* plan, char* errbuf, size_t errbuf_size) {
  try {
    const auto* s = static_cast<const state*>(raw);
    if (!s || !q || !plan || !q->device) {
      write_message(errbuf, errbuf_size, "autotune: choose() given no state, query, plan or device");
      return LAUNCHFIT_PLUGIN_ERROR;
    }
    // Tuning re-runs the kernel; launchfit offers time_plan only when the spec says that is safe.
    if (!LAUNCHFIT_HAS_FIELD(q, launchfit_query, time_plan) || !q->time_plan)
      return decline(plan, errbuf, errbuf_size, no_rerun_reason);
    if (!q->active_blocks)
      return decline(plan, errbuf, errbuf_size, "autotune: the query has no occupancy oracle");
    if (q->work_kind > LAUNCHFIT_WORK_GRID_STRIDE) {
      return decline(plan, errbuf, errbuf_size,
                     "autotune: unknown work kind " + std::to_string(q->work_kind) + " (newer launchfit?)");
    }
    search tuner(*q, s->p, LAUNCHFIT_HAS_FIELD(plan, launchfit_plan, full_grid));
    std::string why;
    if (!tuner.build(why)) return decline(plan, errbuf, errbuf_size, why);
    tuner.run();
    if (!tuner.decide(*plan, why)) return decline(plan, errbuf, errbuf_size, why);
    return LAUNCHFIT_PLUGIN_OK;
  } catch (const std::bad_alloc&) {
    write_message(errbuf, errbuf_size, "autotune: out of memory while tuning");
  } catch (const std::exception& e) {
    write_message(errbuf, errbuf_size, "autotune: %s", e.what());
  } catch (...) {
    write_message(errbuf, errbuf_size, "autotune: unknown failure while tuning");
  }
  return LAUNCHFIT_PLUGIN_ERROR;
}

// floor(log2 n) + 1: sizes within a factor of two share a plan. 0 (n irrelevant) without work or bucketing.
uint64_t work_bucket(void* raw, uint32_t work_kind, uint64_t work_n, uint32_t work_per_thread) {
  (void)work_per_thread;
  const auto* s = static_cast<const state*>(raw);
  if (!s || !s->p.bucket || work_kind == LAUNCHFIT_WORK_NONE || work_n == 0) return 0;
  uint64_t bits = 0;
  while (work_n) {
    ++bits;
    work_n >>= 1;
  }
  return bits;
}

const launchfit_plugin_descriptor descriptor = {
    sizeof(launchfit_plugin_descriptor),
    LAUNCHFIT_PLUGIN_ABI_VERSION,
    plugin_name,
    plugin_version,
    create,
    choose,
    nullptr,  // feedback: a plan is decided by its trials; launch times reported later would decide nothing
    destroy,
    work_bucket,
};

}  // namespace

extern "C" LAUNCHFIT_PLUGIN_EXPORT const launchfit_plugin_descriptor* launchfit_plugin_entry(void) {
  return &descriptor;
}

#ifdef LAUNCHFIT_AUTOTUNE_TEST_CLOCK
// The test build's second symbol: `clock` (milliseconds, never decreasing) replaces the steady clock for every
// search that begins from now on; nullptr restores it.
extern "C" LAUNCHFIT_PLUGIN_EXPORT void launchfit_autotune_test_clock(double (*clock)(void)) {
  test_clock.store(clock, std::memory_order_release);
}
#endif
