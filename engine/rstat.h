// Rstat: per-CPU statistics with per-CPU updated lists and flush on read.
//
// Mirrors kernel/cgroup/rstat.c (css_rstat_updated(), css_rstat_updated_list(),
// css_rstat_flush()) with memcg's flush callback mem_cgroup_css_rstat_flush()
// and the update-side threshold bookkeeping of memcg_rstat_updated() in
// mm/memcontrol.c.
//
// Model. Every group owns an RstatGroup. Updates add to the group's per-CPU
// block for the updating CPU (plain relaxed atomic adds on a line that CPU
// owns) and link the group and its ancestors into that CPU's updated tree.
// A flush of a subtree walks every CPU, pops the updated part of the subtree
// from that CPU's tree (children before parents) and folds each group's
// per-CPU delta into its totals and its parent's pending deltas. Reading
// costs O(groups updated since the last flush), not O(groups).
//
// Locks (in order): the flush lock (global, css_rstat_lock) protects the
// per-group aggregates (pending, local, prev); each CPU's tree lock
// (css_rstat_cpu_lock) protects that CPU's updated tree. Totals are atomics
// written under the flush lock and read without it.
//
// Flush lock policies (DESIGN.md §4.3):
//   kPerCpu  take and drop the flush lock around every CPU (Linux 6.15+,
//            "cgroup/rstat: avoid disabling irqs for O(num_cpu)"): short
//            holds, one acquisition per CPU;
//   kWhole   take it once around the CPU loop and drop it between CPUs only
//            when another thread waits for it (<= 6.14, and "cgroup/rstat:
//            move css_rstat_lock outside cpu loop"): few acquisitions, holds
//            that grow with nr_cpus.
//
// Memory ordering: an updater adds to its per-CPU counter, then (seq_cst
// fence) checks whether its node is already on the tree; a flusher unlinks
// nodes, then (seq_cst fence) reads the counters. So either the updater sees
// the node off the tree and links it again, or the flusher sees its add:
// nothing acknowledged before a flush is missed by it.
//
// Per-CPU blocks are allocated on a group's first update from that CPU, from
// per-CPU pools (engine/percpu_arena.h), and so is the group's array of
// pointers to them: an idle group costs no per-CPU memory at all.
//
// Thread safety: thread-safe. The engine guarantees a group is neither
// updated nor flushed while it is being destroyed.
#ifndef CGACCT_ENGINE_RSTAT_H_
#define CGACCT_ENGINE_RSTAT_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "engine/mutex.h"
#include "engine/observer.h"
#include "engine/percpu_arena.h"
#include "engine/types.h"

namespace cgacct {

// Items kept per group. State items are in pages, events are counts.
enum StatItem : uint8_t {
  kStatAnon,              // state, pages
  kStatFile,              // state, pages
  kStatPgscanDirect,      // event
  kStatPgscanProactive,   // event
  kStatPgstealDirect,     // event
  kStatPgstealProactive,  // event
  kStatPgpgin,            // event: charge operations
  kStatPgpgout,           // event: uncharge operations
  kNrStatItems
};

class Rstat;

// One group's rstat state. Owned by the group; constructed with its parent's.
class RstatGroup {
 public:
  RstatGroup(Rstat* rstat, RstatGroup* parent);
  ~RstatGroup();
  RstatGroup(const RstatGroup&) = delete;
  RstatGroup& operator=(const RstatGroup&) = delete;

  // Hierarchical total of `item` as of the last flush that reached this
  // group, clamped at 0 like memcg_page_state(). Lock-free.
  int64_t total(StatItem item) const;
  // Pending update magnitude of this subtree (vmstats->stats_updates), in
  // pages/events: what FLUSH_MODE_THRESHOLD compares with 64 x nr_cpus.
  uint64_t pending_updates() const {
    return stats_updates_.load(std::memory_order_relaxed);
  }
  // steady-clock ns of the end of the last flush rooted at or above this
  // group; 0 = never.
  int64_t last_flush_ns() const {
    return last_flush_ns_.load(std::memory_order_relaxed);
  }
  RstatGroup* parent() const { return parent_; }

 private:
  friend class Rstat;

  // Per (group, CPU) block: css_rstat_cpu + memcg_vmstats_percpu.
  struct alignas(kCacheLineBytes) Cpu {
    // Updated tree links, guarded by the CPU's tree lock. updated_children
    // == owner means empty; updated_next == nullptr means "not on the tree"
    // (read racily, hence atomic); the root points to itself when on it.
    RstatGroup* updated_children;
    std::atomic<RstatGroup*> updated_next{nullptr};
    // Pending update magnitude on this CPU; moved to stats_updates_ in
    // batches. Written by updaters (relaxed), reset by flushes.
    std::atomic<int64_t> stats_updates{0};
    // Monotone per-CPU accumulators, written by updaters (relaxed adds).
    std::atomic<int64_t> state[kNrStatItems] = {};
    // Values seen at the last flush; guarded by the flush lock.
    int64_t prev[kNrStatItems] = {};
  };

  Cpu* GetCpu(int cpu) const {
    // Acquire pairs with the release CASes in GetOrCreateCpu(): a reader of
    // a pointer sees what it points to initialised.
    std::atomic<Cpu*>* pcpu = pcpu_.load(std::memory_order_acquire);
    return pcpu == nullptr ? nullptr
                           : pcpu[cpu].load(std::memory_order_acquire);
  }
  Cpu* GetOrCreateCpu(int cpu);

  Rstat* const rstat_;
  RstatGroup* const parent_;
  // nr_cpus pointers, allocated on the first update (null while idle).
  std::atomic<std::atomic<Cpu*>*> pcpu_{nullptr};
  // Aggregates (memcg_vmstats). Guarded by the flush lock; totals are
  // atomics so readers need no lock.
  std::atomic<int64_t> totals_[kNrStatItems] = {};
  int64_t local_[kNrStatItems] = {};    // flush lock
  int64_t pending_[kNrStatItems] = {};  // flush lock; from children
  RstatGroup* flush_next_ = nullptr;    // flush lock; scratch list link
  std::atomic<uint64_t> stats_updates_{0};
  std::atomic<int64_t> last_flush_ns_{0};
};

class Rstat {
 public:
  Rstat(int nr_cpus, FlushLockPolicy policy, EngineObserver* observer);
  Rstat(const Rstat&) = delete;
  Rstat& operator=(const Rstat&) = delete;

  // One update: adds deltas[i] to `group`'s per-CPU counters on `cpu` and
  // marks it updated (memcg_rstat_updated() + css_rstat_updated()).
  // `magnitude` is the threshold weight in pages (kernel: |val| in pages).
  void Update(RstatGroup* group, int cpu, const int64_t (&deltas)[kNrStatItems],
              uint64_t magnitude);

  // css_rstat_flush(): folds every CPU's pending deltas in `root`'s subtree
  // into totals, under the configured flush lock policy.
  void Flush(RstatGroup* root);

  // True if `group`'s pending updates exceed 64 x nr_cpus
  // (memcg_vmstats_needs_flush()).
  bool NeedsFlush(const RstatGroup* group) const;

  // Unlinks `group` from every CPU's tree and folds its deltas into its
  // parent. Call before destroying a group; no concurrent updates of it.
  void FlushForRemoval(RstatGroup* group) { Flush(group); }

  int nr_cpus() const { return nr_cpus_; }
  FlushLockPolicy policy() const { return policy_; }
  absl::Duration hold_max() const {
    return absl::Nanoseconds(hold_max_ns_.load(std::memory_order_relaxed));
  }
  uint64_t flushes() const { return flushes_.load(std::memory_order_relaxed); }
  uint64_t flush_cpus() const {
    return flush_cpus_.load(std::memory_order_relaxed);
  }

 private:
  friend class RstatGroup;

  struct alignas(kCacheLineBytes) CpuLock {
    Mutex mu;
  };

  void* AllocCpuBlock(int cpu) { return cpu_blocks_.Alloc(cpu); }
  void FreeCpuBlock(int cpu, void* block) { cpu_blocks_.Free(cpu, block); }

  void UpdatedLocked(RstatGroup* group, int cpu);
  RstatGroup* UpdatedListLocked(RstatGroup* root, int cpu);
  void FlushOneLocked(RstatGroup* group, int cpu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  int FlushCpuLocked(RstatGroup* root, int cpu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);

  // Flush lock with a waiter count, so a holder can yield on contention.
  // Times are CycleClock ticks.
  struct HoldStart {
    int64_t acquired = 0;
    int64_t wait_ticks = 0;
  };
  HoldStart LockFlush() ABSL_EXCLUSIVE_LOCK_FUNCTION(flush_mu_);
  void UnlockFlush(const HoldStart& start, int cpus, int groups)
      ABSL_UNLOCK_FUNCTION(flush_mu_);

  const int nr_cpus_;
  const FlushLockPolicy policy_;
  EngineObserver* const observer_;
  std::unique_ptr<CpuLock[]> cpu_locks_;
  PercpuArena cpu_blocks_;  // RstatGroup::Cpu blocks, per CPU

  Mutex flush_mu_;
  std::atomic<int> flush_waiters_{0};
  std::atomic<int64_t> hold_max_ns_{0};
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> flush_cpus_{0};
};

// steady_clock now, in nanoseconds.
int64_t MonotonicNowNs();

}  // namespace cgacct

#endif  // CGACCT_ENGINE_RSTAT_H_
