// LatencyHistogram (server/metrics/histogram.h): its two bucket layouts and
// its lock-free recording.
#include "server/metrics/histogram.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace cgacct {
namespace {

TEST(LatencyHistogramTest, BucketsArePowersOfTwoMicroseconds) {
  EXPECT_EQ(LatencyHistogram::BucketFor(0), 0);
  EXPECT_EQ(LatencyHistogram::BucketFor(999), 0);
  EXPECT_EQ(LatencyHistogram::BucketFor(1000), 0);  // le 1 µs
  EXPECT_EQ(LatencyHistogram::BucketFor(1001), 1);  // le 2 µs
  EXPECT_EQ(LatencyHistogram::BucketFor(2000), 1);
  EXPECT_EQ(LatencyHistogram::BucketFor(2001), 2);  // le 4 µs
  EXPECT_EQ(LatencyHistogram::BucketFor(4000), 2);
  EXPECT_EQ(LatencyHistogram::BucketFor(4001), 3);
  EXPECT_EQ(LatencyHistogram::BucketFor(1024 * 1000), 10);
  EXPECT_EQ(LatencyHistogram::BucketFor((uint64_t{1} << 20) * 1000), 20);
  EXPECT_EQ(LatencyHistogram::BucketFor((uint64_t{1} << 20) * 1000 + 1),
            LatencyHistogram::kNrFiniteBuckets);  // +Inf
  EXPECT_EQ(LatencyHistogram::BucketFor(~uint64_t{0}),
            LatencyHistogram::kNrFiniteBuckets);
  EXPECT_DOUBLE_EQ(LatencyHistogram::UpperBoundSeconds(0), 1e-6);
  EXPECT_DOUBLE_EQ(LatencyHistogram::UpperBoundSeconds(20), 1.048576);
}

// Flush-lock holds: a 1-2-5 series from 50 ns, so a per_cpu hold (tens to
// hundreds of ns) lands in a bucket of its own instead of le=1e-06.
TEST(LatencyHistogramTest, HoldBucketsAreOneTwoFiveFromFiftyNanoseconds) {
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(0), 0);
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(50), 0);              // le 50 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(51), 1);              // le 100 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(150), 2);             // le 200 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(201), 3);             // le 500 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(999), 4);             // le 1 µs
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(45'341'000), 18);     // le 50 ms
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(1'000'000'000), 22);  // le 1 s
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(1'000'000'001),
            LatencyHistogram::kNrHoldFiniteBuckets);  // +Inf
  EXPECT_DOUBLE_EQ(LatencyHistogram::HoldUpperBoundSeconds(0), 50e-9);
  EXPECT_DOUBLE_EQ(LatencyHistogram::HoldUpperBoundSeconds(4), 1e-6);
  EXPECT_DOUBLE_EQ(LatencyHistogram::HoldUpperBoundSeconds(13), 1e-3);
  EXPECT_DOUBLE_EQ(LatencyHistogram::HoldUpperBoundSeconds(22), 1.0);
  for (int i = 1; i < LatencyHistogram::kNrHoldFiniteBuckets; ++i)
    EXPECT_LT(LatencyHistogram::HoldUpperBoundSeconds(i - 1),
              LatencyHistogram::HoldUpperBoundSeconds(i));
  LatencyHistogram h(HistogramScale::kHoldNanos);
  h.RecordNanos(70);
  h.RecordNanos(80);
  h.RecordNanos(3'000);
  const LatencyHistogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.nr_finite, LatencyHistogram::kNrHoldFiniteBuckets);
  EXPECT_EQ(s.buckets[1], 2u);  // (50, 100] ns
  EXPECT_EQ(s.buckets[6], 1u);  // (2, 5] µs
  EXPECT_DOUBLE_EQ(s.upper_bound_seconds(1), 100e-9);
}

TEST(LatencyHistogramTest, RecordsSumCountAndMax) {
  LatencyHistogram h;
  h.Record(absl::Microseconds(3));
  h.Record(absl::Milliseconds(2));
  h.Record(absl::Seconds(5));
  h.Record(-absl::Seconds(1));  // clamped to 0
  const LatencyHistogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.sum_ns, 3000u + 2000000u + 5000000000u);
  EXPECT_EQ(s.max_ns, 5000000000u);
  EXPECT_EQ(s.buckets[0], 1u);
  EXPECT_EQ(s.buckets[2], 1u);
  EXPECT_EQ(s.buckets[11], 1u);  // 2 ms <= 2048 µs
  EXPECT_EQ(s.buckets[LatencyHistogram::kNrFiniteBuckets], 1u);
}

TEST(LatencyHistogramTest, ConcurrentRecordsAreAllCounted) {
  LatencyHistogram h;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < kPerThread; ++i) h.RecordNanos(1000 * (t + 1));
    });
  }
  for (std::thread& t : threads) t.join();
  const LatencyHistogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kPerThread);
  uint64_t want_sum = 0;
  for (int t = 0; t < kThreads; ++t) want_sum += 1000u * (t + 1) * kPerThread;
  EXPECT_EQ(s.sum_ns, want_sum);
  EXPECT_EQ(s.max_ns, 1000u * kThreads);
}

}  // namespace
}  // namespace cgacct
