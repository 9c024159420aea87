// SPDX-License-Identifier: MIT
// plan-store: what the layers of the plan store (memory, local file, Redis) cost a launch on the GPU.
//
// - First launch of a kernel never launched before (distinct template kernels, as in launch-overhead), with
//   its plan (a) nowhere, (b) in the local plan file only, (c) only in Redis, written by another process
//   (this one's local file is empty), (d) in a Redis that hangs (SIGSTOP): the first lookup pays the timeout
//   once, later ones nothing. Beside each, the <<<>>> first launch of other fresh kernels of the same
//   process.
// - Warm launches through launchfit without a store, with the local file, and with the file and Redis,
//   against <<<>>>, interleaved batch by batch: the hit path must not touch the remote store.
// - A fleet: N processes with empty local files and one Redis. Process 0 tunes a kernel with autotune and
//   writes its plan through; then the others start together and launch the same kernel.
//
// Every measurement runs in a process of its own (this program again, fork + exec, with the hidden flag
// --child), so "never launched", "an empty local file" and "written by another process" hold literally, and
// no process uses CUDA across a fork without an exec. The program starts its own redis-server on 127.0.0.1
// (a free port, no persistence) and stops it by PID on every path; when it cannot, the Redis rows are skipped
// with the reason.
//
//   plan-store [--quick] [--json PATH] [--redis-server PATH] [--autotune-plugin PATH]
//              [--autotune-policy STRING] [--kernels N] [--fleet N] [--rounds N] [--device N]
//   plan-store --check-redis [--redis-server PATH]     start, PING, SIGSTOP, SIGCONT, stop: no GPU needed

#include <arpa/inet.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.cuh"
#include "launchfit/cache.hpp"
#include "launchfit/launch.hpp"
#include "launchfit/log.hpp"
#include "launchfit/plugin.hpp"
#include "plan_cache.hpp"

namespace lf = launchfit;

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

std::string errno_text(int e) { return std::strerror(e); }

// ---- kernels --------------------------------------------------------------------------------------------

constexpr int max_kernels = 32;
// ran[] slots: [0, 32) the kernels launched through launchfit, [32, 64) those launched raw, then the warm-up.
constexpr int warm_up_slot = 2 * max_kernels;

// Distinct kernels for first launches that really are first; each counts its runs, so every timed launch is
// checked to have run exactly once.
template <int I>
__global__ void fresh_kernel(unsigned* ran) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(ran + I, 1u);
}
using fresh_fn = void (*)(unsigned*);
template <int Offset, int... I>
std::vector<fresh_fn> fresh_table(std::integer_sequence<int, I...>) {
  return std::vector<fresh_fn>{&fresh_kernel<I + Offset>...};
}

__global__ void warm_up_kernel(unsigned* ran) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(ran + warm_up_slot, 1u);
}

// One increment per launch: the warm launches are checked to run every launch.
__global__ void count_launch(unsigned long long* counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(counter, 1ULL);
}

// The fleet's kernel: out = 2 in + 1, grid-stride (exact for the small integers it is given). Block 0 counts
// the kernel's runs: a process that tuned ran it many times, one that reused a stored plan once.
__global__ void scale_add(const float* __restrict__ in, float* __restrict__ out, std::size_t n,
                          unsigned long long* runs) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(runs, 1ULL);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = 2.f * in[i] + 1.f;
  }
}

// ---- what a child reports to the parent
// ---------------------------------------------------------------------

std::string number_text(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

// "key<TAB>value" lines; a key may repeat (failures). Values never hold a newline or a tab.
class record {
 public:
  void set(const std::string& key, const std::string& value) {
    std::string v = value;
    for (char& c : v)
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    lines_.emplace_back(key, v);
  }
  void set_number(const std::string& key, double value) { set(key, number_text(value)); }
  void set_numbers(const std::string& key, const std::vector<double>& values) {
    std::string s;
    for (double x : values) s += (s.empty() ? "" : " ") + number_text(x);
    set(key, s);
  }
  void set_words(const std::string& key, const std::vector<std::string>& words) {
    std::string s;
    for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
    set(key, s);
  }
  void set_remote(const lf::remote_store_stats& s) {
    set_number("remote.enabled", s.enabled);
    set_number("remote.dead", s.dead);
    set_number("remote.lookups", static_cast<double>(s.lookups));
    set_number("remote.hits", static_cast<double>(s.hits));
    set_number("remote.refused", static_cast<double>(s.refused));
    set_number("remote.loaded", static_cast<double>(s.loaded));
    set_number("remote.writes", static_cast<double>(s.writes));
    set_number("remote.already_stored", static_cast<double>(s.already_stored));
    set_number("remote.write_drops", static_cast<double>(s.write_drops));
    set_number("remote.failures", static_cast<double>(s.failures));
  }

  bool has(const std::string& key) const {
    return std::any_of(lines_.begin(), lines_.end(), [&](const auto& l) { return l.first == key; });
  }
  std::string get(const std::string& key) const {
    for (const auto& l : lines_)
      if (l.first == key) return l.second;
    return {};
  }
  std::vector<std::string> all(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& l : lines_)
      if (l.first == key) out.push_back(l.second);
    return out;
  }
  double number(const std::string& key) const {
    const std::string v = get(key);
    return v.empty() ? NAN : std::strtod(v.c_str(), nullptr);
  }
  std::vector<std::string> words(const std::string& key) const {
    std::vector<std::string> out;
    std::istringstream is(get(key));
    for (std::string w; is >> w;) out.push_back(w);
    return out;
  }
  std::vector<double> numbers(const std::string& key) const {
    std::vector<double> out;
    for (const auto& w : words(key)) out.push_back(std::strtod(w.c_str(), nullptr));
    return out;
  }

  void write(const std::string& path) const {
    std::string text;
    for (const auto& l : lines_) text += l.first + "\t" + l.second + "\n";
    bench::write_file(path, text);
  }
  static record read(const std::string& path) {
    record r;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const std::size_t tab = line.find('\t');
      if (tab != std::string::npos) r.lines_.emplace_back(line.substr(0, tab), line.substr(tab + 1));
    }
    return r;
  }

 private:
  std::vector<std::pair<std::string, std::string>> lines_;
};

// ---- processes --------------------------------------------------------------------------------------------

// Children still running, for the interrupt handler: a Redis or a measuring process never outlives this
// program (each also dies with it through PR_SET_PDEATHSIG).
constexpr int max_tracked = 64;
volatile pid_t tracked[max_tracked];

void track(pid_t pid) {
  for (int i = 0; i < max_tracked; ++i) {
    if (tracked[i] == 0) {
      tracked[i] = pid;
      return;
    }
  }
}
void untrack(pid_t pid) {
  for (int i = 0; i < max_tracked; ++i)
    if (tracked[i] == pid) tracked[i] = 0;
}

extern "C" void on_interrupt(int sig) {
  for (int i = 0; i < max_tracked; ++i)
    if (tracked[i] > 0) kill(tracked[i], SIGKILL);  // also ends a stopped Redis
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe: " + errno_text(errno));
  buf[n] = '\0';
  return buf;
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// A bare name is looked up on PATH (before any fork: execvp may allocate); "" when not found.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// fork + exec. This process may hold CUDA threads: the child makes only async-signal-safe calls before exec.
// It dies with this process; its stdout and stderr go to `log_path` when one is given.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> cargv;
  for (const auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) throw std::runtime_error("cannot open " + log_path + ": " + errno_text(errno));
  }
  const pid_t parent = getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    if (log_fd >= 0) close(log_fd);
    throw std::runtime_error("fork failed: " + errno_text(e));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  track(pid);
  return pid;
}

// The exit status of pid, waiting at most timeout_s (then it is killed); -1 with `why` when it did not exit
// normally.
int wait_for(pid_t pid, double timeout_s, std::string& why) {
  const auto t0 = clock_type::now();
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      untrack(pid);
      if (WIFEXITED(st)) return WEXITSTATUS(st);
      why = WIFSIGNALED(st) ? std::string("ended by signal ") + strsignal(WTERMSIG(st)) : "ended abnormally";
      return -1;
    }
    if (r < 0 && errno != EINTR) {
      untrack(pid);
      why = "waitpid failed: " + errno_text(errno);
      return -1;
    }
    if (bench::seconds_since(t0) > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      untrack(pid);
      why = "no exit within " + std::to_string(static_cast<int>(timeout_s)) + " s: killed";
      return -1;
    }
    usleep(2000);
  }
}

std::string last_lines(const std::string& path, int count) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  std::string out;
  for (std::size_t i = lines.size() > static_cast<std::size_t>(count) ? lines.size() - count : 0;
       i < lines.size(); ++i)
    out += (out.empty() ? "" : " / ") + lines[i];
  return out;
}

// A directory of this run's files (plan files, results, the Redis log), removed with everything in it.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/launchfit-plan-store-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed: " + errno_text(errno));
    path_ = tmpl;
  }
  ~temp_dir() {
    nftw(
        path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// ---- Redis on loopback ------------------------------------------------------------------------------------

int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  return ok ? ntohs(a.sin_port) : -1;
}

// One inline command to the Redis at 127.0.0.1:port on a connection of its own, every step bounded by
// timeout_ms (a stopped server accepts the connection and never answers). `reply`: a status or integer
// reply's text, or a bulk string's body. False with `why` on a refusal, a timeout or an error reply.
bool redis_ask(int port, const std::string& command, unsigned timeout_ms, std::string& reply,
               std::string& why) {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  const auto left_ms = [&] {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    return static_cast<int>(std::max<long long>(0, left));
  };
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = "socket: " + errno_text(errno);
    return false;
  }
  struct closer {
    int fd;
    ~closer() { close(fd); }
  } closes{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) {
      why = "connect: " + errno_text(errno);
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, left_ms()) != 1) {
      why = "connect timed out";
      return false;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      why = "connect: " + errno_text(err);
      return false;
    }
  }
  const std::string line = command + "\r\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, left_ms()) != 1) {
      why = "send timed out";
      return false;
    }
    const ssize_t w = send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      why = "send: " + errno_text(errno);
      return false;
    }
    sent += static_cast<std::size_t>(w);
  }
  std::string in;
  for (;;) {
    const std::size_t eol = in.find("\r\n");
    if (eol != std::string::npos) {
      const std::string head = in.substr(1, eol - 1);
      if (in[0] == '-') {
        why = "error reply: " + head;
        return false;
      }
      if (in[0] != '$') {
        reply = head;
        return true;
      }
      const long long len = std::atoll(head.c_str());
      if (len < 0) {
        reply.clear();
        return true;
      }
      if (in.size() >= eol + 2 + static_cast<std::size_t>(len) + 2) {
        reply = in.substr(eol + 2, static_cast<std::size_t>(len));
        return true;
      }
    }
    pollfd p{fd, POLLIN, 0};
    const int pr = poll(&p, 1, left_ms());
    if (pr == 0) {
      why = "no reply within " + std::to_string(timeout_ms) + " ms";
      return false;
    }
    if (pr < 0) {
      if (errno == EINTR) continue;
      why = "poll: " + errno_text(errno);
      return false;
    }
    char buf[4096];
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0) {
      why = "connection closed";
      return false;
    }
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      why = "recv: " + errno_text(errno);
      return false;
    }
    in.append(buf, static_cast<std::size_t>(r));
  }
}

// A redis-server of this program's own: 127.0.0.1 on a free port, nothing saved, stopped by PID.
class redis_server {
 public:
  redis_server() = default;
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;
  ~redis_server() { stop(); }

  // Waits at most 5 s for PING per attempt (a port taken meanwhile gets another, 3 attempts). On failure
  // nothing is left running and reason() says why.
  bool start(const std::string& program, const std::string& dir) {
    log_ = dir + "/redis.log";
    if (program.empty()) {
      reason_ = "redis-server not found on PATH (give --redis-server PATH)";
      return false;
    }
    if (access(program.c_str(), X_OK) != 0) {
      reason_ = program + " is not an executable file (" + errno_text(errno) + ")";
      return false;
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      const int port = free_loopback_port();
      if (port <= 0) {
        reason_ = "no free port on 127.0.0.1";
        return false;
      }
      try {
        pid_ = spawn({program, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--daemonize", "no", "--dir", dir, "--logfile", ""},
                     log_);
      } catch (const std::exception& e) {
        reason_ = e.what();
        return false;
      }
      port_ = port;
      bool port_taken = false;
      const auto t0 = clock_type::now();
      while (pid_ > 0 && bench::seconds_since(t0) < 5.0) {
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) == pid_) {
          untrack(pid_);
          pid_ = -1;
          const std::string tail = last_lines(log_, 3);
          reason_ = program + " exited" +
                    (WIFEXITED(st) ? " with status " + std::to_string(WEXITSTATUS(st)) : " on a signal") +
                    (tail.empty() ? "" : ": " + tail);
          port_taken = tail.find("Address already in use") != std::string::npos;
          break;
        }
        std::string reply, why;
        if (redis_ask(port_, "PING", 200, reply, why) && reply == "PONG") {
          std::string info;
          if (redis_ask(port_, "INFO server", 1000, info, why)) {
            const std::size_t at = info.find("redis_version:");
            if (at != std::string::npos) version_ = info.substr(at + 14, info.find('\r', at) - at - 14);
          }
          return true;
        }
        usleep(20000);
      }
      if (pid_ > 0) {
        reason_ = program + " did not answer PING within 5 s" +
                  (last_lines(log_, 2).empty() ? "" : " (" + last_lines(log_, 2) + ")");
        stop();
        return false;
      }
      if (!port_taken) return false;
    }
    return false;
  }

  // SIGCONT first (a stopped server acts on SIGTERM only when it runs), SIGTERM, at most 3 s, then SIGKILL.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGTERM);
    std::string why;
    wait_for(pid_, 3.0, why);
    pid_ = -1;
    paused_ = false;
  }

  // SIGSTOP, confirmed by a PING that goes unanswered (bounded).
  bool pause(std::string& why) {
    if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) {
      why = "cannot stop the server: " + errno_text(errno);
      return false;
    }
    paused_ = true;
    std::string reply, ping_why;
    if (redis_ask(port_, "PING", 300, reply, ping_why)) {
      why = "the server still answers PING after SIGSTOP";
      return false;
    }
    return true;
  }

  // SIGCONT, confirmed by a PING answered within 2 s.
  bool resume(std::string& why) {
    if (pid_ <= 0) {
      why = "no server";
      return false;
    }
    kill(pid_, SIGCONT);
    paused_ = false;
    std::string reply;
    if (redis_ask(port_, "PING", 2000, reply, why) && reply == "PONG") return true;
    if (why.empty()) why = "PING answered " + reply;
    return false;
  }

  // Keys in the database, -1 when it does not answer.
  long long keys() const {
    std::string reply, why;
    return redis_ask(port_, "DBSIZE", 1000, reply, why) ? std::atoll(reply.c_str()) : -1;
  }

  bool running() const { return pid_ > 0; }
  bool paused() const { return paused_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  const std::string& version() const { return version_; }
  const std::string& reason() const { return reason_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool paused_ = false;
  std::string version_, reason_, log_;
};

// ---- child processes: what each measures ----------------------------------------------------------------

struct child_setup {
  cudaStream_t stream = nullptr;
  std::vector<std::string> failures;
  record out;

  explicit child_setup(const bench::args& a) {
    bench::open_device(a.int_value("--device", 0));
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // A new plan's info line (demangling, formatting, writing) stays out of the timed launches.
    lf::logger()->set_level(spdlog::level::warn);
  }
  ~child_setup() {
    if (stream) cudaStreamDestroy(stream);
  }
  void fail(const std::string& why) { failures.push_back(why); }
  int finish(const std::string& path) {
    for (const auto& f : failures) out.set("failure", f);
    out.write(path);
    return failures.empty() ? 0 : 1;
  }
};

std::string stats_text(const lf::remote_store_stats& s) {
  std::ostringstream os;
  os << "enabled=" << s.enabled << " dead=" << s.dead << " lookups=" << s.lookups << " hits=" << s.hits
     << " refused=" << s.refused << " loaded=" << s.loaded << " writes=" << s.writes
     << " already_stored=" << s.already_stored << " write_drops=" << s.write_drops
     << " failures=" << s.failures;
  return os.str();
}

// First launches of fresh kernels, the plan store configured as --source says:
//   none         no local file, no remote store
//   seed-file    local file (written and flushed): the plans row `file` reads
//   file         the file seed-file wrote, no remote store
//   seed-remote  an empty local file and Redis (written through and flushed): the plans row `remote` reads
//   remote       an empty local file and the Redis seed-remote wrote
//   stopped      an empty local file and that Redis, stopped by the parent
int child_first(const bench::args& a) {
  child_setup c(a);
  const std::string source = a.value("--source"), file = a.value("--file"), url = a.value("--url");
  const int k = std::clamp(a.int_value("--kernels", max_kernels), 1, max_kernels);
  const bool with_file = source != "none";
  const bool with_remote = source == "seed-remote" || source == "remote" || source == "stopped";
  if (source != "none" && source != "seed-file" && source != "file" && !with_remote)
    throw std::invalid_argument("unknown --source " + source);
  if ((source == "remote" || source == "stopped") && access(file.c_str(), F_OK) == 0)
    throw std::runtime_error("the local plan file " + file + " exists: this row needs an empty one");

  bench::device_buffer<unsigned> ran(warm_up_slot + 1);
  BENCH_CUDA(cudaMemset(ran.get(), 0, ran.bytes()));
  // Before any store is configured: the runtime, libcuda's entry points, the device query and the logger
  // are loaded here, so the timed launches pay only for their kernel and its plan.
  warm_up_kernel<<<1, 256, 0, c.stream>>>(ran.get());
  BENCH_CUDA(cudaGetLastError());
  lf::launch(&warm_up_kernel, lf::max_occupancy().items(256).on(c.stream), ran.get());
  BENCH_CUDA(cudaStreamSynchronize(c.stream));
  if (with_file) lf::set_cache_file(file);
  if (with_remote) lf::set_remote_store(url);

  const auto seq = std::make_integer_sequence<int, max_kernels>{};
  const std::vector<fresh_fn> through_launchfit = fresh_table<0>(seq), raw = fresh_table<max_kernels>(seq);
  std::vector<double> lf_us, raw_us;
  std::vector<std::string> matches;
  std::string first_plan;
  for (int i = 0; i < k; ++i) {
    BENCH_CUDA(cudaStreamSynchronize(c.stream));
    auto t0 = clock_type::now();
    raw[i]<<<1, 256, 0, c.stream>>>(ran.get());
    raw_us.push_back(us_since(t0));
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(c.stream));
    t0 = clock_type::now();
    const lf::launched l =
        lf::launch(through_launchfit[i], lf::max_occupancy().items(256).on(c.stream), ran.get());
    lf_us.push_back(us_since(t0));
    matches.push_back(l.plan().match);
    if (i == 0) first_plan = l.plan().to_string();
  }
  BENCH_CUDA(cudaStreamSynchronize(c.stream));

  const bool file_flushed = !(source == "seed-file" || source == "seed-remote") || lf::flush_cache_file(5000);
  const bool remote_flushed = source != "seed-remote" || lf::flush_remote_store(5000);
  const lf::remote_store_stats st = lf::remote_store_statistics();

  const std::vector<unsigned> got = ran.download();
  for (int i = 0; i < k; ++i) {
    if (got[i] != 1)
      c.fail("fresh kernel " + std::to_string(i) + " through launchfit ran " + std::to_string(got[i]) +
             " times");
    if (got[max_kernels + i] != 1)
      c.fail("fresh kernel " + std::to_string(i) + " launched raw ran " +
             std::to_string(got[max_kernels + i]) + " times");
  }
  if (got[warm_up_slot] != 2)
    c.fail("the warm-up kernel ran " + std::to_string(got[warm_up_slot]) + " times, not 2");

  // Where each plan came from.
  for (int i = 0; i < k; ++i) {
    const std::string& m = matches[static_cast<std::size_t>(i)];
    const bool ok = source == "file"     ? m.rfind("cache-file", 0) == 0
                    : source == "remote" ? m == "remote"
                                         : m == "computed";
    if (!ok) {
      c.fail("kernel " + std::to_string(i) + ": plan match \"" + m + "\", expected " +
             (source == "file"     ? "cache-file*"
              : source == "remote" ? "remote"
                                   : "computed"));
      break;
    }
  }
  const std::size_t n = static_cast<std::size_t>(k);
  if (!file_flushed) c.fail("flush_cache_file did not write every plan within 5 s");
  if (!remote_flushed) c.fail("flush_remote_store did not write every plan within 5 s");
  if (!with_remote && st.enabled)
    c.fail("a remote store is configured in a row without one: " + stats_text(st));
  if (with_remote && !st.enabled) c.fail("the remote store is not configured: " + stats_text(st));
  if (source == "seed-remote" && (st.dead || st.failures != 0 || st.writes + st.already_stored != n ||
                                  st.write_drops != 0 || st.hits != 0))
    c.fail("seeding Redis: expected " + std::to_string(n) +
           " plans written and no failure: " + stats_text(st));
  if (source == "remote" &&
      (st.dead || st.failures != 0 || st.refused != 0 || st.hits < n || st.loaded < n || st.writes != 0))
    c.fail("every plan from Redis: expected " + std::to_string(n) +
           " hits, nothing refused or written: " + stats_text(st));
  // Fail open: the first lookup finds the store hung and drops it; no later lookup reaches it.
  if (source == "stopped" && (!st.dead || st.failures < 1 || st.lookups > 1 || st.hits != 0))
    c.fail("a stopped Redis: expected the store dead after one lookup that failed: " + stats_text(st));

  c.out.set("source", source);
  c.out.set_number("kernels", k);
  c.out.set_numbers("launchfit_us", lf_us);
  c.out.set_numbers("raw_us", raw_us);
  c.out.set_words("matches", matches);
  c.out.set("first_plan", first_plan);
  c.out.set_remote(st);
  return c.finish(a.value("--result"));
}

// Host time per warm launch, variants interleaved round by round: <<<>>>, launchfit with no store, with the
// local file, with the file and Redis (--url). Each (round, variant) reconfigures the store, warms up (the
// first launch after a change of the store's inputs is a miss), then times 100-launch batches.
int child_warm(const bench::args& a) {
  child_setup c(a);
  const std::string file = a.value("--file"), url = a.value("--url");
  const int rounds = std::max(1, a.int_value("--rounds", 10));
  const int batches = std::max(1, a.int_value("--batches", 20));
  const int batch = 100;
  const std::uint64_t n = std::uint64_t{1} << 16;
  const std::vector<std::string> names = {"<<<>>>", "launchfit, no store", "launchfit, local file",
                                          "launchfit, local file + Redis"};
  const int variants = url.empty() ? 3 : 4;

  bench::device_buffer<unsigned long long> counter(1);
  unsigned long long* cptr = counter.get();
  const lf::plan p = lf::plan_for(&count_launch, lf::max_occupancy().items(n));
  const unsigned block = p.block.x, grid = lf::grid_for(p, lf::max_occupancy().items(n).work_shape()).x;

  bool file_on = false, remote_on = false;
  const auto configure = [&](int v) {
    const bool want_file = v >= 2, want_remote = v == 3;
    if (remote_on && !want_remote) lf::close_remote_store();
    if (file_on != want_file) {
      if (want_file) {
        lf::set_cache_file(file);
      } else {
        lf::close_cache_file();
      }
    }
    if (!remote_on && want_remote) lf::set_remote_store(url);
    file_on = want_file;
    remote_on = want_remote;
  };

  std::vector<std::vector<double>> us(static_cast<std::size_t>(variants));
  const auto timed = [&](int v, auto&& launch) {
    BENCH_CUDA(cudaMemsetAsync(cptr, 0, sizeof(unsigned long long), c.stream));
    for (int i = 0; i < batch; ++i) launch();
    BENCH_CUDA(cudaGetLastError());
    BENCH_CUDA(cudaStreamSynchronize(c.stream));
    const std::uint64_t builds = lf::detail::stats().builds;
    const lf::remote_store_stats before = lf::remote_store_statistics();
    for (int b = 0; b < batches; ++b) {
      const auto t0 = clock_type::now();
      for (int i = 0; i < batch; ++i) launch();
      const double t = us_since(t0);
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaStreamSynchronize(c.stream));
      us[static_cast<std::size_t>(v)].push_back(t / batch);
    }
    const std::string& name = names[static_cast<std::size_t>(v)];
    const lf::remote_store_stats after = lf::remote_store_statistics();
    if (v > 0 && lf::detail::stats().builds != builds)
      c.fail(name + ": a timed launch built a plan (every one should hit the plan cache)");
    if (v == 3 && (!after.enabled || after.dead))
      c.fail(name + ": the remote store is not in use: " + stats_text(after));
    if (v == 3 && (after.lookups != before.lookups || after.hits != before.hits ||
                   after.writes != before.writes || after.failures != before.failures))
      c.fail(name + ": the hit path reached the remote store: before " + stats_text(before) + "; after " +
             stats_text(after));
    if (v == 2 && !lf::cache_file_open()) c.fail(name + ": no local file is open");
    const unsigned long long expected = static_cast<unsigned long long>(batches + 1) * batch;
    const unsigned long long got = counter.download()[0];
    if (got != expected)
      c.fail(name + ": " + std::to_string(got) + " of " + std::to_string(expected) + " launches ran");
  };
  for (int round = 0; round < rounds; ++round) {
    for (int j = 0; j < variants; ++j) {
      const int v = (j + round) % variants;
      configure(v);
      if (v == 0) {
        timed(v, [&] { count_launch<<<grid, block, 0, c.stream>>>(cptr); });
      } else {
        timed(v, [&] { lf::launch(&count_launch, lf::max_occupancy().items(n).on(c.stream), cptr); });
      }
    }
  }
  configure(0);

  c.out.set("dims", "<<<" + std::to_string(grid) + ", " + std::to_string(block) + ">>>");
  c.out.set_number("batch", batch);
  c.out.set_number("variants", variants);
  for (int v = 0; v < variants; ++v) {
    const std::string key = "variant" + std::to_string(v);
    c.out.set(key + ".name", names[static_cast<std::size_t>(v)]);
    c.out.set_numbers(key + ".us", us[static_cast<std::size_t>(v)]);
  }
  return c.finish(a.value("--result"));
}

// One process of the fleet: an empty local file, the shared Redis, the autotune plugin; launches scale_add
// once with --policy (rerunnable). The tuner (--role tuner) then writes its plan through.
int child_fleet(const bench::args& a) {
  child_setup c(a);
  const std::string role = a.value("--role"), file = a.value("--file"), url = a.value("--url");
  const std::string policy = a.value("--policy");
  const std::size_t n = static_cast<std::size_t>(std::stoull(a.value("--n")));
  const bool tuner = role == "tuner";
  const lf::plugin_info info = lf::load_plugin(a.value("--plugin"));

  std::vector<float> h_in(n);
  for (std::size_t i = 0; i < n; ++i) h_in[i] = static_cast<float>((i * 2654435761u >> 7) & 1023u);
  bench::device_buffer<float> in(n), out(n);
  bench::device_buffer<unsigned long long> runs(1), scratch(1);
  in.upload(h_in);
  BENCH_CUDA(cudaMemset(out.get(), 0xff, out.bytes()));  // NaN: an element never written fails the check
  BENCH_CUDA(cudaMemset(runs.get(), 0, runs.bytes()));
  BENCH_CUDA(cudaMemset(scratch.get(), 0, scratch.bytes()));
  count_launch<<<1, 32, 0, c.stream>>>(scratch.get());
  BENCH_CUDA(cudaGetLastError());
  lf::launch(&count_launch, lf::max_occupancy().items(32).on(c.stream), scratch.get());
  BENCH_CUDA(cudaStreamSynchronize(c.stream));
  lf::set_cache_file(file);
  lf::set_remote_store(url);

  const auto spec = lf::use(policy).grid_stride(n).rerunnable().on(c.stream);
  const auto t0 = clock_type::now();
  const lf::launched l =
      lf::launch(&scale_add, spec, static_cast<const float*>(in.get()), out.get(), n, runs.get());
  const double launch_ms = us_since(t0) / 1000;
  const lf::plan p = l.plan();
  BENCH_CUDA(cudaStreamSynchronize(c.stream));
  const double ready_ms = us_since(t0) / 1000;
  const bool flushed = !tuner || lf::flush_remote_store(5000);
  const lf::remote_store_stats st = lf::remote_store_statistics();

  const std::vector<float> h_out = out.download();
  std::size_t bad = 0, first_bad = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(h_out[i] == 2.f * h_in[i] + 1.f)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  const unsigned long long kernel_runs = runs.download()[0];
  // A stored plan carries the trials of the process that tuned it; only a plan computed here was tuned here,
  // and then the kernel ran more than once.
  const int trials_here = p.match == "computed" ? p.trials : 0;

  if (bad)
    c.fail(std::to_string(bad) + " of " + std::to_string(n) + " elements differ from 2 in + 1; first at " +
           std::to_string(first_bad));
  if (tuner) {
    if (p.match != "computed" || p.trials <= 0 || kernel_runs <= 1)
      c.fail("the tuner did not tune: match " + p.match + ", trials " + std::to_string(p.trials) + ", runs " +
             std::to_string(kernel_runs) + " (" + p.reason + ")");
    if (!flushed || st.dead || st.failures != 0 || st.writes + st.already_stored < 1)
      c.fail("the tuner's plan was not written through: " + stats_text(st));
  } else {
    if (p.match != "remote" || kernel_runs != 1)
      c.fail("expected the tuner's plan from Redis and one run of the kernel: match " + p.match + ", runs " +
             std::to_string(kernel_runs));
    if (st.dead || st.failures != 0 || st.hits < 1) c.fail("Redis did not serve the plan: " + stats_text(st));
  }

  c.out.set("role", role);
  c.out.set("plugin", info.name + " " + info.version);
  c.out.set("match", p.match);
  c.out.set_number("plan_trials", p.trials);
  c.out.set_number("trials_here", trials_here);
  c.out.set_number("tuning_ms", p.tuning_ms);
  c.out.set_number("kernel_runs", static_cast<double>(kernel_runs));
  c.out.set_number("launch_ms", launch_ms);
  c.out.set_number("ready_ms", ready_ms);
  c.out.set("plan", p.to_string());
  c.out.set("reason", p.reason);
  c.out.set_number("bad_elements", static_cast<double>(bad));
  c.out.set_remote(st);
  return c.finish(a.value("--result"));
}

// ---- the parent: phases, results, output ------------------------------------------------------------------

struct child_run {
  int status = -1;  // exit status; -1: it did not exit normally (`why`)
  std::string why;
  record result;
  bool measured() const { return status == 0 || status == 1; }  // 1: it measured, and a check failed
  std::string outcome() const {
    if (status == 0) return "ok";
    if (status == 1) return "verification failed";
    return status < 0 ? why : "exit status " + std::to_string(status) + " (the reason is on stderr above)";
  }
};

class measuring_processes {
 public:
  measuring_processes(std::string exe, const temp_dir& dir, int device)
      : exe_(std::move(exe)), dir_(dir), device_(device) {}

  pid_t start(const std::string& mode, const std::string& tag, std::vector<std::string> args) {
    std::vector<std::string> argv = {exe_,       "--child",       mode, "--device", std::to_string(device_),
                                     "--result", result_path(tag)};
    argv.insert(argv.end(), args.begin(), args.end());
    ::remove(result_path(tag).c_str());
    return spawn(argv, "");
  }
  child_run finish(pid_t pid, const std::string& tag, double timeout_s) {
    child_run r;
    r.status = wait_for(pid, timeout_s, r.why);
    r.result = record::read(result_path(tag));
    return r;
  }
  child_run run(const std::string& mode, const std::string& tag, std::vector<std::string> args,
                double timeout_s) {
    return finish(start(mode, tag, std::move(args)), tag, timeout_s);
  }

 private:
  std::string result_path(const std::string& tag) const { return dir_.file("result-" + tag + ".txt"); }
  std::string exe_;
  const temp_dir& dir_;
  int device_;
};

struct first_row {
  first_row(std::string s, std::string l, std::string e)
      : source(std::move(s)), label(std::move(l)), expected(std::move(e)) {}
  std::string source, label, expected;
  std::string skipped;  // why it did not run
  child_run run;
  std::vector<double> lf_us, raw_us;
  double first_us = NAN, rest_us = NAN, median_us = NAN, raw_median_us = NAN;

  void derive() {
    lf_us = run.result.numbers("launchfit_us");
    raw_us = run.result.numbers("raw_us");
    if (lf_us.empty()) return;
    first_us = lf_us.front();
    rest_us = lf_us.size() > 1 ? bench::median(std::vector<double>(lf_us.begin() + 1, lf_us.end())) : NAN;
    median_us = bench::median(lf_us);
    raw_median_us = bench::median(raw_us);
  }
  bool has_numbers() const { return !lf_us.empty(); }
};

struct fleet_member {
  int index = 0;
  std::string role;
  child_run run;
};

std::string us_text(double us) {
  if (!std::isfinite(us)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, us >= 1000 ? "%.0f" : "%.1f", us);
  return buf;
}

std::string fixed3(double x) {
  if (!std::isfinite(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

std::string ms_text(double x) {
  if (!std::isfinite(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return buf;
}

std::string count_text(double x) { return std::isfinite(x) ? std::to_string(std::llround(x)) : "-"; }

// The plans' match level: one word when every plan of the row has the same, else the mix.
std::string match_text(const std::vector<std::string>& matches) {
  if (matches.empty()) return "-";
  std::vector<std::pair<std::string, int>> seen;
  for (const auto& m : matches) {
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == m; });
    if (it == seen.end()) {
      seen.emplace_back(m, 1);
    } else {
      ++it->second;
    }
  }
  if (seen.size() == 1) return seen[0].first;
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : ", ") + s.first + " x" + std::to_string(s.second);
  return out;
}

std::string json_remote(const record& r) {
  if (!r.has("remote.enabled")) return "null";
  std::ostringstream os;
  const char* fields[] = {"enabled", "dead",   "lookups",        "hits",        "refused",
                          "loaded",  "writes", "already_stored", "write_drops", "failures"};
  os << "{";
  for (std::size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i) {
    os << (i ? "," : "") << "\"" << fields[i]
       << "\":" << bench::json_number(r.number(std::string("remote.") + fields[i]));
  }
  return os.str() + "}";
}

std::string json_numbers(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + bench::json_number(v[i]);
  return s + "]";
}

std::string json_strings(const std::vector<std::string>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + bench::json_string(v[i]);
  return s + "]";
}

std::string remote_summary(const record& r) {
  if (!r.has("remote.enabled") || r.number("remote.enabled") == 0) return "-";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.0f / %.0f / %.0f / %.0f%s", r.number("remote.lookups"),
                r.number("remote.hits"), r.number("remote.writes"), r.number("remote.failures"),
                r.number("remote.dead") != 0 ? ", dead" : "");
  return buf;
}

int check_redis(const std::string& program) {
  temp_dir dir;
  redis_server redis;
  std::printf("# redis check (no GPU)\n\nprogram: %s\n", program.empty() ? "(not found)" : program.c_str());
  if (!redis.start(program, dir.path())) {
    std::printf("cannot start Redis: %s\n", redis.reason().c_str());
    return 2;
  }
  const pid_t pid = redis.pid();
  std::printf("started redis %s at %s (pid %d); keys: %lld\n", redis.version().c_str(), redis.url().c_str(),
              static_cast<int>(pid), redis.keys());
  std::string why;
  auto t0 = clock_type::now();
  if (!redis.pause(why)) {
    std::printf("SIGSTOP: %s\n", why.c_str());
    return 2;
  }
  std::printf("stopped (SIGSTOP): PING unanswered, gave up after %.0f ms\n", us_since(t0) / 1000);
  t0 = clock_type::now();
  if (!redis.resume(why)) {
    std::printf("SIGCONT: %s\n", why.c_str());
    return 2;
  }
  std::printf("continued (SIGCONT): PING answered in %.1f ms\n", us_since(t0) / 1000);
  redis.stop();
  if (kill(pid, 0) == 0 || errno != ESRCH) {
    std::printf("pid %d is still there after stop\n", static_cast<int>(pid));
    return 2;
  }
  std::printf("stopped by PID %d: gone\nredis check: ok\n", static_cast<int>(pid));
  return 0;
}

int run_parent(const bench::args& a) {
  const auto start = clock_type::now();
  const bool quick = a.flag("--quick");
  const std::string json_path = a.value("--json");
  const std::string redis_program =
      find_program(a.value("--redis-server").empty() ? "redis-server" : a.value("--redis-server"));
  if (a.flag("--check-redis")) return check_redis(redis_program);

  const int kernels = std::clamp(a.int_value("--kernels", quick ? 8 : max_kernels), 2, max_kernels);
  const int fleet = std::clamp(a.int_value("--fleet", quick ? 4 : 8), 2, 32);
  const int rounds = std::max(1, a.int_value("--rounds", quick ? 2 : 10));
  const int device = a.int_value("--device", 0);
  const std::string exe = self_exe();
  std::string plugin = a.value("--autotune-plugin");
  if (plugin.empty()) plugin = directory_of(exe) + "/../plugins/liblaunchfit-autotune.so";
  const std::string policy = a.value("--autotune-policy").empty()
                                 ? (quick ? "autotune(max_trials=16,max_ms=50)" : "autotune(max_trials=40)")
                                 : a.value("--autotune-policy");
  const std::size_t fleet_n = quick ? (std::size_t{1} << 20) : (std::size_t{1} << 24);

  const bench::device_info dev = bench::open_device(device);
  std::printf("# launchfit plan store: memory -> local file -> Redis\n\ndevice: %s\n",
              dev.describe().c_str());
  // Every row configures its own store: one from the environment would answer where the row says it must not.
  for (const char* var : {"LAUNCHFIT_CACHE", "LAUNCHFIT_CACHE_MODE", "LAUNCHFIT_REMOTE"}) {
    if (std::getenv(var)) {
      std::printf("note: %s is set; ignored (unset for every measuring process)\n", var);
      unsetenv(var);
    }
  }
  if (std::getenv("LAUNCHFIT_POLICY")) std::printf("note: LAUNCHFIT_POLICY is set; overrides apply\n");

  int failures = 0, errors = 0;
  const auto report = [&](const std::string& what, const child_run& r) {
    for (const auto& f : r.result.all("failure")) std::printf("FAILED: %s: %s\n", what.c_str(), f.c_str());
    if (r.status == 1) ++failures;
    if (!r.measured()) {
      ++errors;
      std::printf("ERROR: %s: %s\n", what.c_str(), r.outcome().c_str());
    }
  };

  temp_dir dir;
  install_interrupt_handlers();
  redis_server redis;
  const bool have_redis = redis.start(redis_program, dir.path());
  const std::string redis_note = have_redis ? "redis " + redis.version() + " at " + redis.url() + " (pid " +
                                                  std::to_string(redis.pid()) + ")"
                                            : "Redis rows skipped: " + redis.reason();
  std::printf("%s\nkernels per first-launch row: %d; fleet: %d processes\n\n", redis_note.c_str(), kernels,
              fleet);
  measuring_processes children(exe, dir, device);
  const std::string k_arg = std::to_string(kernels);
  const double child_timeout_s = 300;

  // ---- first launches ----
  std::vector<first_row> rows = {
      {"none", "(a) nowhere: no local file, no remote store", "computed"},
      {"seed-file", "computed with a local file open, written and flushed (the plans row b reads)",
       "computed"},
      {"file", "(b) in the local file only (written by the previous process)", "cache-file*"},
      {"seed-remote",
       "computed with an empty local file and an empty Redis, written through (the plans row c reads)",
       "computed"},
      {"remote", "(c) only in Redis (written by another process; empty local file)", "remote"},
      {"stopped", "(d) in Redis, Redis stopped with SIGSTOP: fail open", "computed"},
  };
  const auto row = [&](const std::string& source) -> first_row& {
    for (auto& r : rows)
      if (r.source == source) return r;
    throw std::logic_error("no row " + source);
  };
  const auto run_row = [&](first_row& r, const std::string& file, const std::string& url) {
    std::printf("first launches: %s ...\n", r.label.c_str());
    std::vector<std::string> args = {"--source", r.source, "--kernels", k_arg};
    if (!file.empty()) args.insert(args.end(), {"--file", file});
    if (!url.empty()) args.insert(args.end(), {"--url", url});
    r.run = children.run("first", r.source, args, child_timeout_s);
    r.derive();
    report(r.source, r.run);
    if (r.has_numbers())
      std::printf(
          "  %s: first %s us, median of the rest %s us, <<<>>> %s us; remote lookups/hits/writes/failures "
          "%s\n",
          r.run.outcome().c_str(), us_text(r.first_us).c_str(), us_text(r.rest_us).c_str(),
          us_text(r.raw_median_us).c_str(), remote_summary(r.run.result).c_str());
  };

  run_row(row("none"), "", "");
  const std::string seeded_file = dir.file("plans-seed-file.json");
  run_row(row("seed-file"), seeded_file, "");
  if (row("seed-file").run.status == 0) {
    run_row(row("file"), seeded_file, "");
  } else {
    row("file").skipped = "the process that writes its plans failed";
  }

  long long keys_seeded = -1, keys_after_read = -1;
  if (have_redis) {
    run_row(row("seed-remote"), dir.file("plans-seed-remote.json"), redis.url());
    keys_seeded = redis.keys();
    if (row("seed-remote").run.status == 0 && keys_seeded != kernels) {
      ++failures;
      std::printf("FAILED: Redis holds %lld keys after the seed, expected %d\n", keys_seeded, kernels);
    }
    if (row("seed-remote").run.status == 0) {
      run_row(row("remote"), dir.file("plans-remote.json"), redis.url());
      keys_after_read = redis.keys();
      if (keys_after_read != keys_seeded) {
        ++failures;
        std::printf("FAILED: Redis went from %lld to %lld keys while a process only read it\n", keys_seeded,
                    keys_after_read);
      }
    } else {
      row("remote").skipped = "the process that writes its plans to Redis failed";
    }
    std::string why;
    if (redis.pause(why)) {
      run_row(row("stopped"), dir.file("plans-stopped.json"), redis.url());
    } else {
      row("stopped").skipped = why;
    }
    if (!redis.resume(why)) {
      ++errors;
      std::printf("ERROR: Redis did not come back after SIGCONT: %s\n", why.c_str());
    }
  } else {
    for (const char* s : {"seed-remote", "remote", "stopped"}) row(s).skipped = redis.reason();
  }

  // ---- warm launches ----
  std::printf("warm launches: interleaved batches ...\n");
  std::vector<std::string> warm_args = {"--file",    dir.file("plans-warm.json"),
                                        "--rounds",  std::to_string(rounds),
                                        "--batches", quick ? "5" : "20"};
  if (have_redis && redis.running() && !redis.paused())
    warm_args.insert(warm_args.end(), {"--url", redis.url()});
  const child_run warm = children.run("warm", "warm", warm_args, child_timeout_s);
  report("warm launches", warm);
  struct warm_variant {
    std::string name;
    std::vector<double> us;
    double median = NAN;
  };
  std::vector<warm_variant> warm_variants;
  for (int v = 0; v < static_cast<int>(warm.result.number("variants")); ++v) {
    const std::string key = "variant" + std::to_string(v);
    warm_variant w{warm.result.get(key + ".name"), warm.result.numbers(key + ".us")};
    w.median = bench::median(w.us);
    warm_variants.push_back(w);
  }
  const std::string warm_remote_skipped =
      warm_variants.size() == 3 ? (have_redis ? "Redis did not come back" : redis.reason()) : "";

  // ---- fleet ----
  std::vector<fleet_member> members;
  std::string fleet_skipped;
  if (!have_redis || !redis.running() || redis.paused()) {
    fleet_skipped = have_redis ? "Redis did not come back" : redis.reason();
  } else if (access(plugin.c_str(), R_OK) != 0) {
    fleet_skipped = "no autotune plugin at " + plugin + " (--autotune-plugin PATH)";
  } else {
    const auto fleet_args = [&](int i, const char* role) {
      return std::vector<std::string>{
          "--role",   role,        "--file",   dir.file("plans-fleet-" + std::to_string(i) + ".json"),
          "--url",    redis.url(), "--plugin", plugin,
          "--policy", policy,      "--n",      std::to_string(fleet_n)};
    };
    std::printf("fleet: process 0 tunes with %s ...\n", policy.c_str());
    members.push_back(
        {0, "tuner", children.run("fleet", "fleet-0", fleet_args(0, "tuner"), child_timeout_s)});
    report("fleet process 0 (tuner)", members[0].run);
    if (members[0].run.measured()) {
      std::printf("fleet: processes 1-%d start together ...\n", fleet - 1);
      std::vector<pid_t> pids;
      for (int i = 1; i < fleet; ++i)
        pids.push_back(children.start("fleet", "fleet-" + std::to_string(i), fleet_args(i, "reuser")));
      const auto t0 = clock_type::now();
      for (int i = 1; i < fleet; ++i) {
        const double left = std::max(1.0, child_timeout_s - bench::seconds_since(t0));
        members.push_back(
            {i, "reuser",
             children.finish(pids[static_cast<std::size_t>(i - 1)], "fleet-" + std::to_string(i), left)});
        report("fleet process " + std::to_string(i), members.back().run);
      }
    } else {
      fleet_skipped = "the tuning process failed";
    }
  }
  redis.stop();

  // ---- results ----
  const double total_s = bench::seconds_since(start);
  if (!json_path.empty()) {
    std::ostringstream js;
    js << "{\n\"benchmark\":\"plan-store\",\n\"device\":" << dev.json()
       << ",\n\"quick\":" << (quick ? "true" : "false") << ",\n\"kernels\":" << kernels
       << ",\n\"redis\":{\"started\":" << (have_redis ? "true" : "false")
       << ",\"program\":" << bench::json_string(redis_program)
       << ",\"version\":" << bench::json_string(redis.version())
       << ",\"reason\":" << bench::json_string(have_redis ? "" : redis.reason())
       << ",\"keys_after_seed\":" << keys_seeded << ",\"keys_after_read\":" << keys_after_read
       << "},\n\"first_launch\":[";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const first_row& r = rows[i];
      js << (i ? ",\n" : "\n") << "{\"row\":" << bench::json_string(r.source)
         << ",\"label\":" << bench::json_string(r.label)
         << ",\"expected_match\":" << bench::json_string(r.expected)
         << ",\"skipped\":" << (r.skipped.empty() ? "null" : bench::json_string(r.skipped))
         << ",\"outcome\":" << bench::json_string(r.skipped.empty() ? r.run.outcome() : "skipped")
         << ",\"first_us\":" << bench::json_number(r.first_us)
         << ",\"rest_median_us\":" << bench::json_number(r.rest_us)
         << ",\"median_us\":" << bench::json_number(r.median_us)
         << ",\"raw_median_us\":" << bench::json_number(r.raw_median_us)
         << ",\"launchfit_us\":" << json_numbers(r.lf_us) << ",\"raw_us\":" << json_numbers(r.raw_us)
         << ",\"matches\":" << json_strings(r.run.result.words("matches"))
         << ",\"first_plan\":" << bench::json_string(r.run.result.get("first_plan"))
         << ",\"remote\":" << json_remote(r.run.result)
         << ",\"failures\":" << json_strings(r.run.result.all("failure")) << "}";
    }
    js << "],\n\"warm\":{\"batch\":100,\"dims\":" << bench::json_string(warm.result.get("dims"))
       << ",\"outcome\":" << bench::json_string(warm.outcome()) << ",\"remote_skipped\":"
       << (warm_remote_skipped.empty() ? "null" : bench::json_string(warm_remote_skipped))
       << ",\"variants\":[";
    for (std::size_t i = 0; i < warm_variants.size(); ++i) {
      js << (i ? "," : "") << "{\"name\":" << bench::json_string(warm_variants[i].name)
         << ",\"median_us_per_launch\":" << bench::json_number(warm_variants[i].median)
         << ",\"us_per_launch\":" << json_numbers(warm_variants[i].us) << "}";
    }
    js << "],\"failures\":" << json_strings(warm.result.all("failure"))
       << "},\n\"fleet\":{\"processes\":" << fleet << ",\"policy\":" << bench::json_string(policy)
       << ",\"n\":" << fleet_n
       << ",\"skipped\":" << (fleet_skipped.empty() ? "null" : bench::json_string(fleet_skipped))
       << ",\"members\":[";
    for (std::size_t i = 0; i < members.size(); ++i) {
      const record& r = members[i].run.result;
      js << (i ? ",\n" : "\n") << "{\"index\":" << members[i].index
         << ",\"role\":" << bench::json_string(members[i].role)
         << ",\"outcome\":" << bench::json_string(members[i].run.outcome())
         << ",\"match\":" << bench::json_string(r.get("match"))
         << ",\"trials_here\":" << bench::json_number(r.number("trials_here"))
         << ",\"plan_trials\":" << bench::json_number(r.number("plan_trials"))
         << ",\"tuning_ms\":" << bench::json_number(r.number("tuning_ms"))
         << ",\"kernel_runs\":" << bench::json_number(r.number("kernel_runs"))
         << ",\"first_launch_ms\":" << bench::json_number(r.number("launch_ms"))
         << ",\"ready_ms\":" << bench::json_number(r.number("ready_ms"))
         << ",\"plan\":" << bench::json_string(r.get("plan"))
         << ",\"bad_elements\":" << bench::json_number(r.number("bad_elements"))
         << ",\"remote\":" << json_remote(r) << ",\"failures\":" << json_strings(r.all("failure")) << "}";
    }
    js << "]},\n\"failures\":" << failures << ",\n\"errors\":" << errors
       << ",\n\"total_s\":" << bench::json_number(total_s) << "\n}\n";
    bench::write_file(json_path, js.str());
    std::printf("\nwrote %s\n", json_path.c_str());
  }

  std::printf(
      "\n## First launch of a kernel never launched before (host us; %d distinct kernels per row, each in "
      "a fresh process)\n\n"
      "| plan | match | first kernel | median of the rest | median | <<<>>> same process | remote lookups / "
      "hits / writes / failures | result |\n|---|---|---:|---:|---:|---:|---|---|\n",
      kernels);
  for (const auto& r : rows) {
    if (!r.skipped.empty()) {
      std::printf("| %s | %s | - | - | - | - | - | skipped: %s |\n", r.label.c_str(), r.expected.c_str(),
                  r.skipped.c_str());
      continue;
    }
    std::printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.label.c_str(),
                match_text(r.run.result.words("matches")).c_str(), us_text(r.first_us).c_str(),
                us_text(r.rest_us).c_str(), us_text(r.median_us).c_str(), us_text(r.raw_median_us).c_str(),
                remote_summary(r.run.result).c_str(), r.run.outcome().c_str());
  }
  if (!row("none").run.result.get("first_plan").empty())
    std::printf("\nplan of fresh kernel 0 (row a): %s\n", row("none").run.result.get("first_plan").c_str());

  std::printf(
      "\n## Warm launch: host us per launch, %s, 100-launch batches, variants interleaved (%d rounds)\n\n"
      "| launch | median us | vs <<<>>> | vs launchfit, no store |\n|---|---:|---:|---:|\n",
      warm.result.has("dims") ? warm.result.get("dims").c_str() : "-", rounds);
  for (std::size_t i = 0; i < warm_variants.size(); ++i) {
    const double m = warm_variants[i].median;
    std::printf("| %s | %.3f | %.3f | %s |\n", warm_variants[i].name.c_str(), m, m / warm_variants[0].median,
                i >= 1 ? fixed3(m / warm_variants[1].median).c_str() : "-");
  }
  if (!warm_remote_skipped.empty())
    std::printf("| launchfit, local file + Redis | - | - | skipped: %s |\n", warm_remote_skipped.c_str());
  std::printf("result: %s\n", warm.outcome().c_str());

  std::printf("\n## Fleet: %d processes, empty local files, one Redis; %s, grid_stride(%zu), rerunnable\n\n",
              fleet, policy.c_str(), fleet_n);
  if (!fleet_skipped.empty()) std::printf("skipped: %s\n", fleet_skipped.c_str());
  if (!members.empty()) {
    std::printf(
        "| process | role | match | trials made here | plan.trials | kernel runs | first launch ms | "
        "result ready ms | plan | result |\n|---:|---|---|---:|---:|---:|---:|---:|---|---|\n");
    for (const auto& m : members) {
      const record& r = m.run.result;
      std::printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.index, m.role.c_str(),
                  r.has("match") ? r.get("match").c_str() : "-", count_text(r.number("trials_here")).c_str(),
                  count_text(r.number("plan_trials")).c_str(), count_text(r.number("kernel_runs")).c_str(),
                  ms_text(r.number("launch_ms")).c_str(), ms_text(r.number("ready_ms")).c_str(),
                  r.has("plan") ? r.get("plan").c_str() : "-", m.run.outcome().c_str());
    }
  }

  // ---- summary ----
  const auto row_value = [&](const first_row& r, bool split) -> std::string {
    if (!r.skipped.empty()) return "skipped: " + r.skipped;
    if (!r.has_numbers()) return r.run.outcome();
    return split ? us_text(r.first_us) + " us; " + us_text(r.rest_us) + " us" : us_text(r.median_us) + " us";
  };
  std::printf("\n## Summary: first launch of a fresh kernel, warm launch, fleet (host time)\n\n");
  std::printf("| measurement | value |\n|---|---|\n");
  std::printf("| first launch, `<<<>>>` (fresh kernels of row a) | %s us |\n",
              us_text(row("none").raw_median_us).c_str());
  std::printf("| first launch, plan nowhere (a) | %s |\n", row_value(row("none"), false).c_str());
  std::printf("| first launch, plan in the local file only (b) | %s |\n",
              row_value(row("file"), false).c_str());
  std::printf("| first launch, plan only in Redis (c): first lookup; the rest | %s |\n",
              row_value(row("remote"), true).c_str());
  std::printf("| first launch, Redis stopped (d): first lookup; the rest | %s |\n",
              row_value(row("stopped"), true).c_str());
  std::string warm_text;
  for (const auto& w : warm_variants) warm_text += (warm_text.empty() ? "" : " / ") + fixed3(w.median);
  std::printf(
      "| warm launch us: %s | %s |\n",
      warm_variants.size() == 4 ? "<<<>>> / no store / file / file + Redis" : "<<<>>> / no store / file",
      warm_text.empty() ? warm.outcome().c_str() : warm_text.c_str());
  if (!fleet_skipped.empty()) {
    std::printf("| fleet | skipped: %s |\n", fleet_skipped.c_str());
  } else {
    std::string trials;
    std::vector<std::string> matches;
    std::vector<double> reuse_ms;
    for (const auto& m : members) {
      if (m.index == 0) continue;
      trials += (trials.empty() ? "" : " ") + count_text(m.run.result.number("trials_here"));
      matches.push_back(m.run.result.has("match") ? m.run.result.get("match") : "none");
      reuse_ms.push_back(m.run.result.number("launch_ms"));
    }
    std::printf("| fleet of %d: trials made by the tuner; by each other process | %s; %s |\n", fleet,
                members.empty() ? "-" : count_text(members[0].run.result.number("trials_here")).c_str(),
                trials.c_str());
    std::printf("| fleet: where the others' plans came from | %s |\n", match_text(matches).c_str());
    std::printf("| fleet: first launch of the tuner; median of the others | %s ms; %s ms |\n",
                ms_text(members.empty() ? NAN : members[0].run.result.number("launch_ms")).c_str(),
                ms_text(reuse_ms.empty() ? NAN : bench::median(reuse_ms)).c_str());
  }
  const std::string verdict =
      errors ? std::to_string(errors) + " ERROR(S)" +
                   (failures ? ", " + std::to_string(failures) + " FAILED" : "")
             : bench::verification_summary(failures,
                                           "every plan came from the layer its row names, every launch ran");
  std::printf("\nplan-store: %s; %s; total %.1f s\n", verdict.c_str(),
              have_redis ? ("redis " + redis.version()).c_str() : "Redis rows skipped", total_s);
  return errors ? 2 : failures ? 1 : 0;
}

int run(int argc, char** argv) {
  const bench::args a(argc, argv);
  const std::string mode = a.value("--child");
  if (mode.empty()) return run_parent(a);
  // Several processes write to the same stderr: say which one failed.
  const std::string which =
      "measuring process (" + mode + " " + a.value("--source") + a.value("--role") + ")";
  try {
    if (mode == "first") return child_first(a);
    if (mode == "warm") return child_warm(a);
    if (mode == "fleet") return child_fleet(a);
  } catch (const std::exception& e) {
    throw std::runtime_error(which + ": " + e.what());
  }
  throw std::invalid_argument("unknown --child " + mode);
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("plan-store", run, argc, argv); }
