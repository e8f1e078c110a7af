// The reclaim scenario's pure parts (client/load/reclaim.h): the writers'
// groups and the memory.events / pgsteal deltas the report shows.
#include "client/load/reclaim.h"

#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

EventsSnapshot Snapshot(uint64_t high, uint64_t max, uint64_t oom,
                        uint64_t oom_kill, std::optional<uint64_t> pgsteal) {
  EventsSnapshot s;
  s.events.high = high;
  s.events.max = max;
  s.events.oom = oom;
  s.events.oom_kill = oom_kill;
  s.pgsteal = pgsteal;
  return s;
}

TEST(SetEventsDeltaTest, CounterByCounter) {
  LoadReport report;
  SetEventsDelta(Snapshot(1, 2, 3, 4, 100), Snapshot(11, 2, 5, 4, 164), report);
  ASSERT_TRUE(report.events_delta.has_value());
  EXPECT_EQ(report.events_delta->high, 10u);
  EXPECT_EQ(report.events_delta->max, 0u);
  EXPECT_EQ(report.events_delta->oom, 2u);
  EXPECT_EQ(report.events_delta->oom_kill, 0u);
  EXPECT_EQ(report.pgsteal_delta, 64u);
}

TEST(SetEventsDeltaTest, PgstealOnlyWhenBothReadsHaveIt) {
  LoadReport report;
  SetEventsDelta(Snapshot(0, 0, 0, 0, std::nullopt), Snapshot(1, 0, 0, 0, 10),
                 report);
  EXPECT_TRUE(report.events_delta.has_value());
  EXPECT_FALSE(report.pgsteal_delta.has_value());
}

TEST(WriterPathTest, GroupSlashWriterIndex) {
  LoadOptions o;
  o.group = "/g";
  EXPECT_EQ(WriterPath(o, 0), "/g/writer-0");
}

}  // namespace
}  // namespace cgacct::load
