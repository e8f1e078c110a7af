// RstatFlushObserver: cgacctd's recorder of the engine's timings (flush-lock
// holds and waits, flush durations, reclaim cycles), the userspace stand-in
// for the irqs-off tracer's histograms (docs/DESIGN.md §5, §9.3).
#ifndef CGACCT_SERVER_METRICS_FLUSH_OBSERVER_H_
#define CGACCT_SERVER_METRICS_FLUSH_OBSERVER_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "engine/observer.h"
#include "engine/types.h"
#include "server/metrics/histogram.h"

namespace cgacct {

// The EngineObserver of cgacctd: rstat flush-lock holds and waits (per
// policy) and flush durations, recorded into LatencyHistograms. Called by the
// engine once per lock hold (once per CPU per flush with the per_cpu policy,
// so hundreds of times per flush on a big machine): it only does relaxed
// atomic adds on the calling thread's shard. Also records reclaim cycles
// (duration per walk kind, pages scanned and stolen) the same way.
//
// Thread safety: thread-safe. Must outlive the Engine it is given to.
class RstatFlushObserver final : public EngineObserver {
 public:
  // Policies with their own histograms; FlushLockPolicy values at or above
  // this are folded into the last slot.
  static constexpr int kNrPolicySlots = 4;

  RstatFlushObserver() = default;

  void OnFlushLockHold(const FlushLockHold& hold) override;
  void OnFlushDone(absl::Duration duration, int cpus_walked,
                   int groups_folded) override;
  void OnReclaimDone(absl::Duration cycle, uint64_t scanned, uint64_t stolen,
                     bool full_walk) override;

  // Histogram of flush-lock hold times for `policy`.
  const LatencyHistogram& lock_hold(FlushLockPolicy policy) const;
  // Histogram of flush-lock acquisition waits for `policy`.
  const LatencyHistogram& lock_wait(FlushLockPolicy policy) const;
  // Histogram of whole subtree flushes (css_rstat_flush()).
  const LatencyHistogram& flush_duration() const { return flush_duration_; }
  // Histogram of reclaim cycles (try_to_free_mem_cgroup_pages()) that used
  // only partial walks (full_walk false) or walked whole subtrees (true).
  const LatencyHistogram& reclaim_cycle(bool full_walk) const {
    return reclaim_cycle_[full_walk ? 1 : 0];
  }
  // Pages scanned and reclaimed by all reclaim cycles, summed over shards.
  uint64_t reclaim_scanned() const;
  uint64_t reclaim_stolen() const;

 private:
  static int PolicySlot(FlushLockPolicy policy);

  struct alignas(kCacheLineBytes) ReclaimShard {
    std::atomic<uint64_t> scanned;
    std::atomic<uint64_t> stolen;
  };
  static_assert(sizeof(ReclaimShard) % kCacheLineBytes == 0,
                "shards must not share cache lines");

  // Holds and waits on the 1-2-5 scale from 50 ns: a per_cpu hold is a
  // fraction of a microsecond, a whole hold on 400 CPUs tens of them.
  static_assert(kNrPolicySlots == 4, "one initialiser per policy slot");
  std::array<LatencyHistogram, kNrPolicySlots> lock_hold_{
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos)};
  std::array<LatencyHistogram, kNrPolicySlots> lock_wait_{
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos)};
  LatencyHistogram flush_duration_;
  std::array<LatencyHistogram, 2> reclaim_cycle_;  // [partial, full]
  std::array<ReclaimShard, kNrMetricShards> reclaim_pages_{};
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_FLUSH_OBSERVER_H_
