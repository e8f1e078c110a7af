#include "engine/memcontrol.h"

#include <algorithm>
#include <climits>
#include <string>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "engine/oom_group.h"
#include "engine/percpu.h"
#include "engine/validate.h"

namespace cgacct {
namespace {

void Bump(std::atomic<uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

// What a charge answers after a network drain: OK to go on;
// RemoteDrainDeferredError (a thread that may not wait: its caller runs the
// charge again where it may; nothing charged, no OOM); NOT_FOUND when its
// group was deleted while it waited (the tree's slot was given up for the
// wait). `over` is used only when the drain did not wait.
absl::Status MemoryController::RemoteDrainStatus(RemoteDrain drain,
                                                 const Group* over) {
  switch (drain) {
    case RemoteDrain::kDone:
      return absl::OkStatus();
    case RemoteDrain::kDeferred:
      return RemoteDrainDeferredError(ShortPath(over->path()));
    case RemoteDrain::kChargingGroupGone:
      break;
  }
  return absl::NotFoundError(
      "path: the group was deleted while this charge waited for clients to "
      "return stock; nothing was charged");
}

namespace {

// mem_cgroup_from_counter(): the group whose memory counter is `counter`,
// found among `g` and its ancestors (page_counter_try_charge() fails at one
// of them). Only the charge path's failure branch asks.
Group* GroupOfCounter(Group* g, const PageCounter* counter) {
  Group* pos = g;
  while (&pos->memory() != counter) pos = pos->parent();
  return pos;
}

// The level page_counter_try_charge() of nr_pages at `g` would fail at now
// (the first, from `g` up, without room), or null.
Group* LimitingGroup(Group* g, uint64_t nr_pages) {
  for (Group* pos = g; pos != nullptr; pos = pos->parent()) {
    const PageCounter& c = pos->memory();
    if (c.Read() + nr_pages > c.max()) return pos;
  }
  return nullptr;
}

// mem_cgroup_get_oom_group(victim, oom_domain): from the victim's group up
// to the OOM domain (the group whose limit failed), the highest with
// memory.oom.group set; null if none (or the victim is the root's, which
// never happens: the root is never charged).
Group* GetOomGroup(Group* victim, Group* oom_domain) {
  Group* oom_group = nullptr;
  for (Group* pos = victim; pos != nullptr && !pos->is_root();
       pos = pos->parent()) {
    if (pos->oom_group()) oom_group = pos;
    if (pos == oom_domain) break;
  }
  return oom_group;
}

}  // namespace

MemoryController::MemoryController(int nr_cpus, const EngineOptions& options)
    : nr_cpus_(nr_cpus),
      page_size_bytes_(options.page_size_bytes),
      page_counter_max_(static_cast<uint64_t>(LONG_MAX) /
                        options.page_size_bytes),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()),
      observer_(options.observer),
      uncharge_refills_stock_(options.uncharge_refills_stock),
      memory_localevents_(options.memory_localevents),
      rstat_(
          nr_cpus,
          FlushLockConfig{options.flush_lock_policy, options.flush_batch_cpus,
                          options.flush_hold_budget,
                          options.flush_preempt_model},
          options.observer, clock_),
      tree_(nr_cpus, &rstat_, page_counter_max_),
      stock_(nr_cpus, options.charge_batch_pages, options.stock_pool_buckets,
             options.stock_victim_sets, options.stock_eviction_seed),
      counters_(new CpuCounters[nr_cpus]),
      reclaimer_(&rstat_, options.observer, clock_,
                 options.memory_recursiveprot, options.memcg_full_walk,
                 [this](Group* g, MemoryEvent event, int cpu) {
                   MemcgMemoryEvent(g, event, cpu);
                 }) {}

// --- helpers ---------------------------------------------------------------

absl::Status MemoryController::Reject(absl::Status status, int cpu) {
  Bump(counters_[cpu].charges_rejected);
  return status;
}

absl::Status MemoryController::RejectArgs(uint64_t nr_pages, PageKind kind,
                                          std::optional<int> cpu_arg,
                                          bool charge) {
  absl::StatusOr<int> cpu = ResolveCpu(cpu_arg, nr_cpus_);
  if (!cpu.ok()) return charge ? Reject(cpu.status()) : cpu.status();
  absl::Status s = ValidateNrPages(nr_pages, page_counter_max_);
  if (s.ok()) s = ValidatePageKind(kind);
  if (charge) return Reject(s, *cpu);
  return s;
}

Limits MemoryController::LimitsOf(const Group& g) const {
  Limits l;
  l.max_pages = g.memory().max();
  l.high_pages = g.memory().high();
  l.min_pages = g.memory().min();
  l.low_pages = g.memory().low();
  return l;
}

GroupInfo MemoryController::InfoOf(const Group& g) const {
  return GroupInfo{g.path(), g.id(), LimitsOf(g)};
}

// memcg_memory_event(): local count on `g`, hierarchical counts on `g` and
// its ancestors below the root (on `g` alone under memory_localevents).
void MemoryController::MemcgMemoryEvent(Group* g, MemoryEvent event, int cpu) {
  g->CountEvent(event, memory_localevents_);
  // cgroup_file_notify() on memory.events(.local) of g and of the ancestors
  // whose memory.events moved.
  if (observer_ != nullptr) {
    for (Group* pos = g; pos != nullptr && !pos->is_root(); pos = pos->parent()) {
      observer_->OnMemoryEvents(pos->id());
      if (memory_localevents_) break;
    }
  }
  if (event == MemoryEvent::kOom) Bump(counters_[cpu].oom_events);
}

// Direct reclaim from `over` (try_to_free_mem_cgroup_pages(),
// engine/reclaim.h). Returns pages reclaimed.
uint64_t MemoryController::ReclaimPages(Group* over, uint64_t nr_pages,
                                        int cpu,
                                        uint64_t* groups_without_file) {
  return reclaimer_.TryToFreeMemCgroupPages(
      over, nr_pages, ReclaimMode::kDirect, cpu, groups_without_file);
}

uint64_t MemoryController::FileChargeEpoch() const {
  uint64_t sum = 0;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu)
    sum += counters_[cpu].file_charges.load(std::memory_order_acquire);
  return sum;
}

// mod_memcg_state() of the charged kind. cgroup v2 counts no pgpgin/pgpgout
// (v1 items), so a charge or uncharge moves one state item.
void MemoryController::UpdateStats(Group* g, int cpu, PageKind kind,
                                   int64_t nr_pages) {
  int64_t deltas[kNrStatItems] = {};
  deltas[kind == PageKind::kAnon ? kStatAnon : kStatFile] = nr_pages;
  rstat_.Update(&g->rstat_group(), cpu, deltas,
                static_cast<uint64_t>(nr_pages < 0 ? -nr_pages : nr_pages) + 1);
}

// --- group online/offline --------------------------------------------------

absl::StatusOr<GroupInfo> MemoryController::CreateGroup(
    absl::string_view path, const LimitsUpdate& limits) {
  if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
  if (path == "/")
    return absl::AlreadyExistsError("path \"/\": the root always exists");
  PercpuWriterLock l(tree_.lock());
  FreeDyingGroups();
  absl::StatusOr<Group*> g = tree_.Add(path);
  if (!g.ok()) return g.status();
  ApplyLimits(*g, limits);
  return InfoOf(**g);
}

absl::StatusOr<uint64_t> MemoryController::DeleteGroup(absl::string_view path) {
  if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
  if (path == "/")
    return absl::InvalidArgumentError("path \"/\": the root cannot be deleted");
  PercpuWriterLock l(tree_.lock());
  absl::StatusOr<Group*> found = tree_.Find(path);
  if (ABSL_PREDICT_FALSE(!found.ok())) return found.status();
  Group* g = *found;
  // rmdir's EBUSY (css_has_online_children()): dying children do not count.
  if (g->nr_children() > 0)
    return absl::FailedPreconditionError(
        absl::StrCat("path ", QuotePath(path), " has ", g->nr_children(),
                     " child group(s); delete them first"));
  // mem_cgroup_css_offline(): protection reset (re-propagating protected
  // usage), then drain_all_stock(memcg): every CPU whose stock holds pages
  // of the group is drained whole, every slot whoever owns it.
  g->memory().SetMin(0);
  g->memory().SetLow(0);
  stock_.DrainAll(&g->memory(), /*wait=*/true);
  // The group leaves cgroupfs (its path and handles), and stays linked,
  // offline, with the pages still charged to it until they are gone.
  const uint64_t id = g->id();
  const uint64_t dying_pages = g->memory().Read();
  tree_.Offline(g);
  if (observer_ != nullptr) observer_->OnGroupDeleted(id);
  FreeDyingGroups();
  return dying_pages;
}

// css release/free for every dying group that holds no page and has no
// children (dying_ is oldest first, so children go before their parents
// in one pass): move reclaim cursors off it (mem_cgroup_css_released():
// invalidate_reclaim_iterators()), forget its stock slots (they hold no
// reference, unlike the kernel's), fold its stats into the parent, free it.
void MemoryController::FreeDyingGroups() {
  for (Group* g : tree_.DyingGroups()) {
    if (g->has_children() || g->memory().Read() != 0) continue;
    InvalidateReclaimIterators(g);
    stock_.DrainOwner(&g->memory());
    rstat_.FlushForRemoval(&g->rstat_group());
    tree_.Remove(g);
  }
}

// --- charge -----------------------------------------------------------------

// try_charge_memcg(), mm/memcontrol.c. Differences: no task context, so
// no PF_MEMALLOC force-charge, no OOM killer to wait for; the failed
// request itself is the OOM victim (oom_kill is raised on `g`), unless it
// is costly (more than kCostlyChargePages pages), which the kernel fails
// without an OOM. The root is never charged here (ChargeLocked refuses
// it). On success *nr_pages_over_high is the batch charged if the charge
// left `g` or an ancestor over memory.high
// (current->memcg_nr_pages_over_high), else 0; a charge served from the
// stock checks nothing, as in the kernel.
absl::Status MemoryController::TryChargeMemcg(Group* g, uint64_t nr_pages,
                                              int cpu,
                                              uint64_t* nr_pages_over_high,
                                              uint64_t* charged, bool* oom) {
  *nr_pages_over_high = 0;
  *oom = false;
  PageCounter* const memory = &g->memory();
  // What the caller takes on success: its own batch while that may still
  // fit, then exactly nr_pages.
  uint64_t take = std::max(*charged, nr_pages);
  *charged = take;
  uint64_t batch = std::max<uint64_t>(stock_.batch_pages(), take);
  int retries = kMaxReclaimRetries;
  bool drained = false;
  // Pages the last network drain gave back (see below), and how many more
  // rounds of it this charge may ask for.
  uint64_t remote_returned = 0;
  int remote_rounds = kMaxRemoteDrainRounds;
  Group* over = nullptr;
  for (;;) {
    if (stock_.Consume(cpu, memory, take)) return absl::OkStatus();
    // The stock's pool: pages this group parked from another CPU's slot.
    if (const uint64_t pooled = stock_.TakePooled(memory, take)) {
      if (pooled > take) stock_.Refill(cpu, memory, pooled - take);
      return absl::OkStatus();
    }
    // The rerun of a deferred charge (RemoteDrainDeferral::Resume) resumes
    // its turn where it stopped: the batch dropped, the page_counter
    // failures, `max` and reclaim done, at the drain (if there is still no
    // room), so failcnt and memory.events count what the same charge
    // waiting in place would.
    bool at_drain = false;
    if (!drained && ABSL_PREDICT_FALSE(RemoteDrainDeferral::Resuming())) {
      batch = take = *charged = nr_pages;
      over = LimitingGroup(g, nr_pages);
      at_drain = over != nullptr;
    }
    if (!at_drain) {
      PageCounter* fail = nullptr;
      if (memory->TryCharge(batch, &fail)) {
        if (batch > take) stock_.Refill(cpu, memory, batch - take);
        if (MemoryHighExceeded(g)) *nr_pages_over_high = batch;
        return absl::OkStatus();
      }
      over = GroupOfCounter(g, fail);
      if (batch > nr_pages) {
        // Retry the exact amount before any reclaim or event (the caller's
        // batch too: it gets nr_pages).
        batch = take = *charged = nr_pages;
        continue;
      }
    }
    uint64_t reclaimed = 0;
    if (!at_drain) {
      MemcgMemoryEvent(over, MemoryEvent::kMax, cpu);
      // A reclaim cycle (this charge's or another's) that saw all of
      // `over`'s subtree without one FILE page, and the FILE charges before
      // it began (Group::file_free_epoch): while no FILE page is charged
      // anywhere, a cycle at that group would find the same nothing, so it
      // is skipped (its `max` event is still raised). Not in the kernel,
      // whose retries each walk again; recorded only when the walk saw more
      // groups than there are CPU slots (else the sum costs more than the
      // walk). Without it a tenant's 10,000 empty groups cost each of its
      // refused charges 17 walks of them (1.2 ms), and, shared across
      // charges, its six threads refusing at once each walked them still
      // (partial walks on the shared cursor, then the full-walk rung): 0.7-
      // 1.6 ms a refusal, other tenants' charges 1.1 -> 5.8 ms (issue 22's
      // re-attacks, row 11g).
      const uint64_t epoch = FileChargeEpoch();
      if (over->file_free_epoch() != epoch) {
        uint64_t groups_without_file = 0;
        reclaimed = ReclaimPages(over, nr_pages, cpu, &groups_without_file);
        if (groups_without_file > static_cast<uint64_t>(nr_cpus_))
          over->set_file_free_epoch(epoch);
      }
      if (over->memory().Margin() >= nr_pages) continue;
    }
    if (!drained) {
      // Once per charge, as the kernel's drain_all_stock(), but waiting
      // for a concurrent drain where the kernel's trylock skips it. Pages
      // a concurrent charge or uncharge parks after this drain stay parked
      // for the rest of the retries (README's kernel table).
      stock_.DrainAll(&over->memory(), /*wait=*/true);
      // Then the stocks clients hold across the network (sessions,
      // engine/remote_stock.h): only if the local drain left no room; what
      // they give back is uncharged.
      if (over->memory().Margin() < nr_pages) {
        if (absl::Status s = RemoteDrainStatus(
                DrainRemoteStock(g, over, nr_pages, cpu, &remote_returned),
                over);
            !s.ok())
          return s;
      }
      drained = true;
      continue;
    }
    // The network drain gave back enough for this charge, yet it still
    // does not fit: a concurrent charge took the room they made (the pages
    // are uncharged, then this charge retries; a client's batch can take
    // them in between, the window being a network round trip wide). Ask
    // again, at most kMaxRemoteDrainRounds more rounds (each may wait up to
    // the drainer's bound). Not when less came back than the charge needs:
    // a client trickling a page per answer (then charging it again) would
    // otherwise hold every refused charge for several of its answers. The
    // kernel drains once per charge; its per-CPU stocks refill in
    // nanoseconds, not across a network, and this drain has no kernel
    // counterpart (README's kernel table).
    if (remote_returned >= nr_pages && remote_rounds > 0 &&
        over->memory().Margin() < nr_pages) {
      --remote_rounds;
      remote_returned = 0;
      if (absl::Status s = RemoteDrainStatus(
              DrainRemoteStock(g, over, nr_pages, cpu, &remote_returned),
              over);
          !s.ok())
        return s;
      continue;
    }
    // Progress on a small charge does not consume a retry.
    if (reclaimed > 0 && nr_pages <= kCostlyChargePages) continue;
    if (retries-- > 0) continue;
    break;
  }
  // Pages, as the engine counts, and bytes, as memory.max and
  // memory.current are written and read (issue 26, item 7).
  const uint64_t usage = over->memory().Read();
  const uint64_t max = over->memory().max();
  const std::string failed = absl::StrCat(
      "memory.max of ", ShortPath(over->path()), " reached: cannot charge ",
      nr_pages, nr_pages == 1 ? " page (" : " pages (",
      nr_pages * page_size_bytes_, " bytes) to ",
      ShortPath(g->path()), " (", ShortPath(over->path()), " usage ", usage,
      " of max ", max, " pages: memory.current ", usage * page_size_bytes_,
      " of memory.max ", max * page_size_bytes_, " bytes)");
  // mem_cgroup_oom() returns before counting MEMCG_OOM for an order above
  // PAGE_ALLOC_COSTLY_ORDER: a costly charge fails with ENOMEM and `max`
  // events only (its caller falls back to smaller charges).
  if (nr_pages > kCostlyChargePages)
    return absl::ResourceExhaustedError(
        absl::StrCat(failed, "; a charge of more than ", kCostlyChargePages,
                     " pages fails without OOM"));
  // mem_cgroup_oom(): `oom` on the limiting group; the charging request is
  // the victim (oom_kill_process() -> __oom_kill_process(): `oom_kill` on
  // its memcg).
  *oom = true;
  MemcgMemoryEvent(over, MemoryEvent::kOom, cpu);
  MemcgMemoryEvent(g, MemoryEvent::kOomKill, cpu);
  // oom_kill_process(): with memory.oom.group set between the victim's
  // group and the OOM domain, that whole group is killed.
  Group* const oom_group = GetOomGroup(g, over);
  if (oom_group == nullptr) return absl::ResourceExhaustedError(failed);
  MemcgMemoryEvent(oom_group, MemoryEvent::kOomGroupKill, cpu);
  if (observer_ != nullptr)
    observer_->OnOomGroupKill(oom_group->id(), oom_group->path());
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      failed, "; memory.oom.group of ", ShortPath(oom_group->path()),
      ": the whole group is killed"));
  status.SetPayload(kOomGroupKillPayloadUrl, absl::Cord(oom_group->path()));
  return status;
}

// The reader slot is given up around the network wait, which clang's
// analysis cannot follow (the caller's scoped lock still holds it after).
MemoryController::RemoteDrain MemoryController::DrainRemoteStock(
    Group* g, Group* over, uint64_t nr_pages, int cpu,
    uint64_t* uncharged_out) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (uncharged_out != nullptr) *uncharged_out = 0;
  RemoteStockDrainer* const drainer =
      remote_drainer_.load(std::memory_order_acquire);
  if (drainer == nullptr) return RemoteDrain::kDone;
  if (RemoteDrainDeferral::Active() &&
      drainer->RemoteDrainWouldWait(over->id(), over->path()))
    return RemoteDrain::kDeferred;
  uint64_t uncharged = 0;
  // The room the charge needs at the limiting group: more than nr_pages
  // when usage is above a lowered max.
  const uint64_t usage = over->memory().Read();
  const uint64_t max = over->memory().max();
  const uint64_t needed =
      usage + nr_pages > max ? usage + nr_pages - max : nr_pages;
  // The wait is for clients across the network (up to the drainer's bound):
  // holding the slot through it made a CreateGroup or DeleteGroup, waiting
  // for it as writer, stall every call on the slots it already held (issue
  // 22's re-attack, row 9b: another tenant's GetStats 0.5 -> 9-10 ms while
  // a tenant's own charges waited on its own slow-answering sessions). So
  // the slot is given up, and what the charge holds is found again after.
  const uint64_t over_id = over->id();
  const std::string over_path(over->path());
  const GroupHandle g_handle = GroupTree::HandleOf(*g);
  PercpuRwLock* const lock = tree_.lock();
  const uint64_t writes = lock->writes();
  lock->ReaderUnlock(cpu);
  const std::vector<RemoteStockReturn> returned =
      drainer->DrainRemoteStock(over_id, over_path, needed);
  lock->ReaderLock(cpu);
  RemoteDrain result = RemoteDrain::kDone;
  // A writer ran: `g` (and so `over`, itself or an ancestor) is valid only
  // if still live (a group offline since may even be freed).
  if (lock->writes() != writes && !tree_.Find(g_handle).ok())
    result = RemoteDrain::kChargingGroupGone;
  for (const RemoteStockReturn& r : returned) {
    if (r.nr_pages == 0) continue;
    // Deleted since the pages were charged: uncharged from the heir.
    absl::StatusOr<UnchargeResult> done =
        UnchargeLocked(FindOrHeir(r.group, r.path), r.nr_pages, r.kind, cpu);
    if (done.ok()) uncharged += done->nr_pages;
  }
  // With uncharge_refills_stock they went into this CPU's stock: back to the
  // counters. Then tell the drainer (charges that joined this drain retry
  // now).
  if (uncharged > 0 && uncharge_refills_stock_ && result == RemoteDrain::kDone)
    stock_.DrainAll(&over->memory(), /*wait=*/true);
  if (!returned.empty()) drainer->RemoteStockReturned(over_id, over_path);
  if (uncharged_out != nullptr) *uncharged_out = uncharged;
  return result;
}

// Inlined into both callers (path and handle): the fast path.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::StatusOr<ChargeResult>
MemoryController::ChargeLocked(const absl::StatusOr<Group*>& found,
                               uint64_t nr_pages, PageKind kind, int cpu,
                               uint64_t batch_pages) {
  if (ABSL_PREDICT_FALSE(!found.ok())) return Reject(found.status(), cpu);
  Group* g = *found;
  // A handle to the root (Charge(path) refused "/" on entry).
  if (ABSL_PREDICT_FALSE(g->is_root()))
    return Reject(RefuseRootCharge(g->path()), cpu);
  uint64_t nr_pages_over_high = 0;
  uint64_t charged = batch_pages;
  bool oom = false;
  if (absl::Status s = TryChargeMemcg(g, nr_pages, cpu, &nr_pages_over_high,
                                      &charged, &oom);
      !s.ok()) {
    // A deferred charge (RemoteDrainDeferral) is retried by its caller.
    if (ABSL_PREDICT_TRUE(!IsRemoteDrainDeferred(s)))
      Bump(oom ? counters_[cpu].charges_oom : counters_[cpu].charges_refused);
    return s;
  }
  g->Charged(kind, charged);
  if (kind == PageKind::kFile)
    counters_[cpu].file_charges.fetch_add(1, std::memory_order_release);
  UpdateStats(g, cpu, kind, static_cast<int64_t>(charged));
  Bump(counters_[cpu].charges_ok);
  ChargeResult result;
  result.nr_pages = charged;
  // The request's return to user mode: mem_cgroup_handle_over_high().
  result.throttle = reclaimer_.HandleOverHigh(g, nr_pages_over_high, cpu);
  return result;
}

absl::StatusOr<ChargeResult> MemoryController::Charge(
    absl::string_view path, uint64_t nr_pages, PageKind kind,
    std::optional<int> cpu_arg) {
  // The root first, as the service checks it with the path: before any
  // other argument, and before the tree lock.
  if (absl::Status s = RefuseRootCharge(path); !s.ok()) return Reject(s);
  absl::StatusOr<int> cpu = CheckArgs(nr_pages, kind, cpu_arg, true);
  if (!cpu.ok()) return cpu.status();
  PercpuReaderLock l(tree_.lock(), *cpu);
  return ChargeLocked(tree_.Find(path), nr_pages, kind, *cpu);
}

absl::StatusOr<ChargeResult> MemoryController::Charge(
    GroupHandle group, uint64_t nr_pages, PageKind kind,
    std::optional<int> cpu_arg, uint64_t batch_pages) {
  absl::StatusOr<int> cpu = CheckArgs(nr_pages, kind, cpu_arg, true);
  if (!cpu.ok()) return cpu.status();
  if (ABSL_PREDICT_FALSE(batch_pages > nr_pages)) {
    // The batch must be a charge the engine would take on its own.
    if (absl::StatusOr<int> c = CheckArgs(batch_pages, kind, cpu_arg, true);
        !c.ok())
      return c.status();
  }
  PercpuReaderLock l(tree_.lock(), *cpu);
  return ChargeLocked(tree_.Find(group), nr_pages, kind, *cpu, batch_pages);
}

// --- uncharge ---------------------------------------------------------------

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void MemoryController::UnchargeCounters(
    Group* g, uint64_t nr_pages, int cpu, bool online) {
  if (uncharge_refills_stock_ && online) {
    stock_.Refill(cpu, &g->memory(), nr_pages);
  } else {
    g->memory().Uncharge(nr_pages);
  }
}

// Uncharged ANON and FILE pages leave the page_counters at once
// (uncharge_batch() -> memcg_uncharge(), the kernel's path for user pages),
// or, with the uncharge_refills_stock addition, go back through the per-CPU
// stock (refill_stock(), the kernel's path for socket and kernel memory).
// The root holds no pages of its own. Inlined into both callers (path and
// handle): the fast path.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::StatusOr<UnchargeResult>
MemoryController::UnchargeLocked(const absl::StatusOr<Group*>& found,
                                 uint64_t nr_pages, PageKind kind, int cpu,
                                 bool at_most) {
  if (ABSL_PREDICT_FALSE(!found.ok())) return found.status();
  Group* g = *found;
  if (ABSL_PREDICT_FALSE(g->is_root())) {
    // The root holds no page of its own, so nothing may be uncharged in its
    // name, except, by the library's own returns (UnchargeAtMost: a
    // session's holdings, reparented to the root when their top-level
    // group was deleted), the pages its dying children still hold: else
    // they stayed charged, and those groups dying, for ever.
    if (!at_most) return RefuseRootCharge(g->path());
    if (g->nr_dying_children() == 0) return UnchargeResult{0};
    return UnchargeWithDying(g, nr_pages, kind, cpu, at_most);
  }
  if (ABSL_PREDICT_FALSE(g->nr_dying_children() > 0))
    return UnchargeWithDying(g, nr_pages, kind, cpu, at_most);
  absl::StatusOr<uint64_t> take = g->Uncharging(kind, nr_pages, at_most);
  if (!take.ok()) return take.status();
  if (*take == 0) return UnchargeResult{0};
  // Found by path or handle: an online group.
  UnchargeCounters(g, *take, cpu, /*online=*/true);
  UpdateStats(g, cpu, kind, -static_cast<int64_t>(*take));
  Bump(counters_[cpu].uncharges);
  return UnchargeResult{*take};
}

// The pages `g` answers for are its own and those still charged to its
// dying descendants (DeleteGroup leaves them there): its own first, then
// each dying child's subtree in pre-order. ANON without `at_most` refuses
// (FAILED_PRECONDITION, nothing moved) unless they hold nr_pages together.
absl::StatusOr<UnchargeResult> MemoryController::UnchargeWithDying(
    Group* g, uint64_t nr_pages, PageKind kind, int cpu, bool at_most) {
  struct Taken {
    Group* group;
    uint64_t nr_pages;
  };
  std::vector<Taken> taken;
  uint64_t left = nr_pages;
  auto take_from = [&](Group* from) {
    // at_most: take what `from` has; the ANON refusal is decided below, on
    // the sum.
    const uint64_t t = *from->Uncharging(kind, left, /*at_most=*/true);
    if (t > 0) taken.push_back({from, t});
    left -= t;
  };
  take_from(g);
  for (Group* child = g->first_child(); child != nullptr && left > 0;
       child = child->next_sibling()) {
    if (child->online()) continue;
    // A dying child's subtree is all dying.
    for (Group* d = child; d != nullptr && left > 0;
         d = NextDescendantPre(d, child))
      take_from(d);
  }
  if (kind == PageKind::kAnon && left > 0 && !at_most) {
    // Give back what was taken: no page_counter moved yet.
    for (const Taken& t : taken) t.group->Charged(kind, t.nr_pages);
    return g->AnonUnderflow(nr_pages, nr_pages - left);
  }
  for (const Taken& t : taken) {
    UnchargeCounters(t.group, t.nr_pages, cpu, t.group->online());
    UpdateStats(t.group, cpu, kind, -static_cast<int64_t>(t.nr_pages));
  }
  if (left == nr_pages) return UnchargeResult{0};
  Bump(counters_[cpu].uncharges);
  return UnchargeResult{nr_pages - left};
}

absl::StatusOr<UnchargeResult> MemoryController::Uncharge(
    absl::string_view path, uint64_t nr_pages, PageKind kind,
    std::optional<int> cpu_arg) {
  if (absl::Status s = RefuseRootCharge(path); !s.ok()) return s;
  absl::StatusOr<int> cpu = CheckArgs(nr_pages, kind, cpu_arg, false);
  if (!cpu.ok()) return cpu.status();
  PercpuReaderLock l(tree_.lock(), *cpu);
  return UnchargeLocked(tree_.Find(path), nr_pages, kind, *cpu);
}

absl::StatusOr<UnchargeResult> MemoryController::Uncharge(
    GroupHandle group, uint64_t nr_pages, PageKind kind,
    std::optional<int> cpu_arg) {
  absl::StatusOr<int> cpu = CheckArgs(nr_pages, kind, cpu_arg, false);
  if (!cpu.ok()) return cpu.status();
  PercpuReaderLock l(tree_.lock(), *cpu);
  return UnchargeLocked(tree_.Find(group), nr_pages, kind, *cpu);
}

absl::StatusOr<Group*> MemoryController::FindOrHeir(
    GroupHandle group, absl::string_view charged_path) {
  absl::StatusOr<Group*> g = tree_.Find(group);
  for (absl::string_view path = charged_path;
       !g.ok() && !path.empty() && path != "/";) {
    path = ParentPath(path);
    // The root is the heir of a deleted top-level group: it answers for
    // the pages left on it (UnchargeLocked takes them with at_most only).
    if (path == "/") {
      g = tree_.root();
      break;
    }
    if (Group* up = tree_.Lookup(path)) g = up;
  }
  return g;
}

absl::StatusOr<UnchargeResult> MemoryController::UnchargeAtMost(
    GroupHandle group, absl::string_view charged_path, uint64_t nr_pages,
    PageKind kind) {
  absl::StatusOr<int> cpu = CheckArgs(nr_pages, kind, std::nullopt, false);
  if (!cpu.ok()) return cpu.status();
  PercpuReaderLock l(tree_.lock(), *cpu);
  return UnchargeLocked(FindOrHeir(group, charged_path), nr_pages, kind, *cpu,
                        /*at_most=*/true);
}

}  // namespace cgacct
