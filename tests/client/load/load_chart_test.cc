// cgacct-load --chart: the data and script, and the PNG the real gnuplot
// (Debian gnuplot-nox) draws from them. Label "gnuplot".
#include "client/load/load_chart.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

LoadReport OpenLoopReport() {
  LoadReport r;
  r.scenario = "stat-reader";
  r.threads = 2;
  r.rate = 1000;
  r.warmup = absl::Seconds(1);
  r.elapsed = absl::Seconds(3);
  for (int s = 0; s < 3; ++s) {
    LatencyHistogram h;
    for (int i = 0; i < 990; ++i) h.Record(100'000 + 1000 * s);  // ~100 us
    for (int i = 0; i < 10; ++i) h.Record(5'000'000);             // 5 ms
    r.read_latency.Merge(h);
    r.read_series.push_back(SummarizeInterval(h, 0, s + 1.0, 1.0));
  }
  // An interval in which nothing completed (a stall): not plotted.
  r.read_series.push_back(SummarizeInterval(LatencyHistogram(), 0, 4.0, 1.0));
  return r;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LoadChartTest, SeriesDataHasOneLinePerIntervalWithSamples) {
  const std::string data = ChartSeriesData(OpenLoopReport());
  const std::vector<std::string> lines =
      absl::StrSplit(data, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << data;  // header + 3 intervals
  EXPECT_EQ(lines[0][0], '#');
  // t_s p50_us p99_us max_us count: p50 ~100 us (bucket edge, <= 0.8% over)
  // and p99 ~100 us (990 of 1000 are fast), max 5000 us.
  double t = 0, p50 = 0, p99 = 0, max = 0;
  int count = 0;
  ASSERT_EQ(std::sscanf(lines[1].c_str(), "%lf %lf %lf %lf %d", &t, &p50, &p99,
                        &max, &count),
            5);
  EXPECT_EQ(t, 1.0);
  EXPECT_NEAR(p50, 100.0, 1.0);
  EXPECT_NEAR(p99, 100.0, 1.0);
  EXPECT_EQ(max, 5000.0);
  EXPECT_EQ(count, 1000);
}

TEST(LoadChartTest, PercentileDataReachesTheTailTheCountAllows) {
  const std::string data = ChartPercentileData(OpenLoopReport());
  const std::vector<std::string> lines =
      absl::StrSplit(data, '\n', absl::SkipEmpty());
  // 3000 samples: tails down to 10^-3.4 hold >= 1 sample: k = 0..34.
  ASSERT_EQ(lines.size(), 1u + 35u) << data;
  double inv = 0, pct = 0, us = 0;
  ASSERT_EQ(std::sscanf(lines.back().c_str(), "%lf %lf %lf", &inv, &pct, &us),
            3);
  EXPECT_GT(pct, 99.9);
  EXPECT_EQ(us, 5000.0);  // the slow 1%
  ASSERT_EQ(std::sscanf(lines[1].c_str(), "%lf %lf %lf", &inv, &pct, &us), 3);
  EXPECT_EQ(inv, 1.0);
  EXPECT_EQ(pct, 0.0);
  EXPECT_NEAR(us, 100.0, 1.0);
}

TEST(LoadChartTest, ScriptNamesItsFilesAndTheMode) {
  const std::string gp = ChartScript(OpenLoopReport(), "/tmp/a \"b\".png",
                                     "/tmp/s.dat", "/tmp/p.dat");
  EXPECT_NE(gp.find("set output \"/tmp/a \\\"b\\\".png\""), std::string::npos)
      << gp;
  EXPECT_NE(gp.find("\"/tmp/s.dat\" using 1:3"), std::string::npos) << gp;
  EXPECT_NE(gp.find("\"/tmp/p.dat\" using 1:3"), std::string::npos) << gp;
  EXPECT_NE(gp.find("open loop at 1000/s"), std::string::npos) << gp;
}

TEST(LoadChartTest, RealGnuplotWritesAPng) {
  char dir_template[] = "/tmp/cgacct_chart_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string png = std::string(dir_template) + "/latency.png";
  const absl::Status s = WriteLatencyChart(OpenLoopReport(), png);
  ASSERT_TRUE(s.ok()) << s;
  const std::string bytes = ReadAll(png);
  ASSERT_GT(bytes.size(), 10'000u);  // a 1000x800 chart, not an empty image
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // Width and height from the IHDR chunk (big-endian at offsets 16 and 20).
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 3]));
  };
  EXPECT_EQ(be32(16), 1000u);
  EXPECT_EQ(be32(20), 800u);
  EXPECT_FALSE(ReadAll(png + ".gp").empty());
  std::filesystem::remove_all(dir_template);
}

TEST(LoadChartTest, MissingGnuplotIsAClearError) {
  const char* old_path = getenv("PATH");
  const std::string saved = old_path != nullptr ? old_path : "";
  setenv("PATH", "/nonexistent", 1);
  char dir_template[] = "/tmp/cgacct_chart_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const absl::Status s =
      WriteLatencyChart(OpenLoopReport(), std::string(dir_template) + "/x.png");
  setenv("PATH", saved.c_str(), 1);
  std::filesystem::remove_all(dir_template);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("gnuplot-nox"), std::string::npos) << s;
}

TEST(LoadChartTest, NoSamplesIsAnError) {
  LoadReport r;
  r.threads = 1;
  const absl::Status s = WriteLatencyChart(r, "/tmp/never.png");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace cgacct::load
