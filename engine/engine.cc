#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/group.h"
#include "engine/mutex.h"
#include "engine/percpu.h"
#include "engine/reclaim.h"
#include "engine/rstat.h"
#include "engine/stock.h"

namespace cgacct {

// Paths in error messages: long ones are cut, so that a status never grows
// past what a client accepts in its trailers (gRPC's 8 KiB metadata limit).
std::string ShortPath(absl::string_view path) {
  constexpr size_t kShown = 128;
  if (path.size() <= kShown) return std::string(path);
  return absl::StrCat(path.substr(0, kShown), "... (", path.size(), " bytes)");
}

std::string QuotePath(absl::string_view path) {
  return absl::StrCat("\"", ShortPath(path), "\"");
}

absl::Status ValidateGroupPath(absl::string_view path,
                               absl::string_view field) {
  if (path.size() > kMaxPathBytes)
    return absl::InvalidArgumentError(absl::StrCat(field, " ", QuotePath(path),
                                                   " is longer than ",
                                                   kMaxPathBytes, " bytes"));
  if (path.empty() || path[0] != '/')
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", QuotePath(path),
                     " must be an absolute cgroup path like /a/b"));
  if (path == "/") return absl::OkStatus();
  if (path.back() == '/')
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", QuotePath(path), " must not end with '/'"));
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == absl::string_view::npos) end = path.size();
    absl::string_view segment = path.substr(start, end - start);
    if (segment.empty() || segment.size() > 255)
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", QuotePath(path),
                       ": each segment must be 1 to 255 characters"));
    if (segment == "." || segment == "..")
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", QuotePath(path),
                       ": segments '.' and '..' are not allowed"));
    for (char ch : segment) {
      const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
                      ch == '-';
      if (!ok)
        return absl::InvalidArgumentError(
            absl::StrCat(field, " ", QuotePath(path),
                         ": segments may use only [A-Za-z0-9._-]"));
    }
    start = end + 1;
  }
  return absl::OkStatus();
}

namespace {

absl::string_view ParentPath(absl::string_view path) {
  size_t pos = path.rfind('/');
  return pos == 0 ? absl::string_view("/") : path.substr(0, pos);
}

// Engine-wide counters kept per CPU slot; relaxed atomics, summed at read.
struct alignas(kCacheLineBytes) CpuCounters {
  std::atomic<uint64_t> charges_ok{0};
  std::atomic<uint64_t> charges_oom{0};
  std::atomic<uint64_t> charges_rejected{0};
  std::atomic<uint64_t> uncharges{0};
  std::atomic<uint64_t> oom_events{0};
};

void Bump(std::atomic<uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

// The engine's state. Lock order: tree_lock_ (one reader slot, or all as
// writer) -> limits_mu_ -> rstat flush lock -> rstat per-CPU tree locks;
// stock locks are leaves (taken under any of the above).
class EngineImpl {
 public:
  EngineImpl(int nr_cpus, const EngineOptions& options)
      : nr_cpus_(nr_cpus),
        page_size_bytes_(options.page_size_bytes),
        page_counter_max_(static_cast<uint64_t>(LONG_MAX) /
                          options.page_size_bytes),
        periodic_flush_interval_(options.periodic_flush_interval),
        clock_(options.clock != nullptr ? *options.clock : Clock::Real()),
        tree_lock_(nr_cpus),
        stock_(nr_cpus, options.charge_batch_pages, options.stock_pool_buckets,
               options.stock_victim_sets),
        rstat_(
            nr_cpus,
            FlushLockConfig{options.flush_lock_policy, options.flush_batch_cpus,
                            options.flush_hold_budget},
            options.observer, clock_),
        counters_(new CpuCounters[nr_cpus]),
        reclaimer_(&rstat_, options.observer, clock_,
                   options.memory_recursiveprot, options.memcg_full_walk,
                   [this](Group* g, MemoryEvent event, int cpu) {
                     RaiseEvent(g, event, cpu);
                   }) {
    auto root = std::make_unique<Group>("/", next_id_++, nullptr, &rstat_,
                                        page_counter_max_);
    root_ = root.get();
    AddHandleSlotLocked(root_);
    groups_.emplace("/", std::move(root));
    nr_groups_.store(1, std::memory_order_relaxed);
    last_periodic_flush_ns_.store(clock_.NowNs(), std::memory_order_relaxed);
    if (periodic_flush_interval_ > absl::ZeroDuration())
      flusher_ = std::thread([this] { FlusherLoop(); });
  }

  // The flusher stops first. Then the groups go: their rstat blocks return
  // to rstat_'s per-CPU pools, and rstat_ is declared after groups_, so it
  // would be destroyed first.
  ~EngineImpl() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (flusher_.joinable()) {
      stop_flusher_.Notify();
      flusher_.join();
    }
    groups_.clear();
  }

  // The periodic flusher (the kernel's flush_memcg_stats_dwork, every
  // FLUSH_TIME = 2 s): wakes often enough to notice a due flush on the
  // engine's clock, flushes the whole tree when due.
  void FlusherLoop() {
    const absl::Duration tick =
        std::min(periodic_flush_interval_, absl::Milliseconds(100));
    while (!stop_flusher_.WaitForNotificationWithTimeout(tick))
      MaybePeriodicFlush();
  }

  bool MaybePeriodicFlush() {
    if (periodic_flush_interval_ <= absl::ZeroDuration()) return false;
    const int64_t now = clock_.NowNs();
    int64_t last = last_periodic_flush_ns_.load(std::memory_order_relaxed);
    if (now - last < absl::ToInt64Nanoseconds(periodic_flush_interval_))
      return false;
    // One periodic flush per interval even if several threads call this.
    if (!last_periodic_flush_ns_.compare_exchange_strong(
            last, now, std::memory_order_relaxed))
      return false;
    PercpuReaderLock l(&tree_lock_, CurrentCpu(nr_cpus_));
    rstat_.Flush(&root_->rstat_group);
    return true;
  }


  // --- helpers -----------------------------------------------------------

  absl::StatusOr<int> ResolveCpu(std::optional<int> cpu) const {
    if (!cpu.has_value()) return CurrentCpu(nr_cpus_);
    if (*cpu < 0 || *cpu >= nr_cpus_)
      return absl::InvalidArgumentError(
          absl::StrCat("cpu ", *cpu, " out of range [0, ", nr_cpus_, ")"));
    return *cpu;
  }

  Group* Lookup(absl::string_view path) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = groups_.find(path);
    return it == groups_.end() ? nullptr : it->second.get();
  }

  absl::StatusOr<Group*> Find(absl::string_view path) const {
    if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
    Group* g = Lookup(path);
    if (g == nullptr)
      return absl::NotFoundError(
          absl::StrCat("path ", QuotePath(path), ": no such group"));
    return g;
  }

  // GroupHandle table (engine/group_handle.h): slot -> live group. Written
  // under the tree writer lock only, so a reader holding any one reader slot
  // sees it stable (a vector that grows is fine: no reader is inside).
  void AddHandleSlotLocked(Group* g) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (free_handle_slots_.empty()) {
      g->handle_slot = static_cast<uint32_t>(handle_slots_.size());
      handle_slots_.push_back(g);
    } else {
      g->handle_slot = free_handle_slots_.back();
      free_handle_slots_.pop_back();
      handle_slots_[g->handle_slot] = g;
    }
  }

  void RemoveHandleSlotLocked(Group* g) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    handle_slots_[g->handle_slot] = nullptr;
    free_handle_slots_.push_back(g->handle_slot);
  }

  // The live group `h` names, or null. Caller holds a tree reader slot (or
  // the writer lock). The id check makes a reused slot harmless: ids are
  // never reused.
  Group* LookupHandle(GroupHandle h) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (h.slot_ >= handle_slots_.size()) return nullptr;
    Group* g = handle_slots_[h.slot_];
    return g != nullptr && g->id == h.id_ ? g : nullptr;
  }

  static absl::Status HandleNotFound(GroupHandle h) {
    return absl::NotFoundError(absl::StrCat(
        "group id ", h.id_, ": no such group (deleted, or an empty handle)"));
  }

  uint64_t ClampLimit(uint64_t nr_pages) const {
    return std::min(nr_pages, page_counter_max_);
  }

  Limits LimitsOf(const Group& g) const {
    Limits l;
    l.max_pages = g.memory.max();
    l.high_pages = g.memory.high();
    l.min_pages = g.memory.min();
    l.low_pages = g.memory.low();
    return l;
  }

  GroupInfo InfoOf(const Group& g) const {
    return GroupInfo{g.path, g.id, LimitsOf(g)};
  }

  // memcg_memory_event(): local count on `g`, hierarchical counts on `g` and
  // its ancestors below the root.
  void RaiseEvent(Group* g, MemoryEvent event, int cpu) {
    const int e = static_cast<int>(event);
    g->events_local[e].fetch_add(1, std::memory_order_relaxed);
    for (Group* pos = g; pos != nullptr && !pos->is_root(); pos = pos->parent)
      pos->events[e].fetch_add(1, std::memory_order_relaxed);
    if (event == MemoryEvent::kOom) Bump(counters_[cpu].oom_events);
  }

  static Group* GroupOf(PageCounter* counter) {
    return static_cast<Group*>(counter->owner());
  }

  // Direct reclaim from `over` (try_to_free_mem_cgroup_pages(),
  // engine/reclaim.h). Returns pages reclaimed.
  uint64_t ReclaimPages(Group* over, uint64_t nr_pages, int cpu) {
    return reclaimer_.TryToFreeMemCgroupPages(over, nr_pages,
                                              ReclaimMode::kDirect, cpu);
  }

  // try_charge_memcg(), mm/memcontrol.c. Differences: no task context, so
  // no PF_MEMALLOC force-charge, no OOM killer to wait for; the failed
  // request itself is the OOM victim (oom_kill is raised on `g`). On
  // success *nr_pages_over_high is the batch charged if the charge left `g`
  // or an ancestor over memory.high (current->memcg_nr_pages_over_high),
  // else 0; a charge served from the stock checks nothing, as in the kernel.
  absl::Status TryChargeMemcg(Group* g, uint64_t nr_pages, int cpu,
                              uint64_t* nr_pages_over_high) {
    *nr_pages_over_high = 0;
    if (g->is_root()) {
      // The root has no limit and no stock; its own pages go straight to
      // its counter, bounded by PAGE_COUNTER_MAX (so bytes never wrap).
      PageCounter* fail = nullptr;
      if (g->memory.TryCharge(nr_pages, &fail)) return absl::OkStatus();
      return absl::ResourceExhaustedError(absl::StrCat(
          "PAGE_COUNTER_MAX of / reached: cannot charge ", nr_pages,
          " pages (usage ", g->memory.Read(), " pages)"));
    }
    uint64_t batch = std::max<uint64_t>(stock_.batch_pages(), nr_pages);
    int retries = kMaxReclaimRetries;
    bool drained = false;
    Group* over = nullptr;
    for (;;) {
      if (stock_.Consume(cpu, &g->memory, nr_pages)) return absl::OkStatus();
      // The stock's pool: pages this group parked from another CPU's slot.
      if (const uint64_t pooled = stock_.TakePooled(&g->memory, nr_pages)) {
        if (pooled > nr_pages)
          stock_.Refill(cpu, &g->memory, pooled - nr_pages);
        return absl::OkStatus();
      }
      PageCounter* fail = nullptr;
      if (g->memory.TryCharge(batch, &fail)) {
        if (batch > nr_pages) stock_.Refill(cpu, &g->memory, batch - nr_pages);
        if (MemoryHighExceeded(g)) *nr_pages_over_high = batch;
        return absl::OkStatus();
      }
      over = GroupOf(fail);
      if (batch > nr_pages) {
        // Retry the exact amount before any reclaim or event.
        batch = nr_pages;
        continue;
      }
      RaiseEvent(over, MemoryEvent::kMax, cpu);
      const uint64_t reclaimed = ReclaimPages(over, nr_pages, cpu);
      if (over->memory.Margin() >= nr_pages) continue;
      if (!drained) {
        // Waits for a concurrent drain (the kernel's trylock would skip
        // it): stocked pages must not turn into a premature OOM.
        stock_.DrainAll(&over->memory, /*wait=*/true);
        drained = true;
        continue;
      }
      // Progress on a small charge does not consume a retry.
      if (reclaimed > 0 && nr_pages <= 8) continue;
      if (retries-- > 0) continue;
      break;
    }
    // mem_cgroup_oom(): `oom` on the limiting group; the charging request is
    // the victim.
    RaiseEvent(over, MemoryEvent::kOom, cpu);
    RaiseEvent(g, MemoryEvent::kOomKill, cpu);
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory.max of ", ShortPath(over->path), " reached: cannot charge ",
        nr_pages, " pages to ", ShortPath(g->path), " (", ShortPath(over->path),
        " usage ", over->memory.Read(), " of max ", over->memory.max(),
        " pages)"));
  }

  void UpdateStats(Group* g, int cpu, PageKind kind, int64_t nr_pages,
                   bool charge) {
    int64_t deltas[kNrStatItems] = {};
    deltas[kind == PageKind::kAnon ? kStatAnon : kStatFile] = nr_pages;
    deltas[charge ? kStatPgpgin : kStatPgpgout] = 1;
    rstat_.Update(
        &g->rstat_group, cpu, deltas,
        static_cast<uint64_t>(nr_pages < 0 ? -nr_pages : nr_pages) + 1);
  }

  // --- operations ----------------------------------------------------------

  absl::StatusOr<GroupInfo> CreateGroup(absl::string_view path,
                                        const LimitsUpdate& limits) {
    if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
    if (path == "/")
      return absl::AlreadyExistsError("path \"/\": the root always exists");
    PercpuWriterLock l(&tree_lock_);
    if (Lookup(path) != nullptr)
      return absl::AlreadyExistsError(
          absl::StrCat("path ", QuotePath(path), " already exists"));
    Group* parent = Lookup(ParentPath(path));
    if (parent == nullptr)
      return absl::NotFoundError(absl::StrCat("path ", QuotePath(path),
                                              ": parent \"", ParentPath(path),
                                              "\" does not exist"));
    auto group = std::make_unique<Group>(std::string(path), next_id_++, parent,
                                         &rstat_, page_counter_max_);
    Group* g = group.get();
    ApplyLimitsLocked(g, limits);
    AddHandleSlotLocked(g);
    parent->children.emplace(std::string(path.substr(path.rfind('/') + 1)), g);
    groups_.emplace(std::string(path), std::move(group));
    nr_groups_.fetch_add(1, std::memory_order_relaxed);
    return InfoOf(*g);
  }

  absl::StatusOr<uint64_t> DeleteGroup(absl::string_view path) {
    if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
    if (path == "/")
      return absl::InvalidArgumentError(
          "path \"/\": the root cannot be deleted");
    PercpuWriterLock l(&tree_lock_);
    Group* g = Lookup(path);
    if (g == nullptr)
      return absl::NotFoundError(
          absl::StrCat("path ", QuotePath(path), ": no such group"));
    if (!g->children.empty())
      return absl::FailedPreconditionError(
          absl::StrCat("path ", QuotePath(path), " has ", g->children.size(),
                       " child group(s); delete them first"));
    // css offline/release: drain the stocks holding it, reset protection,
    // fold its stats into the parent, and hand what is still charged to the
    // parent (the counters already include it hierarchically).
    stock_.DrainOwner(&g->memory);
    InvalidateReclaimIterators(g);
    g->memory.SetMin(0);
    g->memory.SetLow(0);
    rstat_.FlushForRemoval(&g->rstat_group);
    const uint64_t reparented = g->memory.Read();
    Group* parent = g->parent;
    parent->nr_anon_pages.fetch_add(
        g->nr_anon_pages.load(std::memory_order_relaxed),
        std::memory_order_relaxed);
    parent->nr_file_pages.fetch_add(
        g->nr_file_pages.load(std::memory_order_relaxed),
        std::memory_order_relaxed);
    parent->children.erase(std::string(path.substr(path.rfind('/') + 1)));
    RemoveHandleSlotLocked(g);
    groups_.erase(groups_.find(path));
    nr_groups_.fetch_sub(1, std::memory_order_relaxed);
    return reparented;
  }

  absl::StatusOr<std::vector<std::string>> ListGroups(absl::string_view path,
                                                      bool recursive) {
    PercpuReaderLock l(&tree_lock_, CurrentCpu(nr_cpus_));
    absl::StatusOr<Group*> g = Find(path);
    if (!g.ok()) return g.status();
    std::vector<std::string> paths;
    std::vector<Group*> stack = {*g};
    while (!stack.empty()) {
      Group* pos = stack.back();
      stack.pop_back();
      for (const auto& [name, child] : pos->children) {
        paths.push_back(child->path);
        if (recursive) stack.push_back(child);
      }
    }
    std::sort(paths.begin(), paths.end());
    return paths;
  }

  // Stores the present limits. Caller serialises setters (writer lock or
  // limits_mu_).
  void ApplyLimitsLocked(Group* g, const LimitsUpdate& limits) {
    if (limits.min_pages) g->memory.SetMin(ClampLimit(*limits.min_pages));
    if (limits.low_pages) g->memory.SetLow(ClampLimit(*limits.low_pages));
    if (limits.high_pages) g->memory.SetHigh(ClampLimit(*limits.high_pages));
    if (limits.max_pages) g->memory.SetMax(ClampLimit(*limits.max_pages));
  }

  absl::StatusOr<GroupInfo> SetLimits(absl::string_view path,
                                      const LimitsUpdate& limits) {
    const int cpu = CurrentCpu(nr_cpus_);
    PercpuReaderLock l(&tree_lock_, cpu);
    absl::StatusOr<Group*> found = Find(path);
    if (!found.ok()) return found.status();
    Group* g = *found;
    if (g->is_root())
      return absl::InvalidArgumentError(
          "path \"/\": the root has no limits to set");
    MutexLock setter(&limits_mu_);
    ApplyLimitsLocked(g, limits);
    if (limits.high_pages && g->memory.Read() > g->memory.high()) {
      // memory_high_write(): drain once, then reclaim the excess until it
      // fits or 16 reclaims found nothing; never OOM.
      stock_.DrainAll(&g->memory, /*wait=*/true);
      int nr_retries = kMaxReclaimRetries;
      for (uint64_t usage; (usage = g->memory.Read()) > g->memory.high();) {
        if (ReclaimPages(g, usage - g->memory.high(), cpu) == 0 &&
            nr_retries-- == 0)
          break;
      }
    }
    if (limits.max_pages && g->memory.Read() > g->memory.max()) {
      // memory_max_write(): drain once, reclaim, and if usage still cannot
      // get under the new max, `oom` (cgroup v2 accepts the limit anyway).
      stock_.DrainAll(&g->memory, /*wait=*/true);
      int nr_reclaims = kMaxReclaimRetries;
      while (g->memory.Read() > g->memory.max()) {
        if (nr_reclaims > 0) {
          if (ReclaimPages(g, g->memory.Read() - g->memory.max(), cpu) == 0)
            --nr_reclaims;
          continue;
        }
        RaiseEvent(g, MemoryEvent::kOom, cpu);
        break;
      }
    }
    return InfoOf(*g);
  }

  absl::StatusOr<GroupHandle> ResolveGroup(absl::string_view path) const {
    PercpuReaderLock l(&tree_lock_, CurrentCpu(nr_cpus_));
    absl::StatusOr<Group*> g = Find(path);
    if (!g.ok()) return g.status();
    return GroupHandle((*g)->handle_slot, (*g)->id);
  }

  // `Lookup` maps the caller's key (a path or a GroupHandle) to its group
  // under the tree reader lock; the rest is common to both overloads.
  template <typename Lookup>
  absl::StatusOr<ChargeResult> Charge(const Lookup& lookup, uint64_t nr_pages,
                                      PageKind kind,
                                      std::optional<int> cpu_arg) {
    absl::StatusOr<int> cpu = ResolveCpu(cpu_arg);
    if (!cpu.ok()) return Reject(cpu.status());
    if (absl::Status s = CheckPages(nr_pages, kind); !s.ok())
      return Reject(s, *cpu);
    PercpuReaderLock l(&tree_lock_, *cpu);
    absl::StatusOr<Group*> g = lookup();
    if (!g.ok()) return Reject(g.status(), *cpu);
    return ChargeLocked(*g, nr_pages, kind, *cpu);
  }

  absl::StatusOr<ChargeResult> ChargeLocked(Group* g, uint64_t nr_pages,
                                            PageKind kind, int cpu) {
    uint64_t nr_pages_over_high = 0;
    if (absl::Status s = TryChargeMemcg(g, nr_pages, cpu, &nr_pages_over_high);
        !s.ok()) {
      Bump(counters_[cpu].charges_oom);
      return s;
    }
    (kind == PageKind::kAnon ? g->nr_anon_pages : g->nr_file_pages)
        .fetch_add(nr_pages, std::memory_order_relaxed);
    UpdateStats(g, cpu, kind, static_cast<int64_t>(nr_pages),
                /*charge=*/true);
    Bump(counters_[cpu].charges_ok);
    ChargeResult result;
    result.nr_pages = nr_pages;
    // The request's return to user mode: mem_cgroup_handle_over_high().
    result.throttle = reclaimer_.HandleOverHigh(g, nr_pages_over_high, cpu);
    return result;
  }

  auto PathLookup(absl::string_view path) const {
    return [this, path]() { return Find(path); };
  }

  auto HandleLookup(GroupHandle h) const {
    return [this, h]() -> absl::StatusOr<Group*> {
      Group* g = LookupHandle(h);
      if (g == nullptr) return HandleNotFound(h);
      return g;
    };
  }

  template <typename Lookup>
  absl::StatusOr<UnchargeResult> Uncharge(const Lookup& lookup,
                                          uint64_t nr_pages, PageKind kind,
                                          std::optional<int> cpu_arg) {
    absl::StatusOr<int> cpu = ResolveCpu(cpu_arg);
    if (!cpu.ok()) return cpu.status();
    if (absl::Status s = CheckPages(nr_pages, kind); !s.ok()) return s;
    PercpuReaderLock l(&tree_lock_, *cpu);
    absl::StatusOr<Group*> found = lookup();
    if (!found.ok()) return found.status();
    return UnchargeLocked(*found, nr_pages, kind, *cpu);
  }

  absl::StatusOr<UnchargeResult> UnchargeLocked(Group* g, uint64_t nr_pages,
                                                PageKind kind, int cpu) {
    std::atomic<uint64_t>& held =
        kind == PageKind::kAnon ? g->nr_anon_pages : g->nr_file_pages;
    uint64_t cur = held.load(std::memory_order_relaxed);
    uint64_t take;
    do {
      if (kind == PageKind::kAnon && nr_pages > cur)
        return absl::FailedPreconditionError(
            absl::StrCat("nr_pages ", nr_pages, ": path ", QuotePath(g->path),
                         " holds only ", cur, " ANON pages"));
      take = std::min(nr_pages, cur);
      if (take == 0) return UnchargeResult{0};
    } while (!held.compare_exchange_weak(cur, cur - take,
                                         std::memory_order_relaxed));
    if (g->is_root()) {
      g->memory.Uncharge(take);
    } else {
      stock_.Refill(cpu, &g->memory, take);
    }
    UpdateStats(g, cpu, kind, -static_cast<int64_t>(take), /*charge=*/false);
    Bump(counters_[cpu].uncharges);
    return UnchargeResult{take};
  }

  absl::StatusOr<GroupStats> GetStats(absl::string_view path, FlushMode mode) {
    const int cpu = CurrentCpu(nr_cpus_);
    PercpuReaderLock l(&tree_lock_, cpu);
    absl::StatusOr<Group*> found = Find(path);
    if (!found.ok()) return found.status();
    Group* g = *found;
    GroupStats stats;
    stats.path = g->path;
    if (mode == FlushMode::kExact ||
        (mode == FlushMode::kThreshold && rstat_.NeedsFlush(&g->rstat_group))) {
      rstat_.Flush(&g->rstat_group);
      stats.flushed = true;
    }
    if (!stats.flushed) {
      // The newest flush that covered this group: its own or an ancestor's
      // (the periodic flush covers every group). Never flushed: as old as
      // the engine.
      int64_t last = 0;
      for (Group* pos = g; pos != nullptr; pos = pos->parent)
        last = std::max(last, pos->rstat_group.last_flush_ns());
      if (last == 0) last = created_ns_;
      stats.max_staleness =
          absl::Nanoseconds(std::max<int64_t>(0, clock_.NowNs() - last));
    }
    stats.memory_current_pages = g->memory.Read();
    stats.memory_peak_pages = g->memory.watermark();
    stats.limits = LimitsOf(*g);
    stats.failcnt = g->memory.failcnt();
    stats.emin_pages = g->memory.emin();
    stats.elow_pages = g->memory.elow();
    auto events = [](const std::atomic<uint64_t>(&e)[kNrMemoryEvents]) {
      MemoryEvents out;
      out.low = e[0].load(std::memory_order_relaxed);
      out.high = e[1].load(std::memory_order_relaxed);
      out.max = e[2].load(std::memory_order_relaxed);
      out.oom = e[3].load(std::memory_order_relaxed);
      out.oom_kill = e[4].load(std::memory_order_relaxed);
      return out;
    };
    stats.events = events(g->events);
    stats.events_local = events(g->events_local);

    const RstatGroup& r = g->rstat_group;
    const uint64_t ps = page_size_bytes_;
    auto total = [&](StatItem item) {
      return static_cast<uint64_t>(r.total(item));
    };
    const uint64_t pgscan =
        total(kStatPgscanDirect) + total(kStatPgscanProactive);
    const uint64_t pgsteal =
        total(kStatPgstealDirect) + total(kStatPgstealProactive);
    // memory_stat_format() order: state items in bytes, the synthetic
    // pgscan/pgsteal sums, then the per-mode event counts. pgpgin/pgpgout
    // (charge and uncharge operations, cgroup v1 names) come last.
    stats.stat = {
        {"anon", total(kStatAnon) * ps},
        {"file", total(kStatFile) * ps},
        {"pgscan", pgscan},
        {"pgsteal", pgsteal},
        {"pgscan_kswapd", 0},
        {"pgscan_direct", total(kStatPgscanDirect)},
        {"pgscan_khugepaged", 0},
        {"pgscan_proactive", total(kStatPgscanProactive)},
        {"pgsteal_kswapd", 0},
        {"pgsteal_direct", total(kStatPgstealDirect)},
        {"pgsteal_khugepaged", 0},
        {"pgsteal_proactive", total(kStatPgstealProactive)},
        {"pgpgin", total(kStatPgpgin)},
        {"pgpgout", total(kStatPgpgout)},
    };
    return stats;
  }

  absl::StatusOr<uint64_t> Reclaim(absl::string_view path, uint64_t nr_pages) {
    const int cpu = CurrentCpu(nr_cpus_);
    PercpuReaderLock l(&tree_lock_, cpu);
    absl::StatusOr<Group*> g = Find(path);
    if (!g.ok()) return g.status();
    return reclaimer_.MemoryReclaim(*g, nr_pages, cpu);
  }

  void DrainAllStock() {
    PercpuReaderLock l(&tree_lock_, CurrentCpu(nr_cpus_));
    // Unlike the kernel's best-effort drain, callers of this entry point
    // want the stocks empty: wait for a concurrent drain and go again.
    stock_.DrainAll(nullptr, /*wait=*/true);
  }

  EngineInfo GetInfo() const {
    EngineInfo info;
    info.nr_cpus = nr_cpus_;
    info.page_size_bytes = page_size_bytes_;
    info.charge_batch_pages = stock_.batch_pages();
    info.flush_lock_policy = rstat_.policy();
    info.flush_lock_policy_name = FlushLockConfigName(rstat_.config());
    info.flush_hold_budget = rstat_.config().hold_budget;
    info.periodic_flush_interval = periodic_flush_interval_;
    info.nr_stock_slots = kNrStockSlots;
    info.nr_groups = nr_groups_.load(std::memory_order_relaxed);
    info.flush_lock_hold_max = rstat_.hold_max();
    info.flush_lock_hold_wall_max = rstat_.hold_wall_max();
    info.preempted_flushes = rstat_.preempted_flushes();
    info.longest_flush_holds = rstat_.LongestHolds();
    return info;
  }

  EngineCounters GetCounters() const {
    EngineCounters c;
    for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
      const CpuCounters& pc = counters_[cpu];
      c.charges_ok += pc.charges_ok.load(std::memory_order_relaxed);
      c.charges_oom += pc.charges_oom.load(std::memory_order_relaxed);
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

  int nr_cpus() const { return nr_cpus_; }
  uint64_t page_size_bytes() const { return page_size_bytes_; }
  uint64_t page_counter_max() const { return page_counter_max_; }

 private:
  absl::Status CheckPages(uint64_t nr_pages, PageKind kind) const {
    if (nr_pages == 0)
      return absl::InvalidArgumentError("nr_pages must be > 0");
    if (nr_pages > page_counter_max_)
      return absl::InvalidArgumentError(
          absl::StrCat("nr_pages ", nr_pages, " exceeds PAGE_COUNTER_MAX (",
                       page_counter_max_, ")"));
    if (kind != PageKind::kAnon && kind != PageKind::kFile)
      return absl::InvalidArgumentError("kind must be ANON or FILE");
    return absl::OkStatus();
  }

  absl::Status Reject(absl::Status status, int cpu = 0) {
    Bump(counters_[cpu].charges_rejected);
    return status;
  }

  // Constant after construction.
  const int nr_cpus_;
  const uint64_t page_size_bytes_;
  const uint64_t page_counter_max_;
  const absl::Duration periodic_flush_interval_;
  const Clock& clock_;
  const int64_t created_ns_ = clock_.NowNs();

  // The group tree: read-locked (one CPU slot) by every operation,
  // write-locked by create and delete.
  mutable PercpuRwLock tree_lock_;
  absl::flat_hash_map<std::string, std::unique_ptr<Group>> groups_
      ABSL_GUARDED_BY(tree_lock_);
  Group* root_;  // constant after construction
  uint64_t next_id_ ABSL_GUARDED_BY(tree_lock_) = 1;
  // GroupHandle slot -> live group (null: free); see AddHandleSlotLocked.
  std::vector<Group*> handle_slots_ ABSL_GUARDED_BY(tree_lock_);
  std::vector<uint32_t> free_handle_slots_ ABSL_GUARDED_BY(tree_lock_);
  std::atomic<uint64_t> nr_groups_{0};

  // Serialises limit setters (the kernel's per-file write serialisation).
  Mutex limits_mu_;

  MemcgStock stock_;
  Rstat rstat_;
  std::unique_ptr<CpuCounters[]> counters_;  // per CPU slot
  Reclaimer reclaimer_;

  std::atomic<int64_t> last_periodic_flush_ns_{0};
  absl::Notification stop_flusher_;
  std::thread flusher_;  // last: started after everything it uses
};

// --- Engine --------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const EngineOptions& options) {
  int nr_cpus = options.nr_cpus;
  if (nr_cpus < 0 || nr_cpus > kMaxCpus)
    return absl::InvalidArgumentError(
        absl::StrCat("nr_cpus ", nr_cpus, " out of range [0, ", kMaxCpus, "]"));
  if (nr_cpus == 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    nr_cpus =
        online > 0 ? static_cast<int>(std::min<long>(online, kMaxCpus)) : 1;
  }
  if (options.charge_batch_pages < 1 || options.charge_batch_pages > 127)
    return absl::InvalidArgumentError(absl::StrCat("charge_batch_pages ",
                                                   options.charge_batch_pages,
                                                   " out of range [1, 127]"));
  const uint32_t buckets = options.stock_pool_buckets;
  if (buckets > 65536 || (buckets & (buckets - 1)) != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("stock_pool_buckets ", buckets,
                     " must be 0 or a power of two <= 65536"));
  const uint32_t sets = options.stock_victim_sets;
  if (sets > 1024 || (sets & (sets - 1)) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "stock_victim_sets ", sets, " must be 0 or a power of two <= 1024"));
  const uint64_t ps = options.page_size_bytes;
  if (ps < 512 || (ps & (ps - 1)) != 0 || ps > (uint64_t{1} << 30))
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size_bytes ", ps, " must be a power of two in [512, 1 GiB]"));
  if (options.flush_batch_cpus < 1 || options.flush_batch_cpus > kMaxCpus)
    return absl::InvalidArgumentError(
        absl::StrCat("flush_batch_cpus ", options.flush_batch_cpus,
                     " out of range [1, ", kMaxCpus, "]"));
  if (options.flush_hold_budget <= absl::ZeroDuration() ||
      options.flush_hold_budget > absl::Seconds(1))
    return absl::InvalidArgumentError(absl::StrCat(
        "flush_hold_budget ", absl::FormatDuration(options.flush_hold_budget),
        " must be in (0, 1s]"));
  if (options.periodic_flush_interval < absl::ZeroDuration())
    return absl::InvalidArgumentError("periodic_flush_interval must be >= 0");
  return std::unique_ptr<Engine>(
      new Engine(std::make_unique<EngineImpl>(nr_cpus, options)));
}

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::StatusOr<GroupInfo> Engine::CreateGroup(absl::string_view path,
                                              const LimitsUpdate& limits) {
  return impl_->CreateGroup(path, limits);
}
absl::StatusOr<uint64_t> Engine::DeleteGroup(absl::string_view path) {
  return impl_->DeleteGroup(path);
}
absl::StatusOr<std::vector<std::string>> Engine::ListGroups(
    absl::string_view path, bool recursive) const {
  return impl_->ListGroups(path, recursive);
}
absl::StatusOr<GroupInfo> Engine::SetLimits(absl::string_view path,
                                            const LimitsUpdate& limits) {
  return impl_->SetLimits(path, limits);
}
absl::StatusOr<ChargeResult> Engine::Charge(absl::string_view path,
                                            uint64_t nr_pages, PageKind kind,
                                            std::optional<int> cpu) {
  return impl_->Charge(impl_->PathLookup(path), nr_pages, kind, cpu);
}
absl::StatusOr<UnchargeResult> Engine::Uncharge(absl::string_view path,
                                                uint64_t nr_pages,
                                                PageKind kind,
                                                std::optional<int> cpu) {
  return impl_->Uncharge(impl_->PathLookup(path), nr_pages, kind, cpu);
}
absl::StatusOr<GroupHandle> Engine::ResolveGroup(absl::string_view path) const {
  return impl_->ResolveGroup(path);
}
absl::StatusOr<ChargeResult> Engine::Charge(GroupHandle group,
                                            uint64_t nr_pages, PageKind kind,
                                            std::optional<int> cpu) {
  return impl_->Charge(impl_->HandleLookup(group), nr_pages, kind, cpu);
}
absl::StatusOr<UnchargeResult> Engine::Uncharge(GroupHandle group,
                                                uint64_t nr_pages,
                                                PageKind kind,
                                                std::optional<int> cpu) {
  return impl_->Uncharge(impl_->HandleLookup(group), nr_pages, kind, cpu);
}
absl::StatusOr<uint64_t> Engine::Reclaim(absl::string_view path,
                                         uint64_t nr_pages) {
  return impl_->Reclaim(path, nr_pages);
}
absl::StatusOr<GroupStats> Engine::GetStats(absl::string_view path,
                                            FlushMode mode) {
  return impl_->GetStats(path, mode);
}
void Engine::DrainAllStock() { impl_->DrainAllStock(); }
bool Engine::MaybePeriodicFlush() { return impl_->MaybePeriodicFlush(); }
EngineInfo Engine::GetInfo() const { return impl_->GetInfo(); }
EngineCounters Engine::GetCounters() const { return impl_->GetCounters(); }
int Engine::nr_cpus() const { return impl_->nr_cpus(); }
uint64_t Engine::page_size_bytes() const { return impl_->page_size_bytes(); }
uint64_t Engine::page_counter_max() const { return impl_->page_counter_max(); }

}  // namespace cgacct
