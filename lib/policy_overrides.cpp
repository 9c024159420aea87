// SPDX-License-Identifier: MIT
// Per-kernel policy overrides (LAUNCHFIT_POLICY, set_policy_overrides()): the spec's parser, the globs and
// the names a kernel is matched by, and the table the planner asks.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "launchfit/error.hpp"
#include "log_internal.hpp"
#include "plan_inputs.hpp"
#include "policy_string.hpp"
#include "settings.hpp"

namespace launchfit {
namespace detail {

namespace {

thread_local std::uint64_t glob_steps_taken = 0;

// Where `word` first occurs in text[from, to), or npos: Knuth-Morris-Pratt, linear in both (a name and a glob
// are untrusted: a glob of 5,000 'a's then 'b' against a name of 10,000 'a's cost O(n x m) in a naive search).
std::size_t find_linear(std::string_view text, std::size_t from, std::size_t to, std::string_view word) {
  if (word.empty()) return from;
  if (to < from || to - from < word.size()) return std::string_view::npos;
  std::vector<std::size_t> fail(word.size(), 0);
  std::uint64_t steps = 0;
  for (std::size_t i = 1, k = 0; i < word.size(); ++i, ++steps) {
    while (k > 0 && word[i] != word[k]) k = fail[k - 1], ++steps;
    if (word[i] == word[k]) ++k;
    fail[i] = k;
  }
  std::size_t found = std::string_view::npos;
  for (std::size_t i = from, k = 0; i < to; ++i, ++steps) {
    while (k > 0 && text[i] != word[k]) k = fail[k - 1], ++steps;
    if (text[i] == word[k]) ++k;
    if (k == word.size()) {
      found = i + 1 - word.size();
      break;
    }
  }
  glob_steps_taken += steps;
  return found;
}

// The glob's matcher when no memory is left for the linear one's tables: backtracking only to the last '*',
// O(|pattern| x |text|) at worst, needing none.
bool glob_match_backtracking(std::string_view pattern, std::string_view text) noexcept {
  std::size_t p = 0, t = 0, star = std::string_view::npos, star_t = 0;
  std::uint64_t steps = 0;
  const auto done = [&](bool matched) {
    glob_steps_taken += steps;
    return matched;
  };
  while (t < text.size()) {
    ++steps;
    if (p < pattern.size() && pattern[p] == '*') {  // before the literal test: '*' also matches a '*'
      star = p++;
      star_t = t;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return done(false);
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return done(p == pattern.size());
}

// Whether `run` (literal characters and '?') matches text at `at`, where the text holds it.
bool run_matches_at(std::string_view text, std::size_t at, std::string_view run) noexcept {
  glob_steps_taken += run.size();
  for (std::size_t i = 0; i < run.size(); ++i)
    if (run[i] != '?' && run[i] != text[at + i]) return false;
  return true;
}

// Where `run` (with '?' in it) first matches in text[from, to), or npos: Shift-And, one bit per character of
// the run, O(|text| x |run| / 64) (a run of 5,000 characters against a name of 200,000: about 16 million word
// operations, where trying each position cost a billion comparisons).
std::size_t find_with_any(std::string_view text, std::size_t from, std::size_t to, std::string_view run) {
  if (to < from || to - from < run.size()) return std::string_view::npos;
  const std::size_t words = (run.size() + 63) / 64;
  // Bit i of a character's mask: run[i] is that character or '?'. Masks only for the run's own characters.
  std::array<int, 256> slot;
  slot.fill(0);  // 0: the mask of '?' alone (a character the run does not hold)
  std::vector<std::uint64_t> masks(words, 0);
  for (std::size_t i = 0; i < run.size(); ++i) {
    const auto c = static_cast<unsigned char>(run[i]);
    if (run[i] == '?' || slot[c] != 0) continue;
    slot[c] = static_cast<int>(masks.size() / words);
    masks.resize(masks.size() + words, 0);
  }
  for (std::size_t i = 0; i < run.size(); ++i) {
    const std::uint64_t bit = std::uint64_t{1} << (i % 64);
    if (run[i] == '?') {
      for (std::size_t m = 0; m < masks.size(); m += words) masks[m + i / 64] |= bit;  // every mask
    } else {
      masks[static_cast<std::size_t>(slot[static_cast<unsigned char>(run[i])]) * words + i / 64] |= bit;
    }
  }
  const std::size_t last_word = (run.size() - 1) / 64;
  const std::uint64_t last_bit = std::uint64_t{1} << ((run.size() - 1) % 64);
  std::vector<std::uint64_t> state(words, 0);  // bit i: run[0..i] matches the text ending here
  glob_steps_taken += masks.size() + run.size();
  for (std::size_t t = from; t < to; ++t) {
    glob_steps_taken += words;
    const std::uint64_t* mask = &masks[static_cast<std::size_t>(slot[static_cast<unsigned char>(text[t])]) * words];
    std::uint64_t carry = 1;  // a match of run[0] may start at every position
    for (std::size_t w = 0; w < words; ++w) {
      const std::uint64_t next_carry = state[w] >> 63;
      state[w] = ((state[w] << 1) | carry) & mask[w];
      carry = next_carry;
    }
    if (state[last_word] & last_bit) return t + 1 - run.size();
  }
  return std::string_view::npos;
}

}  // namespace

// The text starts with the glob's first run (up to its first '*'), ends with its last, and holds the runs
// between in order, each where it first matches after the one before: runs have a fixed length, '?' included,
// so the leftmost choice never loses a match. Linear in the text for runs of literal characters (KMP), and
// O(|text| x |run| / 64) for a run with '?' (Shift-And): a glob and a name are untrusted.
std::uint64_t glob_steps() noexcept { return glob_steps_taken; }

bool glob_match(std::string_view pattern, std::string_view text) noexcept {
  const std::size_t first_star = pattern.find('*');
  if (first_star == std::string_view::npos)
    return pattern.size() == text.size() && run_matches_at(text, 0, pattern);
  const std::size_t last_star = pattern.rfind('*');
  const std::string_view head = pattern.substr(0, first_star), tail = pattern.substr(last_star + 1);
  if (text.size() < head.size() + tail.size() || !run_matches_at(text, 0, head) ||
      !run_matches_at(text, text.size() - tail.size(), tail))
    return false;
  try {
    std::size_t at = head.size();
    const std::size_t end = text.size() - tail.size();
    std::string_view middle =
        last_star > first_star ? pattern.substr(first_star + 1, last_star - first_star - 1) : std::string_view();
    while (!middle.empty()) {
      const std::size_t star = middle.find('*');
      const std::string_view run = middle.substr(0, star);
      middle = star == std::string_view::npos ? std::string_view() : middle.substr(star + 1);
      if (run.empty()) continue;
      const std::size_t found = run.find('?') == std::string_view::npos ? find_linear(text, at, end, run)
                                                                         : find_with_any(text, at, end, run);
      if (found == std::string_view::npos) return false;
      at = found + run.size();
    }
    return true;
  } catch (...) {  // no memory for a run's table: the quadratic search, which needs none
    return glob_match_backtracking(pattern, text);
  }
}

kernel_match_names match_names(std::string_view demangled) {
  std::string_view s = trim(demangled);
  if (!s.empty() && s.back() == ')') {  // the parameter list: back to its matching '('
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        s = trim(s.substr(0, i));
        break;
      }
    }
  }
  // The return type ends at the last space outside <...> and (...): "void ns::k<float, 4>".
  int depth = 0;
  std::size_t name_start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '(') ++depth;
    if ((s[i] == '>' || s[i] == ')') && depth > 0) --depth;
    if (s[i] == ' ' && depth == 0) name_start = i + 1;
  }
  kernel_match_names names;
  names.with_template_args = std::string(s.substr(name_start));
  depth = 0;
  for (char c : names.with_template_args) {
    if (c == '<')
      ++depth;
    else if (c == '>' && depth > 0)
      --depth;
    else if (depth == 0)
      names.without_template_args += c;
  }
  return names;
}

std::optional<syntax_error> glob_refusal(std::string_view glob) {
  for (std::size_t i = 0; i < glob.size(); ++i) {
    const auto c = static_cast<unsigned char>(glob[i]);
    if (c < 0x20 || c == 0x7f) {
      return syntax_error(i, "the glob cannot match: a kernel name never holds " + found(glob, i));
    }
  }
  // Up to the first wildcard the glob is the start of the name itself, so its nesting is known: a space
  // outside <...> and (...) there would end a return type, which match names never keep.
  int depth = 0;
  for (std::size_t i = 0; i < glob.size() && glob[i] != '*' && glob[i] != '?'; ++i) {
    if (glob[i] == '<' || glob[i] == '(') ++depth;
    if ((glob[i] == '>' || glob[i] == ')') && depth > 0) --depth;
    if (glob[i] == ' ' && depth == 0) {
      return syntax_error(i, "the glob cannot match: kernel names are matched without their return type ('" +
                                 std::string(glob.substr(0, std::min<std::size_t>(i, 48))) +
                                 "'), e.g. \"ns::kernel<float>\" or \"ns::kernel\"");
    }
  }
  // A kernel's parameter list is dropped before matching: no match name ends with ')'.
  if (glob.back() == ')') {
    std::size_t open = glob.size() - 1;
    for (std::size_t i = glob.size(), d = 0; i-- > 0;) {
      if (glob[i] == ')') ++d;
      if (glob[i] == '(' && --d == 0) {
        open = i;
        break;
      }
    }
    return syntax_error(open, "the glob cannot match: kernel names are matched without their parameter list");
  }
  return std::nullopt;
}

// One "<glob>=<policy>" entry, trimmed, at `entry_pos` in its spec (errors are positioned in the spec).
policy_override parse_override_entry(std::string_view entry, std::size_t entry_pos) {
  const std::size_t eq = entry.find('=');
  if (eq == std::string_view::npos) throw syntax_error(entry_pos, "expected <kernel glob>=<policy>, found no '='");
  const std::string_view glob = trim(entry.substr(0, eq));  // starts at entry_pos: entry is trimmed
  if (glob.empty()) throw syntax_error(entry_pos, "expected a kernel name glob before '='");
  if (auto refused = glob_refusal(glob)) throw syntax_error(entry_pos + refused->pos, refused->what());
  const std::size_t policy_pos = entry_pos + eq + 1;
  try {
    return {std::string(glob), make_parsed_policy(parse_policy_string(entry.substr(eq + 1)))};
  } catch (const syntax_error& e) {
    throw syntax_error(policy_pos + e.pos, e.what());
  } catch (const std::exception& e) {  // a registered factory's own (std::out_of_range, a runtime_error)
    throw syntax_error(policy_pos, std::string("the policy could not be made: ") + e.what());
  }
}

std::vector<policy_override> parse_policy_overrides(std::string_view spec, std::vector<syntax_error>* skipped) {
  std::vector<policy_override> out;
  std::size_t begin = 0;
  while (begin <= spec.size()) {
    std::size_t end = spec.find(';', begin);
    if (end == std::string_view::npos) end = spec.size();
    std::size_t entry_pos = begin;
    const std::string_view entry = trim(spec.substr(begin, end - begin), &entry_pos);
    try {
      if (!entry.empty()) out.push_back(parse_override_entry(entry, entry_pos));
    } catch (const syntax_error& e) {
      if (!skipped) throw;
      skipped->push_back(e);
    }
    begin = end + 1;
  }
  return out;
}

}  // namespace detail

namespace {

struct override_table {
  std::shared_mutex mutex;
  bool loaded = false;  // from LAUNCHFIT_POLICY or set_policy_overrides()
  std::vector<detail::policy_override> entries;
};

// Created on first use and never destroyed: a plan miss from a static destructor still finds it.
override_table& overrides() {
  static override_table& table = *new override_table;
  return table;
}

// Constant-initialised and trivially destructible: readable at any point of the process's life.
std::atomic<std::uint64_t> generation{0};

// `label` names the source in the message, `what` in a refusal of its length.
std::vector<detail::policy_override> parse_overrides(std::string_view spec, std::string_view label,
                                                     std::string_view what) {
  try {
    detail::check_length(spec, what);
    return detail::parse_policy_overrides(spec);
  } catch (const detail::syntax_error& e) {
    detail::throw_syntax_error("policy overrides", label, spec, e);
  }
}

// LAUNCHFIT_POLICY's entries: an operator's override never turns a launch that works into an exception, so a
// bad entry (a typo, an unknown policy, a plugin that did not load) is left out with one error line naming its
// column, and the others apply; a variable longer than policy strings may be is left out whole.
std::vector<detail::policy_override> env_overrides(std::string_view env) {
  std::vector<detail::syntax_error> skipped;
  std::vector<detail::policy_override> entries;
  try {
    detail::check_length(env, "LAUNCHFIT_POLICY");
    entries = detail::parse_policy_overrides(env, &skipped);
  } catch (const detail::syntax_error& e) {
    skipped.push_back(e);
  }
  constexpr std::size_t named = 8;  // a variable of thousands of bad entries is named in its first few
  for (std::size_t i = 0; i < skipped.size() && i < named; ++i) {
    detail::log_event(spdlog::level::err, "policy_override_ignored",
                      "LAUNCHFIT_POLICY: an entry is ignored, the others apply",
                      {{"error", detail::syntax_error_text("LAUNCHFIT_POLICY", env, skipped[i])}});
  }
  if (skipped.size() > named) {
    const std::string more = std::to_string(skipped.size() - named);
    detail::log_event(spdlog::level::err, "policy_override_ignored",
                      "LAUNCHFIT_POLICY: more entries are ignored", {{"count", more}});
  }
  return entries;
}

}  // namespace

std::uint64_t detail::policy_overrides_generation() noexcept {
  return generation.load(std::memory_order_acquire);
}

void set_policy_overrides(std::string_view spec) {
  auto entries = parse_overrides(spec, "policy overrides", "a policy override spec");
  auto& table = overrides();
  std::unique_lock lock(table.mutex);
  std::swap(table.entries, entries);  // the old policies are destroyed below, after the lock (plugin code)
  table.loaded = true;
  generation.fetch_add(1, std::memory_order_acq_rel);
  lock.unlock();
  static const detail::plan_input overrides_input = detail::register_plan_input("policy overrides");
  detail::plan_input_changed(overrides_input);  // every plan was chosen under the old overrides
}

namespace {

// The override table, LAUNCHFIT_POLICY loaded on first use; held by the returned shared lock.
std::shared_lock<std::shared_mutex> loaded_overrides(override_table& table) {
  std::shared_lock lock(table.mutex);
  if (!table.loaded) {
    lock.unlock();
    {
      std::unique_lock write(table.mutex);
      if (!table.loaded) {
        const std::string& env = detail::current_settings().policy_overrides;
        if (!env.empty()) table.entries = env_overrides(env);
        table.loaded = true;
        generation.fetch_add(1, std::memory_order_acq_rel);
      }
    }
    lock.lock();
  }
  return lock;
}

}  // namespace

bool detail::policy_overrides_configured() {
  auto& table = overrides();
  const auto lock = loaded_overrides(table);
  return !table.entries.empty();
}

std::shared_ptr<const policy> policy_override_for(std::string_view demangled_kernel, std::string* matched) {
  auto& table = overrides();
  const auto lock = loaded_overrides(table);
  if (table.entries.empty()) return nullptr;
  const auto names = detail::match_names(demangled_kernel);
  for (const auto& entry : table.entries) {
    if (detail::glob_match(entry.glob, names.with_template_args) ||
        detail::glob_match(entry.glob, names.without_template_args)) {
      if (matched) *matched = entry.glob;
      return entry.chosen;
    }
  }
  return nullptr;
}

}  // namespace launchfit
