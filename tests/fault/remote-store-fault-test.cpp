// SPDX-License-Identifier: MIT
// The remote plan store under faults, against a redis-server each test starts (and kills) itself: a server
// absent at start, killed mid-run, stopped with SIGSTOP (it hangs), or answering garbage (a wrong type, a
// 10 MB value, forged entries, another format version, a peer that is not Redis at all). In every case a
// lookup returns promptly, one warning is logged, the store is marked dead where it must be, and the local
// plan file keeps working. Every body runs in a forked child with a deadline (fault/bounded.hpp).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cache_file.hpp"
#include "captured_log.hpp"
#include "fault/bounded.hpp"
#include "launchfit/cache.hpp"
#include "remote_store.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using launchfit_test::captured_log;
using launchfit_test::has;
using std::chrono::milliseconds;

namespace {

#ifdef LAUNCHFIT_REDIS_SERVER
const char* const redis_server_binary = LAUNCHFIT_REDIS_SERVER;
#else
const char* const redis_server_binary = "redis-server";
#endif

const std::string policy_text = "max_occupancy(prefer_block=256,block_limit=0)";

lf::stored_key key(int kernel, const std::string& policy = policy_text) {
  lf::stored_key k;
  k.device_uuid = "GPU-3f1a2b4c-0000-1111-2222-333344445555";
  k.cc = 90;
  k.sm_count = 132;
  k.driver_version = 12080;
  k.kernel = lf::kernel_fingerprint(
      lf::kernel_resources::manual(32, 0, 1024, "_Z6kernel" + std::to_string(kernel) + "Pf"));
  k.policy = policy;
  k.smem_rule = "bytes=0";
  k.device_name = "NVIDIA H200";
  k.l2_bytes = 62914560;
  return k;
}

ld::stored_entry entry(const lf::stored_key& k, int block) {
  lf::plan p;
  p.block = lf::dims{static_cast<unsigned>(block), 1, 1};
  p.block_threads = block;
  p.blocks_per_sm = 2048 / block;
  p.sm_count = 132;
  p.policy = policy_text;
  p.reason = "sample";
  return ld::stored_entry{k, p, 1700000000000, 0};
}

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// A port nothing listens on right now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// One command over a plain socket, independent of the library; returns the reply's first line.
std::string raw_call(int port, const std::vector<std::string>& args, int timeout_ms = 2000,
                     std::string* bulk = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string line;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& s : args) out += "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    char c = 0;
    while (::recv(fd, &c, 1, 0) == 1 && c != '\n') line += c;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (bulk && line.size() > 1 && line[0] == '$' && line != "$-1") {
      const std::size_t n = std::stoul(line.substr(1)) + 2;
      bulk->clear();
      while (bulk->size() < n && ::recv(fd, &c, 1, 0) == 1) *bulk += c;
    }
  }
  ::close(fd);
  return line;
}

// What the server has sent so far (INFO stats total_net_output_bytes), -1 when unknown.
long long bytes_sent_by(int port) {
  std::string info;
  raw_call(port, {"INFO", "stats"}, 2000, &info);
  const std::string name = "total_net_output_bytes:";
  const std::size_t at = info.find(name);
  return at == std::string::npos ? -1 : std::stoll(info.substr(at + name.size()));
}

// A redis-server of this test's own, on a free port, stopped by its PID.
class redis_server {
 public:
  redis_server() {
    port_ = free_port();
    const std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen("/dev/null", "w", stdout);
      ::execlp(redis_server_binary, redis_server_binary, "--port", port.c_str(), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
               static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto start = clock_type::now();
    while (ms_since(start) < 5000) {
      if (raw_call(port_, {"PING"}, 200) == "+PONG") {
        up_ = true;
        break;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  ~redis_server() { kill(); }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  bool up() const { return up_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);  // also ends a stopped server
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    up_ = false;
  }

 private:
  int port_ = -1;
  pid_t pid_ = -1;
  bool up_ = false;
};

#define CHECK_IN_CHILD(cond, log)                                                                            \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      std::fprintf(stderr, "%s:%d: check failed: %s\nlog:\n%s\n", __FILE__, __LINE__, #cond, (log).c_str()); \
      return 1;                                                                                              \
    }                                                                                                        \
  } while (0)

// The local plan file works as before, whatever the remote store did.
bool local_file_works(const fs::path& file) {
  lf::set_cache_file(file.string());
  lf::store_plan(key(99), entry(key(99), 256).plan);
  const bool ok = lf::flush_cache_file(5000) && lf::find_stored_plan(key(99)).has_value();
  lf::close_cache_file();
  return ok && fs::exists(file);
}

class RemoteStoreFault : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("launchfit-remote-fault-" + std::to_string(::getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts this test's server; skips the test (with the reason) where there is no redis-server.
  bool start_server() {
    server_.emplace();
    if (server_->up()) return true;
    server_.reset();
    return false;
  }

  fs::path dir_;
  std::optional<redis_server> server_;
};

#define START_SERVER()                                   \
  if (!start_server())                                   \
  GTEST_SKIP() << "cannot start " << redis_server_binary \
               << " (install redis-server; LAUNCHFIT_REDIS_SERVER at configure time names the binary)"

// Connection refused: one warning, the store dead at once, and every later call returns without I/O.
TEST_F(RemoteStoreFault, AServerAbsentAtStartIsOneWarningThenNothing) {
  const std::string url = "redis://127.0.0.1:" + std::to_string(free_port());
  const fs::path file = dir_ / "plans.json";
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store(url);
                             ld::plan_store_layer* l = ld::remote_layer();
                             CHECK_IN_CHILD(l != nullptr, log.text());
                             auto t = clock_type::now();
                             CHECK_IN_CHILD(l->find(key(1)).empty(), log.text());
                             const double first_ms = ms_since(t);
                             t = clock_type::now();
                             for (int i = 0; i < 1000; ++i) l->find(key(i));
                             l->put(entry(key(1), 128));
                             const double later_ms = ms_since(t);
                             CHECK_IN_CHILD(!l->flush(5000), log.text());
                             std::fprintf(stderr, "first lookup %.1f ms, 1000 later ones %.2f ms\n", first_ms,
                                          later_ms);
                             CHECK_IN_CHILD(first_ms < 2000, log.text());
                             CHECK_IN_CHILD(later_ms < 100, log.text());
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             CHECK_IN_CHILD(s.dead && s.failures == 1 && s.lookups == 1, log.text());
                             CHECK_IN_CHILD(s.write_drops == 1 && s.writes == 0, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             CHECK_IN_CHILD(has(log.text(), "cannot connect"), log.text());
                             CHECK_IN_CHILD(has(log.text(), "not used again"), log.text());
                             CHECK_IN_CHILD(local_file_works(file), log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             return 0;
                           }));
}

// A host name the resolver cannot answer (a dead or slow resolver holds getaddrinfo() for seconds): the
// lookup returns within the connect bound, one warning, dead. "localhost" still resolves and is used.
TEST_F(RemoteStoreFault, AHostNameThatDoesNotResolveHangsNobody) {
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store("redis://no-such-plan-store.invalid:6379");
                             ld::plan_store_layer* l = ld::remote_layer();
                             CHECK_IN_CHILD(l != nullptr, log.text());
                             const auto t = clock_type::now();
                             CHECK_IN_CHILD(l->find(key(1)).empty(), log.text());
                             const double first_ms = ms_since(t);
                             std::fprintf(stderr, "lookup with an unresolvable host: %.1f ms\n", first_ms);
                             CHECK_IN_CHILD(first_ms < 1000, log.text());
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             CHECK_IN_CHILD(s.dead && s.failures == 1, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             CHECK_IN_CHILD(has(log.text(), "resolve"), log.text());
                             return 0;
                           }));
}

TEST_F(RemoteStoreFault, ALocalhostNameIsResolvedAndUsed) {
  START_SERVER();
  const std::string url = "redis://localhost:" + server_->url().substr(server_->url().rfind(':') + 1);
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store(url);
                             ld::plan_store_layer* l = ld::remote_layer();
                             l->put(entry(key(1), 128));
                             CHECK_IN_CHILD(l->flush(5000), log.text());
                             CHECK_IN_CHILD(l->find(key(1)).size() == 1, log.text());
                             CHECK_IN_CHILD(!lf::remote_store_statistics().dead, log.text());
                             CHECK_IN_CHILD(log.warnings() == 0, log.text());
                             return 0;
                           }));
}

// Killed while in use (its connections live): the next operation fails, one warning, dead; the writer's
// failure at the same time adds no second warning.
TEST_F(RemoteStoreFault, AServerKilledMidRunIsOneWarningAndTheStoreIsDead) {
  START_SERVER();
  const std::string url = server_->url();
  const pid_t server = server_->pid();
  const fs::path file = dir_ / "plans.json";
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store(url);
                             ld::plan_store_layer* l = ld::remote_layer();
                             l->put(entry(key(1), 128));
                             CHECK_IN_CHILD(l->flush(5000), log.text());
                             CHECK_IN_CHILD(l->find(key(1)).size() == 1, log.text());
                             ::kill(server, SIGKILL);
                             std::this_thread::sleep_for(milliseconds(100));
                             const auto t = clock_type::now();
                             lf::stored_key other = key(2);
                             other.sm_count = 66;  // another model: a round trip
                             CHECK_IN_CHILD(l->find(other).empty(), log.text());
                             l->put(entry(key(3), 128));
                             l->flush(5000);
                             const double ms = ms_since(t);
                             CHECK_IN_CHILD(ms < 2000, log.text());
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             CHECK_IN_CHILD(s.dead && s.failures >= 1 && s.writes == 1, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             CHECK_IN_CHILD(local_file_works(file), log.text());
                             return 0;
                           }));
}

// SIGSTOP: the server accepts connections (the kernel does) and never answers. A lookup returns within the
// operation timeout (200 ms), once; the store is dead; a flush does not wait for it either.
TEST_F(RemoteStoreFault, AStoppedServerHangsNobody) {
  START_SERVER();
  const std::string url = server_->url();
  const pid_t server = server_->pid();
  const fs::path file = dir_ / "plans.json";
  ::kill(server, SIGSTOP);
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store(url);
                             ld::plan_store_layer* l = ld::remote_layer();
                             auto t = clock_type::now();
                             CHECK_IN_CHILD(l->find(key(1)).empty(), log.text());
                             const double first_ms = ms_since(t);
                             t = clock_type::now();
                             CHECK_IN_CHILD(l->find(key(2)).empty(), log.text());
                             l->put(entry(key(1), 128));
                             const bool flushed = l->flush(5000);
                             const double later_ms = ms_since(t);
                             std::fprintf(stderr, "first lookup %.1f ms, then %.2f ms\n", first_ms, later_ms);
                             CHECK_IN_CHILD(first_ms >= 150 && first_ms < 2000, log.text());
                             CHECK_IN_CHILD(later_ms < 50 && !flushed, log.text());
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             CHECK_IN_CHILD(s.dead && s.failures == 1, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             CHECK_IN_CHILD(has(log.text(), "no answer within 200 ms"), log.text());
                             CHECK_IN_CHILD(local_file_works(file), log.text());
                             return 0;
                           }));
  ::kill(server, SIGCONT);
}

// Stopped while the writer has a batch in flight: flush() and exit() are bounded, nothing waits for it.
TEST_F(RemoteStoreFault, AServerStoppedWhileWritingBoundsFlushAndExit) {
  START_SERVER();
  const std::string url = server_->url();
  const pid_t server = server_->pid();
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store(url);
                             ld::plan_store_layer* l = ld::remote_layer();
                             l->put(entry(key(1), 128));
                             CHECK_IN_CHILD(l->flush(5000), log.text());
                             ::kill(server, SIGSTOP);
                             for (int i = 2; i < 200; ++i) l->put(entry(key(i), 128));
                             const auto t = clock_type::now();
                             const bool flushed = l->flush(5000);
                             const double ms = ms_since(t);
                             std::fprintf(stderr, "flush %.1f ms\n", ms);
                             CHECK_IN_CHILD(!flushed && ms < 2000, log.text());
                             CHECK_IN_CHILD(lf::remote_store_statistics().dead, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             for (int i = 200; i < 300; ++i) l->put(entry(key(i), 128));
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             CHECK_IN_CHILD(s.writes + s.write_drops == 299, log.text());
                             return 0;
                           }));
  ::kill(server, SIGCONT);
}

// A list under a plan key: WRONGTYPE. A store that answers a wrong type is not trusted again.
TEST_F(RemoteStoreFault, AWrongTypeUnderAPlanKeyKillsTheStoreWithOneWarning) {
  START_SERVER();
  ASSERT_EQ(raw_call(server_->port(), {"LPUSH", ld::remote_key(key(1)), "not a plan"}), ":1");
  const std::string url = server_->url();
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store(url);
                             ld::plan_store_layer* l = ld::remote_layer();
                             const auto t = clock_type::now();
                             CHECK_IN_CHILD(l->find(key(1)).empty(), log.text());
                             CHECK_IN_CHILD(l->find(key(2)).empty(), log.text());
                             CHECK_IN_CHILD(ms_since(t) < 2000, log.text());
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             CHECK_IN_CHILD(s.dead && s.failures == 1 && s.hits == 0, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             CHECK_IN_CHILD(has(log.text(), "WRONGTYPE"), log.text());
                             return 0;
                           }));
}

// A 10 MB string under a plan key: never transferred (GETRANGE reads one byte more than a value may hold),
// refused as oversize, the store dead.
TEST_F(RemoteStoreFault, AHugeValueIsNeverReadAndKillsTheStore) {
  START_SERVER();
  ASSERT_EQ(raw_call(server_->port(), {"SET", ld::remote_key(key(1)), std::string(10 << 20, 'x')}, 10000),
            "+OK");
  const std::string url = server_->url();
  const long long sent_before = bytes_sent_by(server_->port());
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             lf::set_remote_store(url);
                             const auto t = clock_type::now();
                             CHECK_IN_CHILD(ld::remote_layer()->find(key(1)).empty(), log.text());
                             const double ms = ms_since(t);
                             std::fprintf(stderr, "lookup %.1f ms\n", ms);
                             CHECK_IN_CHILD(ms < 2000, log.text());
                             const lf::remote_store_stats s = lf::remote_store_statistics();
                             CHECK_IN_CHILD(s.dead && s.failures == 1, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             CHECK_IN_CHILD(has(log.text(), "larger than 65536 bytes"), log.text());
                             return 0;
                           }));
  const long long sent = bytes_sent_by(server_->port()) - sent_before;
  EXPECT_GE(sent_before, 0);
  EXPECT_LT(sent, 1 << 20) << "the server sent " << sent << " bytes: the 10 MB value was read";
}

// Plans claiming cooperative, PDL or a cluster under a plain key, another format version, an entry copied
// under another kernel's key, and JSON garbage: each refused and counted, one warning in all, and the store
// stays in use (a good entry of the same model is still served).
TEST_F(RemoteStoreFault, ForgedEntriesAreRefusedAndCountedButDoNotKillTheStore) {
  START_SERVER();
  const int port = server_->port();
  auto put_raw = [&](const lf::stored_key& k, const std::string& value) {
    return raw_call(port, {"SET", ld::remote_key(k), value});
  };
  ld::stored_entry cooperative = entry(key(1), 128), pdl = entry(key(2), 128), cluster = entry(key(3), 128);
  cooperative.plan.cooperative = true;
  pdl.plan.programmatic = true;
  cluster.plan.cluster = lf::dims{2, 1, 1};
  ASSERT_EQ(put_raw(cooperative.key, ld::remote_value(cooperative)), "+OK");
  ASSERT_EQ(put_raw(pdl.key, ld::remote_value(pdl)), "+OK");
  ASSERT_EQ(put_raw(cluster.key, ld::remote_value(cluster)), "+OK");
  std::string v2 = ld::remote_value(entry(key(4), 128));
  v2.replace(v2.find("\"version\": 1"), 12, "\"version\": 2");
  ASSERT_EQ(put_raw(key(4), v2), "+OK");
  ASSERT_EQ(put_raw(key(5), ld::remote_value(entry(key(6), 128))),
            "+OK");  // kernel 6's entry, kernel 5's key
  ASSERT_EQ(put_raw(key(7), "{\"format\": \"launchfit-plan-cache\", \"version\": 1, \"entries\": [{\"key\""),
            "+OK");
  ASSERT_EQ(put_raw(key(8), ld::remote_value(entry(key(8), 512))), "+OK");
  const std::string url = server_->url();
  LAUNCHFIT_EXPECT_BOUNDED(
      10000, ([&] {
        captured_log log(spdlog::level::debug);
        lf::set_remote_store(url);
        ld::plan_store_layer* l = ld::remote_layer();
        const auto t = clock_type::now();
        for (int k = 1; k <= 7; ++k) CHECK_IN_CHILD(l->find(key(k)).empty(), log.text());
        const auto good = l->find(key(8));
        CHECK_IN_CHILD(ms_since(t) < 2000, log.text());
        CHECK_IN_CHILD(good.size() == 1 && good[0].plan.block_threads == 512, log.text());
        const lf::remote_store_stats s = lf::remote_store_statistics();
        CHECK_IN_CHILD(!s.dead && s.failures == 0, log.text());
        CHECK_IN_CHILD(s.refused == 6 && s.loaded == 1 && s.hits == 1, log.text());
        CHECK_IN_CHILD(log.warnings() == 1, log.text());
        CHECK_IN_CHILD(has(log.text(), "refused the entry under launchfit:v1:f1:"), log.text());
        for (const char* why : {"cooperative", "PDL", "cluster", "format version 2",
                                "not the one it is stored under", "not valid JSON"})
          CHECK_IN_CHILD(has(log.text(), why), log.text());
        return 0;
      }));
}

// A peer that is not Redis (a web server, a port reused by something else) answers garbage: a protocol
// error, one warning, dead.
// A listening socket on a free loopback port, for peers that play a hostile server.
struct fake_peer {
  int listener = -1;
  std::string url;
  fake_peer() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 8) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen on 127.0.0.1");
    url = "redis://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  ~fake_peer() { ::close(listener); }

  // In the forked child: a peer thread accepts one connection and runs `answer(socket, stop)`; one lookup
  // returns nothing within max_ms, after which the store is dead with one failure and one warning that says
  // `said`. 0 when all of that holds.
  // `op_timeout_ms`: a store of the test's own with that bound per operation instead of the default (200 ms),
  // for a bound that must be reached first however slowly the test runs (a sanitizer on a loaded host).
  int lookup_kills_the_store(const std::function<void(int, const std::atomic<bool>&)>& answer, double max_ms,
                             const char* said, unsigned op_timeout_ms = 0) {
    std::atomic<bool> stop{false};
    std::thread peer([&] {
      const int c = ::accept(listener, nullptr, nullptr);
      answer(c, stop);
      ::close(c);
    });
    captured_log log(spdlog::level::info);
    std::unique_ptr<ld::redis_store> own;
    if (op_timeout_ms > 0) {
      std::string why;
      ld::remote_options o;
      o.url = *ld::parse_remote_url(url, why);
      o.op_timeout_ms = op_timeout_ms;
      own = std::make_unique<ld::redis_store>(o);
    } else {
      lf::set_remote_store(url);
    }
    const auto t = clock_type::now();
    const bool none = (own ? own->find(key(1)) : ld::remote_layer()->find(key(1))).empty();
    const double ms = ms_since(t);
    stop = true;
    peer.join();
    CHECK_IN_CHILD(none && ms < max_ms, std::to_string(ms) + " ms\n" + log.text());
    const lf::remote_store_stats st = own ? own->statistics() : lf::remote_store_statistics();
    CHECK_IN_CHILD(st.dead && st.failures == 1, log.text());
    CHECK_IN_CHILD(log.warnings() == 1, log.text());
    CHECK_IN_CHILD(has(log.text(), said), log.text());
    CHECK_IN_CHILD(has(log.text(), "not used again"), log.text());
    return 0;
  }
};

// A peer that answers one byte at a time, each within the socket timeout: the whole answer is bounded, not
// each read.
TEST_F(RemoteStoreFault, APeerThatDripFeedsItsAnswerIsCutAtTheOperationTimeout) {
  fake_peer fake;
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             return fake.lookup_kills_the_store(
                                 [](int c, const std::atomic<bool>& stop) {
                                   ::send(c, "$60000\r\n", 8, MSG_NOSIGNAL);
                                   for (int i = 0; i < 200 && !stop; ++i) {  // one byte per 50 ms for 10 s
                                     if (::send(c, "x", 1, MSG_NOSIGNAL) != 1) break;
                                     std::this_thread::sleep_for(milliseconds(50));
                                   }
                                 },
                                 1500, "no answer within 200 ms");
                           }));
}

// A peer that announces a gigabyte and sends it as fast as it can: the answer is refused once it passes the
// bound, never buffered whole.
TEST_F(RemoteStoreFault, APeerThatAnnouncesAHugeAnswerIsRefusedAtTheSizeBound) {
  fake_peer fake;
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             return fake.lookup_kills_the_store(
                                 [](int c, const std::atomic<bool>& stop) {
                                   ::send(c, "$1000000000\r\n", 13, MSG_NOSIGNAL);
                                   const std::string chunk(1 << 16, 'x');
                                   for (int i = 0; i < 1024 && !stop; ++i)  // up to 64 MiB
                                     if (::send(c, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) break;
                                 },
                                 6000, "an answer larger than 8 MiB", 5000);
                           }));
}

TEST_F(RemoteStoreFault, APeerThatIsNotRedisIsAProtocolErrorAndOneWarning) {
  fake_peer fake;
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             return fake.lookup_kills_the_store(
                                 [](int c, const std::atomic<bool>&) {
                                   const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
                                   ::send(c, reply, sizeof reply - 1, MSG_NOSIGNAL);
                                   std::this_thread::sleep_for(milliseconds(500));
                                 },
                                 2000, "Protocol error");
                           }));
}

// A server killed while a process writes to it must not take the process down with SIGPIPE.
TEST_F(RemoteStoreFault, WritingToAServerThatWentAwayRaisesNoSigpipe) {
  START_SERVER();
  const std::string url = server_->url();
  const pid_t server = server_->pid();
  LAUNCHFIT_EXPECT_BOUNDED(10000, ([&] {
                             captured_log log(spdlog::level::info);
                             ::signal(SIGPIPE, SIG_DFL);  // as in a program that never touched it
                             lf::set_remote_store(url);
                             ld::plan_store_layer* l = ld::remote_layer();
                             l->put(entry(key(1), 128));
                             CHECK_IN_CHILD(l->flush(5000), log.text());
                             CHECK_IN_CHILD(l->find(key(1)).size() == 1, log.text());
                             ::kill(server, SIGKILL);
                             std::this_thread::sleep_for(milliseconds(100));
                             for (int i = 0; i < 5; ++i) {
                               l->put(entry(key(100 + i), 128));
                               l->flush(1000);
                               lf::stored_key other = key(i);
                               other.cc = 80 + i;
                               l->find(other);
                             }
                             CHECK_IN_CHILD(lf::remote_store_statistics().dead, log.text());
                             CHECK_IN_CHILD(log.warnings() == 1, log.text());
                             return 0;  // still alive
                           }));
}

}  // namespace
