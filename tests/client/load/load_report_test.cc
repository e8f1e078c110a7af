#include "client/load/load_report.h"

#include <string>

#include "gtest/gtest.h"

namespace cgacct::load {
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

// The most work one hold did (GetEngineInfo), apart from the holds picked
// by time, and adaptive's budget in the server row; absent when the
// server did not say.
TEST(LoadReportTest, TableShowsTheMostWorkInOneHoldAndTheBudget) {
  LoadReport r = SeedRstatReport();
  std::string table = FormatLoadReportTable(r);
  EXPECT_FALSE(Contains(table, "most work in one hold")) << table;
  r.hold_max_cpus_walked = 1;
  r.hold_max_groups_folded = 3;
  r.flush_lock_policy = "adaptive";
  r.flush_hold_budget_us = 50;
  table = FormatLoadReportTable(r);
  EXPECT_TRUE(Contains(table, "most work in one hold")) << table;
  EXPECT_TRUE(Contains(table, "1 CPU walked, 3 entries folded (since server "
                              "start, any hold"))
      << table;
  EXPECT_TRUE(Contains(table, "flush lock policy adaptive (budget 50 us)"))
      << table;
  const std::string json = LoadReportJson(r);
  EXPECT_TRUE(Contains(json, "\"hold_max_cpus_walked\": 1")) << json;
  EXPECT_TRUE(Contains(json, "\"hold_max_groups_folded\": 3")) << json;
  EXPECT_TRUE(Contains(json, "\"flush_hold_budget_us\": 50")) << json;
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

// Open loop: the schedule's figures in the table and the JSON, with the
// per-second series.
TEST(LoadReportTest, OpenLoopReportsTheScheduleAndTheSeries) {
  LoadReport r = SeedRstatReport();
  r.scenario = "stat-reader";
  r.hogs = 0;
  r.rate = 100;
  r.warmup = absl::Seconds(1);
  r.sent_reads = 1000;
  r.late_reads = 25;
  r.unsent_reads = 3;
  r.max_send_lag_ns = 2'500'000;
  LatencyHistogram second;
  second.Record(10'000);
  second.Record(70'000);
  r.read_series.push_back(SummarizeInterval(second, 1, 1.0, 1.0));
  const std::string table = FormatLoadReportTable(r);
  EXPECT_TRUE(Contains(table, "open loop at 100 calls/s")) << table;
  EXPECT_TRUE(Contains(table,
                       "achieved 100 of 100 calls/s; 25 of 1000 sent late "
                       "(2.50%), max send lag 2500.0 us; 3 due never sent"))
      << table;
  EXPECT_TRUE(Contains(table, "1s before the measurement, excluded")) << table;
  const std::string json = LoadReportJson(r);
  EXPECT_TRUE(Contains(json, "\"mode\": \"open\"")) << json;
  EXPECT_TRUE(Contains(json, "\"warmup_s\": 1")) << json;
  EXPECT_TRUE(Contains(json, "\"rate_per_s\": 100")) << json;
  EXPECT_TRUE(Contains(json, "\"late\": 25")) << json;
  EXPECT_TRUE(Contains(json, "\"unsent\": 3")) << json;
  EXPECT_TRUE(Contains(json, "\"max_send_lag_us\": 2500")) << json;
  EXPECT_TRUE(Contains(json, "\"time_series\": [")) << json;
  EXPECT_TRUE(Contains(json, "\"t_s\": 1")) << json;
  EXPECT_TRUE(Contains(json, "\"errors\": 1")) << json;
  EXPECT_TRUE(Contains(json, "\"max_us\": 70")) << json;
  EXPECT_TRUE(Contains(json, "\"reclaim\": null")) << json;
  // Closed loop: no schedule.
  r.rate = 0;
  EXPECT_TRUE(Contains(LoadReportJson(r), "\"open_loop\": null"));
  EXPECT_FALSE(Contains(FormatLoadReportTable(r), "sent late"));
}

TEST(LoadReportTest, SummarizeIntervalTakesTheHistogramsPercentiles) {
  LatencyHistogram h;
  for (int i = 0; i < 99; ++i) h.Record(1'000);
  h.Record(1'000'000);
  const IntervalStats i = SummarizeInterval(h, 2, 3.0, 0.5);
  EXPECT_EQ(i.count, 100u);
  EXPECT_EQ(i.errors, 2u);
  EXPECT_EQ(i.t_end_s, 3.0);
  EXPECT_EQ(i.seconds, 0.5);
  // The upper edge of 1000 ns's bucket (within 1/128 above it).
  EXPECT_GE(i.p50_ns, 1'000u);
  EXPECT_LE(i.p50_ns, 1'008u);
  EXPECT_EQ(i.p99_ns, i.p50_ns);
  EXPECT_EQ(i.max_ns, 1'000'000u);
}

TEST(LoadReportTest, ReclaimScenarioReportsThrottleReclaimAndEvents) {
  LoadReport r;
  r.scenario = "reclaim";
  r.elapsed = absl::Seconds(2);
  r.writers = 4;
  r.high_bytes = 32 << 20;
  r.write_chunk_pages = 16;
  r.reclaim_bytes = 4 << 20;
  r.reclaim_interval = absl::Milliseconds(100);
  r.charges = 2000;
  r.charged_pages = 32000;
  r.over_high_charges = 40;
  r.throttle_us = 600'000;
  r.reclaims = 18;
  r.reclaims_short = 2;
  r.reclaimed_pages = 18432;
  r.reclaim_latency.Record(50'000);
  r.charge_latency.Record(20'000);
  r.events_delta = EventCounts{40, 0, 0, 0};
  r.pgsteal_delta = 30000;
  const std::string table = FormatLoadReportTable(r);
  EXPECT_TRUE(Contains(table, "4 writers charging FILE pages, 16 pages per "
                              "charge, memory.high 33554432 B (32 MiB)"))
      << table;
  EXPECT_TRUE(Contains(table, "40 over memory.high (throttled)")) << table;
  EXPECT_TRUE(Contains(table, "600000 us honoured (300.0 ms/s")) << table;
  EXPECT_TRUE(Contains(table, "18 calls, 2 short (UNAVAILABLE), 0 errors; "
                              "18432 pages reclaimed"))
      << table;
  EXPECT_TRUE(Contains(table, "high 40  max 0  oom 0  oom_kill 0")) << table;
  EXPECT_TRUE(Contains(table, "30000 pages")) << table;
  EXPECT_FALSE(Contains(table, "hog cycles")) << table;
  const std::string json = LoadReportJson(r);
  EXPECT_TRUE(Contains(json, "\"over_high_charges\": 40")) << json;
  EXPECT_TRUE(Contains(json, "\"reclaimed_pages\": 18432")) << json;
  EXPECT_TRUE(Contains(json, "\"reclaims_short\": 2")) << json;
  EXPECT_TRUE(Contains(json, "\"high\": 40")) << json;
  EXPECT_TRUE(Contains(json, "\"pgsteal_delta\": 30000")) << json;
  EXPECT_TRUE(Contains(json, "\"throttle_us\": 600000")) << json;
  r.events_delta.reset();
  EXPECT_TRUE(Contains(FormatLoadReportTable(r), "n/a (GetStats failed)"));
  EXPECT_TRUE(Contains(LoadReportJson(r), "\"events_delta\": null"));
}

}  // namespace
}  // namespace cgacct::load
