// The engine's instrumentation interface: how lock and flush timings leave the
// engine without a metrics library inside it (docs/DESIGN.md §2.1).
//
// Thread safety: implementations must be thread-safe; the engine calls them
// from any thread, never while it holds the rstat flush lock, and expects them
// to be cheap (no blocking I/O).
#ifndef CGACCT_ENGINE_OBSERVER_H_
#define CGACCT_ENGINE_OBSERVER_H_

#include <cstdint>

#include "absl/strings/string_view.h"
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
  // memory.events or memory.events.local of the group with id `group_id`
  // (GroupInfo::id) changed: mirrors the cgroup_file_notify() calls in
  // memcg_memory_event(), mm/memcontrol.c. Called once per group whose
  // counts moved, the event's group first, then each ancestor below the
  // root, on the charge, reclaim or limit-write path while it holds a
  // group-tree reader slot: it must not call back into the engine and
  // should be a few instructions when nobody listens. Unlike the kernel
  // (CGROUP_FILE_NOTIFY_MIN_INTV, 20 ms) the engine does not rate-limit:
  // a listener coalesces. Default: ignored.
  virtual void OnMemoryEvents(uint64_t group_id) {}
  // The group with id `group_id` was deleted (css offline; its id is never
  // reused). Called under the group tree's writer lock: must not call back
  // into the engine. Default: ignored.
  virtual void OnGroupDeleted(uint64_t group_id) {}
  // An OOM killed the whole group `group_id` at `path` (memory.oom.group:
  // oom_kill_process() -> mem_cgroup_scan_tasks(oom_group,
  // oom_kill_memcg_member)): every task of that subtree is to die, which
  // for a front end means ending every holder of pages charged at or below
  // `path` and uncharging what it held. Called on the charge path after
  // `oom_group_kill` was counted, holding a group-tree reader slot: must not
  // call back into the engine (queue the kills). Default: ignored.
  virtual void OnOomGroupKill(uint64_t group_id, absl::string_view path) {}
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_OBSERVER_H_
