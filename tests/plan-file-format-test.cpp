// SPDX-License-Identifier: MIT
// The plan file's format and the one check of a stored entry (lib/plan_file_format.hpp: parse_cache_file,
// validate_stored_entry): a stored plan can never add or drop what a launch requires. Whatever its key says
// of cooperative, cluster and PDL (the words after the policy in its policy text) is what its plan must do,
// and its plan must name the key's policy; any other entry is refused, counted and named.

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <locale>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cache_file.hpp"
#include "launch_options.hpp"
#include "launchfit/cache.hpp"
#include "launchfit/log.hpp"
#include "plan_file_format.hpp"
#include "plan_merge.hpp"
#include "store_samples.hpp"

namespace lf = launchfit;
namespace ld = launchfit::detail;
namespace fs = std::filesystem;

namespace {

const std::string plain = launchfit_test::sample_policy;

lf::device_limits h200() {
  lf::device_limits d = lf::device_limits::for_arch("H200");
  d.uuid = "GPU-aaaaaaaa-0000-1111-2222-333344445555";
  d.name = "NVIDIA H200";
  return d;
}

// An entry of kernel `name` whose key's policy text is `key_text` and whose plan names `policy` and launches
// with nothing the key does not say (until a test changes it).
ld::stored_entry entry(const std::string& name, const std::string& key_text,
                       const std::string& policy = plain) {
  ld::stored_entry e;
  e.key = lf::stored_key_for(h200(), 12080, lf::kernel_resources::manual(32, 0, 1024, name), key_text,
                             "bytes=0", 0);
  e.plan = launchfit_test::sample_plan(256, policy, "");
  e.stored_at_ms = 1000;
  return e;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string all(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace

// A kernel's fingerprint is the same text whatever the program's global locale: one that groups digits
// ("49,152") made keys no reader could parse back, so every plan such a program stored was refused.
struct digit_grouping : std::numpunct<char> {
  char do_thousands_sep() const override { return ','; }
  std::string do_grouping() const override { return "\3"; }
};
TEST(StoredKey, AKernelsFingerprintIgnoresTheGlobalLocale) {
  lf::kernel_resources k;
  k.name = "_Z4axpyfPKfPfi";
  k.regs_per_thread = 32;
  k.static_smem_bytes = 49152;
  k.local_bytes_per_thread = 0;
  k.max_threads_per_block = 1024;
  k.ptx_version = 90;
  k.binary_version = 90;
  const std::string classic = lf::kernel_fingerprint(k);
  EXPECT_EQ(classic, "_Z4axpyfPKfPfi|32|49152|0|1024|90|90");
  const std::locale before = std::locale::global(std::locale(std::locale::classic(), new digit_grouping));
  const std::string grouped = lf::kernel_fingerprint(k);
  std::locale::global(before);
  EXPECT_EQ(grouped, classic);
  const auto back = lf::kernel_from_fingerprint(grouped);
  ASSERT_TRUE(back.has_value()) << grouped;
  EXPECT_EQ(back->static_smem_bytes, 49152u);
  EXPECT_EQ(back->max_threads_per_block, 1024);
}

// A kernel whose name is not clean text (bytes that are not UTF-8, a control character) is keyed by its name in
// hex: its entry reads back under the key a launch makes (the writer replaced the bytes, the reader refused the
// control characters, and the kernel's plan was made again, and tuned, on every run). Clean names are as they are.
TEST(StoredKey, ANameThatIsNotCleanTextReadsBackUnderTheSameKey) {
  for (const std::string name : {std::string("_Z4ax\xffypfPKfPfi"), std::string("_Z4a\x1b[31mxfPKfPfi"),
                                 std::string("_Z4axpyfPKfPfi")}) {
    const ld::stored_entry e = entry(name, plain);
    const bool clean = name == "_Z4axpyfPKfPfi";
    EXPECT_EQ(e.key.kernel.rfind(clean ? name : "~x", 0), 0u) << e.key.kernel;
    const auto back = ld::parse_cache_file(ld::serialize_cache_file({e}));
    ASSERT_EQ(back.entries.size(), 1u) << back.problem;
    EXPECT_EQ(back.entries[0].key.kernel, e.key.kernel);
  }
}

TEST(StoredEntry, APlanThatAddsALaunchOptionIsRefusedNamingTheEntryAndTheKernel) {
  ld::stored_entry cooperative = entry("_Z4coopPf", plain);
  cooperative.plan.options.cooperative = true;
  ld::stored_entry programmatic = entry("_Z3pdlPf", plain);
  programmatic.plan.options.programmatic = true;
  ld::stored_entry clustered = entry("_Z7clusterPf", plain);
  clustered.plan.options.cluster = lf::dims{2, 1, 1};
  ld::stored_entry other_policy =
      entry("_Z5otherPf", plain, "bytes_in_flight(per_thread=16,target_per_sm=0,prefer_block=256)");
  const ld::cache_file_contents c = ld::parse_cache_file(ld::serialize_cache_file(
      {entry("_Z4goodPf", plain), cooperative, programmatic, clustered, other_policy}));
  EXPECT_EQ(c.status, ld::cache_file_status::ok);
  ASSERT_EQ(c.entries.size(), 1u);
  EXPECT_EQ(c.entries[0].key.kernel.rfind("_Z4goodPf|", 0), 0u);
  EXPECT_EQ(c.skipped, 4u);
  EXPECT_EQ(c.refused, 4u);
  ASSERT_EQ(c.problems.size(), 4u);
  EXPECT_EQ(c.refusals, c.problems);
  EXPECT_EQ(c.problems[0], "entry 1 (kernel _Z4coopPf): the entry's plan is cooperative, its key is not");
  EXPECT_EQ(
      c.problems[1],
      "entry 2 (kernel _Z3pdlPf): the entry's plan is a programmatic dependent launch (PDL), its key is not");
  EXPECT_EQ(c.problems[2], "entry 3 (kernel _Z7clusterPf): the entry's plan has cluster 2, its key none");
  EXPECT_EQ(c.problems[3],
            "entry 4 (kernel _Z5otherPf): the entry's plan names policy "
            "'bytes_in_flight(per_thread=16,target_per_sm=0,prefer_block=256)', its key '" +
                plain + "'");
  EXPECT_EQ(c.problem, c.problems[0]);
}

TEST(StoredEntry, APlanThatDropsALaunchOptionIsRefused) {
  const ld::stored_entry cooperative = entry("_Z4coopPf", plain + " cooperative");
  const ld::stored_entry clustered = entry("_Z7clusterPf", plain + " cluster=2");
  const ld::stored_entry programmatic = entry("_Z3pdlPf", plain + " pdl");
  ld::stored_entry wider = entry("_Z5widerPf", plain + " cluster=4x1x1");  // the dims either way
  wider.plan.options.cluster = lf::dims{2, 1, 1};
  const ld::cache_file_contents c =
      ld::parse_cache_file(ld::serialize_cache_file({cooperative, clustered, programmatic, wider}));
  EXPECT_TRUE(c.entries.empty());
  EXPECT_EQ(c.refused, 4u);
  const std::string problems = all(c.problems);
  EXPECT_TRUE(has(problems, "entry 0 (kernel _Z4coopPf): the entry's plan is not cooperative, its key is"))
      << problems;
  EXPECT_TRUE(
      has(problems, "entry 1 (kernel _Z7clusterPf): the entry's plan has cluster none, its key cluster 2"))
      << problems;
  EXPECT_TRUE(has(
      problems,
      "entry 2 (kernel _Z3pdlPf): the entry's plan is not a programmatic dependent launch (PDL), its key is"))
      << problems;
  EXPECT_TRUE(has(problems, "entry 3 (kernel _Z5widerPf): the entry's plan has cluster 2, its key cluster 4"))
      << problems;
}

// A cooperative grid co-resides: an entry whose plan launches the full grid under a cooperative key is
// refused (every launch of it with more work than co-resides would fail); under a plain key it is kept.
TEST(StoredEntry, AFullGridUnderACooperativeKeyIsRefused) {
  ld::stored_entry full = entry("_Z4coopPf", plain + " cooperative");
  full.plan.options.cooperative = true;
  full.plan.full_grid = true;
  ld::stored_entry plain_full = entry("_Z4mapsPf", plain);
  plain_full.plan.full_grid = true;
  const ld::cache_file_contents c = ld::parse_cache_file(ld::serialize_cache_file({full, plain_full}));
  ASSERT_EQ(c.entries.size(), 1u);
  EXPECT_TRUE(c.entries[0].plan.full_grid);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0],
            "entry 0 (kernel _Z4coopPf): the entry's plan launches the full grid, its key is cooperative (a "
            "cooperative grid co-resides)");
}

TEST(StoredEntry, APlanThatLaunchesAsItsKeySaysIsKept) {
  ld::stored_entry all_options =
      entry("_Z3allPf", plain + " cooperative cluster=2x2 pdl blocks=multiple of 64 rows=32 sms=66");
  all_options.plan.options.cooperative = true;
  all_options.plan.options.cluster = lf::dims{2, 2, 1};
  all_options.plan.options.programmatic = true;
  // A family's member fingerprints may hold ')' and a policy's parameters ") ": the policy still ends where
  // the launch words begin.
  const ld::stored_entry family =
      entry("_Z3famPf", plain + " family=128:_Z4f128v(x)|32|0|0|128|90|90,256:_Z4f256v|32|0|0|256|90|90");
  const std::string odd = "my_policy(note=a) b,level=2)";
  ld::stored_entry odd_params = entry("_Z3oddPf", odd + " cooperative", odd);
  odd_params.plan.options.cooperative = true;
  const ld::stored_entry unnamed = entry("_Z7unnamedPf", plain, "");  // a plan without its policy's name
  // The work's kind, where it is not items(n): a grid_stride launch's plan (with its waves cap) and a grid's.
  ld::stored_entry strided = entry("_Z6stridePf", plain + " pdl work=grid_stride waves=2");
  strided.plan.options.programmatic = true;
  strided.plan.options.waves = 2;
  const ld::stored_entry gridded = entry("_Z4gridPf", plain + " blocks=multiple of 64 work=grid");
  for (const auto& e : {all_options, family, odd_params, unnamed, strided, gridded,
                        entry("_Z5itemsPf", plain + " blocks=one of 64,128 rows=32 work=items"),
                        entry("_Z4nonePf", plain + " work=none")}) {
    EXPECT_EQ(ld::validate_stored_entry(e), "") << e.key.policy;
  }
  const ld::cache_file_contents c = ld::parse_cache_file(
      ld::serialize_cache_file({all_options, family, odd_params, unnamed, strided, gridded}));
  EXPECT_EQ(c.entries.size(), 6u) << all(c.problems);
  std::vector<ld::stored_entry> fast;
  EXPECT_TRUE(ld::parse_cache_file_lines(
      ld::serialize_cache_file({all_options, family, odd_params, unnamed, strided, gridded}), {}, fast));
  EXPECT_EQ(fast.size(), 6u);
}

TEST(StoredEntry, AMalformedKeyTextIsRefused) {
  for (const std::string text :
       {std::string("max_occupancy"), plain + " turbo", plain + " cluster=0x1x1", plain + " pdl cooperative",
        plain + "  cooperative", std::string("(x=1)"), plain + " cluster=1x1x1", plain + " waves=0",
        plain + " waves=", plain + " waves=2x", plain + " waves=4294967296", plain + " waves=1 waves=2",
        plain + " work=everything", plain + " work=", plain + " work=grid_stride work=grid",
        plain + " work=items waves=2", plain + " waves=2 work=grid", plain + " rows=32 turbo",
        plain + " work=items turbo", plain + " blocks=power of two  work=items",
        plain + " blocks=power of two pdl work=items"}) {
    SCOPED_TRACE(text);
    const ld::stored_entry e = entry("_Z3badPf", text);
    EXPECT_TRUE(has(ld::validate_stored_entry(e), "is not a policy followed by launch-option words"))
        << ld::validate_stored_entry(e);
    const ld::cache_file_contents c = ld::parse_cache_file(ld::serialize_cache_file({e}));
    EXPECT_EQ(c.refused, 1u);
    ASSERT_EQ(c.problems.size(), 1u);
    EXPECT_EQ(c.problems[0].rfind("entry 0 (kernel _Z3badPf): the key's policy text '", 0), 0u)
        << c.problems[0];
  }
}

// The smem rule is a launch option too: a plan whose dynamic smem is not the fixed bytes its key names would
// launch the kernel with other shared memory than its launches ask for.
TEST(StoredEntry, APlanWithoutItsKeysBlockShapeIsRefusedNamingTheEntry) {
  // A quasirandom generator's launch: block {bx, 3}; a 256-thread plan in rows of 32 is not one.
  ld::stored_entry rows = entry("_Z4qrngPf", plain + " rows=32 shape=x=32n,y=3");
  rows.plan.block = lf::dims{32, 8, 1};
  ld::stored_entry shaped = entry("_Z5qrng2Pf", plain + " rows=32 shape=x=32n,y=3");
  shaped.plan.block = lf::dims{64, 3, 1};
  shaped.plan.block_threads = 192;
  ld::stored_entry transpose = entry("_Z9transposePf", plain + " rows=32 shape=x=32n,y=8,per_thread_y=4");
  transpose.plan.block = lf::dims{32, 8, 1};
  EXPECT_EQ(ld::validate_stored_entry(shaped), "");
  EXPECT_EQ(ld::validate_stored_entry(transpose), "");
  EXPECT_EQ(ld::validate_stored_entry(rows),
            "the entry's plan has block 32x8, which does not have its key's block shape x=32n,y=3");
  const ld::cache_file_contents c = ld::parse_cache_file(ld::serialize_cache_file({rows, shaped, transpose}));
  EXPECT_EQ(c.entries.size(), 2u) << all(c.problems);
  EXPECT_EQ(c.refused, 1u);
  EXPECT_TRUE(has(all(c.problems), "entry 0 (kernel _Z4qrngPf): the entry's plan has block 32x8"))
      << all(c.problems);
  // A shape word that no shape writes makes the key malformed.
  for (const std::string bad :
       {plain + " shape=y=3", plain + " shape=x=32n,y=3 shape=x=32n,y=3", plain + " shape=x=32n"}) {
    EXPECT_TRUE(has(ld::validate_stored_entry(entry("_Z3badPf", bad)), "is not a policy followed by")) << bad;
  }
}

TEST(StoredEntry, APlanWhoseSmemIsNotItsKeysFixedBytesIsRefused) {
  ld::stored_entry e = entry("_Z4smemPf", plain);
  e.plan.dynamic_smem_bytes = 4096;  // under "bytes=0"
  EXPECT_EQ(ld::validate_stored_entry(e), "the entry's plan has 4096 B of dynamic smem, its key 0 B");
  e.key.smem_rule = "bytes=4096";
  EXPECT_EQ(ld::validate_stored_entry(e), "");
  e.key.smem_rule = "fn=1234";  // a rule of the block size: checked against the rule when launched
  EXPECT_EQ(ld::validate_stored_entry(e), "");
  for (const std::string bad : {"", "bytes=", "bytes=-1", "fn=", "bytes=99999999999999999999", "4096"}) {
    e.key.smem_rule = bad;
    EXPECT_TRUE(has(ld::validate_stored_entry(e), "is neither bytes=N nor fn=ID")) << bad;
  }
  const ld::cache_file_contents c =
      ld::parse_cache_file(ld::serialize_cache_file({entry("_Z4smemPf", plain), e}));
  EXPECT_EQ(c.entries.size(), 1u);
  EXPECT_EQ(c.refused, 1u);
}

TEST(StoredEntry, AWavesCapIsAKeyWord) {
  const ld::stored_entry e = entry("_Z5wavesPf", plain + " waves=2 sms=66");
  EXPECT_EQ(ld::validate_stored_entry(e), "");
  const auto parsed = ld::parse_key_text(e.key.policy);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->options.waves, 2u);
}

// A calibration is a measured target, never launched: its plan is not held to a plan's rules, its target is.
TEST(StoredEntry, CalibrationsAreCheckedAsCalibrations) {
  ld::stored_entry calibration;
  calibration.key = lf::stored_key_for(h200(), 12080, lf::kernel_resources{}, ld::calibration_policy, "", 0);
  calibration.key.kernel = ld::calibration_kernel;
  calibration.plan.block = lf::dims{1, 1, 1};
  calibration.plan.block_threads = 1;
  calibration.plan.options.cooperative = true;  // nothing a launch reads
  calibration.bytes_in_flight_per_sm = 32 * 1024;
  EXPECT_EQ(ld::validate_stored_entry(calibration), "");
  EXPECT_EQ(ld::parse_cache_file(ld::serialize_cache_file({calibration})).entries.size(), 1u);
  // 1 B per SM was accepted (and sized every block to one warp): below four warps of 4-byte loads, refused.
  for (std::uint64_t bytes : {std::uint64_t(0), std::uint64_t(1), ld::min_calibration_bytes_per_sm - 1,
                              ld::max_calibration_bytes_per_sm + 1}) {
    calibration.bytes_in_flight_per_sm = bytes;
    EXPECT_EQ(ld::validate_stored_entry(calibration), "'bytes_in_flight_per_sm' is not in 512 B..4 MiB")
        << bytes;
  }
  calibration.bytes_in_flight_per_sm = ld::min_calibration_bytes_per_sm;
  EXPECT_EQ(ld::validate_stored_entry(calibration), "");
  // Within 4 MiB but more than an SM of the key's architecture holds (registers and shared memory).
  calibration.key.cc = 90;
  calibration.bytes_in_flight_per_sm = std::uint64_t(1) << 20;
  EXPECT_NE(ld::validate_stored_entry(calibration).find("is not in 512..495616 B"), std::string::npos)
      << ld::validate_stored_entry(calibration);
  ld::stored_entry plan_with_target = entry("_Z4planPf", plain);
  plan_with_target.bytes_in_flight_per_sm = 4096;
  EXPECT_EQ(ld::validate_stored_entry(plan_with_target), "'calibration' out of place");
}

TEST(StoredEntry, OneEntryParsesAndValidatesAsInTheFile) {
  ld::stored_entry good = entry("_Z4goodPf", plain + " cooperative");
  good.plan.options.cooperative = true;
  ld::stored_entry out;
  EXPECT_EQ(ld::parse_stored_entry(ld::cache_file_line(good), out), "");
  EXPECT_EQ(out.key.policy, good.key.policy);
  EXPECT_TRUE(out.plan.options.cooperative);
  ld::stored_entry forged = good;
  forged.key.policy = plain;
  EXPECT_EQ(ld::parse_stored_entry(ld::cache_file_line(forged), out),
            "entry 0 (kernel _Z4goodPf): the entry's plan is cooperative, its key is not");
  EXPECT_EQ(ld::parse_stored_entry("{\"key\": 1}", out), "entry 0: 'key' is not an object");
  EXPECT_EQ(ld::parse_stored_entry(std::string("{}\0", 3), out), "holds a NUL byte");
  EXPECT_EQ(ld::parse_stored_entry("{", out), "not valid JSON");
  // The line parser leaves a file with a refused entry to the full parser, which names it.
  std::vector<ld::stored_entry> fast;
  EXPECT_FALSE(ld::parse_cache_file_lines(ld::serialize_cache_file({good, forged}), {}, fast));
}

// A mangled template name runs to kilobytes: a problem names its start.
TEST(StoredEntry, TheNamedKernelIsCut) {
  ld::stored_entry e = entry(std::string(300, 'k'), plain);
  e.plan.options.cooperative = true;
  const ld::cache_file_contents c = ld::parse_cache_file(ld::serialize_cache_file({e}));
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_TRUE(has(c.problems[0], "entry 0 (kernel " + std::string(200, 'k') + "...(300 bytes)): "))
      << c.problems[0];
}

// The library refuses such an entry when it opens the file, with one warning naming it, and uses the others.
namespace {

// A plan file in a directory of its own, and what launchfit logs meanwhile; both undone at the end.
struct file_and_log {
  fs::path dir = fs::temp_directory_path() / ("launchfit-plan-file-format-" + std::to_string(::getpid()));
  fs::path file = dir / "plans.json";
  std::ostringstream log;
  file_and_log() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    lf::set_logger(std::make_shared<spdlog::logger>("launchfit-test",
                                                    std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  }
  ~file_and_log() {
    lf::close_cache_file();
    lf::set_logger(nullptr);
    fs::remove_all(dir);
  }
};

}  // namespace

TEST(StoredEntry, TheLibraryWarnsOnceNamingEachRefusedEntry) {
  file_and_log t;
  const fs::path& file = t.file;
  std::ostringstream& log = t.log;
  ld::stored_entry cooperative = entry("_Z4coopPf", plain);
  cooperative.plan.options.cooperative = true;
  std::ofstream(file, std::ios::binary) << ld::serialize_cache_file({entry("_Z4goodPf", plain), cooperative});
  lf::set_cache_file(file.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(lf::stored_plan_count(), 1u);
  EXPECT_FALSE(lf::find_stored_plan(cooperative.key));
  EXPECT_TRUE(lf::find_stored_plan(entry("_Z4goodPf", plain).key));
  const std::string text = log.str();
  std::size_t warnings = 0;
  for (auto at = text.find("[warning]"); at != std::string::npos; at = text.find("[warning]", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << text;
  EXPECT_TRUE(has(
      text, "plan cache file " + file.string() +
                ": entry 1 (kernel _Z4coopPf): the entry's plan is cooperative, its key is not; the entry is "
                "not used"))
      << text;

  // With other bad entries: each refusal named, the others counted in one more warning.
  auto doc = nlohmann::json::parse(ld::serialize_cache_file({entry("_Z4goodPf", plain), cooperative}));
  doc["entries"].push_back(42);
  std::ofstream(file, std::ios::binary) << doc.dump();
  log.str("");
  lf::set_cache_file(file.string(), lf::cache_file_mode::frozen);
  EXPECT_TRUE(has(log.str(), "entry 1 (kernel _Z4coopPf): the entry's plan is cooperative")) << log.str();
  EXPECT_TRUE(has(log.str(), "skipped 1 bad entry (entry 2: entry is not an object)")) << log.str();
}

// Past the refusals named one by one, the rest are counted in one warning that says what they failed: the
// stored-entry check, whatever part of it (a launch option the key does not say, an epoch out of range, ...).
TEST(StoredEntry, RefusalsBeyondThoseNamedAreCountedAsFailingTheStoredEntryCheck) {
  file_and_log t;
  std::vector<ld::stored_entry> entries{entry("_Z4goodPf", plain)};
  for (int i = 0; i < 9; ++i) {  // 8 are named one by one
    entries.push_back(entry("_Z5coop" + std::to_string(i) + "Pf", plain));
    entries.back().plan.options.cooperative = true;
  }
  entries.push_back(entry("_Z4smemPf", plain));
  entries.back().key.smem_rule = "bytes=x";  // no launch option: another part of the check
  std::ofstream(t.file, std::ios::binary) << ld::serialize_cache_file(entries);
  lf::set_cache_file(t.file.string(), lf::cache_file_mode::frozen);
  EXPECT_EQ(lf::stored_plan_count(), 1u);
  const std::string text = t.log.str();
  EXPECT_TRUE(has(text,
                  "2 more entries refused: they fail the stored-entry check (launchfit-plans check names "
                  "each and why)"))
      << text;
  EXPECT_FALSE(has(text, "launch as their keys say")) << text;
}

// ---- stored_at: untrusted like the rest -------------------------------------------------------------------

namespace {

std::uint64_t now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

// A stamp within the skew is kept as written (clocks of hosts differ a little); one beyond it is read as 0,
// "unknown", below every dated entry: the plan is kept, the claim to be the newest is not. Counted and named.
TEST(StoredEntry, AStoredAtFromTheFutureIsReadAsOfUnknownAgeCountedAndNamed) {
  const std::uint64_t now = now_ms();
  ld::stored_entry near = entry("_Z4nearPf", plain);
  near.stored_at_ms = now + 60 * 1000;  // a minute ahead: skew
  ld::stored_entry ahead = entry("_Z5aheadPf", plain);
  ahead.stored_at_ms = now + ld::max_stored_at_skew_ms + 10 * 60 * 1000;
  ld::stored_entry forged = entry("_Z6forgedPf", plain);
  forged.stored_at_ms = std::uint64_t(1) << 53;  // year 287396
  ld::stored_entry old = entry("_Z3oldPf", plain);
  old.stored_at_ms = now - 3600 * 1000;

  const std::uint64_t before = ld::future_stamps_cleared();
  const ld::cache_file_contents c =
      ld::parse_cache_file(ld::serialize_cache_file({near, ahead, forged, old}));
  EXPECT_EQ(c.status, ld::cache_file_status::ok);
  ASSERT_EQ(c.entries.size(), 4u) << "no plan is lost for its stamp";
  EXPECT_EQ(c.skipped, 0u);
  EXPECT_EQ(c.entries[0].stored_at_ms, near.stored_at_ms);
  EXPECT_EQ(c.entries[1].stored_at_ms, 0u);
  EXPECT_EQ(c.entries[2].stored_at_ms, 0u);
  EXPECT_EQ(c.entries[3].stored_at_ms, old.stored_at_ms);
  EXPECT_EQ(c.clamped, 2u);
  ASSERT_EQ(c.clamps.size(), 2u);
  // How many whole minutes ahead depends on when the test runs (14 or 15 under load): not asserted.
  EXPECT_TRUE(has(c.clamps[0],
                  "entry 1 (kernel _Z5aheadPf): 'stored_at' " + std::to_string(ahead.stored_at_ms) + " is 1"))
      << c.clamps[0];
  EXPECT_TRUE(has(c.clamps[0],
                  " minutes ahead of this clock (more than the 5 minutes of skew allowed): read as "
                  "of unknown age, below every dated entry"))
      << c.clamps[0];
  EXPECT_TRUE(has(c.clamps[1], "entry 2 (kernel _Z6forgedPf): 'stored_at' 9007199254740992 is "))
      << c.clamps[1];
  EXPECT_TRUE(has(c.clamps[1], " days ahead of this clock")) << c.clamps[1];
  EXPECT_EQ(ld::future_stamps_cleared() - before, 2u);

  // Written back, the lie is gone: the entry stays "unknown" wherever it is read next.
  const ld::cache_file_contents again = ld::parse_cache_file(ld::serialize_cache_file(c.entries));
  EXPECT_EQ(again.clamped, 0u);
  EXPECT_EQ(again.entries[2].stored_at_ms, 0u);

  // One entry read alone is bounded the same way; the line layout leaves such a file to the full parser,
  // which counts it.
  ld::stored_entry out;
  EXPECT_EQ(ld::parse_stored_entry(ld::cache_file_line(forged), out), "");
  EXPECT_EQ(out.stored_at_ms, 0u);
  EXPECT_EQ(ld::future_stamps_cleared() - before, 3u);
  std::vector<ld::stored_entry> fast;
  EXPECT_FALSE(ld::parse_cache_file_lines(ld::serialize_cache_file({old, forged}), {}, fast));
  fast.clear();
  EXPECT_TRUE(ld::parse_cache_file_lines(ld::serialize_cache_file({old, near}), {}, fast));
}

// A file over its limits drops first the entries no launch finds (keys that do not name the work's kind,
// written by launchfit 0.3 and before), whoever wrote them, then this process's own; never another process's
// findable entries.
TEST(StoredEntry, AFileOverItsLimitsDropsEntriesNoLaunchFindsFirst) {
  ld::entry_lines disk;
  const auto put = [&](const ld::stored_entry& e) {
    disk.insert_or_assign(ld::tie_key(e.key), ld::held{e, ld::cache_file_line(e)});
  };
  ld::stored_entry legacy = entry("_Z6legacyPf", plain);
  legacy.stored_at_ms = 5000;  // the newest: age alone would keep it
  ld::stored_entry theirs = entry("_Z6theirsPf", plain + " work=items");
  ld::stored_entry mine = entry("_Z4minePf", plain + " work=grid_stride");
  put(legacy);
  put(theirs);
  put(mine);
  ld::own_lines own{{ld::tie_key(mine.key), ld::cache_file_line(mine)}};
  ld::entry_lines two = disk;
  EXPECT_TRUE(ld::keep_within_limits(two, 2, 1 << 20, own));
  EXPECT_EQ(two.count(ld::tie_key(legacy.key)), 0u) << "the entry no launch finds goes first";
  EXPECT_EQ(two.size(), 2u);
  ld::entry_lines one = disk;
  EXPECT_TRUE(ld::keep_within_limits(one, 1, 1 << 20, own));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one.count(ld::tie_key(theirs.key)), 1u) << "another process's findable entry stays";
  ld::entry_lines none = disk;
  EXPECT_FALSE(ld::keep_within_limits(none, 0, 1 << 20, own)) << "never evicts another's findable entry";
}
