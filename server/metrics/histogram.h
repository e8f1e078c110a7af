// LatencyHistogram: the lock-free histogram every cgacctd recorder uses, and
// the per-thread shards it and the counters record into (docs/DESIGN.md §5).
//
// Recording (hot path): plain std::atomic<uint64_t> counters in
// pre-allocated, cache-line-aligned shards, one shard per thread (modulo
// kNrMetricShards); a few relaxed fetch_adds on the calling thread's own
// shard: no Prometheus call, no mutex, no allocation. Reading sums the shards
// (server/metrics/prometheus/ builds the families at scrape time).
//
// Thread safety: thread-safe. Recording may run concurrently with reads; a
// read sees each counter at some point during it (per-counter atomicity, not
// a consistent cut across counters).
//
// Memory ordering: every counter is a monotonic statistic read by nobody on
// the hot path, so all accesses are std::memory_order_relaxed.
#ifndef CGACCT_SERVER_METRICS_HISTOGRAM_H_
#define CGACCT_SERVER_METRICS_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "engine/types.h"

namespace cgacct {

// Shards per recorder. Threads beyond this share shards (still correct, the
// adds are atomic; only cache-line ping-pong comes back).
inline constexpr int kNrMetricShards = 64;

// The calling thread's shard in [0, kNrMetricShards): assigned round-robin on
// the thread's first call, then fixed. Thread-safe, lock-free.
int ThisThreadMetricShard();

// Bucket layouts of a LatencyHistogram (docs/DESIGN.md §6.1).
enum class HistogramScale : uint8_t {
  // Upper bounds 2^0 .. 2^20 µs (~1.05 s), then +Inf: RPCs, flushes, reclaim.
  kPow2Micros,
  // Upper bounds in a 1-2-5 series from 50 ns to 1 s (50 ns, 100 ns, 200 ns,
  // 500 ns, 1 µs ... 500 ms, 1 s), then +Inf: flush-lock holds and waits,
  // where one per_cpu hold is a fraction of a microsecond.
  kHoldNanos,
};

// A latency histogram with fixed buckets (HistogramScale) plus +Inf,
// recorded lock-free into per-thread shards.
//
// Thread safety: thread-safe; Record() is wait-free except for the running
// maximum (a CAS loop only when a new per-shard maximum is seen).
class LatencyHistogram {
 public:
  // Finite buckets of kPow2Micros and of kHoldNanos.
  static constexpr int kNrFiniteBuckets = 21;
  static constexpr int kNrHoldFiniteBuckets = 23;
  // Storage for the larger layout's finite buckets and +Inf.
  static constexpr int kNrBuckets = kNrHoldFiniteBuckets + 1;

  // Summed over shards at read time. `buckets` are per bucket, not
  // cumulative; count is their sum. Buckets [0, nr_finite) are finite,
  // bucket nr_finite is +Inf, the rest are unused.
  struct Snapshot {
    std::array<uint64_t, kNrBuckets> buckets{};
    HistogramScale scale = HistogramScale::kPow2Micros;
    int nr_finite = kNrFiniteBuckets;
    // Upper bound of finite bucket i in seconds (the layout's).
    double upper_bound_seconds(int i) const {
      return scale == HistogramScale::kHoldNanos ? HoldUpperBoundSeconds(i)
                                                 : UpperBoundSeconds(i);
    }
    uint64_t count = 0;
    uint64_t sum_ns = 0;
    uint64_t max_ns = 0;
  };

  LatencyHistogram() : scale_(HistogramScale::kPow2Micros) {}
  explicit LatencyHistogram(HistogramScale scale) : scale_(scale) {}
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  // Records one observation. Negative durations count as 0.
  void Record(absl::Duration d) { RecordNanos(ToNanos(d)); }
  void RecordNanos(uint64_t ns);

  Snapshot Collect() const;

  HistogramScale scale() const { return scale_; }
  int nr_finite_buckets() const {
    return scale_ == HistogramScale::kHoldNanos ? kNrHoldFiniteBuckets
                                                : kNrFiniteBuckets;
  }

  // kPow2Micros: bucket index for a value in nanoseconds, the smallest i
  // with ns <= 2^i µs, or kNrFiniteBuckets (+Inf).
  static int BucketFor(uint64_t ns);
  // kPow2Micros: upper bound of finite bucket i in seconds.
  static double UpperBoundSeconds(int i);
  // kHoldNanos: the smallest i with ns <= bound i, or kNrHoldFiniteBuckets
  // (+Inf); and bound i in seconds.
  static int HoldBucketFor(uint64_t ns);
  static double HoldUpperBoundSeconds(int i);

  static uint64_t ToNanos(absl::Duration d);

 private:
  struct alignas(kCacheLineBytes) Shard {
    std::atomic<uint64_t> buckets[kNrBuckets];
    std::atomic<uint64_t> sum_ns;
    std::atomic<uint64_t> max_ns;
  };
  static_assert(sizeof(Shard) % kCacheLineBytes == 0,
                "shards must not share cache lines");

  const HistogramScale scale_;
  std::array<Shard, kNrMetricShards> shards_{};
};

// Raises `slot` to `value` if it is larger (a relaxed CAS loop that runs
// only when a new maximum is seen).
void AtomicMax(std::atomic<uint64_t>& slot, uint64_t value);

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_HISTOGRAM_H_
