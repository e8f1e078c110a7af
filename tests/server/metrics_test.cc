#include "server/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "http_get.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

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
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(50), 0);    // le 50 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(51), 1);    // le 100 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(150), 2);   // le 200 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(201), 3);   // le 500 ns
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(999), 4);   // le 1 µs
  EXPECT_EQ(LatencyHistogram::HoldBucketFor(45'341'000), 18);  // le 50 ms
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

TEST(RstatFlushObserverTest, KeepsPoliciesApart) {
  RstatFlushObserver observer;
  FlushLockHold hold;
  hold.policy = FlushLockPolicy::kWhole;
  hold.hold = absl::Microseconds(100);
  hold.wait = absl::Microseconds(7);
  hold.cpus_walked = 400;
  observer.OnFlushLockHold(hold);
  observer.OnFlushDone(absl::Microseconds(300), 400, 12);
  EXPECT_EQ(observer.lock_hold(FlushLockPolicy::kPerCpu).Collect().count, 0u);
  const auto whole = observer.lock_hold(FlushLockPolicy::kWhole).Collect();
  EXPECT_EQ(whole.count, 1u);
  EXPECT_EQ(whole.max_ns, 100000u);
  EXPECT_EQ(observer.lock_wait(FlushLockPolicy::kWhole).Collect().sum_ns,
            7000u);
  EXPECT_EQ(observer.flush_duration().Collect().count, 1u);
}

TEST(RpcMetricsTest, CountsPerMethodAndCode) {
  RpcMetrics rpc;
  rpc.Record(RpcMethod::kCharge, grpc::StatusCode::OK, absl::Microseconds(5));
  rpc.Record(RpcMethod::kCharge, grpc::StatusCode::OK, absl::Microseconds(5));
  rpc.Record(RpcMethod::kCharge, grpc::StatusCode::RESOURCE_EXHAUSTED,
             absl::Microseconds(50));
  // Codes outside 0..16 count as UNKNOWN. Only values inside the enum's
  // range of values may be made (-32..31 for -1..16): 99 was undefined
  // behaviour (UBSan, -fsanitize=enum).
  rpc.Record(RpcMethod::kGetStats, static_cast<grpc::StatusCode>(17),
             absl::Microseconds(1));
  rpc.Record(RpcMethod::kGetStats, grpc::StatusCode::DO_NOT_USE,
             absl::Microseconds(1));
  rpc.RecordChargeRejected();
  EXPECT_EQ(rpc.handled(RpcMethod::kCharge, grpc::StatusCode::OK), 2u);
  EXPECT_EQ(
      rpc.handled(RpcMethod::kCharge, grpc::StatusCode::RESOURCE_EXHAUSTED),
      1u);
  EXPECT_EQ(rpc.handled(RpcMethod::kGetStats, grpc::StatusCode::UNKNOWN), 2u);
  EXPECT_EQ(rpc.handled(RpcMethod::kUncharge, grpc::StatusCode::OK), 0u);
  EXPECT_EQ(rpc.latency(RpcMethod::kCharge).count, 3u);
  EXPECT_EQ(rpc.charges_rejected(), 1u);
  EXPECT_STREQ(RpcMethodName(RpcMethod::kGetEngineInfo), "GetEngineInfo");
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::FAILED_PRECONDITION),
               "FAILED_PRECONDITION");
}

class MetricsExposerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 2;
    options.observer = &observer_;
    engine_ = *Engine::Create(options);
    collector_ = std::make_shared<MetricsCollector>(*engine_, observer_, rpc_);
  }

  RstatFlushObserver observer_;
  RpcMetrics rpc_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<MetricsCollector> collector_;
};

TEST_F(MetricsExposerTest, ServesMetricsOverHttpOnPortZero) {
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1:0", collector_);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  ASSERT_GT((*exposer)->port(), 0);
  const std::string response =
      test_util::HttpGet((*exposer)->port(), "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("cgacct_groups 1"));
  EXPECT_THAT(response,
              HasSubstr("cgacct_group_memory_current_bytes{path=\"/\"} 0"));
}

TEST_F(MetricsExposerTest, TakenPortIsAnErrorNotAnException) {
  absl::StatusOr<std::unique_ptr<MetricsExposer>> first =
      MetricsExposer::Start("127.0.0.1:0", collector_);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsExposer>> second =
      MetricsExposer::Start(taken, collector_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(taken));
}

}  // namespace
}  // namespace cgacct
