// MemoryController: the engine's memory controller proper, the part of
// mm/memcontrol.c the engine models: group online/offline
// (mem_cgroup_css_online()/offline(), and the release of a dying group),
// the charge path (try_charge_memcg()) and its OOM (memory.oom.group),
// uncharge (uncharge_batch()), memory.high/memory.max writes
// (memory_high_write()/memory_max_write()), memory.events
// (memcg_memory_event(), memory_localevents), memory.peak's per-file
// watermarks (memory_peak_write()/show()), memory.stat reads,
// memory.reclaim, and the engine-wide counters. Engine (engine/engine.h) forwards to it; its public
// docstrings hold the contract of each operation.
//
// Invariants:
//   - Lock order: the group tree lock (one reader slot, or all of them as
//     writer) -> limits_mu_ -> the rstat flush lock -> the rstat per-CPU tree
//     locks; stock locks are leaves (taken under any of the above).
//   - A group's own page counts move only on the page_counter's side of
//     them: Group::Charged() after the charge, Group::Uncharging() before
//     the uncharge (engine/group.h).
//   - A failed call changes nothing but counters and memory.events.
//   - Every Charge is counted once: charges_ok, charges_oom (RESOURCE
//     EXHAUSTED after an OOM: memory.events oom raised), charges_refused
//     (RESOURCE_EXHAUSTED without one: a charge of more than 8 pages, or a
//     drain across the network that could not finish) or charges_rejected
//     (bad argument, no such group); a charge deferred to a waiting thread
//     (RemoteDrainDeferral) is not counted: its caller runs it again, and
//     that run is.
//
// Thread safety: thread-safe; every public method may be called from any
// thread. The writer side of the tree lock is taken only by CreateGroup and
// DeleteGroup; everything else holds one reader slot (the operation's CPU).
#ifndef CGACCT_ENGINE_MEMCONTROL_H_
#define CGACCT_ENGINE_MEMCONTROL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/clock.h"
#include "engine/group.h"
#include "engine/group_handle.h"
#include "engine/group_tree.h"
#include "engine/mutex.h"
#include "engine/options.h"
#include "engine/reclaim.h"
#include "engine/remote_stock.h"
#include "engine/rstat.h"
#include "engine/stock.h"
#include "engine/types.h"
#include "engine/validate.h"

namespace cgacct {

class MemoryController {
 public:
  // `options` passed EngineOptions::Validate(); nr_cpus is resolved (> 0).
  MemoryController(int nr_cpus, const EngineOptions& options);
  MemoryController(const MemoryController&) = delete;
  MemoryController& operator=(const MemoryController&) = delete;

  // Group online/offline (Engine::CreateGroup/DeleteGroup).
  absl::StatusOr<GroupInfo> CreateGroup(absl::string_view path,
                                        const LimitsUpdate& limits);
  absl::StatusOr<uint64_t> DeleteGroup(absl::string_view path);

  // memory.min/low/high/max writes (Engine::SetLimits).
  absl::StatusOr<GroupInfo> SetLimits(absl::string_view path,
                                      const LimitsUpdate& limits);

  // Engine::Charge/Uncharge, by path or by handle.
  absl::StatusOr<ChargeResult> Charge(absl::string_view path, uint64_t nr_pages,
                                      PageKind kind, std::optional<int> cpu);
  absl::StatusOr<ChargeResult> Charge(GroupHandle group, uint64_t nr_pages,
                                      PageKind kind, std::optional<int> cpu,
                                      uint64_t batch_pages = 0);
  absl::StatusOr<UnchargeResult> Uncharge(absl::string_view path,
                                          uint64_t nr_pages, PageKind kind,
                                          std::optional<int> cpu);
  absl::StatusOr<UnchargeResult> Uncharge(GroupHandle group, uint64_t nr_pages,
                                          PageKind kind,
                                          std::optional<int> cpu);
  // Engine::UnchargeAtMost.
  absl::StatusOr<UnchargeResult> UnchargeAtMost(GroupHandle group,
                                                absl::string_view charged_path,
                                                uint64_t nr_pages,
                                                PageKind kind);

  // memory.reclaim (Engine::Reclaim).
  absl::StatusOr<uint64_t> Reclaim(absl::string_view path, uint64_t nr_pages);
  // memory.current/peak/stat/events (Engine::GetStats).
  absl::StatusOr<GroupStats> GetStats(absl::string_view path, FlushMode mode);
  // memory.peak through an open file (Engine::OpenPeakWatermark and the
  // rest, one per op): kOpen returns the new watermark's id, kReset the
  // usage it restarted at, kRead the peak, kClose 0.
  enum class PeakOp : uint8_t { kOpen, kReset, kRead, kClose };
  absl::StatusOr<uint64_t> PeakFile(absl::string_view path, PeakOp op,
                                    uint64_t watermark_id = 0);
  // memory.oom.group writes (Engine::SetOomGroup).
  absl::Status SetOomGroup(absl::string_view path, bool on);
  // memory.events and memory.events.local (Engine::GetEvents).
  absl::StatusOr<GroupEvents> GetEvents(GroupHandle group) const;
  // drain_all_stock() for the root, waiting (Engine::DrainAllStock).
  void DrainAllStock();
  // drain_all_stock(memcg) of `group`'s subtree, waiting
  // (Engine::DrainStock). NOT_FOUND: deleted or empty handle.
  absl::Status DrainStock(GroupHandle group, absl::string_view charged_path);
  // Engine::SetRemoteStockDrainer.
  void SetRemoteStockDrainer(RemoteStockDrainer* drainer) {
    remote_drainer_.store(drainer, std::memory_order_release);
  }
  // Flushes the whole tree's stats (the periodic flusher's work).
  void FlushAll();

  // Engine::GetInfo() without periodic_flush_interval (the flusher's).
  EngineInfo GetInfo() const;
  EngineCounters GetCounters() const;

  const GroupTree& tree() const { return tree_; }
  const Clock& clock() const { return clock_; }
  int nr_cpus() const { return nr_cpus_; }
  uint64_t page_size_bytes() const { return page_size_bytes_; }
  uint64_t page_counter_max() const { return page_counter_max_; }

 private:
  // Engine-wide counters kept per CPU slot; relaxed atomics, summed at read.
  struct alignas(kCacheLineBytes) CpuCounters {
    std::atomic<uint64_t> charges_ok{0};
    std::atomic<uint64_t> charges_oom{0};
    std::atomic<uint64_t> charges_refused{0};
    std::atomic<uint64_t> charges_rejected{0};
    std::atomic<uint64_t> uncharges{0};
    std::atomic<uint64_t> oom_events{0};
    // FILE charges: bumped (release) after the pages are on the group's
    // FILE count; FileChargeEpoch() sums them.
    std::atomic<uint64_t> file_charges{0};
  };

  // The checks every Charge/Uncharge runs before taking the tree lock: the
  // CPU slot (resolved), nr_pages and kind (engine/validate.h). A failed
  // Charge check counts as rejected. Inline, with the failure half out of
  // line (RejectArgs): valid arguments cost three compares.
  absl::StatusOr<int> CheckArgs(uint64_t nr_pages, PageKind kind,
                                std::optional<int> cpu, bool charge) {
    if (ABSL_PREDICT_TRUE(NrPagesValid(nr_pages, page_counter_max_) &&
                          PageKindValid(kind) && CpuValid(cpu, nr_cpus_)))
      return cpu.has_value() ? *cpu : CurrentCpu(nr_cpus_);
    return RejectArgs(nr_pages, kind, cpu, charge);
  }
  // CheckArgs' answer for arguments that fail: the first failing check's
  // INVALID_ARGUMENT, in the order cpu, nr_pages, kind.
  absl::Status RejectArgs(uint64_t nr_pages, PageKind kind,
                          std::optional<int> cpu, bool charge);

  // `batch_pages` (0: none): Engine::ChargeWithBatch's.
  absl::StatusOr<ChargeResult> ChargeLocked(const absl::StatusOr<Group*>& found,
                                            uint64_t nr_pages, PageKind kind,
                                            int cpu, uint64_t batch_pages = 0)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock());
  // Charges nr_pages, or, if the caller asked for a batch (`*charged` >
  // nr_pages on entry) and the counters take it at once, `*charged`;
  // *charged is what was charged on success. On failure *oom says whether
  // the charge ended in mem_cgroup_oom() (memory.events oom raised).
  absl::Status TryChargeMemcg(Group* g, uint64_t nr_pages, int cpu,
                              uint64_t* nr_pages_over_high, uint64_t* charged,
                              bool* oom)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock());
  // The group `group` names or, if it was deleted, the nearest live
  // ancestor of `charged_path` below the root (where DeleteGroup moved its
  // pages); NOT_FOUND if neither (an empty `charged_path`: no fallback).
  absl::StatusOr<Group*> FindOrHeir(GroupHandle group,
                                    absl::string_view charged_path)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock());
  // `at_most`: Group::Uncharging()'s (UnchargeAtMost).
  absl::StatusOr<UnchargeResult> UnchargeLocked(
      const absl::StatusOr<Group*>& found, uint64_t nr_pages, PageKind kind,
      int cpu, bool at_most = false) ABSL_SHARED_LOCKS_REQUIRED(tree_.lock());
  // UnchargeLocked for a group with dying children: from its own pages,
  // then from those still charged to its dying descendants.
  absl::StatusOr<UnchargeResult> UnchargeWithDying(Group* g, uint64_t nr_pages,
                                                   PageKind kind, int cpu,
                                                   bool at_most)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock());
  // Takes nr_pages of `g` (already off its own counts) off the
  // page_counters: directly (memcg_uncharge()), or through `cpu`'s stock
  // with uncharge_refills_stock if `g` is `online` (a dying group is never
  // stocked again). Inline: on every uncharge.
  void UnchargeCounters(Group* g, uint64_t nr_pages, int cpu, bool online);
  // Frees every dying group that holds no page and has no children.
  void FreeDyingGroups() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tree_.lock());

  void MemcgMemoryEvent(Group* g, MemoryEvent event, int cpu);
  // drain_all_stock() over the network: asks the remote drainer (if any)
  // for the pages clients hold at or below `over` and uncharges what they
  // give back, drains them from the stocks to the counters (with
  // uncharge_refills_stock) and tells the drainer (RemoteStockReturned).
  // *uncharged (may be null): the pages given back and uncharged. Returns
  // kDeferred, having asked nobody, if the drainer would wait and the
  // thread may not (RemoteDrainDeferral::Scope). The wait is for the
  // network, so the tree's reader slot `cpu` is given up for it and taken
  // back after: a CreateGroup or DeleteGroup may run meanwhile, and
  // kChargingGroupGone says `g` was deleted (neither `g` nor `over`, `g` or
  // an ancestor, may be used then: an ancestor of a live group cannot be
  // deleted); else kDone.
  enum class RemoteDrain { kDone, kDeferred, kChargingGroupGone };
  RemoteDrain DrainRemoteStock(Group* g, Group* over, uint64_t nr_pages,
                               int cpu, uint64_t* uncharged = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock());
  // The charge's status after DrainRemoteStock: OK (go on), the deferral
  // error, or NOT_FOUND for a deleted group (see the .cc).
  static absl::Status RemoteDrainStatus(RemoteDrain drain, const Group* over);
  void UpdateStats(Group* g, int cpu, PageKind kind, int64_t nr_pages);
  // *groups_without_file (may be null): Reclaimer::TryToFreeMemCgroupPages'.
  uint64_t ReclaimPages(Group* over, uint64_t nr_pages, int cpu,
                        uint64_t* groups_without_file = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock());
  // The FILE charges so far, all CPU slots (acquire): unchanged between two
  // reads, no FILE page was added to any group in between.
  uint64_t FileChargeEpoch() const;

  // Stores the present limits, clamped to PAGE_COUNTER_MAX. Caller
  // serialises setters: the writer side of the tree lock, or limits_mu_.
  void ApplyLimits(Group* g, const LimitsUpdate& limits);
  void MemoryHighWrite(Group* g, int cpu)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock())
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(limits_mu_);
  void MemoryMaxWrite(Group* g, int cpu)
      ABSL_SHARED_LOCKS_REQUIRED(tree_.lock())
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(limits_mu_);

  Limits LimitsOf(const Group& g) const;
  GroupInfo InfoOf(const Group& g) const;
  absl::Status Reject(absl::Status status, int cpu = 0);

  // Constant after construction.
  const int nr_cpus_;
  const uint64_t page_size_bytes_;
  const uint64_t page_counter_max_;
  const Clock& clock_;
  EngineObserver* const observer_;  // may be null
  const int64_t created_ns_ = clock_.NowNs();
  const bool uncharge_refills_stock_;  // EngineOptions'
  const bool memory_localevents_;      // EngineOptions'

  // rstat_ before tree_: the groups (destroyed with tree_) return their
  // rstat blocks to rstat_'s per-CPU pools.
  Rstat rstat_;
  GroupTree tree_;
  // Serialises limit setters (the kernel's per-file write serialisation).
  Mutex limits_mu_;
  MemcgStock stock_;
  std::unique_ptr<CpuCounters[]> counters_;  // per CPU slot
  Reclaimer reclaimer_;
  // The remote stock drainer (Engine::SetRemoteStockDrainer); null: none.
  // Read (acquire) only on the charge path's drain step.
  std::atomic<RemoteStockDrainer*> remote_drainer_{nullptr};
  // The next memory.peak watermark id (engine-unique, never reused).
  std::atomic<uint64_t> next_watermark_id_{1};
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_MEMCONTROL_H_
