// SPDX-License-Identifier: MIT
// The plan store in a fleet (lib/store/): plans that improve (a stored plan replaced only by one measured
// better beyond noise, compare-and-set; concurrent writers converge to the best), entries that live while
// they are read (the TTL refreshed at a bounded rate), the plan file merging by the same rule, and a plan
// measured under contention kept out of the shared store. Against the redis-server of
// LAUNCHFIT_TEST_REDIS (tests/run.sh starts one).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "captured_log.hpp"
#include "launchfit/cache.hpp"
#include "plan_file_format.hpp"
#include "plan_merge.hpp"
#include "raw_redis.hpp"
#include "remote_store.hpp"
#include "settings.hpp"
#include "store/chain.hpp"
#include "store/kv_scheme.hpp"
#include "store/plan_tools.hpp"
#include "store/redis_ops.hpp"
#include "store/remote_layer.hpp"
#include "store_samples.hpp"
#include "tool_run.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;

namespace {

const std::string policy_text = launchfit_test::sample_policy;

lf::stored_key key(const std::string& model, int kernel, std::uint64_t bucket = 0) {
  return launchfit_test::sample_key(model, kernel, bucket);
}
using launchfit_test::sample_plan;

ld::plan_measurement measured(double ms, double spread = 0.01, bool clean = true) {
  ld::plan_measurement m;
  m.best_ms = ms;
  m.spread = spread;
  m.trials = 32;
  m.clean = clean;
  if (!clean) m.conditions = "other processes on the GPU";
  return m;
}

ld::stored_entry entry(const lf::stored_key& k, int block, std::optional<ld::plan_measurement> m = {}) {
  ld::stored_entry e;
  e.key = k;
  e.plan = sample_plan(block);
  e.stored_at_ms = 1700000000000;
  e.measurement = std::move(m);
  return e;
}

std::string unique_model(const std::string& what) { return launchfit_test::unique_model("Fleet GPU", what); }

class raw_redis : public launchfit_test::raw_redis {
 public:
  explicit raw_redis(const ld::remote_url& url) : launchfit_test::raw_redis(url.host, url.port, url.db) {}
  // The reply's text (status, error, integer or bulk); "(nil)" for nil.
  std::string call(const std::vector<std::string>& args) {
    const launchfit_test::redis_reply r = command(args);
    return r.nil ? "(nil)" : r.text;
  }
  long ttl(const std::string& k) { return std::stol(call({"TTL", k})); }
};

// What the store holds under the key, read and validated as a lookup does.
std::optional<ld::stored_entry> stored(raw_redis& raw, const lf::stored_key& k) {
  const std::string name = ld::remote_key(k);
  const launchfit_test::redis_reply r = raw.command({"GET", name});
  if (r.type != '$' || r.nil) return std::nullopt;
  std::string why;
  auto e = ld::parse_remote_value(r.text, name, why);
  EXPECT_TRUE(e) << why;
  return e;
}

using launchfit_test::test_connect_ms;
using launchfit_test::test_op_ms;
ld::remote_options options(const ld::remote_url& url) { return launchfit_test::test_store_options(url); }

// One writer's entry through a store of its own, flushed.
lf::remote_store_stats write_one(const ld::remote_url& url, const ld::stored_entry& e) {
  ld::redis_store s(options(url));
  s.put(e);
  EXPECT_TRUE(s.flush(10000));
  return s.statistics();
}

// ---- supersession
// ------------------------------------------------------------------------------------------

TEST(FleetStore, ABetterMeasuredPlanReplacesTheStoredOneAndBumpsItsEpoch) {
  NEEDS_REDIS(url);
  raw_redis raw(*url);
  const lf::stored_key k = key(unique_model("better"), 1);
  EXPECT_EQ(write_one(*url, entry(k, 256, measured(1.0))).writes, 1u);
  ASSERT_TRUE(stored(raw, k));
  EXPECT_EQ(stored(raw, k)->epoch, 0u);
  const lf::remote_store_stats st = write_one(*url, entry(k, 128, measured(0.8)));
  EXPECT_EQ(st.superseded, 1u);
  EXPECT_EQ(st.already_stored, 0u);
  const auto now = stored(raw, k);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->plan.block_threads, 128);
  ASSERT_TRUE(now->measurement);
  EXPECT_EQ(now->measurement->best_ms, 0.8);
  EXPECT_EQ(now->epoch, 1u);
  EXPECT_GT(raw.ttl(ld::remote_key(k)), 0);  // a replacement expires like any entry
  EXPECT_EQ(write_one(*url, entry(k, 64, measured(0.5))).superseded, 1u);
  EXPECT_EQ(stored(raw, k)->epoch, 2u);
  EXPECT_EQ(stored(raw, k)->plan.block_threads, 64);
}

TEST(FleetStore, EqualWithinNoiseWorseOrUnmeasuredPlansDoNotReplace) {
  NEEDS_REDIS(url);
  raw_redis raw(*url);
  const lf::stored_key k = key(unique_model("not-better"), 1);
  write_one(*url, entry(k, 256, measured(1.0, 0.03)));
  const ld::stored_entry candidates[] = {
      entry(k, 128, measured(1.0, 0.0)),   // equal
      entry(k, 128, measured(0.98, 0.0)),  // better, but within the stored plan's 3% noise
      entry(k, 128, measured(0.9, 0.12)),  // better, but within its own 12% noise
      entry(k, 128, measured(1.5, 0.0)),   // worse
      entry(k, 128),                       // unmeasured (a static plan)
  };
  for (const auto& c : candidates) {
    const lf::remote_store_stats st = write_one(*url, c);
    EXPECT_EQ(st.already_stored, 1u);
    EXPECT_EQ(st.superseded + st.replaced + st.writes, 0u);
    const auto now = stored(raw, k);
    ASSERT_TRUE(now);
    EXPECT_EQ(now->plan.block_threads, 256);
    EXPECT_EQ(now->epoch, 0u);
  }
  // An unmeasured plan stored first is replaced by a measured one, however slow.
  const lf::stored_key s = key(unique_model("static-first"), 2);
  write_one(*url, entry(s, 256));
  EXPECT_EQ(write_one(*url, entry(s, 128, measured(100.0))).superseded, 1u);
  EXPECT_EQ(stored(raw, s)->plan.block_threads, 128);
}

// 8 processes, started together, each write their own measurement of the same 20 keys in their own order:
// every key ends with the best one (no arrival order wins), its epoch at most 7.
TEST(FleetStore, EightConcurrentWritersConvergeToTheBest) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("converge");
  constexpr int writers = 8, keys = 20;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> pids;
  for (int w = 0; w < writers; ++w) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      char c = 0;
      if (::read(go[0], &c, 1) != 0) _exit(2);  // released together when the pipe closes
      ld::redis_store s(options(*url));
      for (int i = 0; i < keys; ++i) {
        const int k = (w % 2 ? keys - 1 - i + 3 * w : i + 3 * w) % keys;  // another order in each writer
        // Writer w measured 1.0 - 0.1 w: each faster than the last beyond the 1% noise; writer 7 is best.
        s.put(entry(key(model, k), 32 * (w + 1), measured(1.0 - 0.1 * w)));
      }
      _exit(s.flush(20000) && !s.statistics().dead ? 0 : 1);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer " << pid;
  }
  raw_redis raw(*url);
  for (int k = 0; k < keys; ++k) {
    const auto e = stored(raw, key(model, k));
    ASSERT_TRUE(e) << k;
    EXPECT_EQ(e->plan.block_threads, 32 * writers) << k;
    ASSERT_TRUE(e->measurement);
    EXPECT_NEAR(e->measurement->best_ms, 0.3, 1e-9) << k;
    EXPECT_LE(e->epoch, std::uint64_t(writers - 1)) << k;
  }
}

// ---- time to live
// -------------------------------------------------------------------------------------------

TEST(FleetStore, AReadRefreshesTheTimeToLiveAtABoundedRate) {
  NEEDS_REDIS(url);
  raw_redis raw(*url);
  const lf::stored_key k = key(unique_model("ttl"), 1);
  const std::string name = ld::remote_key(k);
  ASSERT_EQ(raw.call({"SET", name, ld::remote_value(entry(k, 256, measured(1.0))), "EX", "100"}), "OK");
  ld::remote_options o = options(*url);
  o.ttl_s = 100000;
  {
    ld::redis_store s(o);
    ASSERT_EQ(s.find(k).size(), 1u);
    ASSERT_TRUE(s.flush(10000));
    EXPECT_GT(raw.ttl(name), 100);  // raised to the store's TTL by the read
    EXPECT_EQ(s.statistics().ttl_refreshes, 1u);
    // Read again within the hour by the same process: not refreshed again.
    ASSERT_EQ(raw.call({"EXPIRE", name, "100"}), "1");
    ASSERT_EQ(s.find(k).size(), 1u);
    ASSERT_EQ(s.find(k).size(), 1u);
    ASSERT_TRUE(s.flush(10000));
    EXPECT_LE(raw.ttl(name), 100);
    EXPECT_EQ(s.statistics().ttl_refreshes, 1u);
  }
  // With no interval, every read refreshes: the bound is the interval, nothing else.
  o.refresh_every = std::chrono::seconds(0);
  ld::redis_store s(o);
  ASSERT_EQ(s.find(k).size(), 1u);
  ASSERT_TRUE(s.flush(10000));
  EXPECT_GT(raw.ttl(name), 100);
  ASSERT_EQ(raw.call({"EXPIRE", name, "100"}), "1");
  ASSERT_EQ(s.find(k).size(), 1u);
  ASSERT_TRUE(s.flush(10000));
  EXPECT_GT(raw.ttl(name), 100);
  EXPECT_EQ(s.statistics().ttl_refreshes, 2u);
}

// ---- the plan file
// ------------------------------------------------------------------------------------------

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("launchfit-fleet-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
};

// What another process's write of `e` leaves in the file (a view of its own: it never saw the file).
ld::stored_entry file_after_write(const std::string& path, const ld::stored_entry& e) {
  ld::write_job job;
  job.path = path;
  ld::disk_view view;
  const ld::write_outcome out = ld::write_file(job, {e}, view);
  EXPECT_EQ(out.status, ld::write_status::written) << out.why;
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const ld::cache_file_contents c = ld::parse_cache_file(text);
  EXPECT_EQ(c.entries.size(), 1u) << c.problem;
  return c.entries.empty() ? ld::stored_entry{} : c.entries[0];
}

TEST(FleetStore, TheFileMergesByTheSameRule) {
  temp_dir dir;
  const std::string path = (dir.path / "plans.json").string();
  const lf::stored_key k = key(unique_model("file"), 1);
  EXPECT_EQ(file_after_write(path, entry(k, 256, measured(1.0))).plan.block_threads, 256);
  EXPECT_EQ(file_after_write(path, entry(k, 128, measured(0.995))).plan.block_threads, 256);  // noise
  EXPECT_EQ(file_after_write(path, entry(k, 128, measured(2.0))).plan.block_threads, 256);    // worse
  EXPECT_EQ(file_after_write(path, entry(k, 128)).plan.block_threads, 256);                   // unmeasured
  EXPECT_EQ(file_after_write(path, entry(k, 64, measured(0.5))).plan.block_threads, 64);      // better
  // Unmeasured over unmeasured: the newest store, as before.
  const lf::stored_key s = key(unique_model("file-static"), 2);
  EXPECT_EQ(file_after_write(path + ".2", entry(s, 256)).plan.block_threads, 256);
  EXPECT_EQ(file_after_write(path + ".2", entry(s, 128)).plan.block_threads, 128);
}

// launchfit-plans merge keeps a measured plan unless one measured better beyond noise comes, whatever the
// stamps say (a newer plan within noise, or a newer static one, does not replace it).
TEST(FleetStore, MergeKeepsTheBetterMeasuredPlan) {
  temp_dir dir;
  const lf::stored_key k = key(unique_model("merge"), 1);
  const auto file = [&](const std::string& name, const ld::stored_entry& e, std::uint64_t at) {
    ld::stored_entry dated = e;
    dated.stored_at_ms = at;
    std::ofstream((dir.path / name).string()) << ld::serialize_cache_file({dated});
    return (dir.path / name).string();
  };
  const std::string out = file("out.json", entry(k, 256, measured(1.0)), 1000);
  const std::string noise = file("noise.json", entry(k, 128, measured(0.995)), 2000);
  const std::string unmeasured = file("static.json", entry(k, 64), 3000);
  const std::string tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos/launchfit-plans";
  NEEDS_BUILT_TOOL(tool);
  const auto merged_block = [&](const std::string& in) {
    EXPECT_EQ(std::system(("'" + tool + "' merge '" + out + "' '" + in + "' >/dev/null").c_str()), 0);
    std::ifstream f(out);
    const ld::cache_file_contents c = ld::parse_cache_file(
        std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()));
    EXPECT_EQ(c.entries.size(), 1u) << c.problem;
    return c.entries.empty() ? 0 : c.entries[0].plan.block_threads;
  };
  EXPECT_EQ(merged_block(noise), 256);
  EXPECT_EQ(merged_block(unmeasured), 256);
  EXPECT_EQ(merged_block(file("better.json", entry(k, 512, measured(0.5)), 500)), 512);  // older, but better
}

// ---- what is shared
// -----------------------------------------------------------------------------------------

// A plan measured under contention stays in this node's file; a clean one goes to the store too.
TEST(FleetStore, AnUncleanMeasurementIsNotShared) {
  NEEDS_REDIS(url);
  temp_dir dir;
  const std::string model = unique_model("unclean");
  const std::string text = url->text, path = (dir.path / "plans.json").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
    lf::set_cache_file(path, lf::cache_file_mode::read_write);
    lf::set_remote_store(text);
    lf::store_plan(key(model, 1), sample_plan(256), measured(1.0, 0.2, false));
    lf::store_plan(key(model, 2), sample_plan(128), measured(1.0, 0.01, true));
    const bool ok = lf::flush_remote_store(10000) && lf::flush_cache_file(10000);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  raw_redis raw(*url);
  EXPECT_FALSE(stored(raw, key(model, 1)));
  const auto shared = stored(raw, key(model, 2));
  ASSERT_TRUE(shared);
  ASSERT_TRUE(shared->measurement);
  EXPECT_TRUE(shared->measurement->clean);
  std::ifstream in(path);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const ld::cache_file_contents c = ld::parse_cache_file(file);
  ASSERT_EQ(c.entries.size(), 2u) << c.problem;
  for (const auto& e : c.entries) {
    ASSERT_TRUE(e.measurement);
    if (e.plan.block_threads == 256) {
      EXPECT_FALSE(e.measurement->clean);
      EXPECT_EQ(e.measurement->conditions, "other processes on the GPU");
    }
  }
}

// ---- backfill
// -----------------------------------------------------------------------------------------------

// The exit code of `body` run in a child process (the store's state is per process).
template <class Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) _exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A plan served by the store is written to the node's file with its origin; after the store restarts empty
// (FLUSHDB), a process with that file finds the plan there and asks the store nothing.
TEST(FleetStore, APlanReadFromTheStoreIsBackfilledToTheFile) {
  NEEDS_REDIS(url);
  temp_dir dir;
  // A database of its own: this test empties it.
  ld::remote_url db = *url;
  db.db = 14;
  db.text = "redis://" + url->host + ":" + std::to_string(url->port) + "/14";
  const std::string model = unique_model("backfill");
  const std::string path = (dir.path / "plans.json").string();
  // Another node (another GPU of the model) tuned and shared it.
  lf::stored_key theirs = key(model, 1);
  theirs.device_uuid = "GPU-another-node";
  write_one(db, entry(theirs, 128, measured(0.7)));
  lf::stored_key mine = key(model, 1);
  mine.device_uuid = "GPU-this-node";

  ASSERT_EQ(in_child([&] {
              ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
              lf::set_cache_file(path, lf::cache_file_mode::read_write);
              lf::set_remote_store(db.text);
              const std::optional<lf::plan> p = lf::find_stored_plan(mine);
              CHECK_IN_CHILD(p && p->match == "remote" && p->block_threads == 128);
              CHECK_IN_CHILD(ld::store_chain_statistics().backfilled == 1);
              CHECK_IN_CHILD(lf::flush_cache_file(10000));
              return 0;
            }),
            0);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const ld::cache_file_contents c = ld::parse_cache_file(text);
  ASSERT_EQ(c.entries.size(), 1u) << c.problem << text;
  EXPECT_EQ(c.entries[0].origin, db.text);
  EXPECT_EQ(c.entries[0].plan.block_threads, 128);
  ASSERT_TRUE(c.entries[0].measurement);
  EXPECT_EQ(c.entries[0].measurement->best_ms, 0.7);

  raw_redis raw(db);
  ASSERT_EQ(raw.call({"FLUSHDB"}), "OK");  // the store restarts empty
  ASSERT_EQ(in_child([&] {
              ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
              lf::set_cache_file(path, lf::cache_file_mode::read_write);
              lf::set_remote_store(db.text);
              const std::optional<lf::plan> p = lf::find_stored_plan(mine);
              CHECK_IN_CHILD(p && p->block_threads == 128);
              CHECK_IN_CHILD(p->match == "cache-file-same-model");
              const ld::chain_stats st = ld::store_chain_statistics();
              CHECK_IN_CHILD(st.lookups[1] == 0 && st.served[1] == 0 && st.backfilled == 0);
              CHECK_IN_CHILD(lf::remote_store_statistics().lookups == 0);
              return 0;
            }),
            0);
}

// ---- AUTH and secrets
// ---------------------------------------------------------------------------------------

// The password every AUTH test uses: a string no output may hold.
const std::string secret = "Pw-s3cr3t-7f9q";
// A user with only the commands README's plan-store section lists (lookups, writes, TTL refresh, leases).
const std::vector<std::string> acl_user = {"ACL",          "SETUSER",       "lf",    "on",      ">" + secret,
                                           "~launchfit:*", "resetchannels", "-@all", "+auth",   "+select",
                                           "+scan",        "+getrange",     "+set",  "+eval",   "+type",
                                           "+expire",      "+get",          "+pttl", "+exists", "+del"};

// A redis-server of the test's own (the one of LAUNCHFIT_TEST_REDIS has no password), started with
// `args` on a free port, stopped by its PID.
class private_server {
 public:
  explicit private_server(const std::vector<std::string>& args) {
    for (int attempt = 0; attempt < 8 && port_ == 0; ++attempt) {
      const int port = 20000 + static_cast<int>((::getpid() * 7919 + attempt * 104729) % 40000);
      const pid_t pid = ::fork();
      if (pid == 0) {
        std::vector<std::string> all = {
            "redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1",  "--save", "",
            "--appendonly", "no",     "--daemonize",        "no",     "--loglevel", "warning"};
        all.insert(all.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& a : all) argv.push_back(a.data());
        argv.push_back(nullptr);
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        ::execvp("redis-server", argv.data());
        _exit(127);
      }
      // Ready when it answers (NOAUTH counts); gone when its port was taken.
      for (int i = 0; i < 500; ++i) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) break;
        launchfit_test::raw_redis probe("127.0.0.1", port);
        if (probe.connected() && probe.command({"PING"}).type != 0) {
          pid_ = pid;
          port_ = port;
          break;
        }
        ::usleep(10000);
      }
      if (port_ == 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  }
  ~private_server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string url(const std::string& userinfo = "") const {
    return "redis://" + userinfo + "127.0.0.1:" + std::to_string(port_);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

#define NEEDS_SERVER(server)                                                                       \
  if ((server).port() == 0)                                                                        \
  GTEST_SKIP() << "no redis-server could be started (tests/run.sh puts one on PATH for the Redis " \
                  "tests)"

// What a store made from `url` (set_remote_store) does with a write and a read, in a child process whose
// environment is `env` (LAUNCHFIT_REDIS_PASSWORD...), its launchfit log (text or JSON, `format`) on stderr
// captured. Returns the child's exit code: 0 when the store stayed alive and served the plan back.
struct child_run {
  int code = -1;
  std::string log;
};
child_run use_store(const std::string& url, const std::string& model,
                    const std::vector<std::pair<std::string, std::string>>& env, const char* format) {
  const fs::path log = fs::temp_directory_path() / ("launchfit-fleet-log-" + std::to_string(::getpid()));
  child_run out;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::setenv("LAUNCHFIT_LOG_FORMAT", format, 1);
    ::setenv("LAUNCHFIT_LOG_ASYNC", "0", 1);
    ::unsetenv("LAUNCHFIT_REDIS_PASSWORD");
    ::unsetenv("LAUNCHFIT_REDIS_PASSWORD_FILE");
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ld::settings_reload_for_tests();
    // launchfit's own logger on stderr, synchronous (the child ends with _exit), in the format asked for
    // (the parent's tests may have set up the logger before this fork).
    lf::set_logger(nullptr);
    lf::set_log_async(false);
    lf::set_log_format(std::string(format) == "json" ? lf::log_format::json : lf::log_format::text);
    ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
    lf::set_remote_store(url);
    ld::plan_store_layer* l = ld::remote_layer();
    if (!l) _exit(3);
    l->put(entry(key(model, 1), 128, measured(0.5)));
    const bool flushed = lf::flush_remote_store(10000);
    lf::set_remote_store(url);  // a second store: reads what the first wrote
    const auto found = ld::remote_layer()->find(key(model, 1));
    lf::flush_remote_store(10000);  // its TTL refresh
    const lf::remote_store_stats st = lf::remote_store_statistics();
    std::fflush(stderr);
    _exit(flushed && found.size() == 1 && !st.dead && st.ttl_refreshes == 1 ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(log);
  out.log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  fs::remove(log);
  return out;
}

TEST(FleetStoreAuth, TheUrlParsesUserAndPasswordAndShowsNeither) {
  std::string why;
  auto u = ld::parse_remote_url("redis://lf:" + secret + "@cache.example:6380/3", why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->user, "lf");
  EXPECT_EQ(u->password, secret);
  EXPECT_EQ(u->host, "cache.example");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 3);
  EXPECT_EQ(u->text, "redis://lf:***@cache.example:6380/3");
  u = ld::parse_remote_url("redis://:" + secret + "@h", why);  // the one-argument AUTH
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->user, "");
  EXPECT_EQ(u->password, secret);
  EXPECT_EQ(u->text, "redis://:***@h");
  u = ld::parse_remote_url("redis://a%40b:p%2Fw%3A%40@h", why);  // encoded '@', '/', ':'
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->user, "a@b");
  EXPECT_EQ(u->password, "p/w:@");
  EXPECT_EQ(u->text, "redis://a%40b:***@h");
  u = ld::parse_remote_url("redis://lf@h:1", why);  // the password from the environment
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->user, "lf");
  EXPECT_EQ(u->password, "");
  for (const char* bad : {"redis://lf:@h", "redis://@h", "redis://lf:%4@h", "redis://lf:%0a@h"})
    EXPECT_FALSE(ld::parse_remote_url(bad, why)) << bad;
  // Whatever else is wrong with a URL, its password is not shown.
  EXPECT_EQ(ld::redact_url("redis://u:" + secret + "@h:99999"), "redis://u:***@h:99999");
  EXPECT_EQ(ld::redact_url("rediss://u:a/b@c@h/0"), "rediss://u:***@h/0");
}

// The settings read the password variables: the variable first, else the file's one line; a file that is
// not one line of a regular file of at most 4 KiB is one warning naming it, never its text, and no password.
TEST(FleetStoreAuth, APasswordFileIsOneBoundedLineOfARegularFile) {
  temp_dir dir;
  struct env {
    std::vector<std::pair<std::string, std::string>> vars;
    static const char* lookup(const char* name, void* self) {
      for (const auto& [k, v] : static_cast<env*>(self)->vars)
        if (k == name) return v.c_str();
      return nullptr;
    }
  };
  const auto read = [](env e) { return ld::read_settings(&env::lookup, &e); };
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream((dir.path / name).string(), std::ios::binary) << text;
    return (dir.path / name).string();
  };
  ld::settings s = read({{{"LAUNCHFIT_REDIS_PASSWORD_FILE", write("crlf", secret + "\r\n")}}});
  EXPECT_EQ(s.remote.password, secret);
  EXPECT_TRUE(s.warnings.empty());
  s = read({{{"LAUNCHFIT_REDIS_PASSWORD", "from-the-variable"},
             {"LAUNCHFIT_REDIS_PASSWORD_FILE", write("unused", secret)}}});
  EXPECT_EQ(s.remote.password, "from-the-variable");
  const std::string fifo = (dir.path / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& bad :
       {write("two-lines", secret + "\nsecond line\n"), write("large", std::string(5000, 'p') + secret),
        write("empty", "\n"), fifo, (dir.path / "missing").string(), dir.path.string()}) {
    s = read({{{"LAUNCHFIT_REDIS_PASSWORD_FILE", bad}}});
    EXPECT_EQ(s.remote.password, "") << bad;
    ASSERT_EQ(s.warnings.size(), 1u) << bad;
    EXPECT_EQ(s.warnings[0].variable, "LAUNCHFIT_REDIS_PASSWORD_FILE");
    EXPECT_NE(s.warnings[0].message.find(bad.substr(bad.rfind('/') + 1)), std::string::npos)
        << s.warnings[0].message;
    EXPECT_EQ(s.warnings[0].message.find(secret), std::string::npos) << s.warnings[0].message;
    EXPECT_EQ(s.warnings[0].value.find(secret), std::string::npos);
  }
}

TEST(FleetStoreAuth, RequirepassWithThePasswordInTheUrlTheEnvironmentOrAFile) {
  private_server server({"--requirepass", secret});
  NEEDS_SERVER(server);
  temp_dir dir;
  const fs::path file = dir.path / "password";
  std::ofstream(file) << secret << "\n";
  const std::string model = unique_model("requirepass");
  const child_run in_url = use_store(server.url(":" + secret + "@"), model + " url", {}, "text");
  EXPECT_EQ(in_url.code, 0) << in_url.log;
  const child_run in_env =
      use_store(server.url(), model + " env", {{"LAUNCHFIT_REDIS_PASSWORD", secret}}, "json");
  EXPECT_EQ(in_env.code, 0) << in_env.log;
  const child_run in_file =
      use_store(server.url(), model + " file", {{"LAUNCHFIT_REDIS_PASSWORD_FILE", file.string()}}, "text");
  EXPECT_EQ(in_file.code, 0) << in_file.log;
  for (const auto* r : {&in_url, &in_env, &in_file}) EXPECT_EQ(r->log.find(secret), std::string::npos);
}

TEST(FleetStoreAuth, AnAclUserAllowedOnlyTheListedCommandsSuffices) {
  private_server server({"--requirepass", "admin-" + secret});
  NEEDS_SERVER(server);
  {
    launchfit_test::raw_redis admin("127.0.0.1", server.port());
    ASSERT_EQ(admin.command({"AUTH", "admin-" + secret}).text, "OK");
    ASSERT_EQ(admin.command(acl_user).text, "OK");
  }
  const std::string model = unique_model("acl");
  const child_run r = use_store(server.url("lf:" + secret + "@") + "/2", model, {}, "json");
  EXPECT_EQ(r.code, 0) << r.log;  // any other command would have answered NOPERM and killed the store
  EXPECT_EQ(r.log.find(secret), std::string::npos);
  // The tools too: list and push with the user.
  temp_dir dir;
  const std::string tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos/launchfit-plans";
  NEEDS_BUILT_TOOL(tool);
  const std::string url = server.url("lf:" + secret + "@") + "/2";
  const auto out = dir.path / "out", err = dir.path / "err";
  const auto run = [&](const std::string& args) {
    const int status =
        std::system(("'" + tool + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'").c_str());
    std::ifstream o(out), e(err);
    const std::string text =
        std::string(std::istreambuf_iterator<char>(o), std::istreambuf_iterator<char>()) +
        std::string(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find(secret), std::string::npos) << args;
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
  };
  const auto listed = run("list '" + url + "'");
  EXPECT_EQ(listed.first, 0) << listed.second;
  EXPECT_NE(listed.second.find("redis://lf:***@"), std::string::npos) << listed.second;
  for (const std::string json_command : {"list --json", "show --json", "check --json", "stats --json"}) {
    const auto listed_json = run(json_command + " '" + url + "'");
    EXPECT_LE(listed_json.first, 1) << json_command << ": " << listed_json.second;
    EXPECT_NE(listed_json.second.find("redis://lf:***@"), std::string::npos) << listed_json.second;
  }
  const auto pulled = run("pull '" + url + "' '" + (dir.path / "plans.json").string() + "'");
  EXPECT_EQ(pulled.first, 0) << pulled.second;
  const auto pushed = run("push '" + (dir.path / "plans.json").string() + "' '" + url + "'");
  EXPECT_EQ(pushed.first, 0) << pushed.second;
}

// A wrong or missing password: one warning naming the store (its password as ***), the store off for the
// process, the password in no line of the log, text or JSON, nor in a tool's output.
TEST(FleetStoreAuth, AWrongOrMissingPasswordIsOneWarningAndNeverShown) {
  private_server server({"--requirepass", secret});
  NEEDS_SERVER(server);
  const std::string model = unique_model("wrongpass");
  for (const char* format : {"text", "json"}) {
    const child_run wrong = use_store(server.url("lf:wrong-" + secret + "@"), model, {}, format);
    EXPECT_EQ(wrong.code, 1) << wrong.log;
    EXPECT_EQ(wrong.log.find(secret), std::string::npos) << wrong.log;
    EXPECT_NE(wrong.log.find("redis://lf:***@127.0.0.1"), std::string::npos) << wrong.log;
    EXPECT_NE(wrong.log.find("WRONGPASS"), std::string::npos) << wrong.log;
    const child_run none = use_store(server.url(), model, {}, format);
    EXPECT_EQ(none.code, 1) << none.log;
    EXPECT_NE(none.log.find("NOAUTH"), std::string::npos) << none.log;
    // One warning per store (the child makes two stores, each warns once).
    for (const auto* r : {&wrong, &none}) {
      std::size_t warnings = 0;
      for (std::size_t at = r->log.find("not used again"); at != std::string::npos;
           at = r->log.find("not used again", at + 1))
        ++warnings;
      EXPECT_EQ(warnings, 2u) << r->log;
    }
    // A URL refused for another reason shows no password either.
    const child_run refused = use_store("redis://lf:" + secret + "@127.0.0.1:99999", model, {}, format);
    EXPECT_EQ(refused.code, 3) << refused.log;
    EXPECT_EQ(refused.log.find(secret), std::string::npos) << refused.log;
    EXPECT_NE(refused.log.find("redis://lf:***@"), std::string::npos) << refused.log;
  }
  temp_dir dir;
  const std::string tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos/launchfit-plans";
  NEEDS_BUILT_TOOL(tool);
  for (const std::string args :
       {"list '" + server.url("lf:wrong-" + secret + "@") + "'",
        "stats '" + server.url("u:" + secret + "@") + "'", "list 'redis://u:" + secret + "@127.0.0.1:99999'",
        // A bad command line: CLI11 quotes the argument it did not expect.
        "list --no-such-option='redis://u:" + secret + "@127.0.0.1:1' plans.json"}) {
    const std::string out = (dir.path / "out").string();
    const int status = std::system(("'" + tool + "' " + args + " >'" + out + "' 2>&1").c_str());
    std::ifstream in(out);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(WEXITSTATUS(status), 0) << args;
    EXPECT_EQ(text.find(secret), std::string::npos) << text;
    EXPECT_NE(text.find(":***@"), std::string::npos) << text;
  }
}

// A plan this node measured under contention is provisional: a plan measured clean in the store serves
// instead and takes its place in the file; after the store is emptied the file serves the clean plan.
TEST(FleetStore, AProvisionalPlanGivesWayToACleanOneFromTheStore) {
  NEEDS_REDIS(url);
  temp_dir dir;
  ld::remote_url db = *url;
  db.db = 12;
  db.text = "redis://" + url->host + ":" + std::to_string(url->port) + "/12";
  const std::string model = unique_model("provisional");
  const std::string path = (dir.path / "plans.json").string();
  lf::stored_key theirs = key(model, 1);
  theirs.device_uuid = "GPU-a-quiet-node";
  write_one(db, entry(theirs, 128, measured(0.9)));
  lf::stored_key mine = key(model, 1);
  mine.device_uuid = "GPU-this-busy-node";
  ld::stored_entry local = entry(mine, 512, measured(0.5, 0.4, false));
  std::ofstream(path) << ld::serialize_cache_file({local});
  const auto served = [&](const char* match) {
    return in_child([&] {
      ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
      lf::set_cache_file(path, lf::cache_file_mode::read_write);
      lf::set_remote_store(db.text);
      const std::optional<lf::plan> p = lf::find_stored_plan(mine);
      CHECK_IN_CHILD(p && p->block_threads == 128);
      CHECK_IN_CHILD(p->match == match);
      CHECK_IN_CHILD(lf::flush_cache_file(10000));
      return 0;
    });
  };
  EXPECT_EQ(served("remote"), 0);
  raw_redis raw(db);
  ASSERT_EQ(raw.call({"FLUSHDB"}), "OK");
  EXPECT_EQ(served("cache-file"), 0);  // this GPU's own entry now, the clean plan
  std::ifstream in(path);
  const ld::cache_file_contents c =
      ld::parse_cache_file(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  ASSERT_EQ(c.entries.size(), 1u) << c.problem;
  ASSERT_TRUE(c.entries[0].measurement);
  EXPECT_TRUE(c.entries[0].measurement->clean);
  EXPECT_EQ(c.entries[0].origin, db.text);
  // Without a store, the provisional plan serves.
  std::ofstream(path) << ld::serialize_cache_file({local});
  EXPECT_EQ(in_child([&] {
              lf::set_cache_file(path, lf::cache_file_mode::read_write);
              lf::close_remote_store();
              const std::optional<lf::plan> p = lf::find_stored_plan(mine);
              CHECK_IN_CHILD(p && p->block_threads == 512 && p->match == "cache-file");
              return 0;
            }),
            0);
}

// ---- hostile values and what operators see ---------------------------------------------------------------

// The value of `e` with `from` replaced by `to`: a measurement forged by whoever can write the store.
std::string forged_value(const ld::stored_entry& e, const std::string& from, const std::string& to) {
  std::string v = ld::remote_value(e);
  const auto at = v.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) v.replace(at, from.size(), to);
  return v;
}

const std::vector<std::pair<std::string, std::string>> forgeries = {
    {"\"time_ms\":0.5", "\"time_ms\":1e-9"},  // made to win every comparison
    {"\"time_ms\":0.5", "\"time_ms\":-0.5"}, {"\"spread\":0.01", "\"spread\":-1"},  // a negative noise band
    {"\"trials\":32", "\"trials\":0"},       {"\"trials\":32", "\"trials\":99999999999"},
    {"\"clean\":true", "\"clean\":\"yes\""}, {"\"conditions\":\"\"", "\"conditions\":\"\\u001b[2Jcleared\""},
    {"\"epoch\":4", "\"epoch\":-4"},
};

// Values whose measurement is forged are refused (counted, one warning) and never serve; a valid writer
// replaces each, whatever it claims.
TEST(FleetStore, ForgedMeasurementsAreRefusedAndCounted) {
  NEEDS_REDIS(url);
  raw_redis raw(*url);
  const std::string model = unique_model("forged");
  for (std::size_t i = 0; i < forgeries.size(); ++i) {
    ld::stored_entry e = entry(key(model, static_cast<int>(i)), 256, measured(0.5));
    e.epoch = 4;
    ASSERT_EQ(
        raw.call({"SET", ld::remote_key(e.key), forged_value(e, forgeries[i].first, forgeries[i].second)}),
        "OK");
  }
  launchfit_test::captured_log log(spdlog::level::debug);
  ld::redis_store s(options(*url));
  for (std::size_t i = 0; i < forgeries.size(); ++i)
    EXPECT_TRUE(s.find(key(model, static_cast<int>(i))).empty()) << forgeries[i].second;
  EXPECT_EQ(s.statistics().refused, forgeries.size());
  EXPECT_FALSE(s.statistics().dead);
  EXPECT_EQ(log.warnings(), 1) << log.text();
  EXPECT_EQ(log.text().find('\x1b'), std::string::npos);  // nothing forged reaches the log unescaped
  for (std::size_t i = 0; i < forgeries.size(); ++i)
    s.put(entry(key(model, static_cast<int>(i)), 128, measured(5.0)));
  ASSERT_TRUE(s.flush(10000));
  EXPECT_EQ(s.statistics().replaced, forgeries.size());
}

TEST(FleetStore, ToolsShowOriginEpochMeasurementAndStats) {
  NEEDS_REDIS(url);
  // A database of its own: stats counts every plan in it.
  ld::remote_url db = *url;
  db.db = 13;
  db.text = "redis://" + url->host + ":" + std::to_string(url->port) + "/13";
  raw_redis raw(db);
  ASSERT_EQ(raw.call({"FLUSHDB"}), "OK");
  const std::string model = unique_model("stats");
  write_one(db, entry(key(model, 1), 256, measured(1.0)));
  write_one(db, entry(key(model, 1), 128, measured(0.5)));  // epoch 1
  write_one(db, entry(key(model, 2), 256));                 // static
  ld::stored_entry unclean = entry(key(model, 3), 64, measured(0.2, 0.3, false));
  ASSERT_EQ(raw.call({"SET", ld::remote_key(unclean.key), ld::remote_value(unclean)}), "OK");
  ld::stored_entry bad = entry(key(model, 4), 64, measured(0.5));
  ASSERT_EQ(raw.call({"SET", ld::remote_key(bad.key), forged_value(bad, "\"trials\":32", "\"trials\":0")}),
            "OK");
  const std::string lease = "launchfit:lease:" + ld::remote_key(key(model, 5)).substr(10);
  ASSERT_EQ(raw.call({"SET", lease, "node7:4242:00000000deadbeef", "PX", "60000"}), "OK");

  temp_dir dir;
  const std::string tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos/launchfit-plans";
  NEEDS_BUILT_TOOL(tool);
  const auto run = [&](const std::string& args) {
    const std::string out = (dir.path / "out").string();
    const int status = std::system(("'" + tool + "' " + args + " >'" + out + "' 2>&1").c_str());
    std::ifstream in(out);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                          std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  };
  const auto listed = run("list " + db.text);
  EXPECT_EQ(listed.first, 0) << listed.second;
  EXPECT_NE(listed.second.find("0.5 ms \u00b11.0%, 32 trials"), std::string::npos) << listed.second;
  EXPECT_NE(listed.second.find(db.text + " epoch 1"), std::string::npos) << listed.second;
  EXPECT_NE(listed.second.find("not clean: other processes on the GPU"), std::string::npos) << listed.second;
  const auto json_list = run("list --json " + db.text);
  EXPECT_NE(json_list.second.find("\"epoch\": 1"), std::string::npos) << json_list.second;
  EXPECT_NE(json_list.second.find("\"origin\": \"" + db.text + "\""), std::string::npos) << json_list.second;

  const auto stats = run("stats " + db.text);
  EXPECT_EQ(stats.first, 0) << stats.second;
  EXPECT_NE(stats.second.find("3 entries, 1 refused"), std::string::npos) << stats.second;
  EXPECT_NE(stats.second.find("1 tuning lease"), std::string::npos) << stats.second;
  EXPECT_NE(stats.second.find("node7:4242:00000000deadbeef"), std::string::npos) << stats.second;
  const auto js = run("stats --json " + db.text);
  ASSERT_EQ(js.first, 0) << js.second;
  const nlohmann::json j = nlohmann::json::parse(js.second, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << js.second;
  EXPECT_EQ(j["refused"], 1);
  EXPECT_EQ(j["lease_count"], 1);
  ASSERT_EQ(j["models"].size(), 1u);
  EXPECT_EQ(j["models"][0]["plans"], 3);
  EXPECT_EQ(j["models"][0]["tuned"], 2);
  EXPECT_EQ(j["models"][0]["not_clean"], 1);
  EXPECT_EQ(j["models"][0]["static"], 1);
  EXPECT_EQ(j["leases"][0]["plan_key"], ld::remote_key(key(model, 5)));
  EXPECT_GT(j["leases"][0]["ttl_ms"].get<long long>(), 0);
  // push replaces a plan only with one measured better beyond noise, and says so.
  {
    std::ofstream f(dir.path / "better.json");
    f << ld::serialize_cache_file({entry(key(model, 1), 64, measured(0.2)), entry(key(model, 2), 64)});
  }
  const auto pushed = run("push '" + (dir.path / "better.json").string() + "' " + db.text);
  EXPECT_EQ(pushed.first, 0) << pushed.second;
  EXPECT_NE(
      pushed.second.find("0 written, 1 already stored, 0 refused, 0 invalid values replaced, 1 replaced "
                         "by plans measured better"),
      std::string::npos)
      << pushed.second;
  EXPECT_EQ(stored(raw, key(model, 1))->epoch, 2u);
  EXPECT_EQ(stored(raw, key(model, 2))->plan.block_threads, 256);  // unmeasured: the first stays
  // A store that cannot be reached: exit 3, as every store command.
  EXPECT_EQ(run("stats redis://127.0.0.1:1").first, 3);
  ASSERT_EQ(raw.call({"FLUSHDB"}), "OK");
}

}  // namespace
