// Engine: a userspace memory controller (cgroup v2 memcg) for a hierarchy of
// accounting groups.
//
// The engine keeps a tree of groups named by cgroup v2 paths ("/" is the
// root, segments [A-Za-z0-9._-]{1,255}, not "." or ".."). Each group has a
// hierarchical page_counter (memory.current/max/high/min/low), memory.events,
// and rstat statistics (memory.stat). Charges go through a per-CPU stock of
// pre-charged pages (batch 64, 7 group slots per CPU, a random slot evicted
// when full) in front of the counters, following try_charge_memcg() in
// mm/memcontrol.c; uncharges leave the counters at once, as uncharge_batch()
// does for user pages. By default every rule is the kernel's; the engine's
// additions (EngineOptions: stock_pool_buckets, stock_victim_sets,
// uncharge_refills_stock) are opt-in. FILE pages sit
// on their group's LRU and are reclaimed the kernel's way (engine/reclaim.h):
// on the charge path at memory.max and memory.high, on limit writes, and on
// Reclaim (memory.reclaim), honouring memory.min/memory.low.
//
// Thread safety: thread-safe. Every public method may be called concurrently
// from any thread. Operations name a per-CPU slot (`cpu`); when absent, the
// calling thread's sched_getcpu() (modulo nr_cpus) is used, or the override of
// a ScopedCpuOverride on the calling thread (engine/percpu.h).
//
// Where things live (each file states its invariants at the top):
//   engine/options.h      EngineOptions and their validation
//   engine/validate.h     the argument checks, exported for front ends
//   engine/group_path.h   the path grammar
//   engine/group.h        a group (struct mem_cgroup) and its page counts
//   engine/group_tree.h   the registry, GroupHandle table, tree lock
//   engine/memcontrol.h   charge, uncharge, limits, events (mm/memcontrol.c);
//                         its cgroup files in memcontrol_files.cc
//   engine/oom_group.h    a memory.oom.group kill in a charge's status
//   engine/memory_stat.h  memory.stat
//   engine/flusher.h      the periodic flusher
//   engine/page_counter.h, stock.h, rstat.h, reclaim.h  the kernel's
//                         page_counter, per-CPU stock, rstat and reclaim
//
// Errors (absl::Status codes, messages name the offending field):
//   INVALID_ARGUMENT    bad path, nr_pages == 0, cpu >= nr_cpus, root where
//                       the root is not allowed
//   NOT_FOUND           the group (or the parent, for CreateGroup) is missing;
//                       a memory.peak watermark id not open on the group
//   ALREADY_EXISTS      CreateGroup on an existing path, "/" included (the
//                       root always exists)
//   FAILED_PRECONDITION DeleteGroup with (online) children; Uncharge of more
//                       ANON pages than the group holds
//   RESOURCE_EXHAUSTED  Charge hit OOM; the message names the limiting group
//   UNAVAILABLE         Reclaim could not reclaim the requested amount
// A failed call changes nothing. The argument checks are exported
// (engine/validate.h: ValidateGroupPath, ValidateNrPages, ValidatePageKind,
// ResolveCpu) so that a front end rejects with the same rules and words.
#ifndef CGACCT_ENGINE_ENGINE_H_
#define CGACCT_ENGINE_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/group_handle.h"
#include "engine/oom_group.h"
#include "engine/options.h"
#include "engine/remote_stock.h"
#include "engine/types.h"
#include "engine/validate.h"

namespace cgacct {

class EngineImpl;

class Engine {
 public:
  static constexpr int kMaxCpus = EngineOptions::kMaxCpus;

  // Errors: INVALID_ARGUMENT for options out of range
  // (EngineOptions::Validate()).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Creates `path` under its existing parent with `limits` (absent = "max"
  // for max/high, 0 for min/low). Mirrors mem_cgroup_css_alloc()/online().
  absl::StatusOr<GroupInfo> CreateGroup(absl::string_view path,
                                        const LimitsUpdate& limits);

  // Removes a group without (online) children, like rmdir, mirroring
  // mem_cgroup_css_offline(): memory.min/low reset, then
  // drain_all_stock(group): every CPU whose stock holds pages of the group
  // is drained whole, every slot whoever owns it. The group leaves the
  // namespace at once (its path and handles are NOT_FOUND; the path can be
  // created again) but, like the kernel's dying memcg, stays offline in the
  // hierarchy with the pages still charged to it (returned): they count in
  // its ancestors' memory.current and memory.stat, reclaim still visits
  // it (scanning at least min(its FILE pages, 32) at every priority,
  // get_scan_count()'s floor for offline groups), and an Uncharge (or
  // UnchargeAtMost) of its nearest online ancestor takes them once that
  // ancestor's own pages do not cover it: the pages the parent answers for.
  // The dying group is freed (its stats folded into the parent) once it
  // holds no page, at the next CreateGroup or DeleteGroup. Its events stay
  // counted in its ancestors' hierarchical memory.events.
  absl::StatusOr<uint64_t> DeleteGroup(absl::string_view path);

  // Paths below `path` (children, or the whole subtree if recursive), sorted;
  // `path` itself excluded.
  absl::StatusOr<std::vector<std::string>> ListGroups(absl::string_view path,
                                                      bool recursive) const;
  // One page of that listing: the paths below `path` after
  // `listing.after`, within `listing.within`'s subtrees, at most
  // `listing.max_paths` of them, in byte order; `more` says whether any
  // remain (resume with `after` = the page's last path). A page costs
  // O((page + |within|) log n) under one reader slot of the tree lock,
  // whatever the size of the subtree or of the rest of the tree: it seeks
  // in a sorted index of the paths (a non-recursive page steps over each
  // child's subtree in one seek). Groups created or deleted between pages
  // show or not as they sort against the cursor; a page is consistent in
  // itself. The kernel has no counterpart: a cgroupfs directory is read
  // with getdents64(), whose offset cursor is per open directory. Errors:
  // INVALID_ARGUMENT (path), NOT_FOUND (no group at `path`). Thread-safe.
  absl::StatusOr<GroupPage> ListGroupsPage(absl::string_view path,
                                           const GroupListing& listing) const;

  // Changes the present fields of `limits` (pages). Setting min/low
  // propagates protected usage (page_counter_set_min/low()). Raising high or
  // max takes effect at once. Lowering high below usage drains the stocks
  // and reclaims until usage fits or 16 reclaims found nothing; never OOM
  // (memory_high_write()). Lowering max below usage is accepted as cgroup v2
  // does (memory_max_write()): drain, reclaim (16 attempts that find
  // nothing), then `oom` on the group if usage still exceeds max. High is
  // applied before max when both are present. Root: INVALID_ARGUMENT.
  absl::StatusOr<GroupInfo> SetLimits(absl::string_view path,
                                      const LimitsUpdate& limits);

  // Charges nr_pages (> 0) of `kind` to `path` through per-CPU slot `cpu`.
  // Mirrors try_charge_memcg(): stock, then the page_counter with a batch of
  // 64, then the exact amount, then `max` on the group whose limit failed,
  // reclaim from it, drain all stocks once, retry (16 times without
  // progress), then RESOURCE_EXHAUSTED naming the limiting group: for a
  // charge of at most 8 pages an OOM (`oom` is raised on the limiting
  // group, `oom_kill` on the charging group as the "killed" request); a
  // costlier one fails with `max` events only, as mem_cgroup_oom() returns
  // early above PAGE_ALLOC_COSTLY_ORDER. The root is never charged directly
  // (try_charge() returns 0 for it): `path` "/" is INVALID_ARGUMENT, checked
  // first. An OOM whose victim's group, or an ancestor up to the limiting
  // group, has memory.oom.group set (SetOomGroup) kills that whole group
  // (the highest such, mem_cgroup_get_oom_group()): `oom_group_kill` is
  // counted on it, EngineObserver::OnOomGroupKill names it and the status
  // carries its path (OomGroupKillPath(), engine/oom_group.h). A charge
  // that leaves a level over memory.high then runs
  // mem_cgroup_handle_over_high() (reclaim, `high` events) and returns the
  // throttle the kernel would sleep (0, or over 10 ms and at most 2 s).
  // With a RemoteStockDrainer installed, inside a RemoteDrainDeferral::Scope
  // (engine/remote_stock.h): UNAVAILABLE marked IsRemoteDrainDeferred(),
  // nothing charged, when the charge reached the remote drain and the
  // drainer would wait; run it again outside a Scope.
  absl::StatusOr<ChargeResult> Charge(absl::string_view path, uint64_t nr_pages,
                                      PageKind kind,
                                      std::optional<int> cpu = std::nullopt);

  // Uncharges nr_pages (> 0) of `kind` from `path`: the group's own pages,
  // then those still charged to its dying descendants (DeleteGroup). The
  // pages leave the page_counters at once (uncharge_batch() ->
  // memcg_uncharge(), the kernel's path for user pages); with
  // EngineOptions::uncharge_refills_stock they go back through the per-CPU
  // stock instead (refill_stock(), the kernel's path for socket and kernel
  // memory). ANON: more than the group holds is FAILED_PRECONDITION. FILE:
  // uncharges what is left of nr_pages (reclaim may have taken some) and
  // returns that number. The root holds no pages of its own: "/" is
  // INVALID_ARGUMENT.
  absl::StatusOr<UnchargeResult> Uncharge(
      absl::string_view path, uint64_t nr_pages, PageKind kind,
      std::optional<int> cpu = std::nullopt);

  // memory.reclaim: proactively reclaims nr_pages from `path`'s subtree,
  // ignoring the group's own memory.min/low (its descendants' apply); counted
  // as pgscan/pgsteal_proactive. Returns the pages reclaimed (at least
  // nr_pages; reclaim works in chunks of 32). Mirrors memory_reclaim(): in
  // batches of a quarter of what remains, 16 retries without progress.
  // Errors: NOT_FOUND; INVALID_ARGUMENT bad path; UNAVAILABLE when the
  // target was not met (the kernel's EAGAIN; what was reclaimed stays so).
  absl::StatusOr<uint64_t> Reclaim(absl::string_view path, uint64_t nr_pages);
  // Resolves `path` to a handle for the Charge/Uncharge overloads below,
  // which skip the per-call path validation and hash lookup. The handle names
  // this group instance: after DeleteGroup every use of it is NOT_FOUND, even
  // if the path is created again (resolve again then). Thread-safe.
  // Errors: INVALID_ARGUMENT bad path; NOT_FOUND no such group.
  absl::StatusOr<GroupHandle> ResolveGroup(absl::string_view path) const;

  // The ids (GroupInfo::id) of the groups DeleteGroup took offline that
  // pages are still charged to (the kernel's dying memcgs; one that holds
  // none any more, freed at the next CreateGroup or DeleteGroup, is not
  // listed), oldest first. O(dying groups); thread-safe.
  std::vector<uint64_t> DyingGroupIds() const;

  // Charge(path, ...) on a resolved group: same semantics, results and
  // errors, except NOT_FOUND means the handle's group was deleted (or the
  // handle is empty). Thread-safe; the fast path (a charge the CPU's stock
  // serves) takes the calling CPU's tree reader slot, the CPU's stock lock,
  // and, only when the group is not yet on that CPU's rstat updated tree
  // (its first update on the CPU since a flush took it off), that CPU's
  // rstat tree lock (css_rstat_cpu_lock; engine/rstat.h Rstat::Update).
  absl::StatusOr<ChargeResult> Charge(GroupHandle group, uint64_t nr_pages,
                                      PageKind kind,
                                      std::optional<int> cpu = std::nullopt);

  // Charge(group, nr_pages, ...) for a caller that keeps a stock of its own
  // (a client library, docs/DESIGN.md §4.15): charges batch_pages
  // (>= nr_pages) if the page counters take them at once, else exactly
  // nr_pages through the whole path (reclaim, drains, OOM), as
  // try_charge_memcg() charges max(MEMCG_CHARGE_BATCH, nr_pages) and drops
  // to nr_pages before any reclaim. The batch is the caller's: none of it
  // goes into the engine's per-CPU stock (unless batch_pages is below the
  // engine's own batch, whose surplus does, as in Charge). Returns the
  // pages charged (ChargeResult.nr_pages: batch_pages or nr_pages).
  // Errors: Charge's; INVALID_ARGUMENT batch_pages < nr_pages, or
  // batch_pages out of the range Charge allows for nr_pages.
  absl::StatusOr<ChargeResult> ChargeWithBatch(
      GroupHandle group, uint64_t nr_pages, uint64_t batch_pages,
      PageKind kind, std::optional<int> cpu = std::nullopt);

  // Uncharge(path, ...) on a resolved group; NOT_FOUND as for Charge above.
  absl::StatusOr<UnchargeResult> Uncharge(
      GroupHandle group, uint64_t nr_pages, PageKind kind,
      std::optional<int> cpu = std::nullopt);
  // Returns pages a holder recorded against `group` (charged at
  // `charged_path`): uncharges at most nr_pages (> 0) pages of `kind`, ANON
  // too taking what the group still holds of them instead of
  // FAILED_PRECONDITION (some may have been uncharged behind the holder's
  // back), and returns that number. If `group` was deleted since, from the
  // nearest live ancestor of `charged_path`, which answers for the pages
  // DeleteGroup left on the dying group (found under the same tree reader
  // slot as the uncharge, so it cannot change meanwhile); the root is the
  // heir of a top-level group, and `group` may be the root itself (a
  // session's holding reparented there): it takes only what its dying
  // children hold (it has no page of its own; Uncharge refuses the root).
  // For a session's close or expiry. The serving thread's CPU slot.
  // Thread-safe. Errors: INVALID_ARGUMENT as Uncharge for nr_pages or kind;
  // NOT_FOUND for an empty handle with no path.
  absl::StatusOr<UnchargeResult> UnchargeAtMost(GroupHandle group,
                                                absl::string_view charged_path,
                                                uint64_t nr_pages,
                                                PageKind kind);

  // memory.current/peak/stat/events of `path`, flushed per `mode`.
  // memory_peak_pages is the group-wide watermark (memory.peak read through
  // a file that was never written), whatever watermarks are open.
  absl::StatusOr<GroupStats> GetStats(absl::string_view path,
                                      FlushMode mode = FlushMode::kExact);

  // memory.peak per open file (Linux 6.12+): a writer of memory.peak gets a
  // watermark of its own from then on; the group-wide peak is unchanged.
  //
  // OpenPeakWatermark: open memory.peak and write to it
  // (memory_peak_write()): the group's local watermark is set to its usage,
  // every watermark already open on the group is raised to that usage if
  // below it (so it keeps the peak it had), and a new watermark starts at
  // usage. Returns its id (engine-unique, never reused), for the calls
  // below. ResetPeakWatermark: write again through the same file: the same
  // as opening, for an open watermark; returns the usage it restarted at.
  // ReadPeakWatermark: read through that file (memory_peak_show()):
  // max(the watermark's value, the local watermark), pages: the highest
  // usage since its last write. ClosePeakWatermark: close the file
  // (peak_release()). A watermark belongs to the group instance: deleting
  // the group closes it (NOT_FOUND afterwards, even if the path is created
  // again). Thread-safe; each takes the calling CPU's tree reader slot and
  // the group's peaks lock (memcg->peaks_lock). Errors: INVALID_ARGUMENT
  // bad path; NOT_FOUND no such group, or `watermark_id` not open on it.
  absl::StatusOr<uint64_t> OpenPeakWatermark(absl::string_view path);
  absl::StatusOr<uint64_t> ResetPeakWatermark(absl::string_view path,
                                              uint64_t watermark_id);
  absl::StatusOr<uint64_t> ReadPeakWatermark(absl::string_view path,
                                             uint64_t watermark_id) const;
  absl::Status ClosePeakWatermark(absl::string_view path,
                                  uint64_t watermark_id);

  // memory.oom.group write (memory_oom_group_write()): with `on`, an OOM of
  // a charge at or below `path` whose limiting group is `path` or above
  // kills the whole group (see Charge). GetStats().oom_group reads it back.
  // Thread-safe; lock-free on the group. Errors: INVALID_ARGUMENT bad path,
  // or "/" (the root has no memory.oom.group); NOT_FOUND no such group.
  absl::Status SetOomGroup(absl::string_view path, bool on);

  // memory.events and memory.events.local of a resolved group, read without
  // a flush (events are exact counters, not rstat). Thread-safe; takes the
  // calling CPU's tree reader slot. Errors: NOT_FOUND (deleted, or empty
  // handle). Changes are announced by EngineObserver::OnMemoryEvents.
  absl::StatusOr<GroupEvents> GetEvents(GroupHandle group) const;

  // Drains every CPU's stock (drain_all_stock() for the root), synchronously.
  void DrainAllStock();

  // drain_all_stock(memcg) for `group`: every CPU's stock holding pages of
  // `group` or a descendant is drained whole (every slot, and the victim
  // table), and the pool's buckets of that subtree, back to the
  // page_counters, synchronously (waits for a drain already running), so
  // memory.current of `group` and its ancestors counts no stocked page of
  // that subtree afterwards. The kernel drains a memcg's stock this way when
  // it goes offline (mem_cgroup_css_offline() -> drain_all_stock()); cgacct's sessions call it after a close or expiry
  // returned their pages (docs/DESIGN.md §4.14). With `charged_path`, a
  // deleted `group` is replaced by the nearest live ancestor of that path
  // below the root, as in UnchargeAtMost. Thread-safe; takes the calling
  // CPU's tree reader slot. Errors: NOT_FOUND (deleted, or empty handle, and
  // no such ancestor; nothing drained).
  absl::Status DrainStock(GroupHandle group,
                          absl::string_view charged_path = {});

  // Installs (null: removes) the drainer a charge asks, once, for the pages
  // remote clients hold at or below the group whose memory.max it hit, after
  // reclaim and the local stock drain left no room (engine/remote_stock.h).
  // Without one the charge path pays one atomic load, and only on that
  // failing step. `drainer` must outlive every charge that may call it:
  // remove it (and let running charges end) before destroying it.
  // Thread-safe.
  void SetRemoteStockDrainer(RemoteStockDrainer* drainer);

  // Flushes the whole tree if periodic_flush_interval has passed on the
  // engine's clock since the last periodic flush (flush_memcg_stats_dwork()).
  // The engine's flusher thread calls it; public for tests (with a
  // ManualClock) and embedders. Returns whether it flushed.
  bool MaybePeriodicFlush();

  EngineInfo GetInfo() const;
  EngineCounters GetCounters() const;

  int nr_cpus() const;
  uint64_t page_size_bytes() const;
  // PAGE_COUNTER_MAX for this page size: LONG_MAX / page_size.
  uint64_t page_counter_max() const;

 private:
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_ENGINE_H_
