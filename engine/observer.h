// The engine's instrumentation interface: how lock and flush timings leave the
// engine without a metrics library inside it (docs/DESIGN.md §2.1).
//
// Thread safety: implementations must be thread-safe; the engine calls them
// from any thread, never while it holds the rstat flush lock, and expects them
// to be cheap (no blocking I/O).
#ifndef CGACCT_ENGINE_OBSERVER_H_
#define CGACCT_ENGINE_OBSERVER_H_

#include <cstdint>

#include "absl/time/time.h"
#include "engine/types.h"

namespace cgacct {

// What one hold of the rstat flush lock did (the irqs-off tracer's view).
struct FlushLockHold {
  FlushLockPolicy policy = FlushLockPolicy::kPerCpu;
  absl::Duration wait;  // time spent acquiring the lock
  absl::Duration hold;  // time between acquire and release
  int cpus_walked = 0;  // CPUs processed inside this hold
  int groups_folded = 0;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;

  // One acquire/release of the flush lock, reported after the release.
  virtual void OnFlushLockHold(const FlushLockHold& hold) = 0;

  // One subtree flush (mirrors css_rstat_flush()), reported after it ends.
  // `cpus_walked`: the CPUs whose updated tree it locked (see
  // Rstat::flush_cpus()); `groups_folded`: groups folded, once per CPU folded.
  virtual void OnFlushDone(absl::Duration duration, int cpus_walked,
                           int groups_folded) = 0;

  // One reclaim cycle (try_to_free_mem_cgroup_pages()), reported after it
  // ends: its duration, the pages it scanned and reclaimed (stolen), and
  // whether it walked whole subtrees (forced full walks, or the full-walk
  // retry before giving up) rather than only partial walks on the shared
  // cursor. Called without engine locks other than a group-tree reader
  // slot. Default: ignored.
  virtual void OnReclaimDone(absl::Duration cycle, uint64_t scanned,
                             uint64_t stolen, bool full_walk) {}
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_OBSERVER_H_
