// Latency histogram for the load client: bounded memory, mergeable, with the
// percentiles of a benchmark table and the power-of-2 "mode" the kernel rstat
// patches report ("the mode of memory.stat access latency after grouping by
// power of 2 buckets: 64 usec => 16 usec").
//
// Thread safety: LatencyHistogram is thread-compatible. The intended use is one
// histogram per worker thread, recorded without locks, and merged into one
// after the workers have been joined.
#ifndef CGACCT_CLIENT_LOAD_HISTOGRAM_H_
#define CGACCT_CLIENT_LOAD_HISTOGRAM_H_

#include <array>
#include <cstdint>
#include <vector>

namespace cgacct::load {

// One power-of-2 microsecond bucket: [lower_us, 2 * lower_us), except the
// first, which is [0, 1) us and has lower_us == 0.
struct Pow2Bucket {
  uint64_t lower_us = 0;
  uint64_t count = 0;
};

// Records durations in nanoseconds into an HDR-like log-linear layout: values
// below 2^kSubBucketBits ns are exact, above that every power of 2 is split
// into 2^kSubBucketBits equal sub-buckets, so a reported percentile is at most
// 1/128 (0.8%) above the true sample. Covers the whole uint64_t range in a
// fixed ~58 KiB. Alongside, it keeps exact counts per power-of-2 microsecond
// bucket for Pow2ModeUs(), whose boundaries (1000 * 2^k ns) do not line up
// with the nanosecond layout.
class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;

  LatencyHistogram();

  // Adds one sample of `ns` nanoseconds. O(1), no allocation.
  void Record(uint64_t ns);

  // Adds every sample of `other` to this histogram.
  void Merge(const LatencyHistogram& other);

  // Forgets every sample (back to the state of a new histogram) without
  // giving back the bucket array. O(buckets) when non-empty, O(1) when empty.
  void Reset();

  // Number of samples recorded.
  uint64_t count() const { return count_; }
  // Smallest and largest samples in ns, exact; 0 when empty.
  uint64_t min_ns() const { return count_ == 0 ? 0 : min_ns_; }
  uint64_t max_ns() const { return max_ns_; }
  // Arithmetic mean in ns; 0 when empty.
  double mean_ns() const;

  // The value at quantile `q` (0 < q <= 1; e.g. 0.999 for p99.9) in ns: the
  // upper edge of the bucket holding the ceil(q * count)-th smallest sample,
  // clamped to [min_ns(), max_ns()], so it never under-reports. q <= 0 gives
  // min_ns(), q >= 1 gives max_ns(). 0 when empty.
  uint64_t PercentileNs(double q) const;

  // The lower bound in microseconds of the power-of-2 bucket [2^k, 2^(k+1)) us
  // holding the most samples (0 for the [0, 1) us bucket). On a tie the
  // faster bucket wins. 0 when empty.
  uint64_t Pow2ModeUs() const;

  // The non-empty power-of-2 microsecond buckets, fastest first.
  std::vector<Pow2Bucket> Pow2Buckets() const;

  // Layout helpers, exposed for tests. BucketIndex maps a value in ns to its
  // bucket; BucketLowerNs / BucketUpperNs give that bucket's inclusive range.
  static int BucketIndex(uint64_t ns);
  static uint64_t BucketLowerNs(int index);
  static uint64_t BucketUpperNs(int index);

 private:
  static constexpr int kSubBucketCount = 1 << kSubBucketBits;
  // Values < 2^kSubBucketBits take one bucket each; every power of 2 from
  // kSubBucketBits to 63 takes kSubBucketCount buckets.
  static constexpr int kNumBuckets =
      (64 - kSubBucketBits + 1) * kSubBucketCount;
  // Index 0 is [0, 1) us; index k + 1 is [2^k, 2^(k+1)) us.
  static constexpr int kNumPow2Buckets = 65;

  std::vector<uint64_t> counts_;  // kNumBuckets entries
  std::array<uint64_t, kNumPow2Buckets> pow2_counts_{};
  uint64_t count_ = 0;
  uint64_t min_ns_ = UINT64_MAX;
  uint64_t max_ns_ = 0;
  // Sum in ns as a double: a uint64_t would overflow after ~5 hours of
  // summed latency, which a long run with many threads can reach.
  double sum_ns_ = 0;
};

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_HISTOGRAM_H_
