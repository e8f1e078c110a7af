// MemoryController's cgroup files (engine/memcontrol.h): the memory.min/
// low/high/max writes (memory_high_write()/memory_max_write()),
// memory.reclaim, memory.stat/events reads, memory.peak through an open
// file (memory_peak_write()/memory_peak_show()), memory.oom.group, the
// stock drains and flushes the engine offers, and the engine-wide
// information. The charge path, uncharge and group online/offline are in
// memcontrol.cc.
#include <algorithm>
#include <optional>

#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "engine/memcontrol.h"
#include "engine/memory_stat.h"
#include "engine/percpu.h"

namespace cgacct {

// --- memory.min/low/high/max writes -----------------------------------------

void MemoryController::ApplyLimits(Group* g, const LimitsUpdate& limits) {
  auto clamp = [this](uint64_t pages) {
    return std::min(pages, page_counter_max_);
  };
  PageCounter& memory = g->memory();
  if (limits.min_pages) memory.SetMin(clamp(*limits.min_pages));
  if (limits.low_pages) memory.SetLow(clamp(*limits.low_pages));
  if (limits.high_pages) memory.SetHigh(clamp(*limits.high_pages));
  if (limits.max_pages) memory.SetMax(clamp(*limits.max_pages));
}

// memory_high_write(): drain once, then reclaim the excess until it fits or
// 16 reclaims found nothing; never OOM.
void MemoryController::MemoryHighWrite(Group* g, int cpu) {
  PageCounter& memory = g->memory();
  stock_.DrainAll(&memory, /*wait=*/true);
  int nr_retries = kMaxReclaimRetries;
  for (uint64_t usage; (usage = memory.Read()) > memory.high();) {
    if (ReclaimPages(g, usage - memory.high(), cpu) == 0 && nr_retries-- == 0)
      break;
  }
}

// memory_max_write(): drain once, reclaim, and if usage still cannot get
// under the new max, `oom` (cgroup v2 accepts the limit anyway).
void MemoryController::MemoryMaxWrite(Group* g, int cpu) {
  PageCounter& memory = g->memory();
  stock_.DrainAll(&memory, /*wait=*/true);
  int nr_reclaims = kMaxReclaimRetries;
  while (memory.Read() > memory.max()) {
    if (nr_reclaims > 0) {
      if (ReclaimPages(g, memory.Read() - memory.max(), cpu) == 0)
        --nr_reclaims;
      continue;
    }
    MemcgMemoryEvent(g, MemoryEvent::kOom, cpu);
    break;
  }
}

absl::StatusOr<GroupInfo> MemoryController::SetLimits(
    absl::string_view path, const LimitsUpdate& limits) {
  const int cpu = CurrentCpu(nr_cpus_);
  PercpuReaderLock l(tree_.lock(), cpu);
  absl::StatusOr<Group*> found = tree_.Find(path);
  if (ABSL_PREDICT_FALSE(!found.ok())) return found.status();
  Group* g = *found;
  if (g->is_root())
    return absl::InvalidArgumentError(
        "path \"/\": the root has no limits to set");
  MutexLock setter(&limits_mu_);
  ApplyLimits(g, limits);
  if (limits.high_pages && g->memory().Read() > g->memory().high())
    MemoryHighWrite(g, cpu);
  if (limits.max_pages && g->memory().Read() > g->memory().max())
    MemoryMaxWrite(g, cpu);
  return InfoOf(*g);
}

// --- memory.reclaim, memory.stat, drains and flushes ------------------------

absl::StatusOr<uint64_t> MemoryController::Reclaim(absl::string_view path,
                                                   uint64_t nr_pages) {
  const int cpu = CurrentCpu(nr_cpus_);
  PercpuReaderLock l(tree_.lock(), cpu);
  absl::StatusOr<Group*> g = tree_.Find(path);
  if (!g.ok()) return g.status();
  return reclaimer_.MemoryReclaim(*g, nr_pages, cpu);
}

absl::StatusOr<GroupEvents> MemoryController::GetEvents(
    GroupHandle group) const {
  PercpuReaderLock l(tree_.lock(), CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> found = tree_.Find(group);
  if (!found.ok()) return found.status();
  const Group* g = *found;
  return GroupEvents{g->path(), g->id(), g->events(), g->events_local()};
}

absl::StatusOr<GroupStats> MemoryController::GetStats(absl::string_view path,
                                                      FlushMode mode) {
  PercpuReaderLock l(tree_.lock(), CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> found = tree_.Find(path);
  if (ABSL_PREDICT_FALSE(!found.ok())) return found.status();
  Group* g = *found;
  GroupStats stats;
  stats.path = g->path();
  if (mode == FlushMode::kExact ||
      (mode == FlushMode::kThreshold && rstat_.NeedsFlush(&g->rstat_group()))) {
    rstat_.Flush(&g->rstat_group());
    stats.flushed = true;
  }
  if (!stats.flushed) {
    // The newest flush that covered this group: its own or an ancestor's
    // (the periodic flush covers every group). Never flushed: as old as
    // the engine.
    int64_t last = 0;
    for (const Group* pos = g; pos != nullptr; pos = pos->parent())
      last = std::max(last, pos->rstat_group().last_flush_ns());
    if (last == 0) last = created_ns_;
    stats.max_staleness =
        absl::Nanoseconds(std::max<int64_t>(0, clock_.NowNs() - last));
  }
  const PageCounter& memory = g->memory();
  stats.memory_current_pages = memory.Read();
  stats.memory_peak_pages = memory.watermark();
  stats.oom_group = g->oom_group();
  stats.limits = LimitsOf(*g);
  stats.failcnt = memory.failcnt();
  stats.emin_pages = memory.emin();
  stats.elow_pages = memory.elow();
  stats.events = g->events();
  stats.events_local = g->events_local();
  stats.stat =
      MemoryStatEntries(ReadMemoryStat(g->rstat_group(), page_size_bytes_));
  return stats;
}

// --- memory.peak per open file, memory.oom.group -----------------------------

absl::StatusOr<uint64_t> MemoryController::PeakFile(absl::string_view path,
                                                    PeakOp op,
                                                    uint64_t watermark_id) {
  PercpuReaderLock l(tree_.lock(), CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> found = tree_.Find(path);
  if (!found.ok()) return found.status();
  Group* g = *found;
  if (op == PeakOp::kOpen) {
    const uint64_t id =
        next_watermark_id_.fetch_add(1, std::memory_order_relaxed);
    g->PeakWrite(id);
    return id;
  }
  std::optional<uint64_t> peak = g->PeakRead(watermark_id);
  if (!peak.has_value())
    return absl::NotFoundError(absl::StrCat(
        "watermark ", watermark_id, ": not open on path ", QuotePath(path)));
  switch (op) {
    case PeakOp::kReset:
      return g->PeakWrite(watermark_id);
    case PeakOp::kRead:
      return *peak;
    default:
      g->PeakRelease(watermark_id);
      return 0;
  }
}

absl::Status MemoryController::SetOomGroup(absl::string_view path, bool on) {
  PercpuReaderLock l(tree_.lock(), CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> g = tree_.Find(path);
  if (!g.ok()) return g.status();
  // memory.oom.group is CFTYPE_NOT_ON_ROOT.
  if ((*g)->is_root())
    return absl::InvalidArgumentError(
        "path \"/\": the root has no memory.oom.group");
  (*g)->set_oom_group(on);
  return absl::OkStatus();
}

void MemoryController::DrainAllStock() {
  PercpuReaderLock l(tree_.lock(), CurrentCpu(nr_cpus_));
  // Unlike the kernel's best-effort drain, callers of this entry point
  // want the stocks empty: wait for a concurrent drain and go again.
  stock_.DrainAll(nullptr, /*wait=*/true);
}

absl::Status MemoryController::DrainStock(GroupHandle group,
                                          absl::string_view charged_path) {
  PercpuReaderLock l(tree_.lock(), CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> found = FindOrHeir(group, charged_path);
  if (!found.ok()) return found.status();
  stock_.DrainAll(&(*found)->memory(), /*wait=*/true);
  return absl::OkStatus();
}

void MemoryController::FlushAll() {
  PercpuReaderLock l(tree_.lock(), CurrentCpu(nr_cpus_));
  rstat_.Flush(&tree_.root()->rstat_group());
}

// --- engine-wide information ------------------------------------------------

EngineInfo MemoryController::GetInfo() const {
  EngineInfo info;
  info.nr_cpus = nr_cpus_;
  info.page_size_bytes = page_size_bytes_;
  info.charge_batch_pages = stock_.batch_pages();
  info.flush_lock_policy = rstat_.policy();
  info.flush_lock_policy_name = FlushLockConfigName(rstat_.config());
  info.flush_hold_budget = rstat_.config().hold_budget;
  info.flush_preempt_model = rstat_.config().preempt_model;
  info.nr_stock_slots = kNrStockSlots;
  info.stock_pool_buckets = stock_.nr_buckets();
  info.stock_victim_sets = stock_.nr_victim_sets();
  info.stock_eviction_seed = stock_.eviction_seed();
  info.uncharge_refills_stock = uncharge_refills_stock_;
  info.memory_localevents = memory_localevents_;
  info.nr_groups = tree_.nr_groups();
  info.nr_dying_groups = tree_.nr_dying_groups();
  info.flush_lock_hold_max = rstat_.hold_max();
  info.flush_lock_hold_wall_max = rstat_.hold_wall_max();
  info.preempted_flushes = rstat_.preempted_flushes();
  info.flush_lock_hold_max_cpus_walked = rstat_.hold_max_cpus_walked();
  info.flush_lock_hold_max_groups_folded = rstat_.hold_max_groups_folded();
  info.longest_flush_holds = rstat_.LongestHolds();
  return info;
}

EngineCounters MemoryController::GetCounters() const {
  EngineCounters c;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
    const CpuCounters& pc = counters_[cpu];
    c.charges_ok += pc.charges_ok.load(std::memory_order_relaxed);
    c.charges_oom += pc.charges_oom.load(std::memory_order_relaxed);
    c.charges_refused += pc.charges_refused.load(std::memory_order_relaxed);
    c.charges_rejected += pc.charges_rejected.load(std::memory_order_relaxed);
    c.uncharges += pc.uncharges.load(std::memory_order_relaxed);
    c.oom_total += pc.oom_events.load(std::memory_order_relaxed);
  }
  c.stock_hits = stock_.hits();
  c.stock_victim_hits = stock_.victim_hits();
  c.stock_pool_hits = stock_.pool_hits();
  c.stock_drains = stock_.drains();
  c.flushes = rstat_.flushes();
  c.flush_cpus = rstat_.flush_cpus();
  return c;
}

}  // namespace cgacct
