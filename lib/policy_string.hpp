// SPDX-License-Identifier: MIT
#pragma once
// Internal: the policy-string and LAUNCHFIT_POLICY parsers, split into pieces the fuzz targets call directly.
//
//   policy := ws [ ( 'launchfit' | 'lf' ) '::' ] name ws [ '(' ws [ params | args ] ')' ] ws
//   params := param ws { ',' ws param ws }
//   param  := name ws '=' ws value
//   args   := arg ws { ',' ws arg ws }       (as in C++: the factory's parameters in order)
//   arg    := number | '{' ws number ws [ ',' ws number ws [ ',' ws number ws ] ] '}'   (dims: x, y, z)
//   name   := [A-Za-z_][A-Za-z0-9_]*
//   value  := name | number
//   number := [+-]? ( digits [ '.' digits* ] | '.' digits ) [ [eE] [+-]? digits ]
//             | [+-]? digits ( 'K' | 'KB' | 'M' | 'MB' )       (x 1024, x 1024^2; stored as the product)
//             | [+-] ( 'inf' | 'nan' )                          (as a float parameter prints itself)
//
//   overrides := entry { ';' entry }          (empty entries are ignored)
//   entry     := ws glob ws '=' policy        (glob: no '=' or ';'; '*' any run, '?' any one character)

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "launchfit/policy.hpp"

namespace launchfit::detail {

struct policy_param {
  std::string key, value;                  // key empty: an argument in the factory's order (args above)
  std::size_t key_pos = 0, value_pos = 0;  // byte offsets in the parsed text (the value's, for an argument)
  int braces = -1;                         // an argument inside {x, y, z}: its group's number
};

struct parsed_policy {
  std::string name;
  std::size_t name_pos = 0;
  std::vector<policy_param> params;
};

// A parse or construction failure at byte offset `pos` of the text being parsed.
struct syntax_error : std::runtime_error {
  syntax_error(std::size_t at, const std::string& what) : std::runtime_error(what), pos(at) {}
  std::size_t pos;
};

// The longest policy string, override spec or LAUNCHFIT_POLICY accepted: a longer one is refused, never cut.
inline constexpr std::size_t max_policy_text_bytes = 64 * 1024;

// Throws syntax_error at max_policy_text_bytes when `text` is longer; `what` names it ("a policy string").
void check_length(std::string_view text, std::string_view what);

// The parsers' text helpers: `s` without surrounding white space (`offset`, when given, advanced by what the
// front lost), and what a parser found at `pos` where it expected something else ("'x'", "byte 0x1b", "end
// of string").
std::string_view trim(std::string_view s, std::size_t* offset = nullptr);
std::string found(std::string_view text, std::size_t pos);

// Throws syntax_error. Values come back normalised ("32K" -> "32768"); keys are unique.
parsed_policy parse_policy_string(std::string_view text);

// make_policy() for a parsed string; an unknown name or bad parameter is a syntax_error at its position.
// Arguments in the factory's order take the policy's parameter names in order (policy::params() of the policy
// made with none); {x, y, z} fills three parameters named <p>x, <p>y, <p>z (missing components: 1), and
// fixed({x, y}, ...) is fixed_dims, as the C++ factory fixed(dims, dims) makes it.
std::shared_ptr<const policy> make_parsed_policy(const parsed_policy& parsed);

// The message throw_syntax_error() throws: `label` and `source` (quoted when short), the column, a caret line.
std::string syntax_error_text(std::string_view label, std::string_view source, const syntax_error& e);
// Throws launchfit::error: `<label> "<source>" col <pos + 1>: <what>`, then the source and a caret under it.
// A source longer than 80 bytes is shown as `<label> (<n> bytes)` and an 80-byte window around the column,
// cut with "..."; echoed text has control characters, invalid UTF-8 and bidirectional controls escaped.
[[noreturn]] void throw_syntax_error(std::string_view call, std::string_view label, std::string_view source,
                                     const syntax_error& e);

bool glob_match(std::string_view pattern, std::string_view text) noexcept;
// The steps glob_match() took on this thread so far (a character of the literal search, a 64-bit word of the
// search with '?', a step of the matcher without tables): the tests bound a match's work by its inputs' sizes,
// not by a clock.
std::uint64_t glob_steps() noexcept;

// The names an override glob is matched against, from a demangled kernel name: the parameter list and any
// return type are dropped ("void ns::reduce<float, 4>(float const*, int)" -> "ns::reduce<float, 4>"), and
// the same with template arguments removed ("ns::reduce").
struct kernel_match_names {
  std::string with_template_args;
  std::string without_template_args;
};
kernel_match_names match_names(std::string_view demangled);

struct policy_override {
  std::string glob;
  std::shared_ptr<const policy> chosen;
};

// Why a glob can never match the match_names() of a kernel name, at an offset in `glob`, or nothing: a
// control character, a space outside <...> and (...) before the first wildcard (a return type), or a final
// ')' (a parameter list). Kernel names are C identifiers or demangled C++ names of functions returning void:
// no control characters, brackets balanced. '(', ',' and spaces elsewhere do match:
// "(anonymous namespace)::k", "reduce<float, 4>".
std::optional<syntax_error> glob_refusal(std::string_view glob);

// Parses a whole LAUNCHFIT_POLICY-style spec; throws syntax_error with positions in `spec`. With `skipped`,
// a bad entry is left out and its error (positioned in `spec`) appended there instead; the others are kept.
std::vector<policy_override> parse_policy_overrides(std::string_view spec,
                                                    std::vector<syntax_error>* skipped = nullptr);

// Whether any override is in force (LAUNCHFIT_POLICY is read on first use; its bad entries are logged then).
bool policy_overrides_configured();

// Changes whenever the overrides may have: each successful set_policy_overrides() and the first read of
// LAUNCHFIT_POLICY add one. A plan chosen after reading generation G is stale once this differs from G.
std::uint64_t policy_overrides_generation() noexcept;

// Whether set_bytes_in_flight_per_sm() set a target for this architecture (it wins over a calibration).
bool bytes_in_flight_overridden(int cc);
// Whether `p` may read query::bytes_in_flight_per_sm: bytes_in_flight, and every policy launchfit does not ship
// (a plugin is handed it). A miss looks the plan file's calibration up only for these; a built-in that starts
// reading the target is added here, beside the policies.
bool reads_bytes_in_flight_target(const policy& p) noexcept;

// How many policy strings policy_from_string() has parsed (a string is parsed once per generation of the
// plan inputs, then answered from memory): for tests.
std::uint64_t policy_string_parse_count() noexcept;

}  // namespace launchfit::detail
