// SPDX-License-Identifier: MIT
// Many threads at once on everything process-wide that is not the plan cache (cache-test.cpp covers that):
// the policy registry, policy strings, plugin loading, LAUNCHFIT_POLICY overrides and the bytes-in-flight
// table. Each test checks results, not just survival, and is what ThreadSanitizer (tests/sanitize.sh) runs on.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "launchfit/error.hpp"
#include "launchfit/plugin.hpp"
#include "launchfit/param_policy.hpp"
#include "launchfit/policy.hpp"

namespace lf = launchfit;

namespace {

constexpr int threads = 16;

std::string plugin_path(const std::string& name) {
  return std::string(LAUNCHFIT_TEST_BINARY_DIR) + "/plugins/liblf_" + name + ".so";
}

lf::query h200() {
  lf::query q;
  q.device = lf::device_limits::for_arch("H200");
  q.kernel = lf::kernel_resources::manual(32, 0, 1024, "void saxpy(float, float const*, float*, int)");
  return q;
}

// Runs body(thread index) on `threads` threads released together; failures are collected, not thrown.
class crowd {
 public:
  template <class F>
  void run(F body) {
    std::atomic<int> arrived{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        arrived.fetch_add(1);
        while (arrived.load() < threads) std::this_thread::yield();  // start together
        try {
          body(t);
        } catch (const std::exception& e) {
          fail("thread " + std::to_string(t) + " threw: " + e.what());
        }
      });
    }
    for (auto& th : pool) th.join();
  }
  void fail(const std::string& what) {
    std::lock_guard lock(mutex_);
    if (failures_.size() < 20) failures_.push_back(what);
    ++count_;
  }
  void expect(bool ok, const std::string& what) {
    if (!ok) fail(what);
  }
  void check() const {
    for (const auto& f : failures_) ADD_FAILURE() << f;
    EXPECT_EQ(count_, 0) << "failures in worker threads";
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> failures_;
  int count_ = 0;
};

struct tag_params {
  int tag = 0;
  static constexpr std::array<const char*, 1> names{"tag"};
};

class tag_policy final : public lf::param_policy<tag_policy, tag_params> {
 public:
  static constexpr const char* policy_name = "test_tag";
  using param_policy::param_policy;

 protected:
  lf::plan choose_impl(const lf::query& q) const override {
    lf::plan p;
    p.block = lf::dims{static_cast<unsigned>(32 * (1 + params_.tag % 8)), 1, 1};
    p.blocks_per_sm = q.active_blocks_for(static_cast<int>(p.block.x));
    p.reason = "tag " + std::to_string(params_.tag);
    return p;
  }
};

}  // namespace

TEST(Concurrency, RegistryLookupsRegistrationsAndPolicyStrings) {
  const char* good[] = {"max_occupancy", "bytes_in_flight(per_thread=32)", "fixed(block=256,grid=80)",
                        "cooperative(blocks_per_sm=1)", "constant_block()", "bytes_in_flight(target_per_sm=64K)"};
  const char* expected[] = {"max_occupancy(prefer_block=256,block_limit=0)", "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)",
                            "fixed(block=256,grid=80)", "cooperative(blocks_per_sm=1,block=0)", "constant_block()",
                            "bytes_in_flight(per_thread=16,target_per_sm=65536,prefer_block=256)"};
  const char* bad[] = {"fixed(block=", "max_occupency", "fixed(blok=1)", "bytes_in_flight(per_thread=1K"};
  std::atomic<int> shared_name_wins{0};
  const lf::query q = h200();
  crowd c;
  c.run([&](int t) {
    const std::string own = "test_thread_" + std::to_string(t);
    for (int i = 0; i < 200; ++i) {
      const int k = (t + i) % 6;
      const auto p = lf::policy_from_string(good[k]);
      c.expect(p->to_string() == expected[k], p->to_string() + " != " + expected[k]);
      try {
        lf::policy_from_string(bad[(t + i) % 4]);
        c.fail(std::string("accepted ") + bad[(t + i) % 4]);
      } catch (const lf::error& e) {
        c.expect(e.cuda_error() == "LAUNCHFIT_BAD_POLICY_STRING", e.what());
      }
      const auto fixed = lf::make_policy("fixed", {{"block", std::to_string(32 * (1 + i % 32))}});
      c.expect(fixed->choose(q).block_threads == 32 * (1 + i % 32), "fixed block");
      // Registration races lookups: a thread's own name, registered and removed again.
      if (i % 10 == 0) {
        lf::register_policy(own, [t](const std::map<std::string, std::string>&) {
          return std::shared_ptr<const lf::policy>(std::make_shared<tag_policy>(tag_params{t}));
        });
        c.expect(lf::make_policy(own)->choose(q).reason == "tag " + std::to_string(t), "own policy");
        const auto names = lf::registered_policies();
        c.expect(std::find(names.begin(), names.end(), own) != names.end(), own + " not listed");
        c.expect(std::find(names.begin(), names.end(), "max_occupancy") != names.end(), "built-ins not listed");
        c.expect(lf::unregister_policy(own), own + " not removed");
      }
    }
    // Everyone registers the same name once: exactly one wins, the rest get a clear duplicate error.
    try {
      lf::register_policy("test_shared_name", [](const std::map<std::string, std::string>&) {
        return std::shared_ptr<const lf::policy>(std::make_shared<tag_policy>());
      });
      ++shared_name_wins;
    } catch (const lf::error& e) {
      c.expect(e.cuda_error() == "LAUNCHFIT_DUPLICATE_POLICY", e.what());
      c.expect(std::string(e.what()).find("'test_shared_name' is already registered") != std::string::npos,
               e.what());
    }
  });
  c.check();
  EXPECT_EQ(shared_name_wins.load(), 1);
  EXPECT_TRUE(lf::unregister_policy("test_shared_name"));
  for (int t = 0; t < threads; ++t) EXPECT_THROW(lf::make_policy("test_thread_" + std::to_string(t)), lf::error);
}

TEST(Concurrency, OnePluginFileLoadsOnceAndItsTwinIsRefusedAsADuplicate) {
  // liblf_good.so and liblf_good_twin.so both call their policy "test_good": whichever loads first wins,
  // every later load of the same file is harmless, and every load of the other file is refused.
  std::mutex m;
  std::map<std::string, int> loaded, refused;
  crowd c;
  c.run([&](int t) {
    for (int i = 0; i < 20; ++i) {
      const std::string name = (t + i) % 2 ? "good" : "good_twin";
      try {
        const lf::plugin_info info = lf::load_plugin(plugin_path(name));
        c.expect(info.name == "test_good", "plugin name " + info.name);
        std::lock_guard lock(m);
        ++loaded[name];
      } catch (const lf::error& e) {
        c.expect(e.cuda_error() == "LAUNCHFIT_PLUGIN_REFUSED", e.what());
        c.expect(std::string(e.what()).find("duplicate name") != std::string::npos, e.what());
        c.expect(std::string(e.what()).find("liblf_" + name + ".so") != std::string::npos, e.what());
        std::lock_guard lock(m);
        ++refused[name];
      }
      // Missing and malformed plugins fail the same way every time, whoever else is loading.
      try {
        lf::load_plugin(plugin_path(i % 2 ? "no_entry" : "bad_abi"));
        c.fail("a broken plugin loaded");
      } catch (const lf::error& e) {
        c.expect(e.cuda_error() == "LAUNCHFIT_PLUGIN_REFUSED", e.what());
      }
    }
  });
  c.check();
  ASSERT_EQ(loaded.size(), 1u) << "both files, or neither, loaded";
  const std::string winner = loaded.begin()->first;
  const std::string loser = winner == "good" ? "good_twin" : "good";
  EXPECT_EQ(loaded[winner], threads * 10);
  EXPECT_EQ(refused[loser], threads * 10);
  EXPECT_EQ(refused.count(winner), 0u);
  int with_name = 0;
  for (const auto& p : lf::loaded_plugins()) with_name += p.name == "test_good";
  EXPECT_EQ(with_name, 1);

  // Every thread makes and uses its own instance of the plugin's policy at once.
  const lf::query q = h200();
  crowd use;
  use.run([&](int t) {
    const int block = 32 * (1 + t % 8);
    for (int i = 0; i < 50; ++i) {
      const auto p = lf::policy_from_string("test_good(block=" + std::to_string(block) + ")");
      const lf::plan chosen = p->choose(q);
      use.expect(chosen.block_threads == block, "plugin chose " + std::to_string(chosen.block_threads));
      use.expect(chosen.policy == "test_good(block=" + std::to_string(block) + ")", chosen.policy);
      lf::plugin_feedback(*p, chosen, 1.0);
    }
  });
  use.check();
}

TEST(Concurrency, OverrideLookupsWhileTheOverridesAreReplaced) {
  // Two complete tables, swapped by writers while readers look kernels up: a reader sees one table or the
  // other, never a mix, and a policy it got stays usable after its table is gone.
  const std::string table_a = "saxpy=fixed(block=128);reduce*=bytes_in_flight(per_thread=32)";
  const std::string table_b = "saxpy=fixed(block=256);reduce*=bytes_in_flight(per_thread=64)";
  lf::set_policy_overrides(table_a);
  const lf::query q = h200();
  crowd c;
  c.run([&](int t) {
    for (int i = 0; i < 300; ++i) {
      if (t < 2) {  // writers
        lf::set_policy_overrides(i % 2 ? table_a : table_b);
        try {
          lf::set_policy_overrides("saxpy=fixed(block=128);reduce*=");  // refused; the table stays
          c.fail("a bad override table was accepted");
        } catch (const lf::error& e) {
          c.expect(e.cuda_error() == "LAUNCHFIT_BAD_POLICY_STRING", e.what());
        }
        continue;
      }
      std::string glob;
      const auto saxpy = lf::policy_override_for("void saxpy(float, float const*, float*, int)", &glob);
      const auto reduce = lf::policy_override_for("void reduce<float, 4>(float const*, double*)");
      const auto none = lf::policy_override_for("void other_kernel(int)");
      c.expect(saxpy && reduce && !none, "override lookup");
      if (!saxpy || !reduce) continue;
      c.expect(glob == "saxpy", "matched glob " + glob);
      const std::string s = saxpy->to_string();
      c.expect(s == "fixed(block=128,grid=0)" || s == "fixed(block=256,grid=0)", s);
      const lf::plan p = saxpy->choose(q);  // the table may have been replaced by now
      c.expect(p.block_threads == 128 || p.block_threads == 256, "block " + std::to_string(p.block_threads));
    }
  });
  c.check();
  lf::set_policy_overrides("");
  EXPECT_FALSE(lf::policy_override_for("saxpy"));
}

TEST(Concurrency, BytesInFlightTargetsChangeWhilePoliciesChoose) {
  const lf::query q = h200();
  const lf::bytes_in_flight_policy policy{{32, 0}};
  crowd c;
  c.run([&](int t) {
    for (int i = 0; i < 200; ++i) {
      if (t == 0) {
        lf::set_bytes_in_flight_per_sm(90, i % 2 ? 32 * 1024 : 64 * 1024);
        continue;
      }
      const lf::plan p = policy.choose(q);
      const int warps = p.blocks_per_sm * p.block_threads / 32;
      c.expect(warps == 32 || warps == 64, "resident warps " + std::to_string(warps));
    }
  });
  c.check();
  lf::set_bytes_in_flight_per_sm(90, 32 * 1024);
}
