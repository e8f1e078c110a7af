#include "client/load/histogram.h"

#include <algorithm>
#include <cmath>

namespace cgacct::load {
namespace {

// Index of the highest set bit; `v` must be non-zero.
int HighestBit(uint64_t v) { return 63 - __builtin_clzll(v); }

// Power-of-2 microsecond bucket of a sample: 0 for [0, 1) us, k + 1 for
// [2^k, 2^(k+1)) us.
int Pow2Index(uint64_t ns) {
  const uint64_t us = ns / 1000;
  return us == 0 ? 0 : HighestBit(us) + 1;
}

}  // namespace

LatencyHistogram::LatencyHistogram() : counts_(kNumBuckets, 0) {}

int LatencyHistogram::BucketIndex(uint64_t ns) {
  if (ns < kSubBucketCount) return static_cast<int>(ns);
  const int msb = HighestBit(ns);  // >= kSubBucketBits
  const int shift = msb - kSubBucketBits;
  // The top kSubBucketBits + 1 bits, in [kSubBucketCount, 2 * kSubBucketCount).
  const int mantissa = static_cast<int>(ns >> shift);
  return (shift + 1) * kSubBucketCount + (mantissa - kSubBucketCount);
}

uint64_t LatencyHistogram::BucketLowerNs(int index) {
  if (index < kSubBucketCount) return static_cast<uint64_t>(index);
  const int shift = index / kSubBucketCount - 1;
  const uint64_t mantissa = kSubBucketCount + index % kSubBucketCount;
  return mantissa << shift;
}

uint64_t LatencyHistogram::BucketUpperNs(int index) {
  if (index < kSubBucketCount) return static_cast<uint64_t>(index);
  const int shift = index / kSubBucketCount - 1;
  // lower + width - 1 without overflowing for the very last bucket.
  return BucketLowerNs(index) + ((uint64_t{1} << shift) - 1);
}

void LatencyHistogram::Record(uint64_t ns) {
  ++counts_[BucketIndex(ns)];
  ++pow2_counts_[Pow2Index(ns)];
  ++count_;
  min_ns_ = std::min(min_ns_, ns);
  max_ns_ = std::max(max_ns_, ns);
  sum_ns_ += static_cast<double>(ns);
}

void LatencyHistogram::Reset() {
  if (count_ == 0) return;
  std::fill(counts_.begin(), counts_.end(), 0);
  pow2_counts_.fill(0);
  count_ = 0;
  min_ns_ = UINT64_MAX;
  max_ns_ = 0;
  sum_ns_ = 0;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  for (int i = 0; i < kNumBuckets; ++i) counts_[i] += other.counts_[i];
  for (int i = 0; i < kNumPow2Buckets; ++i) {
    pow2_counts_[i] += other.pow2_counts_[i];
  }
  count_ += other.count_;
  min_ns_ = std::min(min_ns_, other.min_ns_);
  max_ns_ = std::max(max_ns_, other.max_ns_);
  sum_ns_ += other.sum_ns_;
}

double LatencyHistogram::mean_ns() const {
  return count_ == 0 ? 0.0 : sum_ns_ / static_cast<double>(count_);
}

uint64_t LatencyHistogram::PercentileNs(double q) const {
  if (count_ == 0) return 0;
  if (!(q > 0)) return min_ns();
  if (q >= 1) return max_ns_;
  // The rank of the sample at quantile q, 1-based (nearest-rank method).
  uint64_t rank =
      static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (int i = 0; i < kNumBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      return std::clamp(BucketUpperNs(i), min_ns_, max_ns_);
    }
  }
  return max_ns_;  // not reached: the counts sum to count_
}

uint64_t LatencyHistogram::Pow2ModeUs() const {
  if (count_ == 0) return 0;
  int best = 0;
  for (int i = 1; i < kNumPow2Buckets; ++i) {
    if (pow2_counts_[i] > pow2_counts_[best]) best = i;
  }
  return best == 0 ? 0 : uint64_t{1} << (best - 1);
}

std::vector<Pow2Bucket> LatencyHistogram::Pow2Buckets() const {
  std::vector<Pow2Bucket> out;
  for (int i = 0; i < kNumPow2Buckets; ++i) {
    if (pow2_counts_[i] == 0) continue;
    out.push_back({i == 0 ? 0 : uint64_t{1} << (i - 1), pow2_counts_[i]});
  }
  return out;
}

}  // namespace cgacct::load
