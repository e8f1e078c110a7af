// LatencyHistogram and the metric shards (server/metrics/histogram.h).
#include "server/metrics/histogram.h"

#include <algorithm>

namespace cgacct {
namespace {

std::atomic<int> next_thread_shard{0};

}  // namespace

void AtomicMax(std::atomic<uint64_t>& slot, uint64_t value) {
  // Relaxed: a statistic; the CAS only runs when a new maximum is seen.
  uint64_t current = slot.load(std::memory_order_relaxed);
  while (value > current && !slot.compare_exchange_weak(
                                current, value, std::memory_order_relaxed)) {
  }
}

int ThisThreadMetricShard() {
  // Relaxed: only uniqueness of the ticket matters, not ordering.
  thread_local const int shard =
      next_thread_shard.fetch_add(1, std::memory_order_relaxed) %
      kNrMetricShards;
  return shard;
}

// ---------------------------------------------------------------------------
// LatencyHistogram

int LatencyHistogram::BucketFor(uint64_t ns) {
  // Round up to whole microseconds so that bucket i holds (2^(i-1), 2^i] µs.
  const uint64_t us = ns / 1000 + (ns % 1000 != 0 ? 1 : 0);
  if (us <= 1) return 0;
  const int bucket = 64 - __builtin_clzll(us - 1);  // ceil(log2(us))
  return std::min(bucket, kNrFiniteBuckets);
}

double LatencyHistogram::UpperBoundSeconds(int i) {
  // Divided, not multiplied by 1e-6: the quotient is correctly rounded, so
  // the bound prints as the decimal it is (le="0.008", never
  // "0.008000000000000002").
  return static_cast<double>(uint64_t{1} << i) / 1e6;
}

namespace {

// kHoldNanos bounds: 1-2-5 from 50 ns to 1 s.
constexpr uint64_t kHoldBoundsNs[LatencyHistogram::kNrHoldFiniteBuckets] = {
    50,         100,         200,         500,         1'000,        2'000,
    5'000,      10'000,      20'000,      50'000,      100'000,      200'000,
    500'000,    1'000'000,   2'000'000,   5'000'000,   10'000'000,   20'000'000,
    50'000'000, 100'000'000, 200'000'000, 500'000'000, 1'000'000'000};

}  // namespace

int LatencyHistogram::HoldBucketFor(uint64_t ns) {
  // The first bound >= ns; a binary search of 23 (5 compares).
  return static_cast<int>(
      std::lower_bound(std::begin(kHoldBoundsNs), std::end(kHoldBoundsNs), ns) -
      std::begin(kHoldBoundsNs));
}

double LatencyHistogram::HoldUpperBoundSeconds(int i) {
  // Divided (see UpperBoundSeconds): le="5e-07", not 5.000000000000001e-07.
  return static_cast<double>(kHoldBoundsNs[i]) / 1e9;
}

uint64_t LatencyHistogram::ToNanos(absl::Duration d) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

void LatencyHistogram::RecordNanos(uint64_t ns) {
  Shard& shard = shards_[ThisThreadMetricShard()];
  // Relaxed: statistics (see the header's Memory ordering paragraph).
  const int bucket =
      scale_ == HistogramScale::kHoldNanos ? HoldBucketFor(ns) : BucketFor(ns);
  shard.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  shard.sum_ns.fetch_add(ns, std::memory_order_relaxed);
  AtomicMax(shard.max_ns, ns);
}

LatencyHistogram::Snapshot LatencyHistogram::Collect() const {
  Snapshot snapshot;
  snapshot.scale = scale_;
  snapshot.nr_finite = nr_finite_buckets();
  for (const Shard& shard : shards_) {
    for (int i = 0; i < kNrBuckets; ++i) {
      const uint64_t n = shard.buckets[i].load(std::memory_order_relaxed);
      snapshot.buckets[i] += n;
      snapshot.count += n;
    }
    snapshot.sum_ns += shard.sum_ns.load(std::memory_order_relaxed);
    snapshot.max_ns =
        std::max(snapshot.max_ns, shard.max_ns.load(std::memory_order_relaxed));
  }
  return snapshot;
}

}  // namespace cgacct
