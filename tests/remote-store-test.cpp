// SPDX-License-Identifier: MIT
// The remote plan store (cache.hpp, "remote plan store"; lib/remote_store.hpp): its URL, keys and values
// without a server, then a real redis-server (LAUNCHFIT_TEST_REDIS=redis://127.0.0.1:PORT, started by
// tests/run.sh): entries shared between stores and processes, the first writer winning, 16 processes
// writing at once, a forked child on its own connection, and launchfit-plans push / pull / list / check.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "captured_log.hpp"
#include "fault/bounded.hpp"
#include "launchfit/cache.hpp"
#include "raw_redis.hpp"
#include "remote_store.hpp"
#include "settings.hpp"
#include "store/future_stamps.hpp"
#include "store/kv_scheme.hpp"
#include "store/plan_tools.hpp"
#include "store/remote_layer.hpp"
#include "store/slow_store.hpp"
#include "store_samples.hpp"
#include "tool_run.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;
using launchfit_test::captured_log;
using launchfit_test::has;

namespace {

const std::string policy_text = launchfit_test::sample_policy;

lf::stored_key key(const std::string& model, int kernel, std::uint64_t bucket = 0) {
  return launchfit_test::sample_key(model, kernel, bucket);
}
using launchfit_test::sample_plan;

ld::stored_entry entry(const lf::stored_key& k, int block, std::uint64_t at_ms = 1700000000000) {
  return ld::stored_entry{k, sample_plan(block), at_ms, 0};
}

std::string unique_model(const std::string& what) { return launchfit_test::unique_model("Test GPU", what); }

// A few commands over a plain socket, independent of the library (tests/raw_redis.hpp), opened from the
// store's URL; call() answers the reply's first line ("+OK", ":42", "$-1", "-ERR ...") and, for a bulk
// string, its text.
class raw_redis : public launchfit_test::raw_redis {
 public:
  explicit raw_redis(const ld::remote_url& url) : launchfit_test::raw_redis(url.host, url.port, url.db) {}
  std::string call(const std::vector<std::string>& args, std::string* bulk = nullptr) {
    const launchfit_test::redis_reply r = command(args);
    if (r.type == 0) return "";
    if (r.type != '$')
      return std::string(1, r.type) + (r.type == '*' ? std::to_string(r.elements.size()) : r.text);
    if (r.nil) return "$-1";
    if (bulk) *bulk = r.text;
    return "$" + std::to_string(r.text.size());
  }
};

using launchfit_test::test_connect_ms;
using launchfit_test::test_op_ms;
ld::remote_options options(const ld::remote_url& url) { return launchfit_test::test_store_options(url); }

const std::string tool = std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../demos/launchfit-plans";

struct outcome {
  int exit_code = -1;
  std::string out;  // stdout, then stderr
};

outcome run_tool(const std::string& args) {
  const launchfit_test::tool_outcome o = launchfit_test::run_tool(tool, args);
  return {o.exit_code, o.out + o.err};
}

}  // namespace

// ---- URL ------------------------------------------------------------------------------------------------

TEST(RemoteUrl, AcceptsHostPortAndDatabase) {
  std::string why;
  auto u = ld::parse_remote_url("redis://127.0.0.1:6380", why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 0);
  u = ld::parse_remote_url("redis://plans.cluster.local/3", why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->host, "plans.cluster.local");
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->db, 3);
  u = ld::parse_remote_url("redis://[::1]:7000/2", why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 7000);
  EXPECT_EQ(u->db, 2);
}

TEST(RemoteUrl, RefusesWhatIsNotRedisHostPortDb) {
  const std::pair<std::string, std::string> bad[] = {
      {"redis://host:0", "port"},
      {"redis://host:65536", "port"},
      {"redis://host:63a9", "port"},
      {"redis://host:", "empty port"},
      {"rediss://host:6379", "unknown scheme"},
      {"http://host:6379", "unknown scheme"},
      {"host:6379", "not a URL"},
      {"redis://" + std::string(300, 'h') + ":1", "longer than 256"},
      {"redis://host:6379\n", "control character"},
      {"redis://ho\x1bst:6379", "control character"},
      {"redis://user:@host:6379", "empty password"},
      {"redis://@host:6379", "empty user"},
      {"redis://user:%zz@host:6379", "hex digits"},
      {"redis://:6379", "no host"},
      {"redis://host:6379/x", "database"},
      {"redis://host:6379/1/2", "database"},
      {"redis://::1:6379", "brackets"},
      {"redis://host:6379?db=1", "query"},
  };
  for (const auto& [text, because] : bad) {
    std::string why;
    EXPECT_FALSE(ld::parse_remote_url(text, why)) << text;
    EXPECT_TRUE(has(why, because)) << text << ": " << why;
  }
}

// ---- keys and values ------------------------------------------------------------------------------------

// A key that omits what matters gives silently wrong plans: every field of the model, the driver, the
// kernel, the policy text (with its launch options), the smem rule and the bucket changes the key; the
// GPU's UUID does not (plans are shared by the GPUs of one model).
TEST(RemoteKey, HoldsEverythingAPlanDependsOnButTheGpu) {
  const lf::stored_key k = key("NVIDIA H200", 1, 4);
  const std::string base = ld::remote_key(k);
  EXPECT_TRUE(ld::is_remote_key(base)) << base;
  EXPECT_EQ(base.rfind("launchfit:v1:f1:", 0), 0u);
  EXPECT_EQ(base.substr(0, base.size() - 16), ld::remote_model_prefix(k));
  auto changed = [&](auto change) {
    lf::stored_key c = k;
    change(c);
    return ld::remote_key(c);
  };
  EXPECT_EQ(changed([](auto& c) { c.device_uuid = "GPU-ffffffff-0000-1111-2222-333344445555"; }), base);
  EXPECT_NE(changed([](auto& c) { c.device_name = "NVIDIA H100"; }), base);
  EXPECT_NE(changed([](auto& c) { c.cc = 100; }), base);
  EXPECT_NE(changed([](auto& c) { c.sm_count = 66; }), base);
  EXPECT_NE(changed([](auto& c) { c.l2_bytes = 1; }), base);
  EXPECT_NE(changed([](auto& c) { c.driver_version = 12090; }), base);
  EXPECT_NE(changed([](auto& c) { c.device_uuid = "MIG-0000"; }), base);  // a MIG slice is its own model
  EXPECT_NE(changed([](auto& c) { c.kernel += "x"; }), base);
  EXPECT_NE(changed([](auto& c) { c.policy += " cooperative"; }), base);
  EXPECT_NE(changed([](auto& c) { c.smem_rule = "bytes=1024"; }), base);
  EXPECT_NE(changed([](auto& c) { c.bucket = 5; }), base);
  // The model's prefix is shared by its kernels, so one SCAN reads them all.
  EXPECT_EQ(ld::remote_model_prefix(key("NVIDIA H200", 2)), ld::remote_model_prefix(k));
  // An entry of an older writer names no model: used for its own GPU only, never shared.
  EXPECT_EQ(changed([](auto& c) { c.device_name.clear(); }), "");
  EXPECT_FALSE(ld::is_remote_key(base + "0"));
  EXPECT_FALSE(ld::is_remote_key("launchfit:v1:f2:" + base.substr(16)));
}

TEST(RemoteValue, RoundTripsAsAOneEntryPlanFileAndIsValidatedLikeOne) {
  const ld::stored_entry e = entry(key("NVIDIA H200", 1), 128);
  const std::string k = ld::remote_key(e.key);
  const std::string value = ld::remote_value(e);
  EXPECT_EQ(value, ld::serialize_cache_file({e}));
  EXPECT_TRUE(has(value, ld::cache_file_line(e)));
  std::string why;
  const auto back = ld::parse_remote_value(value, k, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->plan.block_threads, 128);
  EXPECT_EQ(back->plan.match, "remote");
  EXPECT_EQ(back->key.kernel, e.key.kernel);
  EXPECT_EQ(back->stored_at_ms, e.stored_at_ms);

  // A valid entry under another kernel's key (a hash collision, or a copy) is never served.
  EXPECT_FALSE(ld::parse_remote_value(value, ld::remote_key(key("NVIDIA H200", 2)), why));
  EXPECT_TRUE(has(why, "not the one it is stored under")) << why;

  // Another format version, two entries, garbage, too large.
  std::string v2 = value;
  v2.replace(v2.find("\"version\": 1"), 12, "\"version\": 2");
  EXPECT_FALSE(ld::parse_remote_value(v2, k, why));
  EXPECT_TRUE(has(why, "format version 2")) << why;
  EXPECT_FALSE(ld::parse_remote_value(ld::serialize_cache_file({e, e}), k, why));
  EXPECT_FALSE(ld::parse_remote_value("{\"format\": \"launchfit-plan-cache\", \"vers", k, why));
  EXPECT_FALSE(ld::parse_remote_value("", k, why));
  EXPECT_FALSE(ld::parse_remote_value(std::string(ld::remote_max_value_bytes + 1, ' '), k, why));
  EXPECT_TRUE(has(why, "above the limit")) << why;
}

// What the launch requires is the key's: a plan claiming cooperative, PDL or a cluster under a plain key
// (or the reverse) is refused.
TEST(RemoteValue, AForgedPlanThatChangesTheLaunchOptionsIsRefused) {
  std::string why;
  auto refused = [&](ld::stored_entry e) {
    return !ld::parse_remote_value(ld::remote_value(e), ld::remote_key(e.key), why);
  };
  ld::stored_entry e = entry(key("NVIDIA H200", 1), 128);
  e.plan.options.cooperative = true;
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "cooperative")) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.plan.options.programmatic = true;
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "PDL")) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.plan.options.cluster = lf::dims{2, 1, 1};
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "cluster")) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.key.policy = std::string(launchfit_test::sample_policy) + " cooperative work=items";  // as launchfit writes it
  EXPECT_TRUE(refused(e));  // the key asks for cooperative, the plan is not
  e.plan.options.cooperative = true;
  EXPECT_FALSE(refused(e)) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.plan.policy = "fixed(block=128,grid=0)";
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "names policy")) << why;
}

// The store's TTL is the settings' LAUNCHFIT_REMOTE_TTL (read once, with the settings' one number parser):
// garbage falls back to 30 days with one warning, which launchfit-plans prints too.
TEST(RemoteTtl, GarbageFallsBackToThirtyDaysWithAWarning) {
  LAUNCHFIT_EXPECT_BOUNDED(
      5000, ([] {
        ::unsetenv("LAUNCHFIT_REMOTE_TTL");
        std::string warning;
        ld::settings_reload_for_tests();
        CHECK_IN_CHILD(ld::plan_tools::ttl_from_env(warning) == 30u * 24 * 3600);
        CHECK_IN_CHILD(warning.empty());
        ::setenv("LAUNCHFIT_REMOTE_TTL", "3600", 1);
        ld::settings_reload_for_tests();
        CHECK_IN_CHILD(ld::plan_tools::ttl_from_env(warning) == 3600u);
        CHECK_IN_CHILD(warning.empty());
        for (const char* bad : {"0", "-5", "1h", "99999999999", " 6 0", "6\n0"}) {
          warning.clear();
          ::setenv("LAUNCHFIT_REMOTE_TTL", bad, 1);
          ld::settings_reload_for_tests();
          CHECK_IN_CHILD(ld::plan_tools::ttl_from_env(warning) == ld::remote_default_ttl_s);
          CHECK_IN_CHILD(has(warning, "LAUNCHFIT_REMOTE_TTL="));
          CHECK_IN_CHILD(warning.find('\n') == std::string::npos);
        }
        return 0;
      }));
}

// ---- when a live store is too slow to keep ---------------------------------------------------------------

// Three exchanges in a row over half the operation bound drop a store; a fast one between starts again.
TEST(SlowStore, ThreeSlowAnswersInARowDropTheStore) {
  using std::chrono::milliseconds;
  ld::slow_store_rule rule(milliseconds(200));
  const auto t0 = ld::slow_store_rule::clock::time_point{} + std::chrono::hours(1);
  EXPECT_EQ(rule.record(milliseconds(150), t0), "");
  EXPECT_EQ(rule.record(milliseconds(190), t0 + milliseconds(200)), "");
  EXPECT_EQ(rule.record(milliseconds(5), t0 + milliseconds(400)), "");  // a fast one: the count starts again
  EXPECT_EQ(rule.record(milliseconds(101), t0 + milliseconds(600)), "");
  EXPECT_EQ(rule.record(milliseconds(199), t0 + milliseconds(800)), "");
  const std::string why = rule.record(milliseconds(120), t0 + milliseconds(1000));
  EXPECT_TRUE(has(why, "3 answers in a row took more than 100 ms")) << why;
}

// More than 1 s spent in exchanges within 10 s drops a store, even when no answer is over half the bound;
// the same time spread over longer is kept.
TEST(SlowStore, MoreThanOneSecondWithinTenSecondsDropsTheStore) {
  using std::chrono::milliseconds;
  const auto t0 = ld::slow_store_rule::clock::time_point{} + std::chrono::hours(1);
  ld::slow_store_rule spread(milliseconds(200));
  for (int i = 0; i < 40; ++i)  // 90 ms every 1.1 s: ~820 ms in any 10 s
    EXPECT_EQ(spread.record(milliseconds(90), t0 + milliseconds(1100 * i)), "") << i;
  ld::slow_store_rule dense(milliseconds(200));
  std::string why;
  int answers = 0;
  while (why.empty() && answers < 100) {  // 90 ms every 0.5 s
    why = dense.record(milliseconds(90), t0 + milliseconds(500 * answers));
    ++answers;
  }
  EXPECT_EQ(answers, 12) << why;  // 12 x 90 ms = 1,080 ms within 6 s
  EXPECT_TRUE(has(why, "more than 1000 ms within 10 s")) << why;
}

// Exchanges no launching thread waits for (lease polls of the background queue, every 50 ms while a key is
// watched) are held to the in-a-row rule only: a store 6 ms away polled 20 times a second spends an eighth of its
// time answering them, which is no reason to drop it; three slow answers in a row still are.
TEST(SlowStore, PollsOfTheBackgroundQueueSpendNoLookupBudget) {
  using std::chrono::milliseconds;
  const auto t0 = ld::slow_store_rule::clock::time_point{} + std::chrono::hours(1);
  ld::slow_store_rule polled(milliseconds(200));
  for (int i = 0; i < 1000; ++i)  // 6 ms every 50 ms for 50 s
    EXPECT_EQ(polled.record(milliseconds(6), t0 + milliseconds(50 * i), false), "") << i;
  std::string why;
  for (int i = 0; i < 3 && why.empty(); ++i) why = polled.record(milliseconds(150), t0 + milliseconds(60000 + 200 * i), false);
  EXPECT_TRUE(has(why, "3 answers in a row took more than 100 ms")) << why;
  ld::slow_store_rule looked(milliseconds(200));  // the same as lookups: dropped within 10 s
  why.clear();
  int answers = 0;
  while (why.empty() && answers < 1000) why = looked.record(milliseconds(6), t0 + milliseconds(50 * answers++));
  EXPECT_TRUE(has(why, "more than 1000 ms within 10 s")) << answers << " " << why;
}

// ---- configuration --------------------------------------------------------------------------------------

TEST(RemoteConfig, OffByDefault) {
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([] {
                             ::unsetenv("LAUNCHFIT_REMOTE");
                             ld::settings_reload_for_tests();  // the environment is read once per process
                             CHECK_IN_CHILD(ld::remote_layer() == nullptr);
                             CHECK_IN_CHILD(!lf::remote_store_statistics().enabled);
                             CHECK_IN_CHILD(lf::flush_remote_store(10));
                             return 0;
                           }));
}

TEST(RemoteConfig, AMalformedUrlIsRefusedWithOneEscapedWarningAndTheStoreStaysOff) {
  LAUNCHFIT_EXPECT_BOUNDED(
      5000, ([] {
        captured_log log(spdlog::level::debug);
        ::setenv("LAUNCHFIT_REMOTE", "redis://cache\x1b[31m:6379", 1);
        ld::settings_reload_for_tests();  // the environment is read once per process
        CHECK_IN_CHILD(ld::remote_layer() == nullptr);
        CHECK_IN_CHILD(ld::remote_layer() == nullptr);  // read once
        CHECK_IN_CHILD(log.warnings() == 1);
        CHECK_IN_CHILD(has(log.text(), "LAUNCHFIT_REMOTE='redis://cache\\x1b[31m:6379': not redis://"));
        CHECK_IN_CHILD(has(log.text(), "stays off"));
        lf::set_remote_store("redis://cache:99999");
        CHECK_IN_CHILD(ld::remote_layer() == nullptr);
        CHECK_IN_CHILD(log.warnings() == 2);
        CHECK_IN_CHILD(has(log.text(), "port"));
        return 0;
      }));
}

TEST(RemoteConfig, TheEnvironmentTurnsItOnAtFirstUse) {
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([] {
                             ::setenv("LAUNCHFIT_REMOTE", "redis://127.0.0.1:6390/1", 1);
                             ::setenv("LAUNCHFIT_REMOTE_TTL", "soon", 1);
                             ld::settings_reload_for_tests();  // the environment is read once per process
                             captured_log log(spdlog::level::info);  // logs the settings' warnings
                             ld::plan_store_layer* l = ld::remote_layer();
                             CHECK_IN_CHILD(l != nullptr);
                             CHECK_IN_CHILD(std::string(l->name()) == "redis");
                             CHECK_IN_CHILD(ld::remote_layer() == l);
                             CHECK_IN_CHILD(lf::remote_store_statistics().enabled);
                             CHECK_IN_CHILD(log.warnings() == 1);  // the TTL; nothing connects yet
                             CHECK_IN_CHILD(has(log.text(), "LAUNCHFIT_REMOTE_TTL='soon'"));
                             lf::close_remote_store();
                             CHECK_IN_CHILD(ld::remote_layer() == nullptr);
                             CHECK_IN_CHILD(l->find(key("NVIDIA H200", 1)).empty());  // still valid, inert
                             return 0;
                           }));
}

// ---- against a real server ------------------------------------------------------------------------------

TEST(RemoteStore, AnEntryWrittenByOneStoreIsFoundByAnotherAsRemote) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("shared");
  ld::redis_store a(options(*url));
  a.put(entry(key(model, 1, 4), 128));
  a.put(entry(key(model, 1, 64), 256));
  ASSERT_TRUE(a.flush(5000));
  EXPECT_EQ(a.statistics().writes, 2u);

  ld::redis_store b(options(*url));
  const auto found = b.find(key(model, 1, 8));  // any bucket, the nearest first
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].key.bucket, 4u);
  EXPECT_EQ(found[0].plan.block_threads, 128);
  EXPECT_EQ(found[0].plan.match, "remote");
  EXPECT_EQ(found[1].plan.block_threads, 256);
  EXPECT_TRUE(b.find(key(model, 2)).empty());  // another kernel
  lf::stored_key other_gpu = key(model, 1, 64);
  other_gpu.device_uuid = "GPU-99999999-0000-1111-2222-333344445555";  // another GPU of the model
  EXPECT_EQ(b.find(other_gpu).size(), 2u);
  lf::stored_key other_driver = key(model, 1, 64);
  other_driver.driver_version = 12090;
  EXPECT_TRUE(b.find(other_driver).empty());
  const lf::remote_store_stats s = b.statistics();
  EXPECT_EQ(s.loaded, 2u);  // read once, in bulk, by the first lookup of the model
  EXPECT_EQ(s.lookups, 4u);
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_FALSE(s.dead);

  // Written with SET NX EX: it expires.
  raw_redis raw(*url);
  const std::string ttl = raw.call({"TTL", ld::remote_key(key(model, 1, 4))});
  ASSERT_EQ(ttl.substr(0, 1), ":") << ttl;
  const long left = std::stol(ttl.substr(1));
  EXPECT_GT(left, long(ld::remote_default_ttl_s) - 60);
  EXPECT_LE(left, long(ld::remote_default_ttl_s));
}

// A value whose stored_at lies a day ahead is served (its plan passed every check) but read as of unknown
// age: the remote layer counts it in its stats and says the first of the process once, naming the store and
// the key.
TEST(RemoteStore, AStampFromTheFutureIsCountedInTheLayersStatsAndNamed) {
  NEEDS_REDIS(url);
  ld::reset_future_stamp_warning_for_tests();
  captured_log log(spdlog::level::warn);
  const std::string model = unique_model("future stamp");
  const std::uint64_t now_ms =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  const lf::stored_key k = key(model, 1);
  raw_redis raw(*url);
  ASSERT_EQ(
      raw.call({"SET", ld::remote_key(k), ld::remote_value(entry(k, 128, now_ms + 24ull * 3600 * 1000))}),
      "+OK");
  ld::redis_store store(options(*url));
  const std::uint64_t before = store.stats().future_stamps;
  const auto found = store.find(k);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].stored_at_ms, 0u);  // of unknown age
  EXPECT_EQ(store.stats().future_stamps, before + 1);
  EXPECT_EQ(log.warnings(), 1u) << log.text();
  EXPECT_TRUE(has(log.text(), "remote plan store " + url->text + " key " + ld::remote_key(k) +
                                  ": entry 0 (kernel _Z6kernel1Pf): 'stored_at'"))
      << log.text();
}

TEST(RemoteStore, TheFirstWriterWins) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("first");
  {
    ld::redis_store a(options(*url));
    a.put(entry(key(model, 1), 128));
    ASSERT_TRUE(a.flush(5000));
  }
  ld::redis_store c(options(*url));
  c.put(entry(key(model, 1), 512));
  ASSERT_TRUE(c.flush(5000));
  EXPECT_EQ(c.statistics().writes, 0u);
  EXPECT_EQ(c.statistics().already_stored, 1u);
  ld::redis_store b(options(*url));
  const auto found = b.find(key(model, 1));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].plan.block_threads, 128);
}

TEST(RemoteStore, TheTtlIsTheStoresAndAFullQueueDropsAndCounts) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("ttl");
  ld::remote_options o = options(*url);
  o.ttl_s = 1234;
  o.queue_max = 4;
  ld::redis_store s(o);
  for (int i = 0; i < 400; ++i) s.put(entry(key(model, i), 128));
  EXPECT_FALSE(s.flush(5000));  // some were not written
  EXPECT_TRUE(s.flush(10));     // reported once
  const lf::remote_store_stats st = s.statistics();
  EXPECT_GT(st.write_drops, 0u);
  EXPECT_EQ(st.writes + st.already_stored + st.write_drops, 400u);
  raw_redis raw(*url);
  const std::string ttl = raw.call({"TTL", ld::remote_key(key(model, 0))});
  ASSERT_EQ(ttl.substr(0, 1), ":") << ttl;
  EXPECT_GT(std::stol(ttl.substr(1)), 1200);
  EXPECT_LE(std::stol(ttl.substr(1)), 1234);
}

// Process A stores a plan and exits normally (its queue is flushed at exit); process B, with nothing in
// memory and no file, finds A's plan in Redis.
TEST(RemoteStore, ProcessBReadsTheProcessAPlanWrittenAtExit) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("a-b");
  const std::string text = url->text;
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             const pid_t a = ::fork();
                             if (a == 0) {
                               ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
                               lf::set_remote_store(text);
                               ld::remote_layer()->put(entry(key(model, 7), 96));
                               std::exit(0);  // no flush: the exit handler writes it
                             }
                             int status = 0;
                             ::waitpid(a, &status, 0);
                             CHECK_IN_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                             ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
                             lf::set_remote_store(text);
                             const auto found = ld::remote_layer()->find(key(model, 7));
                             CHECK_IN_CHILD(found.size() == 1);
                             CHECK_IN_CHILD(found[0].plan.block_threads == 96);
                             CHECK_IN_CHILD(found[0].plan.match == "remote");
                             CHECK_IN_CHILD(lf::remote_store_statistics().hits == 1);
                             return 0;
                           }));
}

// 16 processes write 50 entries each, plus 5 keys all of them write, at once: every entry is readable
// afterwards, each validates (none torn), and each shared key holds one writer's plan.
TEST(RemoteStore, SixteenProcessesWritingAtOnceLoseNothingAndTearNothing) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("16x50");
  const std::string text = url->text;
  constexpr int processes = 16, each = 50, shared = 5;
  std::vector<pid_t> pids;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
      lf::set_remote_store(text);
      ld::plan_store_layer* l = ld::remote_layer();
      for (int i = 0; i < each; ++i) l->put(entry(key(model, 1000 * (p + 1) + i), 32 * (1 + (p + i) % 32)));
      for (int i = 0; i < shared; ++i) l->put(entry(key(model, i), 32 * (1 + p)));
      const bool flushed = lf::flush_remote_store(20000);
      const lf::remote_store_stats s = lf::remote_store_statistics();
      _exit(flushed && s.writes + s.already_stored == each + shared && s.failures == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer " << pid;
  }
  const ld::plan_tools::listing all =
      ld::plan_tools::list_entries(url->text, {}, ld::remote_model_prefix(key(model, 0)));
  EXPECT_FALSE(all.failed) << all.failed.text;
  EXPECT_EQ(all.refused, 0u) << (all.problems.empty() ? ""
                                                      : all.problems[0].key + ": " + all.problems[0].why);
  EXPECT_EQ(all.entries.size(), std::size_t(processes * each + shared));
  ld::redis_store reader(options(*url));
  for (int p = 0; p < processes; ++p) {
    for (int i = 0; i < each; ++i) {
      const auto found = reader.find(key(model, 1000 * (p + 1) + i));
      ASSERT_EQ(found.size(), 1u) << p << "/" << i;
      EXPECT_EQ(found[0].plan.block_threads, 32 * (1 + (p + i) % 32)) << p << "/" << i;
    }
  }
  for (int i = 0; i < shared; ++i) {
    const auto found = reader.find(key(model, i));
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].plan.block_threads % 32, 0);
  }
  EXPECT_EQ(reader.statistics().refused, 0u);
}

// A forked child never talks on its parent's socket (their replies would interleave): it opens its own
// connection, and both write at once without losing an entry.
TEST(RemoteStore, AForkedChildUsesItsOwnConnection) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("fork");
  const std::string text = url->text;
  LAUNCHFIT_EXPECT_BOUNDED(20000, ([&] {
                             ld::set_remote_bounds_for_tests(test_connect_ms, test_op_ms);
                             lf::set_remote_store(text);
                             ld::plan_store_layer* l = ld::remote_layer();
                             l->put(entry(key(model, 0), 64));
                             CHECK_IN_CHILD(lf::flush_remote_store(5000));
                             CHECK_IN_CHILD(l->find(key(model, 0)).size() == 1);  // both connections live
                             const pid_t child = ::fork();
                             const int base = child == 0 ? 100 : 200;
                             for (int i = 0; i < 40; ++i) {
                               l->put(entry(key(model, base + i), 128));
                               l->find(key(model, 5000 + base + i));  // a round trip each
                             }
                             const bool flushed = lf::flush_remote_store(10000);
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             if (child == 0) _exit(flushed && !s.dead && s.failures == 0 ? 0 : 1);
                             int status = 0;
                             ::waitpid(child, &status, 0);
                             CHECK_IN_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                             CHECK_IN_CHILD(flushed && !s.dead && s.failures == 0);
                             CHECK_IN_CHILD(s.writes == 41);
                             ld::redis_store reader(options(*ld::parse_remote_url(text, *new std::string)));
                             for (int i = 0; i < 40; ++i) {
                               CHECK_IN_CHILD(reader.find(key(model, 100 + i)).size() == 1);
                               CHECK_IN_CHILD(reader.find(key(model, 200 + i)).size() == 1);
                             }
                             return 0;
                           }));
}

// ---- an invalid value never blocks a valid writer -------------------------------------------------------

// What a key holds, checked as a lookup checks it: the entry, or nullopt with `why`.
std::optional<ld::stored_entry> stored_under(raw_redis& raw, const std::string& k, std::string& why) {
  std::string value;
  const std::string head = raw.call({"GET", k}, &value);
  if (head.empty() || head[0] != '$' || head == "$-1") {
    why = "GET answered " + head;
    return std::nullopt;
  }
  return ld::parse_remote_value(value, k, why);
}

// Garbage, a forged plan (cooperative under a plain key), a torn value and a list under this process's keys
// (before: SET NX kept them, and every reader refused them, for the 30 days of the TTL): each is replaced
// by the valid plan, counted, and expires like any entry. A valid value of another writer stays.
TEST(RemoteStore, AnInvalidValueUnderAKeyIsReplacedByAValidWriter) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("invalid");
  raw_redis raw(*url);
  ld::stored_entry forged = entry(key(model, 2), 128);
  forged.plan.options.cooperative = true;
  const std::string whole = ld::remote_value(entry(key(model, 3), 128));
  ASSERT_EQ(raw.call({"SET", ld::remote_key(key(model, 1)), "garbage"}), "+OK");
  ASSERT_EQ(raw.call({"SET", ld::remote_key(key(model, 2)), ld::remote_value(forged)}), "+OK");
  ASSERT_EQ(raw.call({"SET", ld::remote_key(key(model, 3)), whole.substr(0, whole.size() / 2)}), "+OK");
  ASSERT_EQ(raw.call({"LPUSH", ld::remote_key(key(model, 4)), "not a plan"}), ":1");
  ASSERT_EQ(raw.call({"SET", ld::remote_key(key(model, 5)), ld::remote_value(entry(key(model, 5), 64))}),
            "+OK");

  ld::redis_store s(options(*url));
  for (int k = 1; k <= 5; ++k) s.put(entry(key(model, k), 256));
  ASSERT_TRUE(s.flush(5000));
  const lf::remote_store_stats st = s.statistics();
  EXPECT_EQ(st.replaced, 4u);
  EXPECT_EQ(st.already_stored, 1u);
  EXPECT_EQ(st.writes, 0u);
  EXPECT_EQ(st.write_drops, 0u);
  EXPECT_FALSE(st.dead);
  for (int k = 1; k <= 5; ++k) {
    std::string why;
    const auto e = stored_under(raw, ld::remote_key(key(model, k)), why);
    ASSERT_TRUE(e) << k << ": " << why;
    EXPECT_EQ(e->plan.block_threads, k == 5 ? 64 : 256) << k;
    if (k == 5) continue;  // the other writer's, as it wrote it
    const std::string ttl = raw.call({"TTL", ld::remote_key(key(model, k))});
    ASSERT_EQ(ttl.substr(0, 1), ":") << ttl;
    EXPECT_GT(std::stol(ttl.substr(1)), 0) << k;
  }
  // A reader of another process now finds them.
  ld::redis_store reader(options(*url));
  EXPECT_EQ(reader.find(key(model, 1)).size(), 1u);
  EXPECT_EQ(reader.statistics().refused, 0u);
}

// Two processes write different valid plans under the same 50 keys, each holding garbage, at once: every key
// ends with one valid value, replaced exactly once (the writer that finds a key changed since it read it
// reads it again and keeps what it finds), and neither undoes the other.
TEST(RemoteStore, TwoWritersReplacingTheSameInvalidValuesConverge) {
  NEEDS_REDIS(url);
  const std::string model = unique_model("converge");
  constexpr int keys = 50;
  raw_redis raw(*url);
  for (int k = 0; k < keys; ++k) ASSERT_EQ(raw.call({"SET", ld::remote_key(key(model, k)), "torn{"}), "+OK");
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  int results[2];
  ASSERT_EQ(::pipe(results), 0);
  std::vector<pid_t> writers;
  for (int w = 0; w < 2; ++w) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      char c = 0;
      if (::read(go[0], &c, 1) != 1) _exit(2);  // both start together
      ld::redis_store s(options(*url));
      for (int k = 0; k < keys; ++k) s.put(entry(key(model, k), w == 0 ? 128 : 512));
      const bool flushed = s.flush(20000);
      const lf::remote_store_stats st = s.statistics();
      const long long line[3] = {static_cast<long long>(st.replaced),
                                 static_cast<long long>(st.already_stored),
                                 static_cast<long long>(st.writes + st.write_drops + (flushed ? 0 : 1000))};
      _exit(::write(results[1], line, sizeof line) == sizeof line ? 0 : 3);
    }
    writers.push_back(pid);
  }
  ASSERT_EQ(::write(go[1], "gg", 2), 2);
  long long replaced = 0, present = 0, other = 0;
  for (const pid_t pid : writers) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    long long line[3] = {0, 0, 0};
    ASSERT_EQ(::read(results[0], line, sizeof line), static_cast<ssize_t>(sizeof line));
    replaced += line[0];
    present += line[1];
    other += line[2];
  }
  for (const int fd : {go[0], go[1], results[0], results[1]}) ::close(fd);
  EXPECT_EQ(replaced, keys);  // each key replaced once, by one of the two
  EXPECT_EQ(present, keys);   // and found valid by the other
  EXPECT_EQ(other, 0);        // nothing written as new, dropped or unflushed
  for (int k = 0; k < keys; ++k) {
    std::string why;
    const auto e = stored_under(raw, ld::remote_key(key(model, k)), why);
    ASSERT_TRUE(e) << k << ": " << why;
    EXPECT_TRUE(e->plan.block_threads == 128 || e->plan.block_threads == 512) << k;
  }
}

// ---- launchfit-plans push / pull / list / check -------------------------------------------------------

TEST(RemotePlansTool, PushPullListAndCheckARedisUrl) {
  NEEDS_REDIS(server);
  if (!std::ifstream(tool).good()) GTEST_SKIP() << tool << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)";
  // pull and check read a whole database: one of the test server's own, emptied first.
  ld::remote_url db = *server;
  db.db = 7;
  db.text = "redis://" + db.host + ":" + std::to_string(db.port) + "/7";
  const std::optional<ld::remote_url> url = db;
  raw_redis(*url).call({"FLUSHDB"});
  const std::string model = unique_model("tool");
  const fs::path dir = fs::temp_directory_path() / ("launchfit-remote-tool-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path in = dir / "in.json", out = dir / "out.json";
  ld::stored_entry no_model = entry(key(model, 3), 64);
  no_model.key.device_name.clear();
  ld::stored_entry legacy = entry(key(model, 2), 256);
  legacy.key.policy = launchfit_test::sample_policy;  // as launchfit 0.3 wrote keys: no work kind
  std::ofstream(in) << ld::serialize_cache_file({entry(key(model, 1), 128), legacy, no_model});

  outcome r = run_tool("push '" + in.string() + "' " + url->text);
  EXPECT_EQ(r.exit_code, 1) << r.out;  // one entry has no device model: refused, counted
  EXPECT_TRUE(has(r.out, "2 written, 0 already stored, 1 refused")) << r.out;
  // A key written as launchfit 0.3 wrote them (no work kind): pushed, and counted.
  EXPECT_TRUE(has(r.out, "; 1 name no work kind (no launch finds them)")) << r.out;
  r = run_tool("push '" + in.string() + "' " + url->text);
  EXPECT_TRUE(has(r.out, "0 written, 2 already stored, 1 refused, 0 invalid values replaced")) << r.out;
  // push writes as the library does: garbage under a key is replaced.
  raw_redis(*url).call({"SET", ld::remote_key(key(model, 1)), "garbage"});
  r = run_tool("push '" + in.string() + "' " + url->text);
  EXPECT_TRUE(has(r.out, "0 written, 1 already stored, 1 refused, 1 invalid values replaced")) << r.out;

  r = run_tool("pull " + url->text + " '" + out.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const auto pulled = ld::parse_cache_file([&] {
    std::ifstream f(out);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }());
  std::size_t ours = 0;
  for (const auto& e : pulled.entries) ours += e.key.device_name == model;
  EXPECT_EQ(ours, 2u);

  r = run_tool("list " + url->text + " --device '" + model + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "_Z6kernel1Pf")) << r.out;
  EXPECT_TRUE(has(r.out, "_Z6kernel2Pf")) << r.out;

  // A forged entry makes check fail, naming the key.
  ld::stored_entry forged = entry(key(model, 9), 128);
  forged.plan.options.cooperative = true;
  raw_redis raw(*url);
  ASSERT_EQ(raw.call({"SET", ld::remote_key(forged.key), ld::remote_value(forged)}), "+OK");
  r = run_tool("check " + url->text);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r.out, ld::remote_key(forged.key))) << r.out;
  EXPECT_TRUE(has(r.out, "cooperative")) << r.out;
  EXPECT_TRUE(has(r.out, "1 entry names no work kind (written by launchfit 0.3 or before): no launch finds it; it "
                         "stays until the store's values expire"))
      << r.out;
  raw.call({"DEL", ld::remote_key(forged.key)});

  r = run_tool("check redis://127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 3) << r.out;  // a store that cannot be reached: the environment
  r = run_tool("push '" + in.string() + "' redis://host:notaport");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  fs::remove_all(dir);
}
