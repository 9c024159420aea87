// SPDX-License-Identifier: MIT
// block-placement: does the hardware put blocks_per_sm blocks on every SM when a grid of blocks_per_sm x SMs
// blocks could fit more per SM, and what does an uneven placement cost? A grid-stride copy of 2^26 floats
// (the policy-quality copy, 4 floats per thread per iteration) records, for every launch, how many of its
// blocks ran on each SM (%smid) next to the launch's time (CUDA events, one launch per sample).
//
// Plans whose residency the kernel's resources enforce (blocks_per_sm == what fits) place exactly that many
// blocks on every SM; the others depend on the block scheduler. Output per plan: the median, fastest and
// slowest time, how often the placement was uneven, and the median time of even and uneven launches.
//
//   block-placement [--repeats N] [--json PATH] [--device N]

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.cuh"

namespace {

// The policy-quality copy, plus one atomic per block: which SM ran it.
__global__ void copy4_placed(const float4* __restrict__ in, float4* __restrict__ out, std::size_t count,
                             unsigned* per_sm) {
  if (threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    atomicAdd(&per_sm[sm], 1u);
  }
#pragma unroll 1
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = in[i];
  }
}

struct plan_row {
  int block = 0, blocks_per_sm = 0, fit = 0;
  std::vector<double> ms;
  std::vector<int> most, fewest;  // blocks on the busiest and the idlest SM, per launch
};

int run(int argc, char** argv) {
  const bench::args a(argc, argv);
  const bench::device_info dev = bench::open_device(a.int_value("--device", 0));
  const int repeats = a.int_value("--repeats", 40);
  const std::string json_path = a.value("--json");
  const std::size_t n = std::size_t{1} << 26;
  const int sms = dev.sm_count;
  std::printf("block-placement on %s, copy of 2^26 floats, %d launches per plan\n\n", dev.describe().c_str(),
              repeats);

  bench::device_buffer<float> in(n), out(n);
  in.upload(bench::random_vector<float>(n, 7, bench::uniform_pm1));
  // %smid can exceed the SM count (it numbers physical slots, below %nsmid): room for every value it may take.
  const int slots = 4 * sms;
  bench::device_buffer<unsigned> per_sm(static_cast<std::size_t>(slots));
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  const auto* in4 = reinterpret_cast<const float4*>(in.get());
  auto* out4 = reinterpret_cast<float4*>(out.get());

  // The copy's fastest plans in the afternoon and evening sweeps (40-46 warps/SM), its full-occupancy plans,
  // and the 96 x 15 plan whose time differed by 2% between runs.
  const std::vector<std::pair<int, int>> plans = {{96, 15},  {704, 2}, {352, 4}, {288, 5},  {224, 6},
                                                  {128, 11}, {480, 3}, {256, 8}, {128, 16}, {1024, 2}};
  std::vector<plan_row> rows;
  int failures = 0;
  for (const auto& [block, bps] : plans) {
    plan_row r;
    r.block = block;
    r.blocks_per_sm = bps;
    BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&r.fit, copy4_placed, block, 0));
    const unsigned grid = static_cast<unsigned>(bps * sms);
    copy4_placed<<<grid, block, 0, stream>>>(in4, out4, n / 4, per_sm.get());  // warm-up
    BENCH_CUDA(cudaGetLastError());
    for (int k = 0; k < repeats; ++k) {
      BENCH_CUDA(cudaMemsetAsync(per_sm.get(), 0, per_sm.bytes(), stream));
      BENCH_CUDA(cudaEventRecord(start, stream));
      copy4_placed<<<grid, block, 0, stream>>>(in4, out4, n / 4, per_sm.get());
      BENCH_CUDA(cudaEventRecord(stop, stream));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      const std::vector<unsigned> counts = per_sm.download();
      unsigned total = 0, most = 0, fewest = ~0u;
      int used = 0;
      for (unsigned c : counts) {
        total += c;
        if (c == 0) continue;
        ++used;
        most = std::max(most, c);
        fewest = std::min(fewest, c);
      }
      if (total != grid) {
        ++failures;
        std::printf("FAILED: %dx%d counted %u blocks of %u\n", block, bps, total, grid);
      }
      // An SM that ran none of the blocks is idle: count it as the fewest.
      if (used < sms) fewest = 0;
      r.ms.push_back(ms);
      r.most.push_back(static_cast<int>(most));
      r.fewest.push_back(static_cast<int>(fewest));
    }
    rows.push_back(std::move(r));
  }
  // Every launch copied: check the output once.
  {
    const std::vector<float> h_in = in.download(), h_out = out.download();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += !(h_out[i] == h_in[i]);
    if (bad) {
      ++failures;
      std::printf("FAILED: %zu elements of the copy differ\n", bad);
    }
  }

  std::printf("| block x blocks/SM | fits per SM | resident warps/SM | median ms | fastest | slowest | uneven launches "
              "| busiest SM (blocks, median) | median ms even / uneven |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  std::ostringstream js;
  js << "{\n\"benchmark\":\"block-placement\",\n\"device\":" << dev.json() << ",\n\"repeats\":" << repeats
     << ",\n\"plans\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const plan_row& r = rows[i];
    std::vector<double> even, uneven;
    std::vector<double> busiest(r.most.begin(), r.most.end());
    for (std::size_t k = 0; k < r.ms.size(); ++k)
      (r.most[k] == r.blocks_per_sm && r.fewest[k] == r.blocks_per_sm ? even : uneven).push_back(r.ms[k]);
    const double med = bench::median(r.ms);
    const double lo = *std::min_element(r.ms.begin(), r.ms.end()), hi = *std::max_element(r.ms.begin(), r.ms.end());
    auto med_or_dash = [](const std::vector<double>& v) {
      if (v.empty()) return std::string("-");
      char b[32];
      std::snprintf(b, sizeof b, "%.4f", bench::median(v));
      return std::string(b);
    };
    std::printf("| %d x %d | %d | %d | %.4f | %.4f | %.4f | %zu of %zu | %.0f | %s / %s |\n", r.block,
                r.blocks_per_sm, r.fit, r.block / 32 * r.blocks_per_sm, med, lo, hi, uneven.size(), r.ms.size(),
                bench::median(busiest), med_or_dash(even).c_str(), med_or_dash(uneven).c_str());
    js << (i ? ",\n" : "\n") << "{\"block\":" << r.block << ",\"blocks_per_sm\":" << r.blocks_per_sm
       << ",\"fits_per_sm\":" << r.fit << ",\"ms\":[";
    for (std::size_t k = 0; k < r.ms.size(); ++k) js << (k ? "," : "") << bench::json_number(r.ms[k]);
    js << "],\"busiest_sm_blocks\":[";
    for (std::size_t k = 0; k < r.most.size(); ++k) js << (k ? "," : "") << r.most[k];
    js << "],\"idlest_sm_blocks\":[";
    for (std::size_t k = 0; k < r.fewest.size(); ++k) js << (k ? "," : "") << r.fewest[k];
    js << "]}";
  }
  js << "],\n\"failures\":" << failures << "\n}\n";
  if (!json_path.empty()) bench::write_file(json_path, js.str());
  std::printf("\nverification: %s\n", bench::verification_summary(failures, "every block counted once, the copy correct").c_str());
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  BENCH_CUDA(cudaStreamDestroy(stream));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::run_main("block-placement", run, argc, argv); }
