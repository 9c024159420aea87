// SPDX-License-Identifier: MIT
// Plugins and the registry under faults: plugins that call back into launchfit from every entry point
// (and from their static constructors), plugins that throw, lie in their descriptor, return garbage numbers
// or hostile text, and paths that are not plugin files. Each case runs in its own process with a deadline
// (bounded.hpp): a deadlock, a crash or std::terminate is a test failure, never a stuck run.

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "captured_log.hpp"
#include "fault/bounded.hpp"
#include "launchfit/error.hpp"
#include "launchfit/plugin.h"
#include "launchfit/plugin.hpp"
#include "launchfit/policy.hpp"
#include "settings.hpp"
#include "../test_query.hpp"

namespace lf = launchfit;
using launchfit_test::captured_log;

namespace {

constexpr int limit_ms = 8000;

std::string plugin_path(const std::string& name) {
  return std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/../plugins/liblf_" + name + ".so";
}

// The body runs in a child process and must exit 0 within the deadline (a hang or a crash fails).
void expect_bounded(const std::function<int()>& body) {
  const auto r = launchfit::fault::run_bounded(std::chrono::milliseconds(limit_ms), body);
  EXPECT_TRUE(r.finished) << "did not finish within " << limit_ms << " ms (a hang)";
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal;
  EXPECT_EQ(r.exit_code, 0) << "exit code " << r.exit_code;
}

// Expectations inside the child: failures go to stderr (shown by ctest) and to the exit code.
struct checks {
  bool ok = true;
  void operator()(bool condition, const std::string& what) {
    if (!condition) {
      std::fprintf(stderr, "FAILED: %s\n", what.c_str());
      ok = false;
    }
  }
  int rc() const { return ok ? 0 : 1; }
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// "<code>: <what()>" of the launchfit::error f throws; "none" or "foreign: ..." otherwise.
template <class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const lf::error& e) {
    return e.cuda_error() + ": " + e.what();
  } catch (const std::exception& e) {
    return std::string("foreign: ") + e.what();
  } catch (...) {
    return "foreign: unknown";
  }
  return "none";
}

// No raw control character (other than none at all) and valid UTF-8 without C1 controls.
bool clean_text(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x80) continue;
    int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : -1;
    if (extra < 0 || c > 0xf4 || i + extra >= s.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    if (c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) return false;   // C1 control
    if (c == 0xe0 && static_cast<unsigned char>(s[i + 1]) < 0xa0) return false;   // overlong
    if (c == 0xed && static_cast<unsigned char>(s[i + 1]) >= 0xa0) return false;  // surrogate
    if (c == 0xf0 && static_cast<unsigned char>(s[i + 1]) < 0x90) return false;   // overlong
    if (c == 0xf4 && static_cast<unsigned char>(s[i + 1]) >= 0x90) return false;  // > U+10FFFF
    if (c == 0xe2 && s.compare(i, 3, "\xe2\x80\xae") == 0) return false;          // bidi override
    i += static_cast<std::size_t>(extra);
  }
  return true;
}

using launchfit_test::h200_query;

// Plugin code calls hook(where) when LF_TEST_HOOK holds the address of hook_thunk (set in the child).
std::function<void(const char*)>& hook() {
  static auto* h = new std::function<void(const char*)>;
  return *h;
}
void hook_thunk(const char* where) {
  if (hook()) hook()(where);
}
void install_hook(std::function<void(const char*)> f) {
  hook() = std::move(f);
  char text[32];
  std::snprintf(text, sizeof text, "%llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(&hook_thunk)));
  setenv("LF_TEST_HOOK", text, 1);
}

bool registered(const std::string& name) {
  const auto names = lf::registered_policies();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every kind of call back into launchfit a plugin might make; returns what failed, "" when all worked.
std::string call_everything() {
  std::string failed;
  auto attempt = [&](const char* what, const std::function<void()>& f) {
    const std::string e = error_text(f);
    if (e != "none") failed += std::string(what) + " -> " + e + "; ";
  };
  attempt("registered_policies", [] { lf::registered_policies(); });
  attempt("loaded_plugins", [] { lf::loaded_plugins(); });
  attempt("make_policy", [] { lf::make_policy("max_occupancy"); });
  attempt("policy_from_string", [] { lf::policy_from_string("fixed(block=128)")->choose(h200_query()); });
  attempt("load_plugin", [] { lf::load_plugin(plugin_path("good")); });
  return failed;
}

}  // namespace

// ---- re-entrancy -------------------------------------------------------------------------------------

TEST(PluginReentry, EveryEntryPointMayCallBackIntoLaunchfit) {
  for (const char* where : {"ctor", "entry", "create", "choose", "destroy"}) {
    SCOPED_TRACE(where);
    expect_bounded([where] {
      checks check;
      std::string failures;
      int calls = 0;
      install_hook([&](const char* at) {
        if (std::string(at) != where) return;
        ++calls;
        failures += call_everything();
      });
      const lf::plugin_info info = lf::load_plugin(plugin_path("reenter"));
      check(info.name == "test_reenter", "loaded " + info.name);
      lf::policy_from_string("test_reenter")->choose(h200_query());  // create, choose, destroy
      check(calls >= 1, std::string("hook at ") + where + " never ran");
      check(failures.empty(), failures);
      check(registered("test_reenter") && registered("test_good"), "both plugins registered");
      return check.rc();
    });
  }
}

TEST(PluginReentry, PluginsFromTheEnvironmentMayCallBackWhileTheyLoad) {
  for (const char* where : {"ctor", "entry"}) {
    SCOPED_TRACE(where);
    expect_bounded([where] {
      checks check;
      std::string failures;
      std::vector<std::string> seen_inside;
      install_hook([&](const char* at) {
        if (std::string(at) != where) return;
        seen_inside = lf::registered_policies();  // the registry as it stands: built-ins, no recursion
        failures += call_everything();
      });
      setenv("LAUNCHFIT_PLUGINS", plugin_path("reenter").c_str(), 1);
      launchfit::detail::settings_reload_for_tests();  // the environment is read once per process
      check(registered("test_reenter"), "test_reenter from LAUNCHFIT_PLUGINS is registered");
      check(registered("test_good"), "test_good, loaded from inside, is registered");
      check(std::find(seen_inside.begin(), seen_inside.end(), "max_occupancy") != seen_inside.end(),
            "built-ins visible from inside");
      check(failures.empty(), failures);
      check(lf::loaded_plugins().size() == 2, "two plugins listed");
      return check.rc();
    });
  }
}

TEST(PluginReentry, APluginLoadingItselfFromItsEntryIsRefusedNotRecursive) {
  expect_bounded([] {
    checks check;
    std::string inner;
    install_hook([&](const char* at) {
      if (std::string(at) != "entry" || !inner.empty()) return;
      inner = error_text([] { lf::load_plugin(plugin_path("reenter")); });
    });
    const lf::plugin_info info = lf::load_plugin(plugin_path("reenter"));
    check(info.name == "test_reenter", "the outer load succeeds");
    check(has(inner, "LAUNCHFIT_PLUGIN_REFUSED") && has(inner, "already being loaded"), inner);
    check(lf::loaded_plugins().size() == 1, "loaded once");
    return check.rc();
  });
}

TEST(PluginReentry, APluginMakingItselfFromCreateEndsWithAnError) {
  expect_bounded([] {
    checks check;
    install_hook([](const char* at) {
      if (std::string(at) == "create") lf::make_policy("test_reenter");  // endless without a bound
    });
    lf::load_plugin(plugin_path("reenter"));
    const std::string e = error_text([] { lf::make_policy("test_reenter"); });
    // The registry refuses the factory's own name at the first re-entry (before the nesting bound).
    check(has(e, "LAUNCHFIT_PLUGIN_ERROR") && has(e, "makes itself again ('test_reenter' -> 'test_reenter')"), e);
    install_hook({});
    check(lf::make_policy("test_reenter") != nullptr, "works again without the hook");
    return check.rc();
  });
}

TEST(PluginReentry, APluginUnregisteringItselfKeepsRunningAndIsClosedAfterItsLastPolicy) {
  expect_bounded([] {
    checks check;
    std::string failures;
    bool closed = false;
    install_hook([&](const char* at) {
      const std::string where = at;
      if (where == "choose") check(lf::unregister_policy("test_reenter"), "unregistered from choose");
      if (where == "dtor") {  // dlclose: no launchfit lock is held
        closed = true;
        failures += call_everything();
      }
    });
    lf::load_plugin(plugin_path("reenter"));
    {
      auto p = lf::policy_from_string("test_reenter(block=96)");
      check(p->choose(h200_query()).block_threads == 96, "choose finishes after unregistering itself");
      check(!registered("test_reenter") && lf::loaded_plugins().empty(), "gone from the registry");
      check(!closed, "still loaded while the policy lives");
    }
    check(closed, "closed with its last policy");
    check(failures.empty(), failures);
    install_hook({});
    check(lf::load_plugin(plugin_path("reenter")).name == "test_reenter", "loads again");
    check(lf::make_policy("test_reenter")->choose(h200_query()).block_threads == 64, "and works");
    return check.rc();
  });
}

TEST(PluginReentry, ConcurrentFirstUsesAllSeeTheEnvironmentPlugins) {
  expect_bounded([] {
    checks check;
    install_hook([](const char* at) {
      if (std::string(at) != "entry") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      lf::registered_policies();
    });
    setenv("LAUNCHFIT_PLUGINS", plugin_path("reenter").c_str(), 1);
    launchfit::detail::settings_reload_for_tests();  // the environment is read once per process
    std::atomic<int> made{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        try {
          if (lf::make_policy("test_reenter")->choose(h200_query()).block_threads == 64) ++made;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
        }
      });
    }
    for (auto& t : threads) t.join();
    check(made == 8, "every thread found the plugin: " + std::to_string(made.load()));
    check(lf::loaded_plugins().size() == 1, "loaded once");
    return check.rc();
  });
}

// ---- exceptions across the C boundary ----------------------------------------------------------------

TEST(PluginThrow, AThrowingEntryInTheEnvironmentBreaksNothingElse) {
  expect_bounded([] {
    checks check;
    captured_log log(spdlog::level::info);
    const std::string list =
        plugin_path("throw_entry") + ":" + plugin_path("throw_int") + ":" + plugin_path("good");
    setenv("LAUNCHFIT_PLUGINS", list.c_str(), 1);
    launchfit::detail::settings_reload_for_tests();  // the environment is read once per process
    for (int i = 0; i < 2; ++i) {
      check(error_text([] { lf::make_policy("max_occupancy")->choose(h200_query()); }) == "none",
            "built-in policies work");
      check(error_text([] { lf::policy_from_string("test_good")->choose(h200_query()); }) == "none",
            "the good plugin works");
    }
    const std::string e = error_text([] { lf::make_policy("test_throw_entry"); });
    check(has(e, "LAUNCHFIT_UNKNOWN_POLICY") && has(e, "liblf_throw_entry.so") && has(e, "threw"), e);
    check(has(e, "entry exploded\\nsecond line"), "the exception's message, escaped: " + e);
    check(has(e, "liblf_throw_int.so") && has(e, "an exception of unknown type"), e);
    check(has(log.text(), "[error] LAUNCHFIT_PLUGINS: plugin '"), log.text());
    check(clean_text(e), "no raw control characters: " + e);
    return check.rc();
  });
}

TEST(PluginThrow, AThrowingEntryIsARefusalNamingThePlugin) {
  expect_bounded([] {
    checks check;
    const std::string e = error_text([] { lf::load_plugin(plugin_path("throw_entry")); });
    check(has(e, "LAUNCHFIT_PLUGIN_REFUSED") && has(e, "liblf_throw_entry.so") &&
              has(e, "launchfit_plugin_entry() threw: entry exploded\\nsecond line"),
          e);
    check(clean_text(e), "escaped: " + e);
    return check.rc();
  });
}

TEST(PluginThrow, ThrowingCreateIsAnErrorNamingThePlugin) {
  expect_bounded([] {
    checks check;
    lf::load_plugin(plugin_path("hostile"));
    const std::string e = error_text([] { lf::make_policy("test_hostile", {{"throw", "create"}}); });
    check(has(e, "LAUNCHFIT_PLUGIN_ERROR") && has(e, "plugin 'test_hostile'") && has(e, "create() threw") &&
              has(e, "boom from create\\nsecond line"),
          e);
    const std::string i = error_text([] {
      lf::make_policy("test_hostile", {{"throw", "create"}, {"kind", "int"}});
    });
    check(has(i, "LAUNCHFIT_PLUGIN_ERROR") && has(i, "an exception of unknown type"), i);
    const std::string s = error_text([] { lf::policy_from_string("test_hostile(throw=create)"); });
    check(has(s, "LAUNCHFIT_BAD_POLICY_STRING") && has(s, "boom from create"), s);
    return check.rc();
  });
}

TEST(PluginThrow, ThrowingChooseIsAPluginErrorAndTakesTheFallbackPath) {
  expect_bounded([] {
    checks check;
    lf::load_plugin(plugin_path("hostile"));
    const lf::query q = h200_query();
    for (const char* kind : {"std", "int"}) {
      const std::string params = std::string("throw=choose,kind=") + kind;
      const std::string e =
          error_text([&] { lf::policy_from_string("test_hostile(" + params + ")")->choose(q); });
      check(has(e, "LAUNCHFIT_PLUGIN_ERROR") && has(e, "plugin 'test_hostile'") && has(e, "choose() threw"),
            e);
      captured_log log(spdlog::level::info);
      const lf::plan p = lf::policy_from_string("test_hostile(" + params + ",fallback=fixed)")->choose(q);
      check(p.match == "fallback" && p.block_threads == 256, "fallback=fixed decided: " + p.reason);
      check(has(p.reason, "plugin test_hostile failed (") && has(p.reason, "; fixed: "), p.reason);
      check(has(log.text(), "[error]") && log.text().find('\n') == log.text().size() - 1,
            "one escaped error line: " + log.text());
    }
    check(error_text([] { lf::make_policy("max_occupancy")->choose(h200_query()); }) == "none",
          "others work");
    return check.rc();
  });
}

TEST(PluginThrow, ThrowingDestroyFeedbackAndWorkBucketAreLoggedNotFatal) {
  expect_bounded([] {
    checks check;
    captured_log log(spdlog::level::debug);
    lf::load_plugin(plugin_path("hostile"));
    {
      auto p = lf::policy_from_string("test_hostile(throw=destroy)");
      p->choose(h200_query());
    }  // destroy throws here
    check(has(log.text(), "[error]") && has(log.text(), "destroy() threw") &&
              has(log.text(), "boom from destroy"),
          log.text());
    auto fb = lf::policy_from_string("test_hostile(throw=feedback)");
    const lf::plan p = fb->choose(h200_query());
    lf::plugin_feedback(*fb, p, 1.0);
    check(has(log.text(), "feedback() threw"), log.text());
    auto wb = lf::policy_from_string("test_hostile(throw=bucket)");
    const lf::work w{lf::work::shape::items, 1000, 1};
    check(wb->work_bucket(w) == 0, "a throwing work_bucket means 0");
    check(has(log.text(), "work_bucket() threw"), log.text());
    check(lf::policy_from_string("test_hostile")->work_bucket(w) == 1, "a normal one still works");
    return check.rc();
  });
}

// A plugin that calls launchfit's callbacks with a null context, or time_plan with a null plan, gets a refusal
// from each (-1, 0, SIZE_MAX, 0 ms): they dereferenced both, a segmentation fault no barrier catches.
TEST(PluginCallbacks, NullContextsAndPlansAreRefusedNeverRead) {
  expect_bounded([] {
    checks check;
    lf::load_plugin(plugin_path("hostile"));
    lf::query q = h200_query();
    q.time_plan = [](const lf::plan&) { return 1.0; };
    q.setup_ms = [] { return 0.0; };
    const lf::plan p = lf::policy_from_string("test_hostile(nulls=1)")->choose(q);
    check(has(p.reason, "time_plan -1 -1 -1, active_blocks 0, smem 18446744073709551615, setup 0"), p.reason);
    return check.rc();
  });
}

// work_bucket() is bounded as every plugin call is: one that asks its own policy's bucket again (here through
// the test's hook; a plugin launching with its own policy does the same) recursed until the stack overflowed.
TEST(PluginCallbacks, AWorkBucketThatCallsBackIntoItsPolicyIsBounded) {
  expect_bounded([] {
    checks check;
    captured_log log(spdlog::level::debug);
    lf::load_plugin(plugin_path("hostile"));
    const auto p = lf::policy_from_string("test_hostile");
    const lf::work w{lf::work::shape::items, 1000, 1};
    int calls = 0;
    install_hook([&](const char* where) {
      if (std::string(where) != "bucket") return;
      ++calls;
      (void)p->work_bucket(w);
    });
    const std::uint64_t b = p->work_bucket(w);
    install_hook({});
    check(calls > 0 && calls < 100, "nested calls: " + std::to_string(calls));
    check(b == 1 || b == 0, "a bucket: " + std::to_string(b));
    check(has(log.text(), "work_bucket() not called: plugin calls nested"), log.text());
    return check.rc();
  });
}

// A plugin's plan with a fixed grid for items(n) work takes the fallback path (fallback= given) or is refused
// naming it: the grid of items work is computed per launch, and one block of 256 threads was launched for a
// million items.
TEST(PluginPlans, AFixedGridForItemsWorkIsAnInvalidPlan) {
  expect_bounded([] {
    checks check;
    lf::load_plugin(plugin_path("hostile"));
    lf::query q = h200_query();
    q.work_hint = lf::work{lf::work::shape::items, 1u << 20, 1};
    const std::string e =
        error_text([&] { lf::policy_from_string("test_hostile(block=256,grid=1)")->choose(q); });
    check(has(e, "LAUNCHFIT_INVALID_PLAN") && has(e, "a fixed grid 1 for items(1048576)"), e);
    const lf::plan p = lf::policy_from_string("test_hostile(block=256,grid=1,fallback=fixed)")->choose(q);
    check(p.match == "fallback" && p.grid.x == 0, "the fallback decided: " + p.reason);
    lf::query strided = q;
    strided.work_hint.kind = lf::work::shape::grid_stride;
    check(lf::policy_from_string("test_hostile(block=256,grid=132)")->choose(strided).grid.x == 132,
          "a fixed grid for grid_stride work stays the plugin's");
    return check.rc();
  });
}

// ---- paths -------------------------------------------------------------------------------------------

TEST(PluginPath, SpecialFilesAreRefusedBeforeDlopenNeverAHang) {
  expect_bounded([] {
    checks check;
    const std::string dir = "/tmp/lf-plugin-fault-" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    const std::string fifo = dir + "/liblf_fifo.so";
    mkfifo(fifo.c_str(), 0600);
    const std::string f = error_text([&] { lf::load_plugin(fifo); });
    check(has(f, "LAUNCHFIT_PLUGIN_REFUSED") && has(f, "not a regular file (a FIFO)"), f);
    const std::string d = error_text([&] { lf::load_plugin(dir); });
    check(has(d, "not a regular file (a directory)"), d);
    const std::string n = error_text([] { lf::load_plugin("/dev/null"); });
    check(has(n, "not a regular file (a character device)"), n);
    const std::string e = error_text([] { lf::load_plugin(""); });
    check(has(e, "LAUNCHFIT_PLUGIN_REFUSED") && has(e, "empty path"), e);
    const std::string m = error_text([&] { lf::load_plugin(dir + "/no\nsuch.so"); });
    check(has(m, "no\\nsuch.so': no such file") && clean_text(m), m);
    std::filesystem::remove_all(dir);
    return check.rc();
  });
}

TEST(PluginPath, ABareNameIsAFileInTheCurrentDirectory) {
  expect_bounded([] {
    checks check;
    captured_log log(spdlog::level::info);
    const std::string dir = std::filesystem::path(plugin_path("good")).parent_path().string();
    if (chdir(dir.c_str()) != 0) return 2;
    const std::string e = error_text([] { lf::load_plugin("liblf_good.so"); });
    check(e == "none", e);
    const std::string real = std::filesystem::canonical(plugin_path("good")).string();
    check(has(log.text(), "[info] loaded plugin test_good 1.0.0 from " + real), log.text());
    // Not searched in the library path: a name only dlopen's search would find is "no such file".
    const std::string c = error_text([] { lf::load_plugin("libc.so.6"); });
    check(has(c, "'libc.so.6': no such file"), c);
    return check.rc();
  });
}

TEST(PluginPath, OneFileThroughASymlinkOrAHardLinkIsOnePlugin) {
  expect_bounded([] {
    checks check;
    const std::string dir = "/tmp/lf-plugin-links-" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    std::filesystem::create_symlink(plugin_path("good"), dir + "/symlink.so");
    std::error_code ec;
    std::filesystem::create_hard_link(plugin_path("good"), dir + "/hardlink.so", ec);
    check(lf::load_plugin(plugin_path("good")).name == "test_good", "the file");
    check(error_text([&] { lf::load_plugin(dir + "/symlink.so"); }) == "none", "the symlink");
    if (!ec) {
      const std::string h = error_text([&] { lf::load_plugin(dir + "/hardlink.so"); });
      check(h == "none", "the hard link: " + h);
    }
    check(lf::loaded_plugins().size() == 1, "one plugin");
    std::filesystem::remove_all(dir);
    return check.rc();
  });
}

// ---- the registry ------------------------------------------------------------------------------------

TEST(Registry, NamesNoPolicyStringCanSelectAreRefused) {
  expect_bounded([] {
    checks check;
    auto factory = [](const std::map<std::string, std::string>&) -> std::shared_ptr<const lf::policy> {
      return std::make_shared<lf::max_occupancy_policy>();
    };
    for (const std::string name :
         {std::string(), std::string("two words"), std::string("f("), std::string("9lives"),
          std::string("a\nb"), std::string("x-y"), std::string("caf\xc3\xa9"), std::string("nul\0l", 5)}) {
      const std::string e = error_text([&] { lf::register_policy(name, factory); });
      check(has(e, "LAUNCHFIT_INVALID_POLICY") && has(e, "cannot be selected by a policy string"), e);
      check(clean_text(e) && e.find('\0') == std::string::npos, "escaped: " + e);
    }
    check(has(error_text([&] { lf::register_policy("a\nb", factory); }), "\"a\\nb\""), "named, escaped");
    check(error_text([&] { lf::register_policy("_ok9", factory); }) == "none", "a good name");
    return check.rc();
  });
}

TEST(Registry, UnregisteringAPluginLetsItLoadAgain) {
  expect_bounded([] {
    checks check;
    lf::load_plugin(plugin_path("good"));
    auto alive = lf::policy_from_string("test_good(block=128)");
    check(lf::unregister_policy("test_good"), "unregistered");
    check(lf::loaded_plugins().empty(), "no longer listed");
    check(has(error_text([] { lf::make_policy("test_good"); }), "LAUNCHFIT_UNKNOWN_POLICY"), "unknown now");
    check(alive->choose(h200_query()).block_threads == 128, "a policy made before still works");
    const lf::plugin_info again = lf::load_plugin(plugin_path("good"));
    check(again.name == "test_good" && registered("test_good"), "loaded and registered again");
    check(lf::policy_from_string("test_good")->choose(h200_query()).block_threads == 64, "selectable again");
    // A twin with the same name may take the place once the name is free.
    check(lf::unregister_policy("test_good"), "unregistered again");
    check(error_text([] { lf::load_plugin(plugin_path("good_twin")); }) == "none", "the twin loads");
    check(alive->choose(h200_query()).block_threads == 128, "the first policy still works");
    return check.rc();
  });
}

TEST(Registry, APolicyKeepsItsLibraryLoadedUntilItIsDropped) {
  expect_bounded([] {
    checks check;
    const std::string path = std::filesystem::canonical(plugin_path("oldest")).string();
    lf::load_plugin(path);
    auto alive = lf::make_policy("test_oldest");
    lf::unregister_policy("test_oldest");
    check(alive->choose(h200_query()).block_threads == 64, "works after unregister");
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    check(h != nullptr, "still loaded while a policy lives");
    if (h) dlclose(h);
    alive.reset();
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    check(h == nullptr, "unloaded with the last policy");
    if (h) dlclose(h);
    return check.rc();
  });
}

// ---- hostile descriptors -----------------------------------------------------------------------------

TEST(PluginDescriptor, LiesAndGapsAreRefusedOrToleratedAsDocumented) {
  expect_bounded([] {
    checks check;
    const std::string nl = error_text([] { lf::load_plugin(plugin_path("newline_name")); });
    check(has(nl, "invalid policy name 'test_bad\\nname'") && clean_text(nl), nl);
    const std::string nn = error_text([] { lf::load_plugin(plugin_path("null_name")); });
    check(has(nn, "invalid policy name '(null)'"), nn);
    const std::string nc = error_text([] { lf::load_plugin(plugin_path("null_choose")); });
    check(has(nc, "plugin 'test_null_choose' lacks choose()"), nc);
    const std::string ne = error_text([] { lf::load_plugin(plugin_path("null_entry")); });
    check(has(ne, "launchfit_plugin_entry() returned no descriptor"), ne);
    const std::string zs = error_text([] { lf::load_plugin(plugin_path("zero_size")); });
    check(has(zs, "descriptor struct_size 0 is smaller than the ABI 1.0 minimum"), zs);
    // Larger than this launchfit knows: only the known fields are read.
    for (const char* name : {"newer_minor", "huge_size"}) {
      const std::string e = error_text([&] { lf::load_plugin(plugin_path(name)); });
      check(e == "none", std::string(name) + ": " + e);
    }
    check(lf::make_policy("test_newer_minor")->choose(h200_query()).block_threads == 64, "newer minor works");
    // The oldest descriptor has no work_bucket: launchfit must not read past struct_size.
    lf::load_plugin(plugin_path("oldest"));
    check(lf::make_policy("test_oldest")->work_bucket({lf::work::shape::items, 1000, 1}) == 0,
          "no work_bucket");
    // A 10 KB version with control characters is bounded and escaped.
    const lf::plugin_info v = lf::load_plugin(plugin_path("long_version"));
    check(v.version.size() <= 256 && clean_text(v.version) && has(v.version, "1.0.0\\n\\x1b[2J"), v.version);
    return check.rc();
  });
}

// ---- hostile numbers and text ------------------------------------------------------------------------

TEST(PluginPlan, GarbageNumbersAreInvalidPlansThatFallBack) {
  expect_bounded([] {
    checks check;
    lf::load_plugin(plugin_path("hostile"));
    const lf::query q = h200_query();
    for (const char* params :
         {"block=-1", "block=4194304,by=2097152,bz=2097152", "bps=-1", "grid=-1", "block=0", "say=status"}) {
      const std::string text = std::string("test_hostile(") + params + ")";
      const std::string e = error_text([&] { lf::policy_from_string(text)->choose(q); });
      check(has(e, "LAUNCHFIT_INVALID_PLAN") || has(e, "LAUNCHFIT_PLUGIN_ERROR"), text + ": " + e);
      const std::string fb = std::string("test_hostile(") + params + ",fallback=fixed)";
      lf::plan p;
      check(error_text([&] { p = lf::policy_from_string(fb)->choose(q); }) == "none", fb);
      check(p.match == "fallback" && p.block_threads == 256, fb + ": " + p.reason);
    }
    check(has(error_text([&] { lf::policy_from_string("test_hostile(bps=-1)")->choose(q); }),
              "blocks_per_sm -1 is negative"),
          "names the field");
    for (const char* ms : {"nan", "inf", "-1"}) {
      const lf::plan p =
          lf::policy_from_string(std::string("test_hostile(trials=-3,ms=") + ms + ")")->choose(q);
      check(p.trials == 0 && p.tuning_ms == 0, std::string("trials and tuning_ms cleaned for ms=") + ms);
    }
    return check.rc();
  });
}

// A block of the plugin's own shape: only a 2-D block (x a multiple of 32, y >= 2, z 1) for 2-D work whose spec
// says block_x_free(), which a stored plan of that launch may also have; anything else is an invalid plan (a
// kernel may size a shared tile for the rows of 32 it was promised).
TEST(PluginPlan, ABlockOfItsOwnShapeOnlyWhereTheLaunchLeavesTheShapeFree) {
  expect_bounded([] {
    checks check;
    lf::load_plugin(plugin_path("hostile"));
    lf::work image{lf::work::shape::items, 4096, 1};
    image.rank = 2;
    image.ny = 4096;
    lf::query q2 = h200_query(image);
    const std::string e0 = error_text([&] { lf::policy_from_string("test_hostile(block=64,by=4)")->choose(q2); });
    check(has(e0, "LAUNCHFIT_INVALID_PLAN") && has(e0, "not a block this launch makes") && has(e0, "block_x_free()"),
          "without block_x_free(): " + e0);
    std::fprintf(stderr, "%s\n", e0.c_str());
    check(error_text([&] { lf::policy_from_string("test_hostile(block=32,by=8)")->choose(q2); }) == "none",
          "32x8: the block the launch makes");
    q2.shape_rule.free_x = true;
    lf::plan p;
    check(error_text([&] { p = lf::policy_from_string("test_hostile(block=64,by=4)")->choose(q2); }) == "none",
          "64x4 for 2-D work");
    check(p.block == lf::dims{64, 4, 1}, p.to_string());
    for (const char* params : {"block=48,by=4", "block=64,by=2,bz=2"}) {
      const std::string text = std::string("test_hostile(") + params + ")";
      const std::string e = error_text([&] { lf::policy_from_string(text)->choose(q2); });
      check(has(e, "LAUNCHFIT_INVALID_PLAN") && has(e, "not a block this launch makes"), text + ": " + e);
    }
    lf::query q1 = h200_query(lf::work{lf::work::shape::items, 1u << 24, 1});
    q1.shape_rule.free_x = true;  // no effect on 1-D work
    const std::string e1 = error_text([&] { lf::policy_from_string("test_hostile(block=64,by=4)")->choose(q1); });
    check(has(e1, "LAUNCHFIT_INVALID_PLAN") && has(e1, "not a block this launch makes"), e1);
    return check.rc();
  });
}

TEST(PluginPlan, HostileTextIsBoundedEscapedAndValidUtf8) {
  expect_bounded([] {
    checks check;
    captured_log log(spdlog::level::debug);
    lf::load_plugin(plugin_path("hostile"));
    const lf::query q = h200_query();
    const lf::plan ok = lf::policy_from_string("test_hostile(text=nasty)")->choose(q);
    check(clean_text(ok.reason) && has(ok.reason, "line one\\nline two\\r\\x1b[31mred"), ok.reason);
    check(ok.reason.size() <= 1100, "bounded: " + std::to_string(ok.reason.size()));
    const lf::plan declined = lf::policy_from_string("test_hostile(text=nasty,say=decline)")->choose(q);
    check(clean_text(declined.reason) && has(declined.reason, "declined by test_hostile (line one\\n"),
          declined.reason);
    check(has(declined.reason, "\\x80 \\xc0\\xaf \\xed\\xa0\\x80"),
          "invalid UTF-8 escaped: " + declined.reason);
    const std::string e =
        error_text([&] { lf::policy_from_string("test_hostile(text=nasty,say=error)")->choose(q); });
    check(clean_text(e) && has(e, "plugin 'test_hostile' failed: line one\\nline two"), e);
    const lf::plan fb =
        lf::policy_from_string("test_hostile(text=nasty,say=error,fallback=fixed)")->choose(q);
    check(clean_text(fb.reason), fb.reason);
    const lf::plan lng = lf::policy_from_string("test_hostile(text=long,say=decline)")->choose(q);
    check(lng.reason.size() < 2000, "long text is capped: " + std::to_string(lng.reason.size()));
    const std::string t = log.text();
    for (std::size_t at = 0, next; at < t.size(); at = next + 1) {
      next = t.find('\n', at);
      if (next == std::string::npos) break;
      const std::string line = t.substr(at, next - at);
      check(line.rfind("[", 0) == 0, "every log line starts with its level: " + line);
    }
    return check.rc();
  });
}
