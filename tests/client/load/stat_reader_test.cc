// The bookkeeping of one GetStats answer (client/load/stat_reader.h,
// CountRead): the same for the blocking and the asynchronous readers.
#include "client/load/stat_reader.h"

#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

TEST(CountReadTest, AMeasuredSuccessIsSentOkAndTimed) {
  LiveCounters live;
  IntervalRecorder interval;
  WorkerResult result;
  CountRead(grpc::Status::OK, 5000, /*measured=*/true, live, interval, result);
  EXPECT_EQ(live.reads.load(), 1u);
  EXPECT_EQ(result.sent, 1u);
  EXPECT_EQ(result.ok, 1u);
  EXPECT_EQ(result.latency.count(), 1u);
  EXPECT_EQ(result.errors, 0u);
}

TEST(CountReadTest, TheWarmupCountsOnlyLive) {
  LiveCounters live;
  IntervalRecorder interval;
  WorkerResult result;
  CountRead(grpc::Status::OK, 5000, /*measured=*/false, live, interval, result);
  EXPECT_EQ(live.reads.load(), 1u);
  EXPECT_EQ(result.sent, 0u);
  EXPECT_EQ(result.ok, 0u);
  EXPECT_EQ(result.latency.count(), 0u);
}

TEST(CountReadTest, ErrorsCountEvenInTheWarmupButOnlyMeasuredOnesAreSent) {
  LiveCounters live;
  IntervalRecorder interval;
  WorkerResult result;
  const grpc::Status down(grpc::StatusCode::UNAVAILABLE, "down");
  CountRead(down, 5000, /*measured=*/false, live, interval, result);
  CountRead(down, 5000, /*measured=*/true, live, interval, result);
  EXPECT_EQ(live.reads.load(), 0u);
  EXPECT_EQ(result.errors, 2u);
  EXPECT_EQ(result.sent, 1u);
  EXPECT_EQ(result.ok, 0u);
  EXPECT_EQ(result.latency.count(), 0u);
  EXPECT_EQ(result.first_error, "GetStats: UNAVAILABLE: down");
  LatencyHistogram taken;
  uint64_t errors = 0;
  interval.Take(taken, &errors);
  EXPECT_EQ(errors, 1u);  // the measured one
}

}  // namespace
}  // namespace cgacct::load
