// SPDX-License-Identifier: MIT
#pragma once
// Template bodies for policy.hpp: setting PFR parameter fields by name, and the structured errors they
// throw. Self-contained: the parsers include it directly.

#include <algorithm>
#include <boost/pfr.hpp>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "launchfit/detail/text.hpp"
#include "launchfit/error.hpp"
#include "launchfit/export.hpp"
#include "launchfit/policy.hpp"

namespace launchfit {
namespace detail {

// A refused parameter, by name: what params_assign() throws (still a std::invalid_argument).
struct LAUNCHFIT_API bad_parameter : std::invalid_argument {
  enum class part { key, value };  // an unknown key, or a bad value for a known one
  bad_parameter(std::string k, part p, const std::string& what)
      : std::invalid_argument(what), key(std::move(k)), at(p) {}
  std::string key;
  part at;
};

// make_policy()'s LAUNCHFIT_BAD_POLICY_PARAMETER error, carrying the parameter at fault so that a policy
// string can point at it. A factory may throw it directly; make_policy() lets a launchfit::error through.
class LAUNCHFIT_API parameter_error : public error {
 public:
  parameter_error(const std::string& policy_name, const bad_parameter& e)
      : error(errc::bad_policy_parameter, "make_policy", "policy '" + policy_name + "': " + e.what()),
        key_(e.key),
        at_(e.at) {}
  const std::string& key() const noexcept { return key_; }
  bad_parameter::part at() const noexcept { return at_; }

 private:
  std::string key_;
  bad_parameter::part at_;
};

// Where from_chars starts: after a '+' that policy strings allow and from_chars does not.
inline std::size_t signed_number_start(const std::string& value) {
  return value.size() > 1 && value[0] == '+' && value[1] != '-' && value[1] != '+' ? 1 : 0;
}

// Whether an out-of-range decimal literal overflowed (rather than underflowed): its first non-zero digit
// stands left of the decimal point once the exponent is applied.
inline bool magnitude_above_one(const char* first, const char* last) {
  long long point = 0, lead = -1, exp = 0, digits = 0;
  bool seen_point = false;
  const char* p = first + (first != last && *first == '-');
  for (; p != last && ((*p >= '0' && *p <= '9') || *p == '.'); ++p) {
    if (*p == '.') {
      seen_point = true;
      continue;
    }
    if (*p != '0' && lead < 0) lead = digits;
    ++digits;
    if (!seen_point) ++point;
  }
  if (p != last && (*p == 'e' || *p == 'E')) {
    ++p;
    const bool negative = p != last && *p == '-';
    if (p != last && (*p == '-' || *p == '+')) ++p;
    for (; p != last && *p >= '0' && *p <= '9'; ++p)
      exp = std::min<long long>(exp * 10 + (*p - '0'), 1LL << 40);
    if (negative) exp = -exp;
  }
  return lead >= 0 && point - lead + exp > 0;
}

template <class T>
void parse_field(T& field, const std::string& value, const std::string& key) {
  auto bad = [&](const char* what) {
    return bad_parameter(
        key, bad_parameter::part::value,
        "parameter " + quote_text(key, 64, '\'') + ": " + what + " " + quote_text(value, 64, '\''));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (value == "true" || value == "1") {
      field = true;
    } else if (value == "false" || value == "0") {
      field = false;
    } else {
      throw bad("expected true or false, got");
    }
  } else if constexpr (std::is_integral_v<T>) {
    T parsed{};
    const char* first = value.data() + signed_number_start(value);  // "+5" as policy strings allow
    const char* last = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(first, last, parsed);
    if (ec == std::errc::result_out_of_range) throw bad("out of range:");
    if (ec != std::errc() || ptr != last) throw bad("expected an integer, got");
    field = parsed;
  } else if constexpr (std::is_floating_point_v<T>) {
    // from_chars, not strtod: independent of the C locale's decimal point, no hex, no leading blanks.
    double parsed = 0;
    const char* first = value.data() + signed_number_start(value);
    const char* last = value.data() + value.size();
    const auto [ptr, ec] = std::from_chars(first, last, parsed, std::chars_format::general);
    if (value.empty() || ptr != last || (ec != std::errc() && ec != std::errc::result_out_of_range))
      throw bad("expected a number, got");
    if (ec == std::errc::result_out_of_range) {  // as strtod: 1e999 is inf, 1e-999 is 0
      parsed = magnitude_above_one(first, last) ? std::numeric_limits<double>::infinity() : 0.0;
      if (first[0] == '-') parsed = -parsed;
    }
    field = static_cast<T>(parsed);
  } else if constexpr (std::is_same_v<T, std::string>) {
    field = value;
  } else {
    static_assert(std::is_integral_v<T>, "policy parameters must be integers, floats, bools or strings");
  }
}

}  // namespace detail

template <class Params>
void params_assign(Params& p, const std::map<std::string, std::string>& kv) {
  for (const auto& entry : kv) {
    const std::string& key = entry.first;
    const std::string& value = entry.second;
    bool found = false;
    boost::pfr::for_each_field(p, [&](auto& field, std::size_t i) {
      if (key == Params::names[i]) {
        found = true;
        detail::parse_field(field, value, key);
      }
    });
    if (!found) {
      std::string known;
      for (const char* n : Params::names) known += std::string(known.empty() ? "" : ", ") + n;
      throw detail::bad_parameter(key, detail::bad_parameter::part::key,
                                  "unknown parameter " + detail::quote_text(key, 64, '\'') +
                                      " (known: " + (known.empty() ? std::string("none") : known) + ")");
    }
  }
}

template <class P>
void register_policy() {
  register_policy(P::policy_name, [](const std::map<std::string, std::string>& kv) {
    typename P::params_type params{};
    try {
      params_assign(params, kv);
    } catch (const detail::bad_parameter& e) {
      throw detail::parameter_error(P::policy_name, e);  // keeps the key for policy strings' columns
    }
    return std::shared_ptr<const policy>(std::make_shared<const P>(params));
  });
}

}  // namespace launchfit
