// What the workers of a run share (client/load/run_control.h): which
// failures are ambiguous or worth a pause, how errors and latencies are
// counted, and a stopped run's sleeps.
#include "client/load/run_control.h"

#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

TEST(RunControlTest, AmbiguousCodesMayHaveBeenApplied) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::UNAVAILABLE,
        grpc::StatusCode::CANCELLED, grpc::StatusCode::UNKNOWN,
        grpc::StatusCode::INTERNAL}) {
    EXPECT_TRUE(IsAmbiguous(code)) << code;
  }
  for (grpc::StatusCode code :
       {grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::ABORTED}) {
    EXPECT_FALSE(IsAmbiguous(code)) << code;
  }
}

TEST(RunControlTest, OnlyAServerDownOrDrowningIsBackedOffFrom) {
  EXPECT_TRUE(ShouldBackOff(grpc::StatusCode::UNAVAILABLE));
  EXPECT_TRUE(ShouldBackOff(grpc::StatusCode::DEADLINE_EXCEEDED));
  EXPECT_FALSE(ShouldBackOff(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_FALSE(ShouldBackOff(grpc::StatusCode::INTERNAL));
}

TEST(RunControlTest, NoteErrorCountsEveryErrorAndKeepsTheFirst) {
  LiveCounters live;
  WorkerResult result;
  NoteErrorNoSleep("GetStats",
                   grpc::Status(grpc::StatusCode::NOT_FOUND, "no /a"), live,
                   result);
  NoteError("Charge", grpc::Status(grpc::StatusCode::INTERNAL, "boom"), live,
            result);
  EXPECT_EQ(result.errors, 2u);
  EXPECT_EQ(live.errors.load(), 2u);
  EXPECT_EQ(result.first_error, "GetStats: NOT_FOUND: no /a");
}

TEST(RunControlTest, RecordLatencyFeedsTheRunAndTheInterval) {
  IntervalRecorder interval;
  WorkerResult result;
  RecordLatency(1500, interval, result);
  RecordLatency(2500, interval, result);
  EXPECT_EQ(result.latency.count(), 2u);
  LatencyHistogram taken;
  uint64_t errors = 7;
  interval.Take(taken, &errors);
  EXPECT_EQ(taken.count(), 2u);
  EXPECT_EQ(taken.max_ns(), 2500u);
  EXPECT_EQ(errors, 0u);
}

TEST(RunControlTest, RecordChargeCountsItsPages) {
  IntervalRecorder interval;
  WorkerResult result;
  RecordCharge(1000, 64, interval, result);
  RecordCharge(1000, 16, interval, result);
  EXPECT_EQ(result.ok, 2u);
  EXPECT_EQ(result.charged_pages, 80u);
  EXPECT_EQ(result.latency.count(), 2u);
}

TEST(RunControlTest, SleepThrottleSleepsWhatItWasAsked) {
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(SleepThrottle(2000), 2000u);
  EXPECT_GE(Clock::now() - start, std::chrono::microseconds(2000));
}

TEST(RunControlTest, AStoppedRunDoesNotSleep) {
  RunControl control;
  control.stop.store(true);
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(SleepUntil(start + std::chrono::seconds(30), control));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
}

TEST(RunControlTest, SleepUntilThePastReturnsAtOnce) {
  RunControl control;
  EXPECT_TRUE(SleepUntil(Clock::now() - std::chrono::seconds(1), control));
}

TEST(RunControlTest, MeasuredFromTheWarmupsEnd) {
  RunControl control;
  control.measure_start = Clock::now();
  EXPECT_FALSE(
      control.Measured(control.measure_start - std::chrono::nanoseconds(1)));
  EXPECT_TRUE(control.Measured(control.measure_start));
}

TEST(RunControlTest, FailIsExitStatusOne) { EXPECT_EQ(Fail("test line"), 1); }

}  // namespace
}  // namespace cgacct::load
