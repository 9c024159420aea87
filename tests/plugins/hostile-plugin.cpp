// SPDX-License-Identifier: MIT
// Hostile test plugins for the C ABI: a plugin is code launchfit does not control, so these break every rule
// of plugin.h on purpose. The descriptor variant is chosen at build time (LF_HOSTILE_DESC), the behaviour of
// each call at run time from the policy parameters:
//   throw=entry|create|choose|destroy|feedback|bucket   that entry point throws (kind=int: a non-std type)
//   say=decline|error|ok            what choose() returns; text=nasty fills errbuf and the reason with
//   control
//                                   characters, invalid UTF-8 and no NUL; text=long with 10 KB of words
//   block=N, by=N, bz=N, grid=N, bps=N, trials=N, ms=nan|inf|-1   numbers choose() returns
//   nulls=1                         choose() calls every callback with a null context and time_plan with a
//                                   null plan, and writes their answers into the reason
//   coop=1                          choose() returns a cooperative plan (the launch may not be)
//   ms=huge                         choose() reports 1e13 ms of tuning (beyond what a plan file holds)
//   trial_grid=N                    choose() first times a plan of 128 threads and a fixed grid of N blocks,
//                                   and writes the answer into the reason ("trial_grid: <ms>")
//   work_bucket() calls hook("bucket") before it answers
// LF_TEST_HOOK (an address in hex of `void hook(const char* where)`, set by a test in its own process) is
// called from the static constructor ("ctor") and destructor ("dtor"), the entry ("entry"), create, choose
// and destroy, so a test can call back into launchfit from inside plugin code.
#include <launchfit/plugin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#ifndef LF_HOSTILE_DESC
#error "define LF_HOSTILE_DESC"
#endif
#ifndef LF_TEST_NAME
#error "define LF_TEST_NAME"
#endif

#define DESC_NORMAL 0
#define DESC_THROW_ENTRY 1   // launchfit_plugin_entry() throws std::runtime_error (its message has a newline)
#define DESC_NULL_CHOOSE 2   // no choose()
#define DESC_NULL_ENTRY 3    // launchfit_plugin_entry() returns NULL
#define DESC_NEWER_MINOR 4   // ABI 1.(minor+1), a larger descriptor with a field launchfit does not know
#define DESC_ZERO_SIZE 5     // struct_size 0
#define DESC_HUGE_SIZE 6     // struct_size 0xffffffff
#define DESC_OLDEST 7        // struct_size the ABI minimum: no work_bucket
#define DESC_NULL_NAME 8     // name NULL
#define DESC_LONG_VERSION 9  // a 10 KB version string with control characters
#define DESC_THROW_INT 10    // launchfit_plugin_entry() throws an int
#define DESC_NEWLINE_NAME 11  // name "test_bad\nname"

namespace {

using hook_fn = void (*)(const char*);

void hook(const char* where) {
  const char* v = std::getenv("LF_TEST_HOOK");
  if (!v || !*v) return;
  auto fn = reinterpret_cast<hook_fn>(static_cast<std::uintptr_t>(std::strtoull(v, nullptr, 16)));
  if (fn) fn(where);
}

struct at_load {
  at_load() { hook("ctor"); }
  ~at_load() { hook("dtor"); }  // when the library is closed (dlclose) or at exit
} at_load_;

struct state {
  std::string params;
  std::string get(const std::string& key) const {
    const std::string k = key + "=";
    std::size_t at = 0;
    while (at < params.size()) {
      std::size_t end = params.find(',', at);
      if (end == std::string::npos) end = params.size();
      if (params.compare(at, k.size(), k) == 0) return params.substr(at + k.size(), end - at - k.size());
      at = end + 1;
    }
    return "";
  }
  long num(const std::string& key, long otherwise) const {
    const std::string v = get(key);
    return v.empty() ? otherwise : std::strtol(v.c_str(), nullptr, 10);
  }
  [[noreturn]] void raise(const char* where) const {
    if (get("kind") == "int") throw 42;
    throw std::runtime_error(std::string("boom from ") + where + "\nsecond line");
  }
  void maybe_throw(const char* where) const {
    if (get("throw") == where) raise(where);
  }
};

// Control characters, an escape sequence, a lone continuation byte, an overlong '/', a surrogate, and no NUL.
void nasty(char* buf, std::size_t size) {
  static const char text[] =
      "line one\nline two\r\x1b[31mred\x1b[0m\t\x7f \x80 \xc0\xaf \xed\xa0\x80 caf\xc3\xa9 \xe2\x80\xae"
      "rtl";
  if (size == 0) return;
  std::size_t i = 0;
  for (; i < size; ++i) buf[i] = text[i % (sizeof text - 1)];  // fills the buffer: no terminating NUL
}

int create(const char* params, void** out, char* errbuf, size_t errbuf_size) {
  hook("create");
  auto* s = new state;
  s->params = params ? params : "";
  try {
    s->maybe_throw("create");
  } catch (...) {
    delete s;
    throw;
  }
  (void)errbuf;
  (void)errbuf_size;
  *out = s;
  return LAUNCHFIT_PLUGIN_OK;
}

int choose(void* st, const launchfit_query* q, launchfit_plan* plan, char* errbuf, size_t errbuf_size) {
  hook("choose");
  const auto* s = static_cast<const state*>(st);
  s->maybe_throw("choose");
  const std::string say = s->get("say");
  const std::string text = s->get("text");
  if (text == "nasty") {
    nasty(errbuf, errbuf_size);
    nasty(plan->reason, sizeof plan->reason);
  } else if (text == "long") {
    std::string words;
    while (words.size() < 10000) words += "word ";
    std::snprintf(errbuf, errbuf_size, "%s", words.c_str());
    std::snprintf(plan->reason, sizeof plan->reason, "%s", words.c_str());
  }
  if (s->get("nulls") == "1") {
    const launchfit_plan blank = *plan;
    std::snprintf(plan->reason, sizeof plan->reason, "nulls: time_plan %g %g %g, active_blocks %d, smem %zu, setup %g",
                  q->time_plan ? q->time_plan(nullptr, &blank) : -2.0, q->time_plan ? q->time_plan(q->ctx, nullptr) : -2.0,
                  q->time_plan ? q->time_plan(nullptr, nullptr) : -2.0,
                  q->active_blocks ? q->active_blocks(nullptr, 128, 0) : -2,
                  q->smem_for_block ? q->smem_for_block(nullptr, 128) : static_cast<size_t>(7),
                  LAUNCHFIT_HAS_FIELD(q, launchfit_query, setup_ms) && q->setup_ms ? q->setup_ms(nullptr) : -2.0);
    plan->block_x = 128;
    return LAUNCHFIT_PLUGIN_OK;
  }
  if (say == "decline") return LAUNCHFIT_PLUGIN_DECLINE;
  if (say == "error") return LAUNCHFIT_PLUGIN_ERROR;
  if (say == "status") return 77;  // not a launchfit_plugin_status
  const long block = s->num("block", 64);
  plan->block_x = static_cast<uint32_t>(block);
  plan->block_y = static_cast<uint32_t>(s->num("by", 1));
  plan->block_z = static_cast<uint32_t>(s->num("bz", 1));
  plan->blocks_per_sm = static_cast<int32_t>(s->num("bps", 0));
  if (const long grid = s->num("grid", 0)) plan->grid_x = static_cast<uint32_t>(grid);
  plan->cooperative = s->get("coop") == "1" ? 1 : 0;
  plan->trials = static_cast<int32_t>(s->num("trials", 0));
  const std::string ms = s->get("ms");
  if (ms == "nan") plan->tuning_ms = std::numeric_limits<double>::quiet_NaN();
  if (ms == "inf") plan->tuning_ms = std::numeric_limits<double>::infinity();
  if (ms == "-1") plan->tuning_ms = -1;
  if (ms == "huge") plan->tuning_ms = 1e13;
  if (text.empty()) std::snprintf(plan->reason, sizeof plan->reason, "hostile %ld threads", block);
  if (const long trial_grid = s->num("trial_grid", 0)) {
    launchfit_plan trial = *plan;
    trial.block_x = 128;
    trial.block_y = trial.block_z = 1;
    trial.grid_x = static_cast<uint32_t>(trial_grid);
    trial.grid_y = trial.grid_z = 1;
    const double answer = q->time_plan ? q->time_plan(q->ctx, &trial) : -2.0;
    std::snprintf(plan->reason, sizeof plan->reason, "trial_grid: %g", answer);
  }
  (void)q;
  return LAUNCHFIT_PLUGIN_OK;
}

void feedback(void* st, const launchfit_plan*, double) {
  static_cast<const state*>(st)->maybe_throw("feedback");
}

void destroy(void* st) {
  hook("destroy");
  auto* s = static_cast<state*>(st);
  if (s->get("throw") == "destroy") {
    const state copy = *s;
    delete s;
    copy.raise("destroy");
  }
  delete s;
}

uint64_t work_bucket(void* st, uint32_t, uint64_t n, uint32_t) {
  hook("bucket");
  static_cast<const state*>(st)->maybe_throw("bucket");
  return n ? 1 : 0;
}

std::string long_version() {
  std::string v = "1.0.0";
  while (v.size() < 10000) v += "\n\x1b[2J-padding";
  return v;
}

struct newer_descriptor {
  launchfit_plugin_descriptor base;
  void* added_in_a_later_minor;
};

const std::string version_text = LF_HOSTILE_DESC == DESC_LONG_VERSION ? long_version() : "1.0.0";

const newer_descriptor descriptor = {
    {
        LF_HOSTILE_DESC == DESC_NEWER_MINOR ? static_cast<uint32_t>(sizeof(newer_descriptor))
        : LF_HOSTILE_DESC == DESC_ZERO_SIZE ? 0u
        : LF_HOSTILE_DESC == DESC_HUGE_SIZE ? 0xffffffffu
        : LF_HOSTILE_DESC == DESC_OLDEST    ? static_cast<uint32_t>(LAUNCHFIT_PLUGIN_DESCRIPTOR_MIN_SIZE)
                                            : static_cast<uint32_t>(sizeof(launchfit_plugin_descriptor)),
        LF_HOSTILE_DESC == DESC_NEWER_MINOR ? LAUNCHFIT_PLUGIN_ABI_VERSION + 1 : LAUNCHFIT_PLUGIN_ABI_VERSION,
        LF_HOSTILE_DESC == DESC_NULL_NAME      ? nullptr
        : LF_HOSTILE_DESC == DESC_NEWLINE_NAME ? "test_bad\nname"
                                               : LF_TEST_NAME,
        version_text.c_str(), create, LF_HOSTILE_DESC == DESC_NULL_CHOOSE ? nullptr : choose, feedback,
        destroy,
        work_bucket,  // DESC_OLDEST: present, but beyond struct_size, so launchfit must not call it
    },
    nullptr,
};

}  // namespace

extern "C" LAUNCHFIT_PLUGIN_EXPORT const launchfit_plugin_descriptor* launchfit_plugin_entry(void) {
  hook("entry");
  if (LF_HOSTILE_DESC == DESC_THROW_ENTRY) throw std::runtime_error("entry exploded\nsecond line");
  if (LF_HOSTILE_DESC == DESC_THROW_INT) throw 7;
  if (LF_HOSTILE_DESC == DESC_NULL_ENTRY) return nullptr;
  return &descriptor.base;
}
