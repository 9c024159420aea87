// SPDX-License-Identifier: MIT
// launchfit-calc --cubin: the figures read from real nvcc output equal what ptxas said while compiling it,
// for a cubin, a two-architecture fatbin, an object file, relocatable-device-code objects (plain and
// zstd-compressed), and debug (-G) builds; the largest block a kernel may have; the gates and the command
// line's exit codes.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

// The reader is pure and lives with launchfit-calc (demos/calc); compiled in here so this test builds
// whether or not the demos are.
#include "../demos/calc/cubin_report.cpp"
#include "tool_run.hpp"

namespace calc = launchfit::calc;

namespace {

const std::string binary_dir = LAUNCHFIT_TEST_BINARY_DIR;
const std::string samples = binary_dir + "/../demos/calc/cubin-samples/";
const std::string calc_binary = binary_dir + "/../demos/launchfit-calc";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool have(const std::string& path) { return std::ifstream(path).good(); }

#define SKIP_WITHOUT_SAMPLES()               \
  if (!have(samples + "samples_sm90.cubin")) \
  GTEST_SKIP()                               \
      << "no sample cubins in " << samples   \
      << " (built by demos/calc/CMakeLists.txt with nvcc: LAUNCHFIT_BUILD_DEMOS and LAUNCHFIT_BUILD_CUDA)"

struct ptxas_kernel {
  int regs = -1;
  std::size_t smem = 0, frame = 0;
};
using ptxas_key = std::pair<std::string, int>;  // mangled name, sm

// What ptxas -v printed for every entry function: "Compiling entry function 'K' for 'sm_90'", then
// "Function properties for K" + "N bytes stack frame, ...", then "Used R registers, ..., M bytes smem".
std::map<ptxas_key, ptxas_kernel> parse_ptxas(const std::string& log) {
  std::map<ptxas_key, ptxas_kernel> out;
  const std::regex entry(R"(Compiling entry function '([^']+)' for 'sm_(\d+)a?')");
  const std::regex props(R"(Function properties for (\S+))");
  const std::regex frame(R"((\d+) bytes stack frame)");
  const std::regex used(R"(Used (\d+) registers)");
  const std::regex smem(R"((\d+) bytes smem)");
  std::istringstream lines(log);
  ptxas_key current;
  std::string properties_of;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      current = {m[1], std::stoi(m[2])};
      out[current];
    } else if (std::regex_search(line, m, props)) {
      properties_of = m[1];
    } else if (std::regex_search(line, m, frame)) {
      if (properties_of == current.first) out[current].frame = std::stoul(m[1]);
    } else if (std::regex_search(line, m, used)) {
      out[current].regs = std::stoi(m[1]);
      if (std::regex_search(line, m, smem)) out[current].smem = std::stoul(m[1]);
    }
  }
  return out;
}

// Every kernel of every cubin in the file, against ptxas; returns how many were compared.
int compare_with_ptxas(const std::string& file, std::set<int> expected_sms) {
  const auto expected = parse_ptxas(slurp(samples + file + ".ptxas.txt"));
  EXPECT_FALSE(expected.empty()) << file << ".ptxas.txt has no entry functions";
  const calc::cubin_contents contents = calc::read_cubin_file(samples + file);
  std::set<int> sms;
  int compared = 0;
  for (const auto& image : contents.images) {
    sms.insert(image.sm);
    std::size_t ptxas_kernels = 0;
    for (const auto& [key, k] : expected) ptxas_kernels += key.second == image.sm;
    EXPECT_EQ(image.kernels.size(), ptxas_kernels) << file << " sm_" << image.sm;
    for (const auto& k : image.kernels) {
      const auto it = expected.find({k.name, image.sm});
      EXPECT_NE(it, expected.end()) << file << ": " << k.name << " sm_" << image.sm << " not in ptxas output";
      if (it == expected.end()) continue;
      EXPECT_EQ(k.regs_per_thread, it->second.regs) << file << ": " << k.name << " sm_" << image.sm;
      EXPECT_EQ(k.static_smem_bytes, it->second.smem) << file << ": " << k.name << " sm_" << image.sm;
      EXPECT_EQ(k.local_bytes_per_thread, it->second.frame) << file << ": " << k.name << " sm_" << image.sm;
      ++compared;
    }
  }
  EXPECT_EQ(sms, expected_sms) << file;
  return compared;
}

const calc::cubin_kernel& kernel_named(const calc::cubin_image& image, const std::string& mangled) {
  for (const auto& k : image.kernels)
    if (k.name == mangled) return k;
  throw std::runtime_error("no kernel " + mangled);
}

using outcome = launchfit_test::tool_outcome;

outcome run_calc(const std::string& args) { return launchfit_test::run_tool(calc_binary, args); }

#define SKIP_WITHOUT_CALC() \
  SKIP_WITHOUT_SAMPLES();   \
  if (!have(calc_binary)) GTEST_SKIP() << calc_binary << " not built (LAUNCHFIT_BUILD_DEMOS=OFF)"

}  // namespace

TEST(CubinReport, EveryKernelOfACubinMatchesPtxas) {
  SKIP_WITHOUT_SAMPLES();
  EXPECT_EQ(compare_with_ptxas("samples_sm90.cubin", {90}), 6);
}

TEST(CubinReport, EveryKernelOfATwoArchFatbinMatchesPtxasAndThePtxIsSkippedBySaying) {
  SKIP_WITHOUT_SAMPLES();
  EXPECT_EQ(compare_with_ptxas("samples.fatbin", {80, 90}), 12);
  const auto contents = calc::read_cubin_file(samples + "samples.fatbin");
  EXPECT_EQ(contents.format, "fatbin");
  ASSERT_EQ(contents.skipped.size(), 1u);
  EXPECT_NE(contents.skipped[0].find("PTX for compute_90, not read"), std::string::npos)
      << contents.skipped[0];
}

TEST(CubinReport, HostObjectsAndRelocatableObjectsAreReadFromTheirFatbinSections) {
  SKIP_WITHOUT_SAMPLES();
  EXPECT_EQ(compare_with_ptxas("samples.o", {80, 90}), 12);
  EXPECT_EQ(compare_with_ptxas("samples_rdc.o", {90}), 6);
  EXPECT_EQ(calc::read_cubin_file(samples + "samples.o").format, "host ELF");
  const auto rdc = calc::read_cubin_file(samples + "samples_rdc.o");
  ASSERT_EQ(rdc.images.size(), 1u);
  EXPECT_EQ(rdc.images[0].where.rfind("__nv_relfatbin at ", 0), 0u) << rdc.images[0].where;
}

TEST(CubinReport, LaunchBoundsStackFramesSpillsAndStaticSmemAreTheKernels) {
  SKIP_WITHOUT_SAMPLES();
  const auto contents = calc::read_cubin_file(samples + "samples_sm90.cubin");
  ASSERT_EQ(contents.images.size(), 1u);
  const auto& image = contents.images[0];
  const auto& bounded = kernel_named(image, "_Z14bounded_kernelPf");
  EXPECT_EQ(bounded.max_threads_per_block, 128);
  EXPECT_STREQ(bounded.max_threads_from, "maxntid");
  EXPECT_EQ(bounded.max_reg_count, 128);  // __launch_bounds__(128, 4): 65536 / (4 x 128)
  const auto& stack = kernel_named(image, "_Z18stack_frame_kernelPfPKii");
  EXPECT_EQ(stack.local_bytes_per_thread, 1024u);
  EXPECT_EQ(stack.max_threads_per_block, 1024);
  EXPECT_STREQ(stack.max_threads_from, "default");
  EXPECT_EQ(stack.demangled, "stack_frame_kernel(float*, int const*, int)");
  EXPECT_GT(kernel_named(image, "_Z12spill_kernelPfi").local_bytes_per_thread, 0u);
  // 1000 floats + 3 doubles, without the 1 KiB reserve nvcc 13 puts at the start of the section on sm_90.
  EXPECT_EQ(kernel_named(image, "_Z18static_smem_kernelPf").static_smem_bytes, 4024u);
  EXPECT_EQ(kernel_named(image, "_Z17call_stack_kernelPfi").stack_bytes_per_thread, 256u);
  EXPECT_EQ(kernel_named(image, "_ZN7samples16templated_kernelIdLi3EEEvPT_").demangled,
            "void samples::templated_kernel<double, 3>(double*)");
}

// nvcc 13 compresses an -rdc object's cubins (and -Xfatbin -compress-all fatbins') with zstd: they are
// inflated and read, every figure as ptxas printed it.
TEST(CubinReport, CompressedCubinsAreInflatedAndMatchPtxas) {
  SKIP_WITHOUT_SAMPLES();
  EXPECT_EQ(compare_with_ptxas("samples_rdc_compressed.o", {90}), 6);
  EXPECT_EQ(compare_with_ptxas("samples_compressed.fatbin", {90}), 6);
  const auto rdc = calc::read_cubin_file(samples + "samples_rdc_compressed.o");
  ASSERT_EQ(rdc.images.size(), 1u);
  EXPECT_EQ(rdc.images[0].where.rfind("__nv_relfatbin at ", 0), 0u) << rdc.images[0].where;
  // Its PTX is compressed too, and still not read (launchfit-calc reads cubins), said so.
  ASSERT_EQ(rdc.skipped.size(), 1u);
  EXPECT_NE(rdc.skipped[0].find("PTX for compute_90, not read"), std::string::npos) << rdc.skipped[0];
  EXPECT_EQ(kernel_named(rdc.images[0], "_Z18static_smem_kernelPf").static_smem_bytes, 4024u);
}

// A debug (-G) cubin marks the 1 KiB shared-memory reserve only with a .nv.reservedSmem symbol (no
// .nv.shared.reserved section): static smem is still what ptxas -v printed, not 1 KiB more.
TEST(CubinReport, DebugCubinsMatchPtxasStaticSmemWithoutTheReserve) {
  SKIP_WITHOUT_SAMPLES();
  EXPECT_EQ(compare_with_ptxas("samples_debug_sm90.cubin", {90}), 6);
  EXPECT_EQ(compare_with_ptxas("samples_debug.o", {80, 90}), 12);
  const auto contents = calc::read_cubin_file(samples + "samples_debug_sm90.cubin");
  EXPECT_EQ(kernel_named(contents.images.at(0), "_Z18static_smem_kernelPf").static_smem_bytes, 4024u);
}

// Recursion under -G: ptxas cannot size the stack and the cubin says 0xffffffff. The report says so in
// words; it is never shown, summed or gated as a 4 GiB stack.
TEST(CubinReport, AStackPtxasCannotSizeIsSaidInWords) {
  SKIP_WITHOUT_SAMPLES();
  const auto contents = calc::read_cubin_file(samples + "recursion_debug_sm90.cubin");
  const auto& k = kernel_named(contents.images.at(0), "_Z16recursive_kernelPi");
  EXPECT_TRUE(k.stack_undetermined);
  EXPECT_EQ(k.stack_bytes_per_thread, k.local_bytes_per_thread);
  EXPECT_EQ(calc::local_memory_text(k), "0 B+?");
  calc::gates g;
  g.fail_on_spill = true;
  const auto failures = calc::gate_failures(calc::occupancy_rows(contents, {}), g);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].find("recursive_kernel(int*) (sm_90 cubin, on sm_90): a stack size that ptxas "
                             "could not determine (recursion or calls through pointers)"),
            std::string::npos)
      << failures[0];
  EXPECT_EQ(failures[0].find("4294967295"), std::string::npos) << failures[0];
}

TEST(CubinReport, RowsOnTheCubinsOwnArchOnAnotherAndOnAll) {
  SKIP_WITHOUT_SAMPLES();
  const auto contents = calc::read_cubin_file(samples + "samples.fatbin");
  calc::row_options o;
  const auto own = calc::occupancy_rows(contents, o);
  ASSERT_EQ(own.size(), 12u);
  for (const auto& row : own) {
    ASSERT_TRUE(row.device && row.occupancy) << row.refusal;
    EXPECT_EQ(row.device->cc(), row.cubin_sm);
    // The row's occupancy is the calculator's for the kernel's own figures.
    auto k = launchfit::kernel_resources::manual(row.kernel->regs_per_thread, row.kernel->static_smem_bytes,
                                                 row.max_threads_per_block);
    EXPECT_EQ(row.occupancy->active_blocks_per_sm,
              launchfit::occupancy(*row.device, k, row.block_threads, 0).active_blocks_per_sm);
    // __launch_bounds__(128): the block is the kernel's maximum, said so.
    EXPECT_EQ(row.block_clamped, row.kernel->name == "_Z14bounded_kernelPf");
  }
  o.arch = "RTX 4090";  // sm_89: the sm_80 cubin runs there
  const auto ada = calc::occupancy_rows(contents, o);
  ASSERT_EQ(ada.size(), 6u);
  EXPECT_EQ(ada[0].cubin_sm, 80);
  o.arch = "all";
  std::set<int> archs;
  for (const auto& row : calc::occupancy_rows(contents, o)) archs.insert(row.device->cc());
  EXPECT_EQ(archs, (std::set<int>{80, 86, 87, 89, 90}));
  o.arch = "sm_75";
  EXPECT_THROW(calc::occupancy_rows(contents, o), calc::cubin_error);
}

// The most threads a block may have, as the driver computes CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK (the
// GPU test gpu-occupancy-agreement-test compares the two on a device): the kernel's launch bounds, or fewer
// where its registers do not fit. Worked out here from the sm_90 facts, independently of the library: a warp
// holds regs x 32 rounded up to 256 registers, and a block's warps are spread over 4 sub-partitions of 16,384
// registers each.
int sm90_max_threads(int regs, int launch_bound) {
  const int regs_per_warp = (regs * 32 + 255) / 256 * 256;
  const int warps = 4 * (16384 / regs_per_warp);
  return std::min({launch_bound, 1024, warps * 32});
}

TEST(CubinReport, MaxThreadsAreTheLaunchBoundsOrWhatTheRegistersAllow) {
  SKIP_WITHOUT_SAMPLES();
  EXPECT_EQ(compare_with_ptxas("launch_limits_sm90.cubin", {90}), 6);
  const auto contents = calc::read_cubin_file(samples + "launch_limits_sm90.cubin");
  calc::row_options o;
  o.block_threads = 1024;
  const auto rows = calc::occupancy_rows(contents, o);
  ASSERT_EQ(rows.size(), 6u);
  std::map<std::string, const calc::kernel_row*> by_name;
  for (const auto& row : rows) {
    by_name[row.kernel->demangled.substr(0, row.kernel->demangled.find('('))] = &row;
    const int expected = sm90_max_threads(row.kernel->regs_per_thread, row.kernel->max_threads_per_block);
    EXPECT_EQ(row.max_threads_per_block, expected)
        << row.kernel->demangled << ", " << row.kernel->regs_per_thread << " registers";
    // A block of the maximum always has an occupancy; --block 1024 is cut to it, said so.
    EXPECT_EQ(row.block_threads, expected) << row.kernel->demangled;
    EXPECT_EQ(row.block_clamped, expected < 1024) << row.kernel->demangled;
    ASSERT_TRUE(row.occupancy) << row.kernel->demangled << ": " << row.refusal;
    EXPECT_GE(row.occupancy->active_blocks_per_sm, 1) << row.kernel->demangled;
  }
  ASSERT_EQ(by_name.count("regs_96"), 1u);
  // The case the driver answers 640 for: 96 x 32 = 3072 registers a warp, 5 warps per sub-partition.
  ASSERT_EQ(by_name["regs_96"]->kernel->regs_per_thread, 96);
  EXPECT_EQ(by_name["regs_96"]->max_threads_per_block, 640);
  EXPECT_STREQ(by_name["regs_96"]->max_threads_from, "registers");
  EXPECT_EQ(by_name["regs_168"]->max_threads_per_block, 384);
  EXPECT_STREQ(by_name["regs_uncapped"]->max_threads_from, "registers");
  // __launch_bounds__(256) below the 512 threads its 128 registers allow: the bounds decide.
  EXPECT_EQ(by_name["bounded_256"]->max_threads_per_block, 256);
  EXPECT_STREQ(by_name["bounded_256"]->max_threads_from, "maxntid");
  EXPECT_EQ(by_name["pdl_waits"]->max_threads_per_block, 1024);
  EXPECT_STREQ(by_name["pdl_waits"]->max_threads_from, "default");
}

TEST(CubinCalc, TheTableAndJsonShowTheMaxThreadsTheRegistersAllow) {
  SKIP_WITHOUT_CALC();
  const std::string file = "'" + samples + "launch_limits_sm90.cubin'";
  const outcome table = run_calc("--cubin " + file + " --block 1024");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("640 registers"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("256 maxntid"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find("   1024 registers"), std::string::npos) << table.out;
  const outcome json = run_calc("--cubin " + file + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  int seen = 0;
  const auto report = nlohmann::json::parse(json.out);
  for (const auto& k : report["kernels"]) {
    if (k["name"] != "_Z7regs_96PKfPf") continue;
    ++seen;
    EXPECT_EQ(k["max_threads_per_block"], 640) << k.dump();
    EXPECT_EQ(k["max_threads_from"], "registers") << k.dump();
  }
  EXPECT_EQ(seen, 1) << json.out;
}

// Whether a kernel waits for its predecessor matters only to a .pdl() launch: said with --pdl, not for every
// kernel of every file.
TEST(CubinCalc, ThePdlNoteIsSaidOnlyWhenAskedFor) {
  SKIP_WITHOUT_CALC();
  const std::string file = "'" + samples + "launch_limits_sm90.cubin'";
  const outcome plain = run_calc("--cubin " + file);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("griddepcontrol"), std::string::npos) << plain.out;
  const outcome pdl = run_calc("--cubin " + file + " --pdl");
  ASSERT_EQ(pdl.exit_code, 0) << pdl.err;
  EXPECT_NE(pdl.out.find("pdl_never_waits(float const*, float*) (sm_90): never executes griddepcontrol.wait"),
            std::string::npos)
      << pdl.out;
  EXPECT_EQ(pdl.out.find("pdl_waits(float const*, float*) (sm_90): never"), std::string::npos) << pdl.out;
  // Code that is not read for the wait is said to be unchecked, not to wait.
  const outcome fatbin = run_calc("--cubin '" + samples + "samples.fatbin' --pdl");
  ASSERT_EQ(fatbin.exit_code, 0) << fatbin.err;
  EXPECT_NE(fatbin.out.find("--pdl: sm_80 code is not read for griddepcontrol.wait"), std::string::npos)
      << fatbin.out;
  EXPECT_EQ(run_calc("--pdl").exit_code, 2);  // --pdl applies to --cubin
}

TEST(CubinReport, GatesNameTheKernelAndTheFigure) {
  SKIP_WITHOUT_SAMPLES();
  const auto contents = calc::read_cubin_file(samples + "samples_sm90.cubin");
  const auto rows = calc::occupancy_rows(contents, {});
  calc::gates g;
  EXPECT_TRUE(calc::gate_failures(rows, g).empty());
  g.fail_on_spill = true;
  const auto spills = calc::gate_failures(rows, g);
  ASSERT_EQ(spills.size(), 3u);  // stack_frame_kernel, spill_kernel, call_stack_kernel
  const std::string all = spills[0] + spills[1] + spills[2];
  EXPECT_NE(
      all.find("kernel stack_frame_kernel(float*, int const*, int) (sm_90 cubin, on sm_90): 1024 bytes of "
               "local memory per thread"),
      std::string::npos)
      << all;
  g = {};
  g.max_regs = 31;
  EXPECT_EQ(calc::gate_failures(rows, g).size(), 2u);  // the two 32-register kernels
  g = {};
  g.min_occupancy_pct = 100;
  EXPECT_TRUE(calc::gate_failures(rows, g).empty());
}

TEST(CubinCalc, TheCommandLineReportsAndGatesWithItsOwnExitCode) {
  SKIP_WITHOUT_CALC();
  const outcome table = run_calc("--cubin '" + samples + "samples.fatbin'");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("fatbin, 2 cubins (sm_80, sm_90)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("128 maxntid"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("stack_frame_kernel(float*, int const*, int)"), std::string::npos) << table.out;

  const outcome gated = run_calc("--cubin '" + samples + "samples.fatbin' --fail-on-spill --max-regs 64");
  EXPECT_EQ(gated.exit_code, 1) << gated.err;  // a finding
  EXPECT_NE(
      gated.err.find("gate failed: kernel spill_kernel(float*, int) (sm_90 cubin, on sm_90): 408 bytes"),
      std::string::npos)
      << gated.err;

  const outcome occupancy = run_calc("--cubin '" + samples + "samples.fatbin' --min-occupancy 80%");
  EXPECT_EQ(occupancy.exit_code, 1);
  EXPECT_NE(
      occupancy.err.find("stack_frame_kernel(float*, int const*, int) (sm_80 cubin, on sm_80): occupancy "
                         "75% at 256 threads per block, limited by registers; --min-occupancy 80%"),
      std::string::npos)
      << occupancy.err;

  const outcome json = run_calc("--cubin '" + samples + "samples.o' --json --arch all --block 128");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["format"], "host ELF");
  EXPECT_EQ(j["block_threads"], 128);
  ASSERT_EQ(j["kernels"].size(), 6u * 5);  // sm_80 cubin on 8.0/8.6/8.7/8.9, sm_90 on 9.0
  EXPECT_TRUE(j["kernels"][0].contains("local_bytes_per_thread"));
  EXPECT_EQ(j["gates"]["failures"].size(), 0u);
}

TEST(CubinCalc, TheTableAndJsonSayWhenTheStackCannotBeSized) {
  SKIP_WITHOUT_CALC();
  const outcome table = run_calc("--cubin '" + samples + "recursion_debug_sm90.cubin'");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("0 B+?"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("+?: the stack size cannot be determined (recursion or calls through pointers)"),
            std::string::npos)
      << table.out;
  EXPECT_EQ(table.out.find("4294967295"), std::string::npos) << table.out;
  const outcome json = run_calc("--cubin '" + samples + "recursion_debug_sm90.cubin' --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto k = nlohmann::json::parse(json.out)["kernels"].at(0);
  EXPECT_TRUE(k["stack_bytes_per_thread"].is_null()) << k.dump();
  EXPECT_EQ(k["stack_undetermined"], true) << k.dump();
}

TEST(CubinCalc, ABadFileIsABadInputAndAMissingOneTheEnvironmentNamingTheFile) {
  SKIP_WITHOUT_CALC();
  const outcome text = run_calc("--cubin '" + samples + "samples.fatbin.ptxas.txt'");
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.err.find("samples.fatbin.ptxas.txt': not a cubin, a fatbin or an ELF file"),
            std::string::npos)
      << text.err;
  // A file that cannot be opened is the environment's answer (3), as the tool's exit code table says.
  const outcome missing = run_calc("--cubin '" + samples + "no-such.cubin'");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_NE(missing.err.find("no-such.cubin': cannot open: No such file or directory"), std::string::npos)
      << missing.err;
  EXPECT_EQ(run_calc("--cubin '" + samples + "samples.o' --regs 32").exit_code, 2);
  EXPECT_EQ(run_calc("--fail-on-spill").exit_code, 2);
}
