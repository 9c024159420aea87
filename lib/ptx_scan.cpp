// SPDX-License-Identifier: MIT
#include "ptx_scan.hpp"

#include <cctype>
#include <map>
#include <mutex>
#include <vector>

#include "lifecycle.hpp"

namespace launchfit::detail {
namespace {

bool is_name_char(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
}

// Skips white space and // or /* */ comments from `i`.
std::size_t skip_blank(std::string_view s, std::size_t i) noexcept {
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else if (s.compare(i, 2, "//") == 0) {
      const std::size_t e = s.find('\n', i);
      i = e == std::string_view::npos ? s.size() : e + 1;
    } else if (s.compare(i, 2, "/*") == 0) {
      const std::size_t e = s.find("*/", i + 2);
      i = e == std::string_view::npos ? s.size() : e + 2;
    } else {
      break;
    }
  }
  return i;
}

struct function_text {
  std::string name;
  bool entry = false;
  std::string_view body;
};

// Each .entry and .func with its body (from its '{' to the matching '}'). Declarations without a body
// (.extern .func prototypes) are skipped.
std::vector<function_text> functions_of(std::string_view ptx) {
  std::vector<function_text> out;
  std::size_t i = 0;
  while (i < ptx.size()) {
    const std::size_t e = ptx.find(".entry", i), f = ptx.find(".func", i);
    const std::size_t at = std::min(e, f);
    if (at == std::string_view::npos) break;
    const bool entry = at == e;
    std::size_t j = at + (entry ? 6 : 5);
    if (j < ptx.size() && is_name_char(ptx[j])) {  // ".entryx", ".function": not the directive
      i = j;
      continue;
    }
    // .func may have a return parameter list first: ".func (.param .b32 r) name(".
    j = skip_blank(ptx, j);
    if (!entry && j < ptx.size() && ptx[j] == '(') {
      const std::size_t close = ptx.find(')', j);
      if (close == std::string_view::npos) break;
      j = skip_blank(ptx, close + 1);
    }
    std::size_t n = j;
    while (n < ptx.size() && is_name_char(ptx[n])) ++n;
    function_text fn;
    fn.name = std::string(ptx.substr(j, n - j));
    fn.entry = entry;
    // The body: the first '{' before the next ';' at depth 0 (a prototype ends with ';').
    std::size_t k = n;
    int parens = 0;
    while (k < ptx.size() && !(parens == 0 && (ptx[k] == '{' || ptx[k] == ';'))) {
      if (ptx[k] == '(') ++parens;
      if (ptx[k] == ')') --parens;
      ++k;
    }
    if (k >= ptx.size() || ptx[k] == ';' || fn.name.empty()) {
      i = k + 1;
      continue;
    }
    int depth = 0;
    std::size_t end = k;
    for (; end < ptx.size(); ++end) {
      if (ptx[end] == '{') ++depth;
      if (ptx[end] == '}' && --depth == 0) break;
    }
    fn.body = ptx.substr(k, end - k);
    out.push_back(std::move(fn));
    i = end + 1;
  }
  return out;
}

bool has_instruction(std::string_view body, std::string_view op) noexcept {
  for (std::size_t at = body.find(op); at != std::string_view::npos; at = body.find(op, at + 1)) {
    const bool starts = at == 0 || !is_name_char(body[at - 1]);
    const std::size_t after = at + op.size();
    if (starts && (after >= body.size() || !is_name_char(body[after]) || body[after] == '.')) return true;
  }
  return false;
}

// The record's lock, a leaf (nothing is locked under it): constant-initialised and registered at load time: a fork never meets its registration half done (and trivially destroyed).
std::mutex wait_record_m;
std::mutex& wait_record_mutex() noexcept { return wait_record_m; }
const bool wait_record_forks = lifecycle::on_fork_leaf_mutex<wait_record_mutex>();

struct wait_record {
  std::mutex& m = wait_record_m;
  std::map<std::uintptr_t, bool> waits;
};

wait_record& record() {
  static wait_record& r = *new wait_record;  // never destroyed: a module may unload from a static destructor
  return r;
}
// Made at load time, before any thread: a fork never meets its initialiser in progress.
const bool record_made = (record(), true);

}  // namespace

bool looks_like_ptx(std::string_view image) noexcept {
  const std::size_t i = skip_blank(image, 0);
  return image.compare(i, 8, ".version") == 0;
}

std::set<std::string> entries_without_wait(std::string_view ptx) {
  std::set<std::string> out;
  if (!looks_like_ptx(ptx)) return out;
  const std::vector<function_text> fns = functions_of(ptx);
  bool some_func_waits = false;
  for (const auto& fn : fns)
    if (!fn.entry && has_instruction(fn.body, "griddepcontrol.wait")) some_func_waits = true;
  for (const auto& fn : fns) {
    if (!fn.entry || has_instruction(fn.body, "griddepcontrol.wait")) continue;
    if (some_func_waits && has_instruction(fn.body, "call")) continue;  // it may wait in a callee
    out.insert(fn.name);
  }
  return out;
}

void note_kernel_wait(std::uintptr_t kernel_id, bool waits) {
  wait_record& r = record();
  std::lock_guard<std::mutex> lock(r.m);
  r.waits[kernel_id] = waits;
}

void forget_kernel_wait(std::uintptr_t kernel_id) {
  wait_record& r = record();
  std::lock_guard<std::mutex> lock(r.m);
  r.waits.erase(kernel_id);
}

std::optional<bool> kernel_waits(std::uintptr_t kernel_id) {
  wait_record& r = record();
  std::lock_guard<std::mutex> lock(r.m);
  const auto it = r.waits.find(kernel_id);
  if (it == r.waits.end()) return std::nullopt;
  return it->second;
}

}  // namespace launchfit::detail
