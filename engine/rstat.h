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
// Flush lock policies (docs/DESIGN.md §9). The lock is global, and a hold is
// what the kernel's irqs-off tracer sees (the kernel takes it with IRQs
// off), so the policies trade the longest hold against acquisitions:
//   kPerCpu    take and drop the flush lock around every CPU (Linux 6.15+,
//              "cgroup/rstat: avoid disabling irqs for O(num_cpu)"): the
//              shortest holds, but nr_cpus acquisitions per flush, each a
//              cache-line transfer and, when contended, a handoff;
//   kWhole     take it once around the CPU loop (<= 6.14; "cgroup/rstat:
//              move css_rstat_lock outside cpu loop"): one acquisition per
//              flush, but holds that grow with nr_cpus and with the updated
//              lists. Whether it drops the lock between CPUs for a waiter
//              depends on the preempt model (below);
//   kBatch     drop and retake every N CPUs (the compromise proposed in the
//              2025 review): holds bounded by N CPUs' work;
//   kAdaptive  ours: visit a CPU without the lock at all when the flush
//              root is not on that CPU's updated tree and no flush of that
//              CPU is in progress (a per-CPU sequence count proves it), so
//              concurrent readers of the same subtree do not queue on the
//              lock for CPUs that have nothing to fold; take the lock around
//              each CPU that has updates, per_cpu's hold (the default,
//              --flush_hold_budget=0), or, with a budget, hold across CPUs
//              while the hold stays under it and nobody waits, then drop and
//              retake (holds bounded by the budget plus one CPU's work, like
//              kBatch but in time). Acquisitions: one per CPU with updates,
//              or fewer with a budget; none for a clean subtree.
//              Readers still see everything acknowledged before the flush:
//              see "Skipping clean CPUs" in rstat.cc.
//
// Preempt models (FlushLockConfig::preempt_model). In the kernel <= 6.14,
// cgroup_rstat_flush_locked() drops the lock inside its CPU loop only if
// need_resched() or spin_needbreak() is true. Without CONFIG_PREEMPTION
// spin_needbreak() is 0, and with IRQs off the local tick cannot set
// need_resched(), so the lock is held across every CPU: seed 000's 45 ms on
// a 400-CPU server kernel. FlushPreemptModel::kNone models that (kWhole never
// drops the lock mid-loop; a waiter waits for the whole walk);
// FlushPreemptModel::kFull models CONFIG_PREEMPT (kWhole drops the lock
// between CPUs when another flusher waits, and the holder yields the CPU).
// need_resched() is not modelled under either: a userspace holder has no
// scheduler flag to poll. kPerCpu, kBatch and kAdaptive are the same under
// both models (kAdaptive always drops for a waiter, as designed).
//
// Holds and preemption. The kernel holds the flush lock with IRQs off, so a
// hold is time the holder ran. A userspace holder can be preempted while it
// holds the lock, and on a machine with more runnable threads than cores
// that adds whole scheduler time slices (milliseconds) to any hold,
// whatever the policy; so does blocking on a per-CPU tree lock whose
// holder was preempted. Each hold is timed by the wall clock (the histogram
// the observer gets, and hold_wall_max()), and each flush that takes the
// lock also counts its thread's context switches (getrusage, two calls a
// flush, none for a flush that takes no lock): the longest hold of a flush
// whose thread never left its CPU is the irqs-off tracer's view (hold_max(),
// LongestHolds()). Time the hypervisor steals from the VM still counts, as
// it would for the kernel's tracer.
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
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/clock.h"
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
  kNrStatItems
};

class RstatGroup;

// How the flush lock is taken (engine/types.h FlushLockPolicy).
struct FlushLockConfig {
  FlushLockPolicy policy = FlushLockPolicy::kPerCpu;
  int batch_cpus = 8;                                   // kBatch
  // kAdaptive: the longest planned hold; zero (the default) drops the lock
  // after every CPU with updates, per_cpu's hold.
  absl::Duration hold_budget = absl::ZeroDuration();
  // kWhole: whether a waiter makes the holder drop the lock mid-loop.
  FlushPreemptModel preempt_model = FlushPreemptModel::kNone;
};

// "per_cpu", "whole", "adaptive" or "batch:N".
std::string FlushLockConfigName(const FlushLockConfig& config);

class Rstat {
 public:
  static constexpr int kNrLongestHolds = 16;

  // `observer` may be null; `clock` must outlive the Rstat, and is where it
  // reads every time (hold timing, flush durations, last_flush_ns()).
  Rstat(int nr_cpus, const FlushLockConfig& config, EngineObserver* observer,
        const Clock& clock = Clock::Real());
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
  FlushLockPolicy policy() const { return config_.policy; }
  const FlushLockConfig& config() const { return config_; }
  // The longest holds seen, longest first.
  std::vector<FlushHoldRecord> LongestHolds() const;
  // The longest hold of a flush whose thread was not preempted (the
  // irqs-off tracer's view; see "Holds and preemption").
  absl::Duration hold_max() const {
    return absl::Nanoseconds(hold_max_ns_.load(std::memory_order_relaxed));
  }
  // The longest hold by the wall clock, preemption included: what waiters
  // saw.
  absl::Duration hold_wall_max() const {
    return absl::Nanoseconds(hold_wall_max_ns_.load(std::memory_order_relaxed));
  }
  // The most work any one hold did: CPUs walked, and (group, CPU) entries
  // folded, each the maximum over all holds (possibly of different holds),
  // preempted or not. Work is free of preemption and hypervisor noise, so
  // these compare policies where the longest hold in time cannot
  // ("Holds and preemption"). Counts (CPUs, entries), 0 before the first
  // hold; updated once per flush after its last hold, read relaxed from
  // any thread.
  int hold_max_cpus_walked() const {
    return static_cast<int>(
        hold_max_cpus_.load(std::memory_order_relaxed));
  }
  int hold_max_groups_folded() const {
    return static_cast<int>(
        hold_max_groups_.load(std::memory_order_relaxed));
  }
  // Flushes that took the lock and whose thread was preempted meanwhile.
  uint64_t preempted_flushes() const {
    return preempted_flushes_.load(std::memory_order_relaxed);
  }
  uint64_t flushes() const { return flushes_.load(std::memory_order_relaxed); }
  // Threads blocked acquiring the flush lock right now (what kWhole under
  // FlushPreemptModel::kFull polls as spin_needbreak()). Diagnostics and
  // tests; a racy snapshot.
  int flush_waiters() const {
    return flush_waiters_.load(std::memory_order_relaxed);
  }
  // CPUs walked by all flushes so far: per flush, the CPUs whose updated
  // tree it locked and unlinked (FlushCpuLocked()), with or without anything
  // on it. kPerCpu, kWhole and kBatch walk all nr_cpus; kAdaptive does not
  // count the clean CPUs it passes without the lock (CpuIsClean()).
  uint64_t flush_cpus() const {
    return flush_cpus_.load(std::memory_order_relaxed);
  }

 private:
  friend class RstatGroup;

  struct alignas(kCacheLineBytes) CpuLock {
    Mutex mu;  // the CPU's updated tree (css_rstat_cpu_lock)
    // Odd while a flusher unlinks and folds this CPU's tree, even otherwise.
    // Written under the flush lock; read lock-free by kAdaptive's skip test.
    std::atomic<uint32_t> flush_seq{0};
  };

  void* AllocCpuBlock(int cpu) { return cpu_blocks_.Alloc(cpu); }
  void FreeCpuBlock(int cpu, void* block) { cpu_blocks_.Free(cpu, block); }

  // The CPU's updated tree: link `group` and its missing ancestors, and
  // pop `root`'s updated subtree (children before parents).
  void UpdatedLocked(RstatGroup* group, int cpu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cpu_locks_[cpu].mu);
  RstatGroup* UpdatedListLocked(RstatGroup* root, int cpu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_, cpu_locks_[cpu].mu);
  void FlushOneLocked(RstatGroup* group, int cpu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  int FlushCpuLocked(RstatGroup* root, int cpu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  // kAdaptive: true if `cpu` provably has nothing for `root` and no flush of
  // it is in progress, so it can be passed without the lock.
  bool CpuIsClean(const RstatGroup* root, int cpu) const;
  // The first CPU from `cpu` on that the flush must visit: `cpu` itself,
  // except that kAdaptive passes clean CPUs; nr_cpus_ when none is left.
  int NextCpuToFlush(const RstatGroup* root, int cpu) const;
  void RecordHold(const RstatGroup* root, int64_t hold_ns, int cpus,
                  int groups);

  // The longest hold of one flush.
  struct LongestHold {
    int64_t hold_ns = 0;
    int cpus = 0;
    int groups = 0;
    // The most work of any hold of the flush (the engine-wide maxima are
    // stored once per flush, not per hold).
    int most_cpus = 0;
    int most_groups = 0;
  };

  // One hold of the flush lock, as a scoped object the thread-safety
  // analysis follows: the constructor takes flush_mu_ (counting itself a
  // waiter while it blocks, so a holder can yield on contention), the
  // destructor drops it, times the hold (wall clock), reports it to the
  // observer and keeps it in `*longest` if it is the flush's longest.
  class ABSL_SCOPED_LOCKABLE FlushHold {
   public:
    FlushHold(Rstat* rstat, LongestHold* longest)
        ABSL_EXCLUSIVE_LOCK_FUNCTION(rstat->flush_mu_);
    ~FlushHold() ABSL_UNLOCK_FUNCTION();
    FlushHold(const FlushHold&) = delete;
    FlushHold& operator=(const FlushHold&) = delete;

    // Counts one CPU walked and the groups folded on it.
    void AddCpu(int groups) {
      ++cpus_;
      groups_ += groups;
    }
    int cpus() const { return cpus_; }
    // Clock::NowCycles() ticks since the lock was taken.
    int64_t held_ticks() const;

   private:
    Rstat* const rstat_;
    LongestHold* const longest_;
    int64_t acquired_ = 0;    // Clock::NowCycles() ticks
    int64_t wait_ticks_ = 0;  // blocked before acquiring
    int cpus_ = 0;
    int groups_ = 0;
  };
  // Whether `hold` ends before the next CPU, per policy; sets *yield when
  // another thread waits for the lock (then the holder also yields the CPU).
  bool ShouldDropFlushLock(const FlushHold& hold, bool* yield) const;

  const int nr_cpus_;
  const FlushLockConfig config_;
  const std::string config_name_;
  const int64_t hold_budget_ticks_;
  EngineObserver* const observer_;
  const Clock& clock_;
  std::unique_ptr<CpuLock[]> cpu_locks_;
  PercpuArena cpu_blocks_;  // RstatGroup::Cpu blocks, per CPU

  // The flush lock (css_rstat_lock): guards every group's aggregates
  // (RstatGroup::local_, pending_, flush_next_, and Cpu::prev).
  Mutex flush_mu_;
  std::atomic<int> flush_waiters_{0};
  std::atomic<int64_t> hold_max_ns_{0};
  std::atomic<int64_t> hold_wall_max_ns_{0};
  std::atomic<int64_t> hold_max_cpus_{0};    // hold_max_cpus_walked()
  std::atomic<int64_t> hold_max_groups_{0};  // hold_max_groups_folded()
  std::atomic<uint64_t> preempted_flushes_{0};
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> flush_cpus_{0};

  // The kNrLongestHolds longest holds. hold_record_floor_ns_ is the shortest
  // of them once the set is full, so shorter holds skip the mutex.
  std::atomic<int64_t> hold_record_floor_ns_{0};
  mutable Mutex holds_mu_;
  std::vector<FlushHoldRecord> longest_holds_ ABSL_GUARDED_BY(holds_mu_);
};

// One group's rstat state. Owned by the group; constructed with its parent's.
class RstatGroup {
 public:
  // `path` names the group in hold records; it must outlive the RstatGroup.
  RstatGroup(Rstat* rstat, RstatGroup* parent, absl::string_view path = {});
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
  // Engine-clock ns of the end of the last flush rooted at this group;
  // 0 = never.
  int64_t last_flush_ns() const {
    return last_flush_ns_.load(std::memory_order_relaxed);
  }
  RstatGroup* parent() const { return parent_; }
  absl::string_view path() const { return path_; }

 private:
  friend class Rstat;

  // Per (group, CPU) block: css_rstat_cpu + memcg_vmstats_percpu. Its
  // fields cannot carry ABSL_GUARDED_BY (a block knows neither its Rstat nor
  // its CPU); what guards each is stated below, and only functions that
  // require that lock (the ...Locked ones of Rstat) touch the plain ones.
  struct alignas(kCacheLineBytes) Cpu {
    // Updated tree links, guarded by the CPU's tree lock (Rstat::cpu_locks_
    // [cpu].mu). updated_children == owner means empty; updated_next ==
    // nullptr means "not on the tree" (read racily, hence atomic); the root
    // points to itself when on it.
    RstatGroup* updated_children;
    std::atomic<RstatGroup*> updated_next{nullptr};
    // Pending update magnitude on this CPU; moved to stats_updates_ in
    // batches. Written by updaters (relaxed), reset by flushes.
    std::atomic<int64_t> stats_updates{0};
    // Monotone per-CPU accumulators, written by updaters (relaxed adds).
    std::atomic<int64_t> state[kNrStatItems] = {};
    // Values seen at the last flush; guarded by the flush lock (read and
    // written only by Rstat::FlushOneLocked()).
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

  // `rstat` (this group's) holds its flush lock, so this group's flush-side
  // state is guarded: tells the analysis that rstat->flush_mu_ is
  // rstat_->flush_mu_ (lockdep_assert_held() in kernel terms; assert() checks
  // the identity in debug builds).
  void AssertFlushLocked(const Rstat* rstat) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(rstat->flush_mu_)
          ABSL_ASSERT_EXCLUSIVE_LOCK(rstat_->flush_mu_);

  Rstat* const rstat_;
  RstatGroup* const parent_;
  const absl::string_view path_;
  // nr_cpus pointers, allocated on the first update (null while idle).
  std::atomic<std::atomic<Cpu*>*> pcpu_{nullptr};
  // Aggregates (memcg_vmstats), guarded by the flush lock. Totals are
  // atomics written under it, so readers need no lock.
  std::atomic<int64_t> totals_[kNrStatItems] = {};
  int64_t local_[kNrStatItems] ABSL_GUARDED_BY(rstat_->flush_mu_) = {};
  // From children, folded into this group by its next flush.
  int64_t pending_[kNrStatItems] ABSL_GUARDED_BY(rstat_->flush_mu_) = {};
  // Scratch link of the flush list UpdatedListLocked() builds.
  RstatGroup* flush_next_ ABSL_GUARDED_BY(rstat_->flush_mu_) = nullptr;
  std::atomic<uint64_t> stats_updates_{0};
  std::atomic<int64_t> last_flush_ns_{0};
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_RSTAT_H_
