// RstatFlushObserver (server/metrics/flush_observer.h).
#include "server/metrics/flush_observer.h"

namespace cgacct {

// ---------------------------------------------------------------------------
// RstatFlushObserver

int RstatFlushObserver::PolicySlot(FlushLockPolicy policy) {
  return std::min(static_cast<int>(policy), kNrPolicySlots - 1);
}

void RstatFlushObserver::OnFlushLockHold(const FlushLockHold& hold) {
  const int slot = PolicySlot(hold.policy);
  lock_hold_[slot].Record(hold.hold);
  lock_wait_[slot].Record(hold.wait);
}

void RstatFlushObserver::OnFlushDone(absl::Duration duration, int cpus_walked,
                                     int groups_folded) {
  // CPUs walked and flushes are counted by the engine (EngineCounters).
  flush_duration_.Record(duration);
}

void RstatFlushObserver::OnReclaimDone(absl::Duration cycle, uint64_t scanned,
                                       uint64_t stolen, bool full_walk) {
  reclaim_cycle_[full_walk ? 1 : 0].Record(cycle);
  ReclaimShard& shard = reclaim_pages_[ThisThreadMetricShard()];
  // Relaxed: statistics (see the header's Memory ordering paragraph).
  shard.scanned.fetch_add(scanned, std::memory_order_relaxed);
  shard.stolen.fetch_add(stolen, std::memory_order_relaxed);
}

uint64_t RstatFlushObserver::reclaim_scanned() const {
  uint64_t total = 0;
  for (const ReclaimShard& shard : reclaim_pages_)
    total += shard.scanned.load(std::memory_order_relaxed);
  return total;
}

uint64_t RstatFlushObserver::reclaim_stolen() const {
  uint64_t total = 0;
  for (const ReclaimShard& shard : reclaim_pages_)
    total += shard.stolen.load(std::memory_order_relaxed);
  return total;
}

const LatencyHistogram& RstatFlushObserver::lock_hold(
    FlushLockPolicy policy) const {
  return lock_hold_[PolicySlot(policy)];
}

const LatencyHistogram& RstatFlushObserver::lock_wait(
    FlushLockPolicy policy) const {
  return lock_wait_[PolicySlot(policy)];
}

}  // namespace cgacct
