#pragma once
// Template bodies for policy.hpp: setting PFR parameter fields by name.

#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>

namespace launchfit {
namespace detail {

template <class T>
void parse_field(T& field, const std::string& value, const std::string& key) {
  auto bad = [&](const char* what) {
    return std::invalid_argument("parameter '" + key + "': " + what + " '" + value + "'");
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
    const char* first = value.data();
    const char* last = value.data() + value.size();
    auto [ptr, ec] = std::from_chars(first, last, parsed);
    if (ec == std::errc::result_out_of_range) throw bad("out of range:");
    if (ec != std::errc() || ptr != last) throw bad("expected an integer, got");
    field = parsed;
  } else if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double parsed = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size()) throw bad("expected a number, got");
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
      throw std::invalid_argument("unknown parameter '" + key + "' (known: " +
                                  (known.empty() ? std::string("none") : known) + ")");
    }
  }
}

template <class P>
void register_policy() {
  register_policy(P::policy_name, [](const std::map<std::string, std::string>& kv) {
    typename P::params_type params{};
    params_assign(params, kv);
    return std::shared_ptr<const policy>(std::make_shared<const P>(params));
  });
}

}  // namespace launchfit
