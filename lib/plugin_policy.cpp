// SPDX-License-Identifier: MIT
// The policy of a loaded plugin: its parameters and hash, the plugin's choose() called through the C ABI
// behind an exception barrier, and what a decline, an error or an invalid plan becomes (the fallback's plan,
// or a thrown launchfit::error).

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>

#include "launchfit/builtin_policies.hpp"
#include "launchfit/error.hpp"
#if __has_include("launchfit/param_policy.hpp")
#include "launchfit/param_policy.hpp"  // param_policy, parameter_error (before: in policy.hpp)
#endif
#include "log_internal.hpp"
#include "plan_match.hpp"
#include "plugin_internal.hpp"
#include "settings.hpp"

namespace launchfit::detail::plugin_internal {

namespace {

constexpr std::size_t errbuf_size = 512;

// LAUNCHFIT_PLUGIN_FALLBACK (a refused word is reported with the other settings' warnings).
bool env_fallback() { return detail::current_settings().plugins.fallback; }

// "k=v,k=v" in key order; for the plugin without launchfit's own `fallback`.
std::string join_params(const std::map<std::string, std::string>& params, bool for_plugin) {
  std::string out;
  for (const auto& [k, v] : params) {
    if (for_plugin && k == "fallback") continue;
    if (!out.empty()) out += ',';
    out.append(k).append("=").append(v);
  }
  return out;
}

// ---- the policy --------------------------------------------------------------------------------------

class plugin_policy final : public policy_base {
 public:
  plugin_policy(std::shared_ptr<const loaded_plugin> plugin, std::map<std::string, std::string> all_params,
                std::shared_ptr<const policy> fallback)
      : plugin_(std::move(plugin)), all_params_(std::move(all_params)), fallback_(std::move(fallback)) {
    hash_ = detail::hash_combine(
        detail::hash_combine(detail::hash_string(plugin_->info.name), detail::hash_string(plugin_->info.version)),
        detail::hash_string(params()));
    const std::string for_plugin = join_params(all_params_, true);
    char err[errbuf_size] = "";
    int status = LAUNCHFIT_PLUGIN_ERROR;
    std::string failure;
    if (!call_plugin([&] { status = desc().create(for_plugin.c_str(), &state_, err, sizeof err); },
                     failure)) {
      state_ = nullptr;
      throw error(errc::plugin, "plugin " + name() + " create",
                  "plugin '" + name() + "' (" + path_text() + ") create() " + failure);
    }
    if (status != LAUNCHFIT_PLUGIN_OK) {
      state_ = nullptr;
      throw error(errc::plugin, "plugin " + name() + " create",
                  "plugin '" + name() + "' (" + path_text() + ") rejected parameters " +
                      detail::quote_text(for_plugin, text_cap_bytes, '\'') + ": " +
                      plugin_text(err, sizeof err, "no message"));
    }
  }
  ~plugin_policy() override {
    std::string failure;
    if (!call_plugin([&] { desc().destroy(state_); }, failure)) {
      try {
        detail::logger()->error("plugin '{}' ({}) destroy() {}; its state may be lost", name(), path_text(),
                                failure);
      } catch (...) {
      }
    }
  }
  plugin_policy(const plugin_policy&) = delete;
  plugin_policy& operator=(const plugin_policy&) = delete;

  std::string name() const override { return plugin_->info.name; }
  std::string params() const override { return join_params(all_params_, false); }
  // Hashed once: every launch of the policy asks (its plugin and parameters never change).
  std::uint64_t hash() const override { return hash_; }
  // On the launch path (asked before any plan is looked up): the exception barrier and the nesting bound of
  // every plugin call (a work_bucket() that launches with its own policy recursed without one).
  std::uint64_t work_bucket(const work& w) const override {
    const auto& d = desc();
    if (!LAUNCHFIT_HAS_FIELD(&d, launchfit_plugin_descriptor, work_bucket) || !d.work_bucket) return 0;
    std::uint64_t bucket = 0;
    std::string failure;
    if (!call_plugin(
            [&] { bucket = d.work_bucket(state_, static_cast<std::uint32_t>(w.kind), total_items(w), w.per_thread); },
            failure)) {
      log_call_failure("work_bucket() " + failure + "; using bucket 0");
      return 0;
    }
    return bucket;
  }

  void feedback(const plan& p, double ms) const {
    if (!desc().feedback) return;
    const launchfit_plan c = to_c(p);
    std::string failure;
    if (!call_plugin([&] { desc().feedback(state_, &c, ms); }, failure))
      log_call_failure("feedback() " + failure);
  }

 protected:
  plan choose_impl(const query& q) const override {
    const launchfit_device device = to_c(q.device);
    const launchfit_kernel kernel = to_c(q.kernel);
    const launchfit_query cq = to_c(q, device, kernel);

    launchfit_plan cp = blank_plan();
    char err[errbuf_size] = "";
    int status = LAUNCHFIT_PLUGIN_ERROR;
    std::string failure;
    if (!call_plugin([&] { status = desc().choose(state_, &cq, &cp, err, sizeof err); }, failure)) {
      return failed(q, error(errc::plugin, "plugin " + name() + " choose",
                             "plugin '" + name() + "' choose() " + failure, q.kernel.demangled));
    }

    if (status == LAUNCHFIT_PLUGIN_DECLINE) {
      std::string why = plugin_text(err, sizeof err);
      if (why.empty()) why = plugin_text(cp.reason, sizeof cp.reason);
      // The library knows why no trial could run (a stream capture), which the plugin saw as failed trials:
      // said first, the plugin's own words after.
      if (!q.no_trials.empty()) why = q.no_trials + (why.empty() ? "" : "; the plugin: " + why);
      plan p = fallback_or_default().choose(q);
      p.reason = "declined by " + name() + (why.empty() ? "" : " (" + why + ")") + "; " +
                 fallback_or_default().name() + ": " + p.reason;
      p.match = detail::plan_match::fallback;
      return p;
    }
    if (status != LAUNCHFIT_PLUGIN_OK) {
      std::string message = plugin_text(err, sizeof err, "no message");
      if (status != LAUNCHFIT_PLUGIN_ERROR)
        message = "unknown status " + std::to_string(status) + ": " + message;
      return failed(q, error(errc::plugin, "plugin " + name() + " choose",
                             "plugin '" + name() + "' failed: " + message, q.kernel.demangled));
    }
    try {
      plan p = from_c(cp, q);
      p.policy = to_string();  // named in every refusal of it
      check_plugin_plan(q, p);
      plan checked = p;
      shape_block(q, checked);
      validate_plan(q, checked);  // here, so an invalid plan can fall back; choose() validates again
      return p;
    } catch (const error& e) {
      return invalid_plan(q, e);
    }
  }

 private:
  const launchfit_plugin_descriptor& desc() const { return *plugin_->descriptor; }
  std::string path_text() const { return detail::escape_text(plugin_->info.resolved_path, text_cap_bytes); }
  const policy& fallback_or_default() const { return fallback_ ? *fallback_ : default_fallback(); }
  static const policy& default_fallback() {
    static const policy& p = *new max_occupancy_policy;
    return p;
  }

  // A failed call that does not change a decision (feedback, work_bucket): one error line per policy.
  void log_call_failure(const std::string& what) const {
    try {
      if (!call_failure_logged_.exchange(true)) {
        detail::logger()->error("plugin '{}' ({}) {} (further failures of {} are logged at debug level)",
                                name(), path_text(), what, to_string());
      } else {
        detail::logger()->debug("plugin '{}' {}", name(), what);
      }
    } catch (...) {
    }
  }

 public:
  // A plan of the plugin's refused (`why`, by its own check or by the launch's requirements): the failure path,
  // the error saying whose plan it was.
  plan invalid_plan(const query& q, const error& why) const {
    const std::string message = "plugin '" + name() + "' returned an invalid plan: " + why.message();
    return failed(q, why.cuda_result() ? error(why.cuda_result(), why.call(), message, why.kernel(), why.config())
                                       : error(why.code(), why.call(), message, why.kernel(), why.config()));
  }
  // An error or invalid plan: thrown, or (fallback=<name> / LAUNCHFIT_PLUGIN_FALLBACK=1) logged once
  // per policy and replaced by the fallback's plan.
  plan failed(const query& q, const error& e) const {
    if (!fallback_ && !env_fallback()) throw e;
    const policy& instead = fallback_or_default();
    if (!logged_.exchange(true)) {
      detail::logger()->error("{}; using {} instead (further failures of {} are logged at debug level)",
                              e.what(), instead.to_string(), to_string());
    } else {
      detail::logger()->debug("{}; using {} instead", e.what(), instead.to_string());
    }
    plan p = instead.choose(q);
    p.reason = "plugin " + name() + " failed (" + e.message() + "); " + instead.name() + ": " + p.reason;
    p.match = detail::plan_match::fallback;
    return p;
  }

 private:
  std::shared_ptr<const loaded_plugin> plugin_;
  std::map<std::string, std::string> all_params_;
  std::uint64_t hash_ = 0;  // name, version and parameters: part of every plan key
  std::shared_ptr<const policy> fallback_;
  void* state_ = nullptr;
  mutable std::atomic<bool> logged_{false};
  mutable std::atomic<bool> call_failure_logged_{false};
};

}  // namespace

// plugin_policy is final: its exact type, without dynamic_cast's walk of the policy's bases (asked on every miss).
bool is_plugin_policy(const policy& p) noexcept { return typeid(p) == typeid(plugin_policy); }

plan plugin_fallback(const policy& p, const query& q, const error& why) {
  const auto* plugin = dynamic_cast<const plugin_policy*>(&p);
  if (!plugin) throw why;
  return plugin->invalid_plan(q, why);
}

policy_factory factory_for(const std::shared_ptr<const loaded_plugin>& plugin) {
  return [plugin](const std::map<std::string, std::string>& params) -> std::shared_ptr<const policy> {
    std::shared_ptr<const policy> fallback;
    if (auto it = params.find("fallback"); it != params.end()) {
      // Plugins cannot be fallbacks: two plugins declining to each other would never end.
      // parameter_error carries the key, so a policy string points at the fallback's value.
      const auto bad_fallback = [&](const std::string& why) {
        return detail::parameter_error(plugin->info.name,
                                       detail::bad_parameter("fallback", detail::bad_parameter::part::value,
                                                             "parameter 'fallback': " + why));
      };
      if (is_plugin_name(it->second)) {
        throw bad_fallback("'" + it->second + "' is a plugin; the fallback must be a built-in or C++ policy");
      }
      try {
        fallback = make_policy(it->second);
      } catch (const error& e) {
        throw bad_fallback(e.message());
      }
    }
    return std::make_shared<const plugin_policy>(plugin, params, std::move(fallback));
  };
}

}  // namespace launchfit::detail::plugin_internal

namespace launchfit {

void plugin_feedback(const policy& chooser, const plan& chosen, double ms) {
  using detail::plugin_internal::plugin_policy;
  if (const auto* p = dynamic_cast<const plugin_policy*>(&chooser)) p->feedback(chosen, ms);
}

}  // namespace launchfit
