// The run driver's pure parts (client/load/driver.h): the report's header
// from the options and the server, the workers' results into the report,
// and the exit status with its summary line.
#include "client/load/driver.h"

#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

v1::EngineInfo Server() {
  v1::EngineInfo info;
  info.set_nr_cpus(16);
  info.set_page_size_bytes(4096);
  info.set_charge_batch_pages(64);
  info.set_flush_lock_policy("adaptive");
  info.set_flush_preempt_model("full");
  return info;
}

TEST(ReportHeaderTest, HogsFieldsOnlyWithHogs) {
  LoadOptions o;
  o.scenario = "seed-rstat";
  o.target = "127.0.0.1:1";
  o.group = "/g";
  o.flush_name = "none";
  o.readers = 4;
  o.hogs = 2;
  o.hog_chunk_pages = 8;
  o.hog_max_bytes = 1 << 20;
  o.duration = absl::Seconds(3);
  o.warmup = absl::Milliseconds(500);
  LoadReport r = ReportHeader(o, Server(), /*hog_cpus=*/16);
  EXPECT_EQ(r.scenario, "seed-rstat");
  EXPECT_EQ(r.flush_mode, "none");
  EXPECT_EQ(r.threads, 4);
  EXPECT_EQ(r.hogs, 2);
  EXPECT_EQ(r.hog_chunk_pages, 8u);
  EXPECT_EQ(r.hog_max_bytes, 1u << 20);
  EXPECT_EQ(r.hog_cpus, 16u);
  EXPECT_EQ(r.nr_cpus, 16u);
  EXPECT_EQ(r.page_size_bytes, 4096u);
  EXPECT_EQ(r.flush_lock_policy, "adaptive");
  EXPECT_EQ(r.flush_preempt_model, "full");
  EXPECT_EQ(r.warmup, absl::Milliseconds(500));
  EXPECT_EQ(r.writers, 0);
  EXPECT_EQ(r.reclaim_bytes, 0u);

  o.hogs = 0;
  r = ReportHeader(o, Server(), 16);
  EXPECT_EQ(r.hog_chunk_pages, 0u);
  EXPECT_EQ(r.hog_max_bytes, 0u);
  EXPECT_EQ(r.hog_cpus, 0u);
}

TEST(ReportHeaderTest, ReclaimFieldsOnlyWithWriters) {
  LoadOptions o;
  o.writers = 2;
  o.high_bytes = 1 << 21;
  o.write_chunk_pages = 16;
  o.reclaim_bytes = 1 << 20;
  o.reclaim_interval = absl::Milliseconds(100);
  LoadReport r = ReportHeader(o, Server(), 16);
  EXPECT_EQ(r.writers, 2);
  EXPECT_EQ(r.high_bytes, 1u << 21);
  EXPECT_EQ(r.write_chunk_pages, 16u);
  EXPECT_EQ(r.reclaim_bytes, 1u << 20);
  EXPECT_EQ(r.reclaim_interval, absl::Milliseconds(100));
}

TEST(AddWorkerResultTest, ReadersToReadsOthersToCharges) {
  LoadReport report;
  WorkerResult reader;
  reader.ok = 10;
  reader.errors = 1;
  reader.sent = 11;
  reader.late = 2;
  reader.unsent = 3;
  reader.max_lag_ns = 500;
  reader.latency.Record(1000);
  reader.first_error = "GetStats: UNAVAILABLE";
  WorkerResult hog;
  hog.ok = 5;
  hog.charged_pages = 320;
  hog.ooms = 1;
  hog.costly_enomems = 2;
  hog.cycles = 3;
  hog.throttle_us = 7;
  hog.over_high = 1;
  hog.latency.Record(2000);
  hog.latency.Record(3000);
  hog.first_error = "Charge: DEADLINE_EXCEEDED";
  AddWorkerResult(reader, /*reader=*/true, report);
  AddWorkerResult(hog, /*reader=*/false, report);
  AddWorkerResult(reader, /*reader=*/true, report);
  EXPECT_EQ(report.reads, 20u);
  EXPECT_EQ(report.read_errors, 2u);
  EXPECT_EQ(report.sent_reads, 22u);
  EXPECT_EQ(report.late_reads, 4u);
  EXPECT_EQ(report.unsent_reads, 6u);
  EXPECT_EQ(report.max_send_lag_ns, 500u);  // the longest, not the sum
  EXPECT_EQ(report.read_latency.count(), 2u);
  EXPECT_EQ(report.charges, 5u);
  EXPECT_EQ(report.charged_pages, 320u);
  EXPECT_EQ(report.ooms, 1u);
  EXPECT_EQ(report.costly_enomems, 2u);
  EXPECT_EQ(report.hog_cycles, 3u);
  EXPECT_EQ(report.throttle_us, 7u);
  EXPECT_EQ(report.over_high_charges, 1u);
  EXPECT_EQ(report.charge_latency.count(), 2u);
  EXPECT_EQ(report.first_error, "GetStats: UNAVAILABLE");  // the first
}

TEST(RunExitStatusTest, CleanRunIsZero) {
  LoadReport report;
  std::string summary = "stale";
  EXPECT_EQ(RunExitStatus(report, /*interrupted=*/false, &summary), 0);
  EXPECT_EQ(summary, "");
}

TEST(RunExitStatusTest, InterruptedIs130WhateverHappened) {
  LoadReport report;
  report.read_errors = 3;
  std::string summary;
  EXPECT_EQ(RunExitStatus(report, /*interrupted=*/true, &summary), 130);
  EXPECT_EQ(summary, "");
}

TEST(RunExitStatusTest, ErrorsOrDisagreeingBooksAreThree) {
  LoadReport report;
  report.read_errors = 1;
  report.charge_errors = 2;
  report.reclaim_errors = 3;
  report.first_error = "GetStats: UNAVAILABLE: gone";
  std::string summary;
  EXPECT_EQ(RunExitStatus(report, false, &summary), 3);
  EXPECT_EQ(summary,
            "cgacct-load: 6 RPC errors, 0 pages reparented, 0 hog groups "
            "left; first: GetStats: UNAVAILABLE: gone\n");

  LoadReport books;
  books.reparented_pages = 64;
  books.hog_groups_left = 1;
  EXPECT_EQ(RunExitStatus(books, false, &summary), 3);
  EXPECT_EQ(summary,
            "cgacct-load: 0 RPC errors, 64 pages reparented, 1 hog groups "
            "left\n");
}

}  // namespace
}  // namespace cgacct::load
