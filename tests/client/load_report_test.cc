#include "client/load_report.h"

#include <string>

#include "gtest/gtest.h"

namespace cgacct::client {
namespace {

LoadReport SeedRstatReport() {
  LoadReport r;
  r.scenario = "seed-rstat";
  r.target = "127.0.0.1:50551";
  r.group = "/cgacct-load";
  r.flush_mode = "exact";
  r.duration = absl::Seconds(10);
  r.elapsed = absl::Seconds(10);
  r.threads = 4;
  r.hogs = 2;
  r.hog_chunk_pages = 64;
  r.hog_max_bytes = 64 << 20;
  for (int i = 0; i < 900; ++i) r.read_latency.Record(10'000);  // [8, 16) us
  for (int i = 0; i < 100; ++i) r.read_latency.Record(70'000);  // [64, 128)
  r.reads = 1000;
  r.charges = 500;
  r.charged_pages = 500 * 64;
  r.ooms = 0;
  r.costly_enomems = 7;  // 64-page chunks: refused without OOM
  r.hog_cycles = 7;
  r.charge_latency.Record(20'000);
  r.nr_cpus = 400;
  r.page_size_bytes = 4096;
  r.charge_batch_pages = 64;
  r.flush_lock_policy = "per_cpu";
  r.flush_lock_hold_max_us = 4142.0;
  r.flush_lock_hold_max_us_before = 100.0;
  r.hog_cpus = 400;
  r.flush_preempt_model = "none";
  r.longest_holds.push_back({4142.0, 400, 1203, "/cgacct-load", "whole"});
  r.longest_holds.push_back({980.5, 400, 411, "/", "whole"});
  return r;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(LoadReportTest, TableShowsTheHeadlineNumbers) {
  const std::string table = FormatLoadReportTable(SeedRstatReport());
  EXPECT_TRUE(Contains(table, "seed-rstat")) << table;
  EXPECT_TRUE(Contains(table, "1000 total, 100/s, 0 errors")) << table;
  EXPECT_TRUE(Contains(table, "p99.9")) << table;
  EXPECT_TRUE(Contains(table, "8 usec (power-of-2 bucket lower bound)"))
      << table;
  EXPECT_TRUE(Contains(table,
                       "0 OOM kills (<= 8 pages), 7 costly ENOMEMs (> 8 "
                       "pages, no OOM)"))
      << table;
  EXPECT_TRUE(Contains(table, "hog cycles")) << table;
  EXPECT_TRUE(Contains(table,
                       "2 of 2 hog groups deleted, 0 pages reparented "
                       "(clean)"))
      << table;
  EXPECT_TRUE(Contains(table, "nr_cpus 400")) << table;
  EXPECT_TRUE(Contains(table, "flush lock policy per_cpu")) << table;
  EXPECT_TRUE(Contains(table, "4142.0 us")) << table;
  EXPECT_TRUE(Contains(table, "[8, 16)")) << table;
  EXPECT_TRUE(Contains(table, "[64, 128)")) << table;
}

// The longest holds come with the work each did, and the hogs say how many
// CPUs they charged on.
TEST(LoadReportTest, TableListsTheLongestHoldsWithTheirWork) {
  const std::string table = FormatLoadReportTable(SeedRstatReport());
  EXPECT_TRUE(Contains(table, "2 workers on 400 CPUs")) << table;
  EXPECT_TRUE(Contains(table, "preempt model none")) << table;
  EXPECT_TRUE(Contains(table, "the 2 longest of 2")) << table;
  EXPECT_TRUE(Contains(table, "4142.0 us, 400 CPUs walked, 1203 entries "
                              "folded (whole, root /cgacct-load)"))
      << table;
  EXPECT_TRUE(Contains(table, "980.5 us, 400 CPUs walked, 411 entries"))
      << table;
  const std::string json = LoadReportJson(SeedRstatReport());
  EXPECT_TRUE(Contains(json, "\"hog_cpus\": 400")) << json;
  EXPECT_TRUE(Contains(json, "\"flush_preempt_model\": \"none\"")) << json;
  EXPECT_TRUE(Contains(json, "\"groups_folded\": 1203")) << json;
  EXPECT_TRUE(Contains(json, "\"cpus_walked\": 400")) << json;
}

TEST(LoadReportTest, TableSaysNaWhenTheScrapeFailed) {
  LoadReport r = SeedRstatReport();
  r.flush_lock_hold_max_us.reset();
  r.metrics_error = "connect to 127.0.0.1:9464: Connection refused";
  const std::string table = FormatLoadReportTable(r);
  EXPECT_TRUE(Contains(table, "n/a (connect to 127.0.0.1:9464")) << table;
}

TEST(LoadReportTest, TableFlagsAnUncleanHogCleanup) {
  LoadReport r = SeedRstatReport();
  r.hog_groups_left = 1;
  std::string table = FormatLoadReportTable(r);
  EXPECT_TRUE(Contains(table, "1 of 2 hog groups deleted")) << table;
  EXPECT_FALSE(Contains(table, "(clean)")) << table;
  r.hog_groups_left = 0;
  r.reparented_pages = 64;
  table = FormatLoadReportTable(r);
  EXPECT_TRUE(Contains(table, "64 pages reparented (books disagree")) << table;
}

TEST(LoadReportTest, StatReaderOnlyOmitsHogRows) {
  LoadReport r = SeedRstatReport();
  r.scenario = "stat-reader";
  r.hogs = 0;
  const std::string table = FormatLoadReportTable(r);
  EXPECT_FALSE(Contains(table, "OOM kills")) << table;
  EXPECT_TRUE(Contains(table, "read latency")) << table;
}

// The kernel's rule for what a failed charge is (mem_cgroup_oom() returns
// early above PAGE_ALLOC_COSTLY_ORDER): a hog's refused 64-page chunk is an
// ENOMEM, not an OOM kill.
TEST(LoadReportTest, RefusedChargesAreOomKillsUpToEightPages) {
  EXPECT_EQ(ClassifyRefusedCharge(1), HogRefusal::kOomKill);
  EXPECT_EQ(ClassifyRefusedCharge(8), HogRefusal::kOomKill);
  EXPECT_EQ(ClassifyRefusedCharge(9), HogRefusal::kCostlyEnomem);
  EXPECT_EQ(ClassifyRefusedCharge(64), HogRefusal::kCostlyEnomem);
}

TEST(LoadReportTest, JsonCarriesTheSameNumbers) {
  LoadReport r = SeedRstatReport();
  r.first_error = "GetStats: UNAVAILABLE: \"server\"\ngone";
  r.flush_lock_hold_max_us_before.reset();
  const std::string json = LoadReportJson(r);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.substr(json.size() - 2), "}\n");
  EXPECT_TRUE(Contains(json, "\"scenario\": \"seed-rstat\"")) << json;
  EXPECT_TRUE(Contains(json, "\"total\": 1000")) << json;
  EXPECT_TRUE(Contains(json, "\"per_s\": 100")) << json;
  EXPECT_TRUE(Contains(json, "\"mode_pow2_us\": 8")) << json;
  EXPECT_TRUE(Contains(json, "\"ooms\": 0")) << json;
  EXPECT_TRUE(Contains(json, "\"costly_enomems\": 7")) << json;
  EXPECT_TRUE(Contains(json, "\"nr_cpus\": 400")) << json;
  EXPECT_TRUE(Contains(json, "\"flush_lock_hold_max_us\": 4142")) << json;
  EXPECT_TRUE(Contains(json, "\"flush_lock_hold_max_us_before\": null"))
      << json;
  EXPECT_TRUE(Contains(
      json,
      "\"first_error\": \"GetStats: UNAVAILABLE: \\\"server\\\"\\ngone\""))
      << json;
}

}  // namespace
}  // namespace cgacct::client
