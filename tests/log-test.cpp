// New-plan log lines: content, JSON validity, once-only warnings, user sinks.

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "launchfit/log.hpp"
#include "launchfit/policy.hpp"

namespace lf = launchfit;

namespace {

lf::plan_report sample_report(int spill_bytes = 0, const char* part = "H200") {
  lf::query q;
  q.device = lf::device_limits::for_arch(part);
  q.kernel = lf::kernel_resources::manual(40, 0, 1024, "_Z6reducePKfPfi");
  q.kernel.local_bytes_per_thread = static_cast<std::size_t>(spill_bytes);
  lf::plan_report r;
  r.kernel = q.kernel;
  r.device = "NVIDIA H200";
  r.device_ordinal = 0;
  r.cc = 90;
  r.plan = lf::bytes_in_flight_policy{{32, 0}}.choose(q);
  r.first_work = {lf::work::shape::grid_stride, 1 << 28, 1};
  return r;
}

struct captured {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  captured() {
    auto l = std::make_shared<spdlog::logger>("launchfit-test", sink);
    l->set_pattern("%l %v");
    l->set_level(spdlog::level::trace);
    lf::set_logger(l);
  }
  ~captured() {
    lf::set_logger(nullptr);
    lf::set_log_format(lf::log_format::text);
  }
  std::vector<std::string> lines() { return sink->last_formatted(); }
};

}  // namespace

TEST(Log, TextLineSaysWhatTheKernelRanWithAndWhy) {
  const std::string line = lf::format_plan(sample_report(), lf::log_format::text);
  for (const char* field : {"kernel=reduce(float const*, float*, int)", "device=\"NVIDIA H200\" #0", "cc=9.0",
                            "block=256", "grid=grid_stride(cap 528)", "smem=0B",
                            "occupancy=75.0% (6 blocks, 48 warps/SM; runs 4 blocks/SM)", "limiter=registers",
                            "regs=40", "spill=0B", "policy=bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)",
                            "match=computed", "reason=\""}) {
    EXPECT_NE(line.find(field), std::string::npos) << "missing " << field << " in: " << line;
  }
}

TEST(Log, JsonLineIsOneValidObjectWithTheSameFacts) {
  const std::string line = lf::format_plan(sample_report(), lf::log_format::json);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["event"], "new_plan");
  EXPECT_EQ(j["kernel"], "reduce(float const*, float*, int)");
  EXPECT_EQ(j["block_threads"], 256);
  EXPECT_EQ(j["registers"], 40);
  EXPECT_EQ(j["cc"], "9.0");
  EXPECT_DOUBLE_EQ(j["occupancy"].get<double>(), 0.75);
  EXPECT_EQ(j["policy"], "bytes_in_flight(per_thread=32,target_per_sm=0,prefer_block=256)");
  EXPECT_TRUE(j.contains("reason"));
  EXPECT_TRUE(j.contains("limiter"));
}

TEST(Log, NewPlanIsOneInfoLineAndASpillWarnsOncePerKernel) {
  captured c;
  lf::plan_report r = sample_report(64);
  r.kernel.name = "_Z13spilly_kernelv";
  r.kernel.demangled = "spilly_kernel()";
  lf::log_new_plan(r);
  lf::log_new_plan(r);  // a second plan of the same kernel: no second spill warning
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("info new plan:", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("warning kernel spilly_kernel() spills 64 B", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("info new plan:", 0), 0u) << lines[2];
}

TEST(Log, ShortfallWarningCarriesBytesTargetAndAdvice) {
  captured c;
  lf::query q;
  q.device = lf::device_limits::for_arch("H200");
  q.kernel = lf::kernel_resources::manual(16, 0, 1024, "copy");
  lf::plan_report r;
  r.kernel = q.kernel;
  r.cc = 90;
  r.plan = lf::bytes_in_flight_policy{{4, 0}}.choose(q);
  lf::log_new_plan(r);
  const auto lines = c.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("8 KB/SM"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("32 KB"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("independent loads"), std::string::npos) << lines[1];
}

TEST(Log, JsonFormatWarningsAreJsonToo) {
  captured c;
  lf::set_log_format(lf::log_format::json);
  lf::plan_report r = sample_report(16);
  r.kernel.name = "_Z5otherv";
  lf::log_new_plan(r);
  for (const std::string& line : c.lines()) {
    const std::string body = line.substr(line.find(' ') + 1);
    EXPECT_TRUE(nlohmann::json::accept(body)) << body;
  }
}

TEST(Log, TheLoggerIsNamedLaunchfitAndDefaultsToInfo) {
  auto l = lf::logger();
  EXPECT_EQ(l->name(), "launchfit");
  EXPECT_EQ(spdlog::get("launchfit"), l);
  EXPECT_NE(spdlog::default_logger()->name(), "launchfit");
}
