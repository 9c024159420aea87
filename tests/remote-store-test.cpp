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
#include "remote_store.hpp"

#include "tool_run.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;
using launchfit_test::captured_log;
using launchfit_test::has;

namespace {

const std::string policy_text = "max_occupancy(prefer_block=256,block_limit=0)";

// A key of a device model no other test uses, so that tests sharing one server never see each other.
lf::stored_key key(const std::string& model, int kernel, std::uint64_t bucket = 0) {
  lf::stored_key k;
  // A GPU of this model (a UUID names one GPU, so no two models share one).
  k.device_uuid = "GPU-" + std::to_string(std::hash<std::string>{}(model)) + "-" + std::to_string(kernel);
  k.cc = 90;
  k.sm_count = 132;
  k.driver_version = 12080;
  k.kernel = lf::kernel_fingerprint(
      lf::kernel_resources::manual(32, 0, 1024, "_Z6kernel" + std::to_string(kernel) + "Pf"));
  k.policy = policy_text;
  k.smem_rule = "bytes=0";
  k.bucket = bucket;
  k.device_name = model;
  k.l2_bytes = 62914560;
  return k;
}

lf::plan sample_plan(int block) {
  lf::plan p;
  p.block = lf::dims{static_cast<unsigned>(block), 1, 1};
  p.block_threads = block;
  p.blocks_per_sm = 2048 / block;
  p.sm_count = 132;
  p.policy = policy_text;
  p.reason = "sample";
  return p;
}

ld::stored_entry entry(const lf::stored_key& k, int block, std::uint64_t at_ms = 1700000000000) {
  return ld::stored_entry{k, sample_plan(block), at_ms, 0};
}

std::string unique_model(const std::string& what) {
  return "Test GPU " + std::to_string(::getpid()) + " " + what + " " +
         testing::UnitTest::GetInstance()->current_test_info()->name();
}

// The server tests/run.sh started, if any.
std::optional<ld::remote_url> test_server() {
  const char* v = std::getenv("LAUNCHFIT_TEST_REDIS");
  if (!v || !*v) return std::nullopt;
  std::string why;
  return ld::parse_remote_url(v, why);
}

#define NEEDS_REDIS(url)                                                                          \
  const std::optional<ld::remote_url> url = test_server();                                        \
  if (!url)                                                                                       \
  GTEST_SKIP() << "LAUNCHFIT_TEST_REDIS is not set: tests/run.sh starts a redis-server and sets " \
                  "it"

// A failed check inside a forked body: print it and make the child's exit code say so.
#define CHECK_IN_CHILD(cond)                                                        \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

// A few commands over a plain socket, independent of the library: to look at what it wrote.
class raw_redis {
 public:
  explicit raw_redis(const ld::remote_url& url) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(url.port));
    ::inet_pton(AF_INET, url.host == "localhost" ? "127.0.0.1" : url.host.c_str(), &a.sin_addr);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (url.db != 0) call({"SELECT", std::to_string(url.db)});
  }
  ~raw_redis() {
    if (fd_ >= 0) ::close(fd_);
  }
  // The reply's first line ("+OK", ":42", "$-1", "-ERR ...") and, for a bulk string, its text.
  std::string call(const std::vector<std::string>& args, std::string* bulk = nullptr) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    for (std::size_t done = 0; done < out.size();) {
      const ssize_t n = ::send(fd_, out.data() + done, out.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return "";
      done += static_cast<std::size_t>(n);
    }
    std::string line = read_line();
    if (bulk && line.size() > 1 && line[0] == '$' && line != "$-1") {
      const std::size_t n = std::stoul(line.substr(1));
      *bulk = read_exact(n + 2).substr(0, n);
    }
    return line;
  }

 private:
  std::string read_line() {
    std::string line;
    while (line.size() < 2 || line.compare(line.size() - 2, 2, "\r\n") != 0) {
      const std::string c = read_exact(1);
      if (c.empty()) return line;
      line += c;
    }
    return line.substr(0, line.size() - 2);
  }
  std::string read_exact(std::size_t n) {
    std::string out;
    while (out.size() < n) {
      if (buf_.empty()) {
        char tmp[65536];
        const ssize_t got = ::recv(fd_, tmp, sizeof tmp, 0);
        if (got <= 0) return out;
        buf_.assign(tmp, static_cast<std::size_t>(got));
      }
      const std::size_t take = std::min(n - out.size(), buf_.size());
      out += buf_.substr(0, take);
      buf_.erase(0, take);
    }
    return out;
  }
  int fd_ = -1;
  std::string buf_;
};

ld::remote_options options(const ld::remote_url& url) {
  ld::remote_options o;
  o.url = url;
  return o;
}

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
      {"redis://user:secret@host:6379", "password"},
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
  e.plan.cooperative = true;
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "cooperative")) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.plan.programmatic = true;
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "PDL")) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.plan.cluster = lf::dims{2, 1, 1};
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "cluster")) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.key.policy += " cooperative";
  EXPECT_TRUE(refused(e));  // the key asks for cooperative, the plan is not
  e.plan.cooperative = true;
  EXPECT_FALSE(refused(e)) << why;
  e = entry(key("NVIDIA H200", 1), 128);
  e.plan.policy = "fixed(block=128,grid=0)";
  EXPECT_TRUE(refused(e));
  EXPECT_TRUE(has(why, "names policy")) << why;
}

TEST(RemoteTtl, GarbageFallsBackToThirtyDaysWithAWarning) {
  std::string warning;
  ::unsetenv("LAUNCHFIT_REMOTE_TTL");
  EXPECT_EQ(ld::remote_ttl_from_env(warning), 30u * 24 * 3600);
  EXPECT_EQ(warning, "");
  ::setenv("LAUNCHFIT_REMOTE_TTL", "3600", 1);
  EXPECT_EQ(ld::remote_ttl_from_env(warning), 3600u);
  EXPECT_EQ(warning, "");
  for (const char* bad : {"0", "-5", "1h", "99999999999", " 60", "6\n0"}) {
    warning.clear();
    ::setenv("LAUNCHFIT_REMOTE_TTL", bad, 1);
    EXPECT_EQ(ld::remote_ttl_from_env(warning), ld::remote_default_ttl_s) << bad;
    EXPECT_TRUE(has(warning, "LAUNCHFIT_REMOTE_TTL=")) << bad;
    EXPECT_EQ(warning.find('\n'), std::string::npos) << warning;
  }
  ::unsetenv("LAUNCHFIT_REMOTE_TTL");
}

// ---- configuration --------------------------------------------------------------------------------------

TEST(RemoteConfig, OffByDefault) {
  LAUNCHFIT_EXPECT_BOUNDED(5000, ([] {
                             ::unsetenv("LAUNCHFIT_REMOTE");
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
                             captured_log log(spdlog::level::info);
                             ::setenv("LAUNCHFIT_REMOTE", "redis://127.0.0.1:6390/1", 1);
                             ::setenv("LAUNCHFIT_REMOTE_TTL", "soon", 1);
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
                               lf::set_remote_store(text);
                               ld::remote_layer()->put(entry(key(model, 7), 96));
                               std::exit(0);  // no flush: the exit handler writes it
                             }
                             int status = 0;
                             ::waitpid(a, &status, 0);
                             CHECK_IN_CHILD(WIFEXITED(status) && WEXITSTATUS(status) == 0);
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
  const ld::remote_listing all = ld::list_remote_entries(*url, {}, ld::remote_model_prefix(key(model, 0)));
  EXPECT_EQ(all.failure, "");
  EXPECT_EQ(all.refused, 0u);
  EXPECT_FALSE(all.truncated);
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
  std::ofstream(in) << ld::serialize_cache_file(
      {entry(key(model, 1), 128), entry(key(model, 2), 256), no_model});

  outcome r = run_tool("push '" + in.string() + "' " + url->text);
  EXPECT_EQ(r.exit_code, 1) << r.out;  // one entry has no device model: refused, counted
  EXPECT_TRUE(has(r.out, "2 written, 0 already stored, 1 refused")) << r.out;
  r = run_tool("push '" + in.string() + "' " + url->text);
  EXPECT_TRUE(has(r.out, "0 written, 2 already stored, 1 refused")) << r.out;

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
  forged.plan.cooperative = true;
  raw_redis raw(*url);
  ASSERT_EQ(raw.call({"SET", ld::remote_key(forged.key), ld::remote_value(forged)}), "+OK");
  r = run_tool("check " + url->text);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r.out, ld::remote_key(forged.key))) << r.out;
  EXPECT_TRUE(has(r.out, "cooperative")) << r.out;
  raw.call({"DEL", ld::remote_key(forged.key)});

  r = run_tool("check redis://127.0.0.1:1");
  EXPECT_EQ(r.exit_code, 3) << r.out;  // a store that cannot be reached: the environment
  r = run_tool("push '" + in.string() + "' redis://host:notaport");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  fs::remove_all(dir);
}
