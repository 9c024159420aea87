// SPDX-License-Identifier: MIT
// One tuner per plan (lib/store/lease.hpp, lib/tuning_lease.hpp) against a real redis-server
// (LAUNCHFIT_TEST_REDIS=redis://127.0.0.1:PORT, started by tests/run.sh; skipped without one): a lease is
// taken by one owner and honoured by every other; it is released only by its owner; a holder killed with
// SIGKILL costs the others its lease time, then one of them takes it; a process that finds the lease held
// watches the key from the background queue and adopts the plan once published, or takes the lease once it
// ended without one. Without a server: the typed failure of an unreachable store (fail open).

#include "store/lease.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "captured_log.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/kernel.hpp"
#include "plan_inputs.hpp"
#include "raw_redis.hpp"
#include "store/chain.hpp"
#include "store/kv_scheme.hpp"
#include "store/remote_layer.hpp"
#include "store_samples.hpp"
#include "tuning_lease.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
using launchfit_test::raw_redis;

namespace {

constexpr const char* lease_policy = "autotune(max_trials=64)";

lf::stored_key key(const std::string& what, std::uint64_t bucket = 0) {
  return launchfit_test::sample_key(launchfit_test::unique_model("Lease GPU", what), 0, bucket, lease_policy);
}

ld::stored_entry tuned_entry(const lf::stored_key& k, int block) {
  return ld::stored_entry{k, launchfit_test::sample_plan(block, lease_policy, "tuned elsewhere"),
                          1700000000000, 0};
}

// Waits for `done` to hold, checking every 5 ms, at most `limit`: the condition is the synchronisation (a
// lease's expiry in the server, the watcher's next poll), the limit only ends a broken test.
bool eventually(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A test's key starts empty, so that --gtest_repeat and a shared server find no lease or plan of a run
// before.
void fresh(raw_redis& raw, const lf::stored_key& k) {
  raw.command({"DEL", ld::lease_key(k), ld::remote_key(k)});
}

ld::redis_store store_at(const ld::remote_url& url) {
  ld::remote_options o;
  o.url = url;
  o.connect_timeout_ms = 2000;  // generous: a loaded test host must not fail the store open
  o.op_timeout_ms = 2000;
  return ld::redis_store(o);
}

// The process's side of a lease: launchfit's remote store is the server tests/run.sh started (the test is
// skipped without one), closed again after the test.
class TuningLease : public testing::Test {
 protected:
  void SetUp() override {
    NEEDS_REDIS(server);
    url = server;
    lf::set_remote_store(url->text);
  }
  void TearDown() override {
    if (url) lf::close_remote_store();
  }

  std::optional<ld::remote_url> url;
};

// A Redis ACL user of this test's own (dropped with it), and launchfit's remote store connected as that user.
class acl_user {
 public:
  acl_user(raw_redis& raw, const std::string& name, std::vector<std::string> rules) : raw_(raw), name_(name) {
    std::vector<std::string> cmd{"ACL", "SETUSER", name_, "on", ">first", "~*", "+@all"};
    cmd.insert(cmd.end(), rules.begin(), rules.end());
    made_ = raw_.command(cmd).text == "OK";
  }
  ~acl_user() {
    if (made_) raw_.command({"ACL", "DELUSER", name_});
  }
  acl_user(const acl_user&) = delete;
  acl_user& operator=(const acl_user&) = delete;
  bool made() const { return made_; }
  void connect_store(const ld::remote_url& url) const {
    lf::set_remote_store("redis://" + name_ + ":first@" + url.host + ":" + std::to_string(url.port) + "/" +
                         std::to_string(url.db));
  }

 private:
  raw_redis& raw_;
  std::string name_;
  bool made_ = false;
};

}  // namespace

TEST(LeaseKey, NamesThePlanKeyAndNeverMatchesAPlanScan) {
  const lf::stored_key k = key("scheme");
  const std::string plan_key = ld::remote_key(k);
  const std::string lease = ld::lease_key(k);
  EXPECT_EQ(lease, "launchfit:lease:" + plan_key.substr(std::string("launchfit:").size()));
  EXPECT_EQ(lease.rfind(std::string(ld::remote_key_base), 0), std::string::npos);
  EXPECT_FALSE(ld::is_remote_key(lease));
  EXPECT_NE(ld::lease_key(key("scheme", 5)), lease);  // one lease per size bucket
  lf::stored_key no_model = k;
  no_model.device_name.clear();
  EXPECT_EQ(ld::lease_key(no_model), "");  // never shared, never leased
}

TEST(LeaseOwner, IsPrintableAndNamesThisProcess) {
  const std::string owner = ld::lease_owner();
  EXPECT_LE(owner.size(), ld::max_lease_owner_bytes);
  EXPECT_NE(owner.find(":" + std::to_string(::getpid()) + ":"), std::string::npos) << owner;
  for (const unsigned char c : owner) EXPECT_TRUE(c > 0x20 && c < 0x7f) << owner;
}

// An unreachable store fails its first lease typed and is dropped as a lookup would drop it: the next lease
// is refused at once.
TEST(Lease, AnUnreachableStoreFailsTypedAndIsDropped) {
  ld::remote_options o;
  o.url.host = "127.0.0.1";
  o.url.port = 1;  // nothing listens there
  launchfit_test::captured_log log(spdlog::level::info);
  ld::redis_store store(o);
  const ld::lease_answer a = store.take_lease("launchfit:lease:x", "me:1:0", 1000);
  EXPECT_EQ(a.status, ld::lease_status::failed);
  EXPECT_EQ(a.failure, ld::layer_failure::io);
  EXPECT_TRUE(store.statistics().dead);
  const ld::lease_answer again = store.take_lease("launchfit:lease:x", "me:1:0", 1000);
  EXPECT_EQ(again.failure, ld::layer_failure::refused);
  EXPECT_EQ(store.statistics().failures, 1u) << log.text();
}

TEST(Lease, TheFileLayerHoldsNone) {
  const ld::lease_answer a = ld::file_layer().take_lease("launchfit:lease:x", "me:1:0", 1000);
  EXPECT_EQ(a.status, ld::lease_status::unsupported);
}

TEST(Lease, TakenByOneOwnerAndHonouredByAnother) {
  NEEDS_REDIS(url);
  ld::redis_store store = store_at(*url);
  raw_redis raw(url->host, url->port, url->db);
  fresh(raw, key("taken"));
  const std::string lease = ld::lease_key(key("taken"));
  const ld::lease_answer a = store.take_lease(lease, "host-a:1:00000000000000aa", 5000);
  EXPECT_EQ(a.status, ld::lease_status::taken);
  const ld::lease_answer b = store.take_lease(lease, "host-b:2:00000000000000bb", 5000);
  EXPECT_EQ(b.status, ld::lease_status::held);
  EXPECT_EQ(b.holder, "host-a:1:00000000000000aa");
  EXPECT_GT(b.remaining_ms, 0);
  EXPECT_LE(b.remaining_ms, 5000);
  // The same owner asking again does not take it twice either: a lease is one SET NX.
  EXPECT_EQ(store.take_lease(lease, "host-a:1:00000000000000aa", 5000).status, ld::lease_status::held);
  const auto ttl = raw.command({"PTTL", lease});
  EXPECT_GT(std::stoll(ttl.text), 0);  // it expires: a dead holder costs its lease time at most
}

TEST(Lease, ReleasedOnlyByItsOwner) {
  NEEDS_REDIS(url);
  ld::redis_store store = store_at(*url);
  raw_redis raw(url->host, url->port, url->db);
  fresh(raw, key("release"));
  const std::string lease = ld::lease_key(key("release"));
  ASSERT_EQ(store.take_lease(lease, "host-a:1:00000000000000aa", 5000).status, ld::lease_status::taken);
  EXPECT_EQ(store.release_lease(lease, "host-b:2:00000000000000bb").status, ld::lease_status::not_owner);
  EXPECT_EQ(raw.command({"GET", lease}).text, "host-a:1:00000000000000aa");  // still A's
  EXPECT_EQ(store.release_lease(lease, "host-a:1:00000000000000aa").status, ld::lease_status::released);
  EXPECT_EQ(raw.command({"EXISTS", lease}).text, "0");
  // Released twice: nothing of anyone's is deleted.
  ASSERT_EQ(store.take_lease(lease, "host-b:2:00000000000000bb", 5000).status, ld::lease_status::taken);
  EXPECT_EQ(store.release_lease(lease, "host-a:1:00000000000000aa").status, ld::lease_status::not_owner);
  EXPECT_EQ(raw.command({"GET", lease}).text, "host-b:2:00000000000000bb");
}

TEST(Lease, APollReadsThePublishedPlanAndWhetherTheLeaseIsHeld) {
  NEEDS_REDIS(url);
  ld::redis_store store = store_at(*url);
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("poll");
  fresh(raw, k);
  const std::string lease = ld::lease_key(k);
  ASSERT_EQ(store.take_lease(lease, "host-a:1:00000000000000aa", 5000).status, ld::lease_status::taken);
  auto polled = store.poll_leases({{lease, k}});
  ASSERT_EQ(polled.size(), 1u);
  EXPECT_TRUE(polled[0].held);
  EXPECT_FALSE(polled[0].published);
  // A forged value is no plan: refused as a lookup refuses it.
  raw.command({"SET", ld::remote_key(k), "{\"format\": \"launchfit-plan-cache\"}"});
  polled = store.poll_leases({{lease, k}});
  EXPECT_FALSE(polled[0].published);
  raw.command({"SET", ld::remote_key(k), ld::remote_value(tuned_entry(k, 256))});
  raw.command({"DEL", lease});
  polled = store.poll_leases({{lease, k}});
  EXPECT_FALSE(polled[0].held);
  ASSERT_TRUE(polled[0].published);
  EXPECT_EQ(polled[0].published->plan.block_threads, 256);
}

// The process's side: a lease held by another process is honoured (no tuning turn), the key watched from
// the background queue, and the plan adopted once published, the plan inputs changed so that the next
// launch of the key plans again and finds it.
TEST_F(TuningLease, AWaiterAdoptsThePlanOncePublished) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("adopt");
  fresh(raw, k);
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("launchfit-lease-test-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::filesystem::remove(file);
  lf::set_cache_file(file);
  const std::string lease = ld::lease_key(k);
  ASSERT_EQ(raw.command({"SET", lease, "tuner-host:4242:00000000000000cc", "PX", "60000"}).text, "OK");
  ld::tuning_lease t = ld::tuning_lease::take(k);
  ASSERT_EQ(t.what(), ld::tuning_lease::turn::wait);
  EXPECT_EQ(t.holder(), "tuner-host:4242:00000000000000cc");
  const ld::lease_watch_stats before = ld::lease_watch_statistics();
  const std::uint64_t generation = ld::plan_inputs_generation();
  t.watch();
  // Held, nothing published: the watcher polls and adopts nothing (and a miss asks no store again).
  ASSERT_TRUE(eventually([&] { return ld::lease_watch_statistics().polls >= before.polls + 2; }));
  EXPECT_FALSE(ld::adopted_plan(k));
  EXPECT_EQ(ld::lease_watch_statistics().adopted, before.adopted);
  EXPECT_EQ(ld::tuning_lease::take(k).what(), ld::tuning_lease::turn::wait);
  // The tuner publishes, then releases.
  raw.command({"SET", ld::remote_key(k), ld::remote_value(tuned_entry(k, 384))});
  raw.command({"DEL", lease});
  ASSERT_TRUE(eventually([&] { return ld::adopted_plan(k).has_value(); }));
  EXPECT_EQ(ld::adopted_plan(k)->block_threads, 384);
  // Backfilled: the local file keeps the adopted plan, its origin recorded, for a store restarted empty.
  ASSERT_TRUE(lf::flush_cache_file());
  const std::vector<ld::stored_entry> in_file = ld::file_layer().find(k);
  ASSERT_EQ(in_file.size(), 1u);
  EXPECT_EQ(in_file[0].plan.block_threads, 384);
  EXPECT_EQ(in_file[0].origin, "redis");
  lf::close_cache_file();
  std::filesystem::remove(file);
  EXPECT_EQ(ld::adopted_plan(k)->match, "remote");
  EXPECT_GT(ld::plan_inputs_generation(), generation);
  EXPECT_EQ(ld::lease_watch_statistics().adopted, before.adopted + 1);
}

// A lease that ends with nothing published (the tuner kept a noisy measurement local, or died) lets the next
// miss take it: the watcher changes the plan inputs and stops watching.
TEST_F(TuningLease, ALeaseEndedWithoutAPlanIsTakenByTheNextMiss) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("ended");
  fresh(raw, k);
  const std::string lease = ld::lease_key(k);
  ASSERT_EQ(raw.command({"SET", lease, "tuner-host:4243:00000000000000dd", "PX", "60000"}).text, "OK");
  ld::tuning_lease waiting = ld::tuning_lease::take(k);
  ASSERT_EQ(waiting.what(), ld::tuning_lease::turn::wait);
  const ld::lease_watch_stats before = ld::lease_watch_statistics();
  const std::uint64_t generation = ld::plan_inputs_generation();
  waiting.watch();
  raw.command({"DEL", lease});
  ASSERT_TRUE(eventually([&] { return ld::lease_watch_statistics().expired > before.expired; }));
  EXPECT_GT(ld::plan_inputs_generation(), generation);
  EXPECT_FALSE(ld::adopted_plan(k));
  {
    ld::tuning_lease mine = ld::tuning_lease::take(k);
    ASSERT_EQ(mine.what(), ld::tuning_lease::turn::tune);
    EXPECT_EQ(raw.command({"GET", lease}).text, ld::lease_owner());
    mine.publish_and_release(0);
    EXPECT_EQ(raw.command({"EXISTS", lease}).text, "0");
  }
  {
    // A tuning that ends without publishing (it threw) gives the lease back too.
    ld::tuning_lease mine = ld::tuning_lease::take(k);
    ASSERT_EQ(mine.what(), ld::tuning_lease::turn::tune);
  }
  EXPECT_EQ(raw.command({"EXISTS", lease}).text, "0");
}

// A holder killed with SIGKILL never releases: the others wait its lease time, then one takes the lease.
TEST_F(TuningLease, AHolderKilledCostsItsLeaseTime) {
  const lf::stored_key k = key("killed");
  {
    raw_redis raw(url->host, url->port, url->db);
    fresh(raw, k);
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ld::set_lease_ms_for_tests(1500);
    ld::tuning_lease t = ld::tuning_lease::take(k);
    const char c = t.what() == ld::tuning_lease::turn::tune ? 'T' : 'F';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();  // tuning for ever, until killed
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'T') << "the child did not get the lease";
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ::close(ready[0]);
  ::close(ready[1]);
  // Held by the dead child for the rest of its lease time: honoured.
  ld::tuning_lease first = ld::tuning_lease::take(k);
  ASSERT_EQ(first.what(), ld::tuning_lease::turn::wait);
  EXPECT_NE(first.holder().find(":" + std::to_string(child) + ":"), std::string::npos) << first.holder();
  EXPECT_LE(first.remaining_ms(), 1500);
  // Then free: this process tunes.
  std::optional<ld::tuning_lease::turn> turn;
  ASSERT_TRUE(eventually([&] {
    ld::tuning_lease t = ld::tuning_lease::take(k);
    turn = t.what();
    if (t.what() == ld::tuning_lease::turn::tune) t.publish_and_release(0);
    return turn == ld::tuning_lease::turn::tune;
  })) << "last turn "
      << static_cast<int>(*turn) << ", holder " << ld::tuning_lease::take(k).holder();
}

// A process whose lookup answered from what it remembered of an earlier read may take a lease whose plan was
// published meanwhile: holding it, it reads the key once, adopts the plan and releases the lease instead of
// tuning again.
TEST_F(TuningLease, AHolderThatFindsThePlanPublishedAdoptsItInsteadOfTuning) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("published");
  fresh(raw, k);
  {
    ld::tuning_lease nothing_yet = ld::tuning_lease::take(k);
    ASSERT_EQ(nothing_yet.what(), ld::tuning_lease::turn::tune);
    EXPECT_FALSE(nothing_yet.adopt_if_published());  // nothing published: this process tunes
    EXPECT_EQ(nothing_yet.what(), ld::tuning_lease::turn::tune);
  }
  raw.command({"SET", ld::remote_key(k), ld::remote_value(tuned_entry(k, 192))});
  ld::tuning_lease t = ld::tuning_lease::take(k);
  ASSERT_EQ(t.what(), ld::tuning_lease::turn::tune);
  EXPECT_TRUE(t.adopt_if_published());
  EXPECT_EQ(t.what(), ld::tuning_lease::turn::alone);
  EXPECT_EQ(raw.command({"EXISTS", ld::lease_key(k)}).text, "0");  // released at once
  ASSERT_TRUE(ld::adopted_plan(k));
  EXPECT_EQ(ld::adopted_plan(k)->block_threads, 192);
}

// Under the `exact` match level a GPU runs only its own GPU's plans: a plan another GPU of the model published
// is not adopted (it was, and served as match=remote, bypassing the level every lookup applies), and each GPU
// takes a lease of its own, so none waits for a plan it would not run.
TEST_F(TuningLease, UnderExactAnotherGpusPublishedPlanIsNotAdopted) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("exact");
  fresh(raw, k);
  lf::stored_key other_gpu = k;
  other_gpu.device_uuid = "GPU-00000000-0000-0000-0000-0000000000ee";
  raw.command({"SET", ld::remote_key(k), ld::remote_value(tuned_entry(other_gpu, 192))});
  struct restore {
    ~restore() { lf::set_cache_match(lf::cache_match::model); }
  } restored;
  lf::set_cache_match(lf::cache_match::exact);
  {
    // Another GPU's tuner holds the model's lease: this GPU's lease is its own.
    ASSERT_EQ(raw.command({"SET", ld::lease_key(k), "tuner-host:4244:00000000000000ee", "PX", "60000"}).text, "OK");
    ld::tuning_lease t = ld::tuning_lease::take(k);
    ASSERT_EQ(t.what(), ld::tuning_lease::turn::tune) << "this GPU waited for another GPU's lease";
    EXPECT_FALSE(t.adopt_if_published()) << "another GPU's plan was adopted under exact";
    EXPECT_EQ(t.what(), ld::tuning_lease::turn::tune);
    EXPECT_FALSE(ld::adopted_plan(k));
    t.publish_and_release(0);
    raw.command({"DEL", ld::lease_key(k)});
  }
  // Under `model` the same plan serves: adopted.
  lf::set_cache_match(lf::cache_match::model);
  ld::tuning_lease t = ld::tuning_lease::take(k);
  ASSERT_EQ(t.what(), ld::tuning_lease::turn::tune);
  EXPECT_TRUE(t.adopt_if_published());
  ASSERT_TRUE(ld::adopted_plan(k));
  EXPECT_EQ(ld::adopted_plan(k)->block_threads, 192);
}

// A store whose polls of a watched key fail (here an ACL user without EXISTS: every poll is refused) is no end
// of the lease: the key is polled again, and after a few failures in a row this process decides the key alone,
// takes no lease for it and polls it no more. (Each failed poll ended the watch and changed the plan inputs, the
// next launch took the lease again and waited, and every kernel of the process planned again in a loop.)
TEST_F(TuningLease, PollsThatKeepFailingEndInDecidingAloneNotALoop) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("failing");
  fresh(raw, k);
  const acl_user user(raw, "launchfit-no-exists-" + std::to_string(::getpid()), {"-exists"});
  if (!user.made()) GTEST_SKIP() << "this Redis has no ACL users";
  user.connect_store(*url);
  const std::string lease = ld::lease_key(k);
  ASSERT_EQ(raw.command({"SET", lease, "tuner-host:4245:00000000000000ff", "PX", "60000"}).text, "OK");
  ld::tuning_lease waiting = ld::tuning_lease::take(k);
  ASSERT_EQ(waiting.what(), ld::tuning_lease::turn::wait);
  const ld::lease_watch_stats before = ld::lease_watch_statistics();
  waiting.watch();
  ASSERT_TRUE(eventually([&] { return ld::lease_watch_statistics().expired > before.expired; }));
  const ld::lease_watch_stats after = ld::lease_watch_statistics();
  EXPECT_GE(after.polls, before.polls + 3) << "the watch ended at the first failed poll";
  EXPECT_EQ(after.expired, before.expired + 1);
  EXPECT_EQ(ld::tuning_lease::take(k).what(), ld::tuning_lease::turn::alone)
      << "the next miss took the lease again and waited";
  EXPECT_EQ(raw.command({"GET", lease}).text, "tuner-host:4245:00000000000000ff");
  raw.command({"DEL", lease, ld::remote_key(k)});
}

// close_remote_store() ends the fleet's leases too: a key watched on the closed store is polled no more after a
// few refused polls and decided here (it was polled, over a new connection each time, for the process's life,
// and a miss of it answered "wait" from the closed store).
TEST_F(TuningLease, AClosedStoreEndsItsWatchesAndTakesNoLease) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("closed");
  fresh(raw, k);
  ASSERT_EQ(raw.command({"SET", ld::lease_key(k), "tuner-host:4246:0000000000000011", "PX", "60000"}).text, "OK");
  ld::tuning_lease waiting = ld::tuning_lease::take(k);
  ASSERT_EQ(waiting.what(), ld::tuning_lease::turn::wait);
  const ld::lease_watch_stats before = ld::lease_watch_statistics();
  waiting.watch();
  lf::close_remote_store();
  ASSERT_TRUE(eventually([&] { return ld::lease_watch_statistics().watched == 0; }));
  EXPECT_EQ(ld::lease_watch_statistics().expired, before.expired + 1);
  EXPECT_EQ(ld::tuning_lease::take(k).what(), ld::tuning_lease::turn::alone);
  raw.command({"DEL", ld::lease_key(k)});
}

// A lease that never ends (a peer's SET without PX, a key restored without its time to live) holds a waiting
// process no longer than a lease could live: then the key is decided here. (It was watched, and polled over a
// new connection 20 times a second, for the process's life, and the key never tuned anywhere.)
TEST_F(TuningLease, ALeaseWithoutATimeToLiveIsWaitedForNoLongerThanALease) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("no-ttl");
  fresh(raw, k);
  struct restore {
    ~restore() { ld::set_lease_ms_for_tests(0); }
  } restored;
  ld::set_lease_ms_for_tests(400);
  ASSERT_EQ(raw.command({"SET", ld::lease_key(k), "tuner-host:4247:0000000000000022"}).text, "OK");  // no PX
  ld::tuning_lease waiting = ld::tuning_lease::take(k);
  ASSERT_EQ(waiting.what(), ld::tuning_lease::turn::wait);
  const ld::lease_watch_stats before = ld::lease_watch_statistics();
  waiting.watch();
  ASSERT_TRUE(eventually([&] { return ld::lease_watch_statistics().expired > before.expired; }))
      << "the watch of a lease without a time to live never ended";
  EXPECT_EQ(ld::tuning_lease::take(k).what(), ld::tuning_lease::turn::alone);
  raw.command({"DEL", ld::lease_key(k)});
}

// A store that cannot give a lease (here an ACL refuses SET, so the lease's SET NX answers NOPERM while the
// store answers lookups) is said once and counted: this process tunes without one, and the store stays in use.
// (It was silent.)
TEST_F(TuningLease, ALeaseTheStoreCannotGiveIsSaidOnceAndCounted) {
  raw_redis raw(url->host, url->port, url->db);
  const lf::stored_key k = key("refused");
  fresh(raw, k);
  const std::string name = "launchfit-lease-noset-" + std::to_string(::getpid());
  const acl_user user(raw, name, {"-set"});
  if (!user.made()) GTEST_SKIP() << "this Redis has no ACL users";
  user.connect_store(*url);
  launchfit_test::captured_log log(spdlog::level::info);
  const std::uint64_t failed = ld::lease_watch_statistics().failed;
  EXPECT_EQ(ld::tuning_lease::take(k).what(), ld::tuning_lease::turn::alone);
  EXPECT_EQ(ld::tuning_lease::take(k).what(), ld::tuning_lease::turn::alone);
  EXPECT_EQ(ld::lease_watch_statistics().failed, failed + 2);
  const std::string t = log.text();
  const std::string said = "the remote plan store gave no tuning lease";
  ASSERT_NE(t.find(said), std::string::npos) << t;
  EXPECT_EQ(t.find(said, t.find(said) + 1), std::string::npos) << "said more than once: " << t;
  EXPECT_FALSE(lf::remote_store_statistics().dead) << "an error reply to a lease command dropped the store: " << t;
}
