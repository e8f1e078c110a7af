#include "client/load/open_loop.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

using Clock = OpenLoopSchedule::Clock;
using std::chrono::nanoseconds;

int64_t NsAfter(Clock::time_point start, Clock::time_point t) {
  return std::chrono::duration_cast<nanoseconds>(t - start).count();
}

TEST(OpenLoopScheduleTest, OneWorkerSendsEveryOneOverRate) {
  const Clock::time_point start = Clock::now();
  OpenLoopSchedule s(1000.0, 1, 0, start);  // every 1 ms
  EXPECT_EQ(NsAfter(start, s.intended()), 0);
  s.Advance();
  EXPECT_EQ(NsAfter(start, s.intended()), 1'000'000);
  for (int i = 0; i < 998; ++i) s.Advance();
  EXPECT_EQ(NsAfter(start, s.intended()), 999'000'000);
  EXPECT_EQ(s.sent(), 999u);
}

TEST(OpenLoopScheduleTest, WorkersInterleaveIntoAnEvenTotalSchedule) {
  // 3 workers sharing 3000/s: each every 1 ms, offset by 1/3 ms; merged,
  // one call every 333.3 us, none at the same time.
  const Clock::time_point start = Clock::now();
  std::vector<int64_t> times;
  for (int w = 0; w < 3; ++w) {
    OpenLoopSchedule s(3000.0, 3, w, start);
    EXPECT_DOUBLE_EQ(s.interval_ns(), 1e6);
    for (int k = 0; k < 100; ++k) {
      times.push_back(NsAfter(start, s.intended()));
      s.Advance();
    }
  }
  std::sort(times.begin(), times.end());
  for (size_t i = 1; i < times.size(); ++i) {
    const int64_t gap = times[i] - times[i - 1];
    EXPECT_GE(gap, 333'333) << i;
    EXPECT_LE(gap, 333'334) << i;
  }
  // 300 calls over 100 ms: the total rate asked for.
  EXPECT_NEAR(times.back() - times.front(), 100e6 - 333'333, 2);
}

TEST(OpenLoopScheduleTest, NoDriftOverADay) {
  // 7 calls/s does not divide a second evenly: the k-th time comes from k,
  // not from summing rounded intervals.
  const Clock::time_point start = Clock::now();
  OpenLoopSchedule s(7.0, 1, 0, start);
  for (int k = 0; k < 7 * 86400; ++k) s.Advance();
  EXPECT_EQ(NsAfter(start, s.intended()), 86400LL * 1'000'000'000);
}

TEST(OpenLoopScheduleTest, DueBeforeCountsTheBacklogAStallLeaves) {
  const Clock::time_point start = Clock::now();
  OpenLoopSchedule s(1000.0, 1, 0, start);  // due at 0, 1, 2, ... ms
  // Nothing sent; the run ends at 10.5 ms: calls due at 0..10 ms are unsent.
  EXPECT_EQ(s.DueBefore(start + std::chrono::microseconds(10'500)), 11u);
  // Due exactly at the end: not before it.
  EXPECT_EQ(s.DueBefore(start + std::chrono::milliseconds(10)), 10u);
  for (int i = 0; i < 4; ++i) s.Advance();  // sent 0..3 ms
  EXPECT_EQ(s.DueBefore(start + std::chrono::microseconds(10'500)), 7u);
  // The current call is due after the end: nothing owed.
  EXPECT_EQ(s.DueBefore(start + std::chrono::milliseconds(3)), 0u);
  EXPECT_EQ(s.DueBefore(start), 0u);
}

TEST(OpenLoopScheduleTest, DueBeforeWithAnOffset) {
  const Clock::time_point start = Clock::now();
  OpenLoopSchedule s(2000.0, 2, 1, start);  // every 1 ms, from 0.5 ms
  EXPECT_EQ(NsAfter(start, s.intended()), 500'000);
  EXPECT_EQ(s.DueBefore(start + std::chrono::microseconds(400)), 0u);
  EXPECT_EQ(s.DueBefore(start + std::chrono::microseconds(600)), 1u);
  EXPECT_EQ(s.DueBefore(start + std::chrono::microseconds(2'600)), 3u);
}

}  // namespace
}  // namespace cgacct::load
