#include "client/load/histogram.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

constexpr uint64_t kUs = 1000;  // ns per microsecond

TEST(LatencyHistogramTest, EmptyReportsZeros) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min_ns(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
  EXPECT_EQ(h.mean_ns(), 0.0);
  EXPECT_EQ(h.PercentileNs(0.5), 0u);
  EXPECT_EQ(h.PercentileNs(1.0), 0u);
  EXPECT_EQ(h.Pow2ModeUs(), 0u);
  EXPECT_TRUE(h.Pow2Buckets().empty());
}

TEST(LatencyHistogramTest, BucketLayoutCoversEveryValueWithBoundedError) {
  std::vector<uint64_t> values = {
      0,      1,          127,        128,        129,       255,
      256,    257,        1000,       1023,       1024,      65535,
      999999, 1000000007, 1ull << 40, 1ull << 63, UINT64_MAX};
  std::mt19937_64 rng(42);
  for (int i = 0; i < 10000; ++i) values.push_back(rng() >> (rng() % 64));
  for (uint64_t v : values) {
    const int index = LatencyHistogram::BucketIndex(v);
    const uint64_t lower = LatencyHistogram::BucketLowerNs(index);
    const uint64_t upper = LatencyHistogram::BucketUpperNs(index);
    ASSERT_LE(lower, v) << v;
    ASSERT_GE(upper, v) << v;
    // Width / lower bound stays under 2^-kSubBucketBits (exact below 128).
    ASSERT_LE(static_cast<double>(upper - lower),
              static_cast<double>(lower) / 128.0)
        << v;
  }
  // Buckets are contiguous and increasing.
  for (int i = 1; i < LatencyHistogram::BucketIndex(UINT64_MAX); ++i) {
    ASSERT_EQ(LatencyHistogram::BucketUpperNs(i - 1) + 1,
              LatencyHistogram::BucketLowerNs(i))
        << i;
  }
  EXPECT_EQ(LatencyHistogram::BucketUpperNs(
                LatencyHistogram::BucketIndex(UINT64_MAX)),
            UINT64_MAX);
}

TEST(LatencyHistogramTest, SmallValuesAreExact) {
  LatencyHistogram h;
  for (uint64_t ns = 1; ns <= 100; ++ns) h.Record(ns);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.PercentileNs(0.50), 50u);
  EXPECT_EQ(h.PercentileNs(0.90), 90u);
  EXPECT_EQ(h.PercentileNs(0.99), 99u);
  EXPECT_EQ(h.PercentileNs(0.999), 100u);
  EXPECT_EQ(h.PercentileNs(1.0), 100u);
  EXPECT_EQ(h.PercentileNs(0.0), 1u);
  EXPECT_EQ(h.min_ns(), 1u);
  EXPECT_EQ(h.max_ns(), 100u);
  EXPECT_DOUBLE_EQ(h.mean_ns(), 50.5);
}

TEST(LatencyHistogramTest, PercentilesOfUniformMicroseconds) {
  // 1 us, 2 us, ..., 10000 us, shuffled.
  std::vector<uint64_t> values;
  for (uint64_t i = 1; i <= 10000; ++i) values.push_back(i * kUs);
  std::shuffle(values.begin(), values.end(), std::mt19937_64(7));
  LatencyHistogram h;
  for (uint64_t v : values) h.Record(v);

  const struct {
    double q;
    uint64_t exact_ns;  // the nearest-rank sample
  } cases[] = {{0.50, 5000 * kUs},
               {0.90, 9000 * kUs},
               {0.99, 9900 * kUs},
               {0.999, 9990 * kUs}};
  for (const auto& c : cases) {
    const uint64_t got = h.PercentileNs(c.q);
    // Never under-reports, and at most one sub-bucket (1/128) over.
    EXPECT_GE(got, c.exact_ns) << c.q;
    EXPECT_LE(static_cast<double>(got),
              static_cast<double>(c.exact_ns) * (1 + 1.0 / 128))
        << c.q;
  }
  EXPECT_EQ(h.max_ns(), 10000 * kUs);
  EXPECT_EQ(h.min_ns(), 1 * kUs);
  EXPECT_EQ(h.PercentileNs(1.0), 10000 * kUs);
}

TEST(LatencyHistogramTest, PercentileIsClampedToMax) {
  LatencyHistogram h;
  h.Record(1000003);  // its bucket's upper edge is above the sample
  EXPECT_EQ(h.PercentileNs(0.5), 1000003u);
  EXPECT_EQ(h.PercentileNs(0.999), 1000003u);
}

TEST(LatencyHistogramTest, Pow2ModeIsTheFullestMicrosecondBucket) {
  LatencyHistogram h;
  for (int i = 0; i < 5; ++i) h.Record(500);         // [0, 1) us
  for (int i = 0; i < 10; ++i) h.Record(20 * kUs);   // [16, 32) us
  for (int i = 0; i < 30; ++i) h.Record(70 * kUs);   // [64, 128) us
  for (int i = 0; i < 29; ++i) h.Record(127 * kUs);  // [64, 128) us too
  for (int i = 0; i < 50; ++i) h.Record(128 * kUs);  // [128, 256) us
  EXPECT_EQ(h.Pow2ModeUs(), 64u);                    // 59 samples beat 50

  const std::vector<Pow2Bucket> buckets = h.Pow2Buckets();
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[0].lower_us, 0u);
  EXPECT_EQ(buckets[0].count, 5u);
  EXPECT_EQ(buckets[1].lower_us, 16u);
  EXPECT_EQ(buckets[1].count, 10u);
  EXPECT_EQ(buckets[2].lower_us, 64u);
  EXPECT_EQ(buckets[2].count, 59u);
  EXPECT_EQ(buckets[3].lower_us, 128u);
  EXPECT_EQ(buckets[3].count, 50u);
}

TEST(LatencyHistogramTest, Pow2BucketBoundariesAreInMicroseconds) {
  const struct {
    uint64_t ns;
    uint64_t lower_us;
  } cases[] = {{0, 0},
               {999, 0},
               {1000, 1},
               {1999, 1},
               {2000, 2},
               {3999, 2},
               {4000, 4},
               {8 * kUs, 8},
               {16 * kUs - 1, 8},
               {16 * kUs, 16},
               {65535 * kUs, 32768},
               {UINT64_MAX, uint64_t{1} << 54}};
  for (const auto& c : cases) {
    LatencyHistogram h;
    h.Record(c.ns);
    EXPECT_EQ(h.Pow2ModeUs(), c.lower_us) << c.ns;
  }
}

TEST(LatencyHistogramTest, Pow2ModeTieGoesToTheFasterBucket) {
  LatencyHistogram h;
  h.Record(8 * kUs);
  h.Record(16 * kUs);
  EXPECT_EQ(h.Pow2ModeUs(), 8u);
}

TEST(LatencyHistogramTest, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> latency_us(3.0, 1.0);
  LatencyHistogram all;
  std::vector<LatencyHistogram> per_thread(4);
  for (int i = 0; i < 40000; ++i) {
    const uint64_t ns = static_cast<uint64_t>(latency_us(rng) * kUs);
    all.Record(ns);
    per_thread[i % 4].Record(ns);
  }
  LatencyHistogram merged;
  merged.Merge(LatencyHistogram());  // merging nothing is a no-op
  for (const LatencyHistogram& h : per_thread) merged.Merge(h);

  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min_ns(), all.min_ns());
  EXPECT_EQ(merged.max_ns(), all.max_ns());
  EXPECT_NEAR(merged.mean_ns(), all.mean_ns(), 1e-6 * all.mean_ns());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    EXPECT_EQ(merged.PercentileNs(q), all.PercentileNs(q)) << q;
  }
  EXPECT_EQ(merged.Pow2ModeUs(), all.Pow2ModeUs());
  ASSERT_EQ(merged.Pow2Buckets().size(), all.Pow2Buckets().size());
  for (size_t i = 0; i < all.Pow2Buckets().size(); ++i) {
    EXPECT_EQ(merged.Pow2Buckets()[i].count, all.Pow2Buckets()[i].count);
  }
  // lognormal(3, 1) us: the median is e^3 ~ 20 us, in the [16, 32) bucket.
  EXPECT_EQ(all.Pow2ModeUs(), 16u);
}

TEST(LatencyHistogramTest, MergeIntoEmptyTakesTheOtherMin) {
  LatencyHistogram a;
  LatencyHistogram b;
  b.Record(5000);
  b.Record(7000);
  a.Merge(b);
  EXPECT_EQ(a.min_ns(), 5000u);
  EXPECT_EQ(a.max_ns(), 7000u);
  EXPECT_EQ(a.count(), 2u);
}

// Reset (used for the per-second series) forgets everything: the histogram
// then behaves as a new one.
TEST(LatencyHistogramTest, ResetForgetsEverySample) {
  LatencyHistogram h;
  h.Record(5);
  h.Record(3'000'000);
  h.Reset();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min_ns(), 0u);
  EXPECT_EQ(h.max_ns(), 0u);
  EXPECT_EQ(h.mean_ns(), 0.0);
  EXPECT_EQ(h.PercentileNs(0.5), 0u);
  EXPECT_TRUE(h.Pow2Buckets().empty());
  h.Record(1'000);
  EXPECT_EQ(h.count(), 1u);
  EXPECT_EQ(h.min_ns(), 1'000u);
  EXPECT_EQ(h.max_ns(), 1'000u);
  EXPECT_EQ(h.Pow2ModeUs(), 1u);
}

}  // namespace
}  // namespace cgacct::load
