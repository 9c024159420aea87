// SPDX-License-Identifier: MIT
#include "launch_options.hpp"

#include <algorithm>
#include <cstdlib>

#include "launchfit/detail/launch_request.hpp"

namespace launchfit::detail {

launch_options launch_options_of(const launch_request& r) noexcept {
  launch_options o = r.options;
  if (!o.has_cluster()) o.cluster = dims{};  // 1x1x1 and 0-sized dims are both "none"
  o.cluster_from_kernel = false;             // the planner reads the kernel's own __cluster_dims__
  return o;
}

std::string key_text(const launch_options& o) {
  std::string s;
  if (o.cooperative) s += " cooperative";
  if (o.has_cluster()) s += " cluster=" + o.cluster.to_string();
  if (o.programmatic) s += " pdl";
  return s;
}

namespace {

// "2x1x1" (or "2", "2x2"): each dimension 1..65535.
std::optional<dims> parse_dims(std::string_view s) {
  unsigned v[3] = {1, 1, 1};
  int n = 0;
  std::size_t i = 0;
  while (n < 3) {
    std::size_t j = i;
    unsigned long x = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9' && j - i < 6)
      x = x * 10 + static_cast<unsigned>(s[j++] - '0');
    if (j == i || x == 0 || x > 65535) return std::nullopt;
    v[n++] = static_cast<unsigned>(x);
    if (j == s.size()) return dims{v[0], v[1], v[2]};
    if (s[j] != 'x') return std::nullopt;
    i = j + 1;
  }
  return std::nullopt;
}

}  // namespace

const char* work_kind_word(work::shape kind) noexcept {
  switch (kind) {
    case work::shape::items:
      return "items";
    case work::shape::grid_stride:
      return "grid_stride";
    case work::shape::grid:
      return "grid";
    case work::shape::none:
      break;
  }
  return "none";
}

namespace {

// The words after the policy's closing ')', in the order the planner writes them: the options first, then
// the shape words. False for anything else.
bool parse_key_words(std::string_view rest, stored_key_text& out) {
  int stage = 0;  // 0: cooperative next, 1: cluster, 2: pdl, 3: shape words only
  bool in_block_rule = false;  // the last word was a block rule's ("blocks=multiple of 64" has spaces)
  while (!rest.empty()) {
    if (rest[0] != ' ') return false;
    rest.remove_prefix(1);
    const std::size_t end = rest.find(' ');
    const std::string_view word = rest.substr(0, end);
    if (word.empty()) return false;  // a doubled space
    const bool continues_rule = in_block_rule && word.find('=') == std::string_view::npos && word != "pdl" &&
                                word != "cooperative";
    in_block_rule = word.substr(0, 7) == "blocks=" || continues_rule;
    if (word == "cooperative" && stage == 0) {
      out.options.cooperative = true;
      stage = 1;
    } else if (word.substr(0, 8) == "cluster=" && stage <= 1) {
      const auto d = parse_dims(word.substr(8));
      if (!d || d->count() <= 1) return false;
      out.options.cluster = *d;
      stage = 2;
    } else if (word == "pdl" && stage <= 2) {
      out.options.programmatic = true;
      stage = 3;
    } else if (word.substr(0, 5) == "work=" && out.work.empty()) {
      // The work's kind, once: one of the words work_kind_word() writes.
      const std::string_view kind = word.substr(5);
      bool known = false;
      for (const work::shape k :
           {work::shape::items, work::shape::grid_stride, work::shape::grid, work::shape::none})
        known = known || kind == work_kind_word(k);
      if (!known) return false;
      out.work = std::string(kind);
      out.rest += ' ';
      out.rest += word;
      stage = 3;
    } else if (word.substr(0, 6) == "waves=" && out.options.waves == 0) {
      // grid_stride work capped at k waves (1..2^32-1): the plan a tuning policy timed under that cap.
      std::uint64_t k = 0;
      std::size_t i = 6;
      while (i < word.size() && word[i] >= '0' && word[i] <= '9' && i < 16) k = k * 10 + (word[i++] - '0');
      if (i != word.size() || i == 6 || k == 0 || k > 0xffffffffu) return false;
      out.options.waves = static_cast<std::uint32_t>(k);
      stage = 3;
    } else if (word.substr(0, 6) == "shape=" && !out.shape.is_set()) {
      const auto shape = parse_block_shape(word.substr(6));
      if (!shape || !shape->is_set()) return false;
      out.shape = *shape;
      out.rest += ' ';
      out.rest += word;
      stage = 3;
    } else if (word.substr(0, 7) == "blocks=" || word == "rows=32" || word.substr(0, 4) == "sms=" ||
               word.substr(0, 7) == "family=" || continues_rule) {
      // A block rule's text has spaces ("blocks=multiple of 64"): its later words follow it.
      out.rest += ' ';
      out.rest += word;
      stage = 3;
    } else {
      return false;
    }
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  // A waves cap is grid-stride work's (an entry written before keys named the kind has no work word).
  return out.options.waves == 0 || out.work.empty() || out.work == "grid_stride";
}

}  // namespace

std::optional<stored_key_text> parse_key_text(std::string_view text) {
  const std::size_t open = text.find('(');
  if (open == 0 || open == std::string_view::npos) return std::nullopt;
  // The policy's own text ends at the last ')' followed by the end or a word: its parameters may hold ") ",
  // the words after it never do (a family's kernel names may hold ')', but never a space after it). One
  // candidate only, so hostile text costs one pass.
  std::size_t close = text.size();
  while (close-- > open) {
    if (text[close] == ')' && (close + 1 == text.size() || text[close + 1] == ' ')) break;
  }
  if (close <= open) return std::nullopt;
  stored_key_text out;
  out.policy = std::string(text.substr(0, close + 1));
  if (!parse_key_words(text.substr(close + 1), out)) return std::nullopt;
  return out;
}

std::optional<block_shape> parse_block_shape(std::string_view text) {
  // "x=<m>n" then ",y=", ",z=", ",per_thread_y=", ",free_x" in that order, each at most once; numbers without
  // signs.
  const auto number = [&text](std::uint64_t most) -> std::optional<std::uint64_t> {
    std::size_t i = 0;
    std::uint64_t v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i < 10) v = v * 10 + (text[i++] - '0');
    if (i == 0 || v == 0 || v > most) return std::nullopt;
    text.remove_prefix(i);
    return v;
  };
  const auto word = [&text](std::string_view w) {
    if (text.substr(0, w.size()) != w) return false;
    text.remove_prefix(w.size());
    return true;
  };
  block_shape b;
  if (!word("x=")) return std::nullopt;
  const auto m = number(1024);
  if (!m || !word("n")) return std::nullopt;
  b.x_multiple = static_cast<std::uint16_t>(*m);
  if (word(",y=")) {
    const auto y = number(1024);
    if (!y) return std::nullopt;
    b.y = static_cast<std::uint16_t>(*y);
  }
  if (word(",z=")) {
    const auto z = number(64);
    if (!z || *z == 1) return std::nullopt;
    b.z = static_cast<std::uint16_t>(*z);
  }
  if (word(",per_thread_y=")) {
    const auto k = number(0xffffffffu);
    if (!k || *k == 1) return std::nullopt;
    b.per_thread_y = static_cast<std::uint32_t>(*k);
  }
  if (word(",free_x")) b.free_x = true;
  if (!text.empty()) return std::nullopt;
  if (b.x_multiple == 32) b.x_multiple = 0;  // to_string() writes the default multiple as 32
  return b;
}

std::optional<std::size_t> fixed_smem_of(std::string_view smem_rule_text) {
  if (smem_rule_text.substr(0, 6) != "bytes=" || smem_rule_text.size() == 6 || smem_rule_text.size() > 6 + 19)
    return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : smem_rule_text.substr(6)) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return static_cast<std::size_t>(v);
}

std::string stored_plan_mismatch(const stored_key_text& key, const plan& p) {
  const launch_options& o = key.options;
  const auto is = [](bool b) { return b ? "is" : "is not"; };
  if (p.options.cooperative != o.cooperative)
    return std::string("the entry's plan ") + is(p.options.cooperative) + " cooperative, its key " +
           is(o.cooperative);
  if (p.full_grid && o.cooperative)
    return "the entry's plan launches the full grid, its key is cooperative (a cooperative grid co-resides)";
  if (p.options.programmatic != o.programmatic)
    return std::string("the entry's plan ") + is(p.options.programmatic) +
           " a programmatic dependent launch (PDL), its key " + is(o.programmatic);
  const bool plan_cluster = p.options.cluster.count() > 1;
  if (plan_cluster != o.has_cluster() || (plan_cluster && p.options.cluster != o.cluster))
    return "the entry's plan has cluster " + (plan_cluster ? p.options.cluster.to_string() : std::string("none")) +
           ", its key " + (o.has_cluster() ? "cluster " + o.cluster.to_string() : std::string("none"));
  if (!key.shape.is_default() &&
      (!key.shape.fits(p.block) ||
       !key.shape.allows(static_cast<int>(std::min<unsigned long long>(p.block.count(), 1u << 20)))))
    return "the entry's plan has block " + p.block.to_string() +
           ", which does not have its key's block shape " + key.shape.to_string();
  if (o.smem_rule == 0 && p.dynamic_smem_bytes != o.smem_bytes)
    return "the entry's plan has " + std::to_string(p.dynamic_smem_bytes) + " B of dynamic smem, its key " +
           std::to_string(o.smem_bytes) + " B";
  if (!p.policy.empty() && p.policy != key.policy)
    return "the entry's plan names policy '" + p.policy.substr(0, 200) + "', its key '" +
           key.policy.substr(0, 200) + "'";
  return {};
}

}  // namespace launchfit::detail
