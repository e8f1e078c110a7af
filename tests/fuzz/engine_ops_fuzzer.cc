// libFuzzer target: random operation sequences on the engine's memory
// controller, checked against a model and the engine's invariants
// (docs/DESIGN.md §12, issue 11 item 5).
//
// Input: the first bytes pick the engine options (CPUs, page size, batch,
// pool, victim table, flush-lock policy, recursiveprot, full walks, then
// uncharges through the stock, the stock's eviction seed and
// memory_localevents); the rest is a sequence of operations on a small tree
// of at most 39 groups ({a,b,c} up to 3 levels deep): create, delete (the
// group stays dying while it holds pages), charge, uncharge (by path and
// through GroupHandles), set limits, memory.oom.group writes, memory.peak
// watermarks (open, read, reset, close), reclaim, stats reads, stock
// drains, flushes, and calls with invalid arguments, each on a CPU slot the
// input chooses. Every call's status is checked against what the model
// predicts.
//
// After every "drain + flush" operation, and at the end of each input, every
// live group is checked (CheckAll):
//   - usage >= 0: no page_counter ever underflowed (PageCounter::underflows);
//   - each group's usage = its own pages + the sum of its children's usages,
//     dying children included (every stock, victim way and pool bucket is
//     empty after the drain); a dying group holds the same invariants, has
//     no protection, and its pages are what its live ancestor answers for
//     (the model's own ANON count of that ancestor);
//   - protected usages: min_usage = min(usage, memory.min), low_usage =
//     min(usage, memory.low) below the root, and each group's
//     children_min/low_usage = the sum of its children's min/low_usage;
//   - memory.events never decrease (per group instance), and each group's
//     hierarchical events = its local events + its children's hierarchical
//     events (dying children included) + those of its freed children as they
//     were when freed; the root's are 0; under memory_localevents
//     hierarchical = local;
//   - an OOM that kills a group (memory.oom.group) names a group at or above
//     the charging one with the flag set, and a charging group with the
//     flag set is always killed (it lies between the victim and any OOM
//     domain); oom_group_kill counts every kill once;
//   - a memory.peak watermark reads between the group's usage and its
//     group-wide peak, and its usage right after a reset;
//   - stats equal charges - uncharges - reclaimed: memory.stat anon = the
//     model's ANON pages of the subtree (own counts exact too); file = the
//     subtree's exact FILE count = FILE charged - uncharged - pgsteal;
//     pgscan = pgsteal; inactive_anon/file = anon/file, active_* and
//     unevictable 0; failcnt, peak, pgscan, pgsteal never decrease;
//     usage <= peak;
//   - limits as last set (clamped to PAGE_COUNTER_MAX), the set of live
//     groups as the model's, and the engine counters (charges_ok/oom/
//     rejected, uncharges, oom events) equal to what the calls answered.
// A violation prints what differs and aborts (libFuzzer reports a crash).
//
// Single-threaded on purpose (libFuzzer needs reproducible inputs); the
// concurrent paths are covered by the TSan tests (tests/engine/
// concurrency_test.cc). "Across CPUs" is the per-CPU slot every operation
// names, so pages move between CPU stocks, victim tables and the pool.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/clock.h"
#include "engine/group.h"
#include "engine/group_handle.h"
#include "engine/group_path.h"
#include "engine/memcontrol.h"
#include "engine/memory_stat.h"
#include "engine/oom_group.h"
#include "engine/options.h"
#include "engine/percpu.h"
#include "engine/rstat.h"
#include "engine/types.h"

namespace cgacct {
namespace {

// Prints the violated invariant and aborts, so libFuzzer saves the input.
[[noreturn]] void Violation(const char* format, ...)
    __attribute__((format(printf, 1, 2)));
void Violation(const char* format, ...) {
  std::fprintf(stderr, "engine_ops_fuzzer: invariant violated: ");
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\n");
  std::abort();
}

#define FUZZ_CHECK(cond, ...)  \
  do {                         \
    if (!(cond)) Violation(__VA_ARGS__); \
  } while (0)

using u64 = uint64_t;
using PeakOp = MemoryController::PeakOp;

constexpr int kNrEvents = kNrMemoryEvents;

std::array<u64, kNrEvents> EventArray(const MemoryEvents& e) {
  return {e.low, e.high, e.max, e.oom, e.oom_kill, e.oom_group_kill};
}

// What the model knows of one live group (by path).
struct ModelGroup {
  u64 id = 0;
  Limits limits;
  bool oom_group = false;  // memory.oom.group
  // Exact: ANON pages charged to the group itself, and those of its dying
  // descendants it answers for.
  u64 anon_own = 0;
  // Hierarchical since the group's creation, deleted descendants included:
  // ANON and FILE charged minus uncharged (pages).
  u64 anon_hier = 0;
  u64 file_hier = 0;
  // Hierarchical memory.events of freed children, as they were when freed
  // (their events stay counted in their ancestors).
  std::array<u64, kNrEvents> freed_events{};
};

// A memory.peak watermark the harness holds open: the group instance it
// was opened on (path and id) and its id.
struct PeakSlot {
  std::string path;
  u64 group_id = 0;
  u64 watermark_id = 0;
};

// Values that never decrease, per group instance (id).
struct Monotone {
  std::array<u64, kNrEvents> events{};
  std::array<u64, kNrEvents> events_local{};
  u64 failcnt = 0;
  u64 peak = 0;
  u64 pgscan = 0;
  u64 pgsteal = 0;
};

struct HandleSlot {
  GroupHandle handle;
  std::string path;
};

class Harness {
 public:
  Harness(FuzzedDataProvider& in) : in_(in) {}

  bool Init() {
    EngineOptions o;
    o.nr_cpus = in_.ConsumeIntegralInRange<int>(1, 8);
    static constexpr u64 kPageSizes[] = {4096, 512, 65536, u64{1} << 30};
    o.page_size_bytes = in_.PickValueInArray(kPageSizes);
    static constexpr uint32_t kBatches[] = {64, 1, 2, 32, 127};
    o.charge_batch_pages = in_.PickValueInArray(kBatches);
    static constexpr uint32_t kBuckets[] = {1024, 0, 1, 4};
    o.stock_pool_buckets = in_.PickValueInArray(kBuckets);
    static constexpr uint32_t kSets[] = {64, 0, 1, 2};
    o.stock_victim_sets = in_.PickValueInArray(kSets);
    static constexpr FlushLockPolicy kPolicies[] = {
        FlushLockPolicy::kPerCpu, FlushLockPolicy::kWhole,
        FlushLockPolicy::kBatch, FlushLockPolicy::kAdaptive};
    o.flush_lock_policy = in_.PickValueInArray(kPolicies);
    o.flush_batch_cpus = in_.ConsumeIntegralInRange<int>(1, 4);
    o.memory_recursiveprot = in_.ConsumeBool();
    o.memcg_full_walk = in_.ConsumeBool();
    // adaptive without a budget (the default: one CPU per hold) or with one
    // (holds across CPUs on the fuzzer's clock).
    if (in_.ConsumeBool()) o.flush_hold_budget = absl::Microseconds(50);
    // Consumed after the older options, so that older inputs keep theirs.
    o.uncharge_refills_stock = in_.ConsumeBool();
    o.stock_eviction_seed = in_.ConsumeIntegral<u64>();
    o.memory_localevents = in_.ConsumeBool();
    localevents_ = o.memory_localevents;
    o.periodic_flush_interval = absl::ZeroDuration();
    o.clock = &clock_;
    FUZZ_CHECK(o.Validate().ok(), "options rejected: %s",
               o.Validate().ToString().c_str());
    nr_cpus_ = o.nr_cpus;
    mc_ = std::make_unique<MemoryController>(nr_cpus_, o);
    pcm_ = mc_->page_counter_max();
    ps_ = mc_->page_size_bytes();
    groups_["/"] = ModelGroup{};
    {
      Group* root = mc_->tree().root();
      groups_["/"].id = root->id();
      groups_["/"].limits = {pcm_, pcm_, 0, 0};
    }
    return true;
  }

  void Run() {
    int nr_ops = 0;
    while (in_.remaining_bytes() > 0 && nr_ops++ < 400) Step();
    Quiesce();
    CheckAll();
  }

 private:
  // --- inputs ---------------------------------------------------------

  std::string PickPath() {
    static constexpr const char* kNames[] = {"a", "b", "c"};
    const int depth = in_.ConsumeIntegralInRange<int>(0, 3);
    std::string path;
    for (int i = 0; i < depth; ++i)
      absl::StrAppend(&path, "/", in_.PickValueInArray(kNames));
    return path.empty() ? "/" : path;
  }

  u64 PickPages() {
    switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
      case 0:
        return in_.ConsumeIntegralInRange<u64>(1, 100000);
      case 1:
        return in_.ConsumeIntegralInRange<u64>(1, pcm_);
      case 2:
        return pcm_;
      default:
        return in_.ConsumeIntegralInRange<u64>(1, 300);
    }
  }

  std::optional<u64> PickLimit() {
    switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        return std::nullopt;
      case 1:
        return pcm_;
      case 2:
        return ~u64{0};
      case 3:
        return in_.ConsumeIntegral<u64>();
      default:
        return in_.ConsumeIntegralInRange<u64>(0, 2000);
    }
  }

  LimitsUpdate PickLimits() {
    LimitsUpdate l;
    l.max_pages = PickLimit();
    l.high_pages = PickLimit();
    l.min_pages = PickLimit();
    l.low_pages = PickLimit();
    return l;
  }

  PageKind PickKind() {
    return in_.ConsumeBool() ? PageKind::kAnon : PageKind::kFile;
  }

  std::optional<int> PickCpuArg() {
    if (in_.ConsumeIntegralInRange<int>(0, 3) == 0) return std::nullopt;
    return in_.ConsumeIntegralInRange<int>(0, nr_cpus_ - 1);
  }

  // --- model helpers --------------------------------------------------

  bool Live(const std::string& path) const { return groups_.count(path) > 0; }

  bool HasChildren(const std::string& path) const {
    for (const auto& [p, g] : groups_)
      if (p != "/" && ParentPath(p) == path) return true;
    return false;
  }

  // Applies `fn` to the model of `path` and of each of its ancestors.
  template <typename Fn>
  void ForSelfAndAncestors(const std::string& path, Fn fn) {
    std::string p = path;
    for (;;) {
      fn(groups_.at(p));
      if (p == "/") break;
      p = std::string(ParentPath(p));
    }
  }

  void ApplyModelLimits(ModelGroup& g, const LimitsUpdate& l) {
    auto clamp = [&](u64 v) { return std::min(v, pcm_); };
    if (l.max_pages) g.limits.max_pages = clamp(*l.max_pages);
    if (l.high_pages) g.limits.high_pages = clamp(*l.high_pages);
    if (l.min_pages) g.limits.min_pages = clamp(*l.min_pages);
    if (l.low_pages) g.limits.low_pages = clamp(*l.low_pages);
  }

  // The pages of `kind` of `g`'s dying children's subtrees.
  static u64 DyingPages(const Group* g, PageKind kind) {
    u64 sum = 0;
    for (const Group* c = g->first_child(); c != nullptr; c = c->next_sibling())
      if (!c->online()) sum += c->nr_pages(kind) + DyingPages(c, kind);
    return sum;
  }

  // FILE pages the live group at `path` answers for: its own and its dying
  // descendants' (the exact counts).
  u64 FilePages(const std::string& path) {
    PercpuReaderLock l(mc_->tree().lock(), 0);
    Group* g = mc_->tree().Lookup(path);
    FUZZ_CHECK(g != nullptr, "live group %s not found", path.c_str());
    return g->nr_pages(PageKind::kFile) + DyingPages(g, PageKind::kFile);
  }

  // The dying children of every live group, with their hierarchical events
  // now: before a create or delete (the only operations that free dying
  // groups), so that the ones it frees are known with their final events.
  using DyingSnapshot =
      std::map<std::string, std::map<u64, std::array<u64, kNrEvents>>>;
  DyingSnapshot SnapshotDying() {
    DyingSnapshot out;
    PercpuReaderLock l(mc_->tree().lock(), 0);
    for (const auto& [path, m] : groups_) {
      const Group* g = mc_->tree().Lookup(path);
      FUZZ_CHECK(g != nullptr, "live group %s not found", path.c_str());
      for (const Group* c = g->first_child(); c != nullptr;
           c = c->next_sibling())
        if (!c->online()) out[path][c->id()] = EventArray(c->events());
    }
    return out;
  }
  // Adds the events of the dying children in `before` that are gone now
  // (freed) to their live parents' freed_events.
  void AccountFreed(const DyingSnapshot& before) {
    const DyingSnapshot now = SnapshotDying();
    for (const auto& [path, children] : before) {
      auto live = groups_.find(path);
      if (live == groups_.end()) continue;  // deleted itself: not checked
      auto still = now.find(path);
      for (const auto& [id, events] : children) {
        if (still != now.end() && still->second.count(id) > 0) continue;
        for (int i = 0; i < kNrEvents; ++i)
          live->second.freed_events[i] += events[i];
      }
    }
  }

  u64 LocalOom(const std::string& path) {
    PercpuReaderLock l(mc_->tree().lock(), 0);
    Group* g = mc_->tree().Lookup(path);
    FUZZ_CHECK(g != nullptr, "live group %s not found", path.c_str());
    return g->events_local().oom;
  }

  static void ExpectCode(const absl::Status& s, absl::StatusCode want,
                         const char* op, const std::string& path) {
    FUZZ_CHECK(s.code() == want, "%s %s: got %s, want code %d", op,
               path.c_str(), s.ToString().c_str(), static_cast<int>(want));
    FUZZ_CHECK(s.ok() || !s.message().empty(), "%s %s: error without message",
               op, path.c_str());
  }

  // --- operations -----------------------------------------------------

  void Step() {
    const int cpu = in_.ConsumeIntegralInRange<int>(0, nr_cpus_ - 1);
    // Operations that name no CPU run on this one.
    ScopedCpuOverride on_cpu(cpu);
    switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
      case 0:
      case 1:
        return OpCreate();
      case 2:
        return OpDelete();
      case 3:
      case 4:
      case 5:
        return OpCharge(/*by_handle=*/false);
      case 6:
      case 7:
        return OpUncharge(/*by_handle=*/false);
      case 8:
        return OpSetLimits();
      case 9:
        return OpReclaim();
      case 10:
        return OpGetStats();
      case 11:
        return OpResolve();
      case 12:
        return in_.ConsumeBool() ? OpCharge(/*by_handle=*/true)
                                 : OpUncharge(/*by_handle=*/true);
      case 13:
        switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
          case 0:
            return OpSetOomGroup();
          case 1:
            return OpPeak();
          default:
            return OpInvalid();
        }
      case 14:
        switch (in_.ConsumeIntegralInRange<int>(0, 2)) {
          case 0:
            return mc_->DrainAllStock();
          case 1:
            return mc_->FlushAll();
          default:
            clock_.Advance(absl::Milliseconds(
                in_.ConsumeIntegralInRange<int>(1, 5000)));
            return;
        }
      default:
        Quiesce();
        return CheckAll();
    }
  }

  void OpCreate() {
    const std::string path = PickPath();
    const LimitsUpdate limits = PickLimits();
    const DyingSnapshot dying = SnapshotDying();
    absl::StatusOr<GroupInfo> r = mc_->CreateGroup(path, limits);
    AccountFreed(dying);
    if (path == "/" || Live(path)) {
      ExpectCode(r.status(), absl::StatusCode::kAlreadyExists, "create", path);
      return;
    }
    if (!Live(std::string(ParentPath(path)))) {
      ExpectCode(r.status(), absl::StatusCode::kNotFound, "create", path);
      return;
    }
    ExpectCode(r.status(), absl::StatusCode::kOk, "create", path);
    ModelGroup g;
    g.id = r->id;
    g.limits = {pcm_, pcm_, 0, 0};
    ApplyModelLimits(g, limits);
    FUZZ_CHECK(r->limits.max_pages == g.limits.max_pages &&
                   r->limits.high_pages == g.limits.high_pages &&
                   r->limits.min_pages == g.limits.min_pages &&
                   r->limits.low_pages == g.limits.low_pages,
               "create %s: limits answered differ from the request",
               path.c_str());
    FUZZ_CHECK(r->id > last_id_, "create %s: id %llu not fresh (last %llu)",
               path.c_str(), static_cast<unsigned long long>(r->id),
               static_cast<unsigned long long>(last_id_));
    last_id_ = r->id;
    groups_[path] = g;
  }

  void OpDelete() {
    const std::string path = PickPath();
    if (path == "/") {
      ExpectCode(mc_->DeleteGroup(path).status(),
                 absl::StatusCode::kInvalidArgument, "delete", path);
      return;
    }
    if (!Live(path)) {
      ExpectCode(mc_->DeleteGroup(path).status(), absl::StatusCode::kNotFound,
                 "delete", path);
      return;
    }
    if (HasChildren(path)) {
      ExpectCode(mc_->DeleteGroup(path).status(),
                 absl::StatusCode::kFailedPrecondition, "delete", path);
      return;
    }
    // What the group's ancestors keep: its hierarchical events (in its
    // parent's freed_events once it is freed), and its local oom and
    // oom_group_kill counts for the engine-wide checks (a dying group is
    // never charged, so they do not move again).
    MemoryEvents events;
    u64 usage;
    {
      PercpuReaderLock l(mc_->tree().lock(), 0);
      Group* g = mc_->tree().Lookup(path);
      FUZZ_CHECK(g != nullptr, "live group %s not found", path.c_str());
      events = g->events();
      deleted_oom_ += g->events_local().oom;
      deleted_group_kills_ += g->events_local().oom_group_kill;
      usage = g->memory().Read();
    }
    DyingSnapshot dying = SnapshotDying();
    // The deleted group itself: freed at once if it holds nothing.
    const std::string parent_path(ParentPath(path));
    dying[parent_path][groups_.at(path).id] = EventArray(events);
    absl::StatusOr<u64> r = mc_->DeleteGroup(path);
    ExpectCode(r.status(), absl::StatusCode::kOk, "delete", path);
    // The pages left on the dying group: its usage once its stock is
    // drained, at most what it had.
    FUZZ_CHECK(*r <= usage, "delete %s: %llu pages left, usage was %llu",
               path.c_str(), static_cast<unsigned long long>(*r),
               static_cast<unsigned long long>(usage));
    ModelGroup& parent = groups_.at(parent_path);
    parent.anon_own += groups_.at(path).anon_own;
    monotone_.erase(groups_.at(path).id);
    groups_.erase(path);
    AccountFreed(dying);
  }

  // The live group a handle slot names, or "" if its group is gone.
  std::string HandleTarget(const HandleSlot& h) const {
    auto it = groups_.find(h.path);
    if (it == groups_.end() || it->second.id != h.handle.id()) return "";
    return h.path;
  }

  void OpCharge(bool by_handle) {
    std::string path;
    HandleSlot* slot = nullptr;
    if (by_handle) {
      slot = &handles_[in_.ConsumeIntegralInRange<size_t>(0, kNrHandles - 1)];
      path = HandleTarget(*slot);
    } else {
      path = PickPath();
    }
    const u64 n = PickPages();
    const PageKind kind = PickKind();
    const std::optional<int> cpu = PickCpuArg();
    absl::StatusOr<ChargeResult> r =
        by_handle ? mc_->Charge(slot->handle, n, kind, cpu)
                  : mc_->Charge(path, n, kind, cpu);
    const std::string shown = by_handle ? "handle:" + slot->path : path;
    if (path == "/") {
      // The root holds no pages of its own (RefuseRootCharge).
      ExpectCode(r.status(), absl::StatusCode::kInvalidArgument, "charge",
                 shown);
      ++charges_rejected_;
      return;
    }
    if (path.empty() || !Live(path)) {
      ExpectCode(r.status(), absl::StatusCode::kNotFound, "charge", shown);
      ++charges_rejected_;
      return;
    }
    if (r.status().code() == absl::StatusCode::kResourceExhausted) {
      FUZZ_CHECK(!r.status().message().empty(), "charge: OOM without message");
      // mem_cgroup_oom() only for a charge of at most 8 pages; a costlier
      // one is refused without an OOM.
      ++(n <= kCostlyChargePages ? charges_oom_ : charges_refused_);
      CheckOomGroupKill(path, n, r.status());
      return;
    }
    ExpectCode(r.status(), absl::StatusCode::kOk, "charge", shown);
    FUZZ_CHECK(r->nr_pages == n, "charge %s: answered %llu pages of %llu",
               shown.c_str(), static_cast<unsigned long long>(r->nr_pages),
               static_cast<unsigned long long>(n));
    FUZZ_CHECK(r->throttle >= absl::ZeroDuration() &&
                   r->throttle <= absl::Seconds(2),
               "charge %s: throttle %s out of [0, 2s]", shown.c_str(),
               absl::FormatDuration(r->throttle).c_str());
    ++charges_ok_;
    if (kind == PageKind::kAnon) groups_.at(path).anon_own += n;
    ForSelfAndAncestors(path, [&](ModelGroup& g) {
      (kind == PageKind::kAnon ? g.anon_hier : g.file_hier) += n;
    });
  }

  // mem_cgroup_get_oom_group(): a kill names a flagged group at or above the
  // victim's, only for an OOM (at most 8 pages); the victim's own group,
  // flagged, is always killed.
  void CheckOomGroupKill(const std::string& path, u64 n,
                         const absl::Status& status) {
    const std::optional<std::string> killed = OomGroupKillPath(status);
    if (!killed.has_value()) {
      FUZZ_CHECK(n > kCostlyChargePages || !groups_.at(path).oom_group,
                 "charge %s: OOM without a group kill, oom.group set",
                 path.c_str());
      return;
    }
    ++group_kills_;
    FUZZ_CHECK(n <= kCostlyChargePages, "charge %s: costly charge killed %s",
               path.c_str(), killed->c_str());
    FUZZ_CHECK(PathAtOrBelow(path, *killed) && groups_.count(*killed) > 0 &&
                   groups_.at(*killed).oom_group,
               "charge %s: killed %s, not a flagged group above it",
               path.c_str(), killed->c_str());
  }

  void OpSetOomGroup() {
    const std::string path = PickPath();
    const bool on = in_.ConsumeBool();
    const absl::Status s = mc_->SetOomGroup(path, on);
    if (!Live(path)) {
      ExpectCode(s, absl::StatusCode::kNotFound, "oom.group", path);
      return;
    }
    if (path == "/") {
      ExpectCode(s, absl::StatusCode::kInvalidArgument, "oom.group", path);
      return;
    }
    ExpectCode(s, absl::StatusCode::kOk, "oom.group", path);
    groups_.at(path).oom_group = on;
  }

  // memory.peak through open files: open, read, reset or close a watermark
  // in one of the harness's slots.
  void OpPeak() {
    PeakSlot& slot = peaks_[in_.ConsumeIntegralInRange<size_t>(0, kNrPeaks - 1)];
    const bool live = !slot.path.empty() && Live(slot.path) &&
                      groups_.at(slot.path).id == slot.group_id;
    switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: {
        const std::string path = PickPath();
        absl::StatusOr<u64> w = mc_->PeakFile(path, PeakOp::kOpen);
        if (!Live(path)) {
          ExpectCode(w.status(), absl::StatusCode::kNotFound, "peak open", path);
          return;
        }
        ExpectCode(w.status(), absl::StatusCode::kOk, "peak open", path);
        slot = PeakSlot{path, groups_.at(path).id, *w};
        return CheckPeak(slot, /*just_reset=*/true);
      }
      case 1: {
        absl::StatusOr<u64> usage =
            mc_->PeakFile(slot.path.empty() ? "/" : slot.path,
                          PeakOp::kReset, slot.watermark_id);
        if (!live) {
          ExpectCode(usage.status(), absl::StatusCode::kNotFound, "peak reset",
                     slot.path);
          return;
        }
        ExpectCode(usage.status(), absl::StatusCode::kOk, "peak reset",
                   slot.path);
        return CheckPeak(slot, /*just_reset=*/true);
      }
      case 2:
        if (!live) {
          ExpectCode(mc_->PeakFile(slot.path.empty() ? "/" : slot.path,
                                   PeakOp::kRead, slot.watermark_id)
                         .status(),
                     absl::StatusCode::kNotFound, "peak read", slot.path);
          return;
        }
        return CheckPeak(slot, /*just_reset=*/false);
      default: {
        const absl::Status s =
            mc_->PeakFile(slot.path.empty() ? "/" : slot.path, PeakOp::kClose,
                          slot.watermark_id)
                .status();
        ExpectCode(s, live ? absl::StatusCode::kOk : absl::StatusCode::kNotFound,
                   "peak close", slot.path);
        slot = PeakSlot{};
        return;
      }
    }
  }

  // usage <= the watermark <= the group-wide peak; right after a write,
  // the watermark is the usage.
  void CheckPeak(const PeakSlot& slot, bool just_reset) {
    absl::StatusOr<u64> peak =
        mc_->PeakFile(slot.path, PeakOp::kRead, slot.watermark_id);
    ExpectCode(peak.status(), absl::StatusCode::kOk, "peak read", slot.path);
    PercpuReaderLock l(mc_->tree().lock(), 0);
    const Group* g = mc_->tree().Lookup(slot.path);
    const u64 usage = g->memory().Read();
    FUZZ_CHECK(usage <= *peak && *peak <= g->memory().watermark() &&
                   (!just_reset || *peak == usage),
               "%s: watermark %llu, usage %llu, group peak %llu%s",
               slot.path.c_str(), static_cast<unsigned long long>(*peak),
               static_cast<unsigned long long>(usage),
               static_cast<unsigned long long>(g->memory().watermark()),
               just_reset ? " (just written)" : "");
  }

  void OpUncharge(bool by_handle) {
    std::string path;
    HandleSlot* slot = nullptr;
    if (by_handle) {
      slot = &handles_[in_.ConsumeIntegralInRange<size_t>(0, kNrHandles - 1)];
      path = HandleTarget(*slot);
    } else {
      path = PickPath();
    }
    const bool live = !path.empty() && Live(path);
    const PageKind kind = PickKind();
    // Mostly amounts the group can give back.
    u64 n = PickPages();
    if (live && in_.ConsumeBool()) {
      const u64 held = kind == PageKind::kAnon ? groups_.at(path).anon_own
                                               : FilePages(path);  // + dying
      if (held > 0) n = in_.ConsumeIntegralInRange<u64>(1, held);
    }
    const u64 file_before = live ? FilePages(path) : 0;
    const std::optional<int> cpu = PickCpuArg();
    absl::StatusOr<UnchargeResult> r =
        by_handle ? mc_->Uncharge(slot->handle, n, kind, cpu)
                  : mc_->Uncharge(path, n, kind, cpu);
    const std::string shown = by_handle ? "handle:" + slot->path : path;
    if (path == "/") {
      ExpectCode(r.status(), absl::StatusCode::kInvalidArgument, "uncharge",
                 shown);
      return;
    }
    if (!live) {
      ExpectCode(r.status(), absl::StatusCode::kNotFound, "uncharge", shown);
      return;
    }
    ModelGroup& g = groups_.at(path);
    u64 taken;
    if (kind == PageKind::kAnon) {
      if (n > g.anon_own) {
        ExpectCode(r.status(), absl::StatusCode::kFailedPrecondition,
                   "uncharge anon", shown);
        return;
      }
      taken = n;
    } else {
      taken = std::min(n, file_before);
    }
    ExpectCode(r.status(), absl::StatusCode::kOk, "uncharge", shown);
    FUZZ_CHECK(r->nr_pages == taken,
               "uncharge %s: answered %llu pages, expected %llu",
               shown.c_str(), static_cast<unsigned long long>(r->nr_pages),
               static_cast<unsigned long long>(taken));
    if (taken == 0) return;
    ++uncharges_;
    if (kind == PageKind::kAnon) g.anon_own -= taken;
    ForSelfAndAncestors(path, [&](ModelGroup& m) {
      (kind == PageKind::kAnon ? m.anon_hier : m.file_hier) -= taken;
    });
  }

  void OpSetLimits() {
    const std::string path = PickPath();
    const LimitsUpdate limits = PickLimits();
    const bool live = Live(path);
    const u64 oom_before = live ? LocalOom(path) : 0;
    absl::StatusOr<GroupInfo> r = mc_->SetLimits(path, limits);
    if (!live) {
      ExpectCode(r.status(), absl::StatusCode::kNotFound, "set", path);
      return;
    }
    if (path == "/") {
      ExpectCode(r.status(), absl::StatusCode::kInvalidArgument, "set", path);
      return;
    }
    ExpectCode(r.status(), absl::StatusCode::kOk, "set", path);
    ModelGroup& g = groups_.at(path);
    ApplyModelLimits(g, limits);
    // memory_max_write(): usage still over max after reclaim raises `oom`
    // exactly once; memory_high_write() never does.
    PercpuReaderLock l(mc_->tree().lock(), 0);
    Group* eg = mc_->tree().Lookup(path);
    const u64 usage = eg->memory().Read();
    const u64 oom_after = eg->events_local().oom;
    if (limits.max_pages && usage > g.limits.max_pages) {
      FUZZ_CHECK(oom_after == oom_before + 1,
                 "set %s: max %llu below usage %llu but oom %llu -> %llu",
                 path.c_str(), static_cast<unsigned long long>(
                                   g.limits.max_pages),
                 static_cast<unsigned long long>(usage),
                 static_cast<unsigned long long>(oom_before),
                 static_cast<unsigned long long>(oom_after));
    } else {
      FUZZ_CHECK(oom_after == oom_before, "set %s: unexpected oom event",
                 path.c_str());
    }
  }

  void OpReclaim() {
    const std::string path = PickPath();
    const u64 n = in_.ConsumeBool() ? in_.ConsumeIntegralInRange<u64>(0, 5000)
                                    : PickPages();
    absl::StatusOr<u64> r = mc_->Reclaim(path, n);
    if (!Live(path)) {
      ExpectCode(r.status(), absl::StatusCode::kNotFound, "reclaim", path);
      return;
    }
    if (r.status().code() == absl::StatusCode::kUnavailable) return;
    ExpectCode(r.status(), absl::StatusCode::kOk, "reclaim", path);
    FUZZ_CHECK(*r >= n, "reclaim %s: %llu pages reclaimed, asked %llu",
               path.c_str(), static_cast<unsigned long long>(*r),
               static_cast<unsigned long long>(n));
  }

  void OpGetStats() {
    const std::string path = PickPath();
    static constexpr FlushMode kModes[] = {FlushMode::kExact,
                                           FlushMode::kThreshold,
                                           FlushMode::kNone};
    const FlushMode mode = in_.PickValueInArray(kModes);
    absl::StatusOr<GroupStats> r = mc_->GetStats(path, mode);
    if (!Live(path)) {
      ExpectCode(r.status(), absl::StatusCode::kNotFound, "stats", path);
      return;
    }
    ExpectCode(r.status(), absl::StatusCode::kOk, "stats", path);
    FUZZ_CHECK(r->path == path, "stats %s: answered for %s", path.c_str(),
               r->path.c_str());
    FUZZ_CHECK(mode != FlushMode::kExact || r->flushed,
               "stats %s: an exact read did not flush", path.c_str());
    FUZZ_CHECK(r->flushed || r->max_staleness >= absl::ZeroDuration(),
               "stats %s: negative staleness", path.c_str());
    FUZZ_CHECK(r->memory_current_pages <= r->memory_peak_pages,
               "stats %s: current %llu above peak %llu", path.c_str(),
               static_cast<unsigned long long>(r->memory_current_pages),
               static_cast<unsigned long long>(r->memory_peak_pages));
  }

  void OpResolve() {
    HandleSlot& slot =
        handles_[in_.ConsumeIntegralInRange<size_t>(0, kNrHandles - 1)];
    const std::string path = PickPath();
    absl::StatusOr<GroupHandle> r = mc_->tree().Resolve(path);
    if (!Live(path)) {
      ExpectCode(r.status(), absl::StatusCode::kNotFound, "resolve", path);
      return;
    }
    ExpectCode(r.status(), absl::StatusCode::kOk, "resolve", path);
    FUZZ_CHECK(r->id() == groups_.at(path).id, "resolve %s: wrong id",
               path.c_str());
    slot.handle = *r;
    slot.path = path;
  }

  // Arguments every entry point must refuse with INVALID_ARGUMENT, counted
  // as rejected for charges, changing nothing (the next CheckAll sees any
  // change).
  void OpInvalid() {
    std::string path = PickPath();
    u64 n = in_.ConsumeIntegralInRange<u64>(1, 300);
    PageKind kind = PickKind();
    std::optional<int> cpu;
    switch (in_.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        path = in_.ConsumeRandomLengthString(300);
        if (ValidateGroupPath(path).ok()) return;  // valid after all
        break;
      case 1:
        n = in_.ConsumeBool() ? 0 : pcm_ + in_.ConsumeIntegralInRange<u64>(
                                               1, ~u64{0} - pcm_);
        break;
      case 2:
        kind = static_cast<PageKind>(in_.PickValueInArray({0, 3, 255}));
        break;
      default:
        cpu = in_.ConsumeBool()
                  ? in_.ConsumeIntegralInRange<int>(nr_cpus_, INT32_MAX)
                  : in_.ConsumeIntegralInRange<int>(INT32_MIN, -1);
        break;
    }
    const bool charge = in_.ConsumeBool();
    absl::Status s = charge ? mc_->Charge(path, n, kind, cpu).status()
                            : mc_->Uncharge(path, n, kind, cpu).status();
    ExpectCode(s, absl::StatusCode::kInvalidArgument,
               charge ? "invalid charge" : "invalid uncharge", path);
    if (charge) ++charges_rejected_;
    if (ValidateGroupPath(path).ok()) return;
    // A bad path: every path-taking call refuses it.
    ExpectCode(mc_->CreateGroup(path, PickLimits()).status(),
               absl::StatusCode::kInvalidArgument, "create", path);
    ExpectCode(mc_->DeleteGroup(path).status(),
               absl::StatusCode::kInvalidArgument, "delete", path);
    ExpectCode(mc_->SetLimits(path, PickLimits()).status(),
               absl::StatusCode::kInvalidArgument, "set", path);
    ExpectCode(mc_->Reclaim(path, 1).status(),
               absl::StatusCode::kInvalidArgument, "reclaim", path);
    ExpectCode(mc_->GetStats(path, FlushMode::kExact).status(),
               absl::StatusCode::kInvalidArgument, "stats", path);
    ExpectCode(mc_->tree().Resolve(path).status(),
               absl::StatusCode::kInvalidArgument, "resolve", path);
    ExpectCode(mc_->tree().ListGroups(path, true).status(),
               absl::StatusCode::kInvalidArgument, "list", path);
  }

  // --- invariants -----------------------------------------------------

  // Every pre-charged page back in the counters, every update folded.
  void Quiesce() {
    mc_->DrainAllStock();
    mc_->FlushAll();
  }

  // Sums over a group's subtree, computed bottom-up by CheckGroup.
  struct Subtree {
    u64 usage = 0;
    u64 anon = 0;  // own ANON pages of every group in the subtree
    u64 file = 0;  // own FILE pages
    int64_t min_usage = 0;  // this group's, for its parent's sum
    int64_t low_usage = 0;
    std::array<u64, kNrEvents> events{};  // hierarchical
  };

  Subtree CheckGroup(const Group* g, size_t* nr_seen, u64* local_oom)
      ABSL_SHARED_LOCKS_REQUIRED(mc_->tree().lock()) {
    const std::string& path = g->path();
    const char* p = path.c_str();
    auto it = groups_.find(path);
    FUZZ_CHECK(it != groups_.end(), "engine has %s, the model does not", p);
    const ModelGroup& m = it->second;
    FUZZ_CHECK(g->id() == m.id, "%s: id %llu, model %llu", p,
               static_cast<unsigned long long>(g->id()),
               static_cast<unsigned long long>(m.id));
    ++*nr_seen;

    Subtree children;
    std::array<u64, kNrEvents> children_events{};
    u64 dying_anon = 0;  // ANON of the dying subtrees this group answers for
    for (const Group* child = g->first_child(); child != nullptr;
         child = child->next_sibling()) {
      FUZZ_CHECK(child->parent() == g, "%s: child %s has another parent", p,
                 child->path().c_str());
      Subtree c = child->online() ? CheckGroup(child, nr_seen, local_oom)
                                  : CheckDying(child);
      if (!child->online()) dying_anon += c.anon;
      children.usage += c.usage;
      children.anon += c.anon;
      children.file += c.file;
      children.min_usage += c.min_usage;
      children.low_usage += c.low_usage;
      for (int i = 0; i < kNrEvents; ++i) children_events[i] += c.events[i];
    }

    const PageCounter& mem = g->memory();
    // usage >= 0: no cancel ever went below zero.
    FUZZ_CHECK(mem.underflows() == 0, "%s: %llu page_counter underflows", p,
               static_cast<unsigned long long>(mem.underflows()));
    const u64 usage = mem.Read();
    const u64 anon_own = g->nr_pages(PageKind::kAnon);
    const u64 file_own = g->nr_pages(PageKind::kFile);
    FUZZ_CHECK(anon_own + dying_anon == m.anon_own,
               "%s: own ANON %llu + dying %llu, model %llu", p,
               static_cast<unsigned long long>(anon_own),
               static_cast<unsigned long long>(dying_anon),
               static_cast<unsigned long long>(m.anon_own));
    // parent = own + sum of children (stocks drained).
    FUZZ_CHECK(usage == anon_own + file_own + children.usage,
               "%s: usage %llu != own %llu + %llu + children %llu", p,
               static_cast<unsigned long long>(usage),
               static_cast<unsigned long long>(anon_own),
               static_cast<unsigned long long>(file_own),
               static_cast<unsigned long long>(children.usage));
    FUZZ_CHECK(usage <= pcm_, "%s: usage %llu above PAGE_COUNTER_MAX", p,
               static_cast<unsigned long long>(usage));
    FUZZ_CHECK(usage <= mem.watermark(), "%s: usage %llu above peak %llu", p,
               static_cast<unsigned long long>(usage),
               static_cast<unsigned long long>(mem.watermark()));

    // Limits as last written.
    FUZZ_CHECK(mem.max() == m.limits.max_pages &&
                   mem.high() == m.limits.high_pages &&
                   mem.min() == m.limits.min_pages &&
                   mem.low() == m.limits.low_pages,
               "%s: limits %llu/%llu/%llu/%llu, model %llu/%llu/%llu/%llu", p,
               static_cast<unsigned long long>(mem.max()),
               static_cast<unsigned long long>(mem.high()),
               static_cast<unsigned long long>(mem.min()),
               static_cast<unsigned long long>(mem.low()),
               static_cast<unsigned long long>(m.limits.max_pages),
               static_cast<unsigned long long>(m.limits.high_pages),
               static_cast<unsigned long long>(m.limits.min_pages),
               static_cast<unsigned long long>(m.limits.low_pages));

    // Protected usage (propagate_protected_usage()).
    const int64_t min_usage = static_cast<int64_t>(mem.min_usage());
    const int64_t low_usage = static_cast<int64_t>(mem.low_usage());
    if (g->is_root()) {
      FUZZ_CHECK(min_usage == 0 && low_usage == 0,
                 "/: min_usage %lld low_usage %lld, want 0",
                 static_cast<long long>(min_usage),
                 static_cast<long long>(low_usage));
    } else {
      const int64_t want_min = static_cast<int64_t>(std::min(usage, mem.min()));
      const int64_t want_low = static_cast<int64_t>(std::min(usage, mem.low()));
      FUZZ_CHECK(min_usage == want_min,
                 "%s: min_usage %lld != min(usage %llu, min %llu)", p,
                 static_cast<long long>(min_usage),
                 static_cast<unsigned long long>(usage),
                 static_cast<unsigned long long>(mem.min()));
      FUZZ_CHECK(low_usage == want_low,
                 "%s: low_usage %lld != min(usage %llu, low %llu)", p,
                 static_cast<long long>(low_usage),
                 static_cast<unsigned long long>(usage),
                 static_cast<unsigned long long>(mem.low()));
    }
    FUZZ_CHECK(static_cast<int64_t>(mem.children_min_usage()) ==
                       children.min_usage &&
                   static_cast<int64_t>(mem.children_low_usage()) ==
                       children.low_usage,
               "%s: children_min/low_usage %lld/%lld, children sum %lld/%lld",
               p, static_cast<long long>(mem.children_min_usage()),
               static_cast<long long>(mem.children_low_usage()),
               static_cast<long long>(children.min_usage),
               static_cast<long long>(children.low_usage));

    // Stats: charges - uncharges - reclaimed.
    const RstatGroup& rs = g->rstat_group();
    for (int item = 0; item < kNrStatItems; ++item)
      FUZZ_CHECK(rs.total(static_cast<StatItem>(item)) >= 0,
                 "%s: stat item %d negative after a flush", p, item);
    const MemoryStat st = ReadMemoryStat(rs, ps_);
    const u64 sub_anon = anon_own + children.anon;
    const u64 sub_file = file_own + children.file;
    FUZZ_CHECK(st.anon == sub_anon * ps_ && sub_anon == m.anon_hier,
               "%s: stat anon %llu B, subtree own ANON %llu pages, model %llu",
               p, static_cast<unsigned long long>(st.anon),
               static_cast<unsigned long long>(sub_anon),
               static_cast<unsigned long long>(m.anon_hier));
    FUZZ_CHECK(st.file == sub_file * ps_,
               "%s: stat file %llu B, subtree own FILE %llu pages", p,
               static_cast<unsigned long long>(st.file),
               static_cast<unsigned long long>(sub_file));
    FUZZ_CHECK(sub_file + st.pgsteal == m.file_hier,
               "%s: FILE %llu + pgsteal %llu != charged - uncharged %llu", p,
               static_cast<unsigned long long>(sub_file),
               static_cast<unsigned long long>(st.pgsteal),
               static_cast<unsigned long long>(m.file_hier));
    FUZZ_CHECK(st.pgscan == st.pgsteal && st.pgscan_kswapd == 0 &&
                   st.pgsteal_kswapd == 0 && st.pgscan_khugepaged == 0 &&
                   st.pgsteal_khugepaged == 0,
               "%s: pgscan %llu != pgsteal %llu (or kswapd/khugepaged)", p,
               static_cast<unsigned long long>(st.pgscan),
               static_cast<unsigned long long>(st.pgsteal));
    // One list per kind, nothing activated, no mlock (memory_stat.h).
    FUZZ_CHECK(st.inactive_anon == st.anon && st.inactive_file == st.file &&
                   st.active_anon == 0 && st.active_file == 0 &&
                   st.unevictable == 0,
               "%s: inactive/active/unevictable lines inconsistent", p);

    // memory.events: hierarchical = local + children + freed children
    // (memory_localevents: local).
    const std::array<u64, kNrEvents> events = EventArray(g->events());
    const std::array<u64, kNrEvents> local = EventArray(g->events_local());
    *local_oom += local[static_cast<int>(MemoryEvent::kOom)];
    *local_group_kills_ += local[static_cast<int>(MemoryEvent::kOomGroupKill)];
    for (int i = 0; i < kNrEvents; ++i) {
      const u64 want = g->is_root() ? 0
                       : localevents_
                           ? local[i]
                           : local[i] + children_events[i] + m.freed_events[i];
      FUZZ_CHECK(events[i] == want,
                 "%s: hierarchical event %d = %llu, local + children + "
                 "freed = %llu",
                 p, i, static_cast<unsigned long long>(events[i]),
                 static_cast<unsigned long long>(want));
    }

    // Never decreasing, per group instance.
    Monotone now;
    now.events = events;
    now.events_local = local;
    now.failcnt = mem.failcnt();
    now.peak = mem.watermark();
    now.pgscan = st.pgscan;
    now.pgsteal = st.pgsteal;
    Monotone& before = monotone_[g->id()];
    for (int i = 0; i < kNrEvents; ++i)
      FUZZ_CHECK(now.events[i] >= before.events[i] &&
                     now.events_local[i] >= before.events_local[i],
                 "%s: event %d decreased", p, i);
    FUZZ_CHECK(now.failcnt >= before.failcnt && now.peak >= before.peak &&
                   now.pgscan >= before.pgscan &&
                   now.pgsteal >= before.pgsteal,
               "%s: failcnt/peak/pgscan/pgsteal decreased", p);
    before = now;

    Subtree out;
    out.usage = usage;
    out.anon = sub_anon;
    out.file = sub_file;
    out.min_usage = min_usage;
    out.low_usage = low_usage;
    out.events = g->is_root() ? children_events : events;
    return out;
  }

  // A dying group's subtree: usage = own pages + children's, no underflow,
  // no protection (reset at offline), nothing of it in the model but what
  // its live ancestor answers for.
  Subtree CheckDying(const Group* g)
      ABSL_SHARED_LOCKS_REQUIRED(mc_->tree().lock()) {
    const char* p = g->path().c_str();
    Subtree children;
    for (const Group* c = g->first_child(); c != nullptr; c = c->next_sibling()) {
      FUZZ_CHECK(!c->online(), "dying %s has a live child %s", p,
                 c->path().c_str());
      Subtree s = CheckDying(c);
      children.usage += s.usage;
      children.anon += s.anon;
      children.file += s.file;
    }
    const PageCounter& mem = g->memory();
    FUZZ_CHECK(mem.underflows() == 0, "dying %s: page_counter underflows", p);
    const u64 anon = g->nr_pages(PageKind::kAnon);
    const u64 file = g->nr_pages(PageKind::kFile);
    FUZZ_CHECK(mem.Read() == anon + file + children.usage,
               "dying %s: usage %llu != own %llu + %llu + children %llu", p,
               static_cast<unsigned long long>(mem.Read()),
               static_cast<unsigned long long>(anon),
               static_cast<unsigned long long>(file),
               static_cast<unsigned long long>(children.usage));
    FUZZ_CHECK(mem.min() == 0 && mem.low() == 0 && mem.min_usage() == 0 &&
                   mem.low_usage() == 0,
               "dying %s: protection left", p);
    Subtree out;
    out.usage = mem.Read();
    out.anon = anon + children.anon;
    out.file = file + children.file;
    out.events = EventArray(g->events());
    return out;
  }

  void CheckAll() {
    size_t nr_seen = 0;
    u64 local_oom = 0;
    u64 local_group_kills = 0;
    local_group_kills_ = &local_group_kills;
    {
      PercpuReaderLock l(mc_->tree().lock(), 0);
      CheckGroup(mc_->tree().root(), &nr_seen, &local_oom);
    }
    FUZZ_CHECK(nr_seen == groups_.size(), "engine has %zu groups, model %zu",
               nr_seen, groups_.size());
    FUZZ_CHECK(mc_->tree().nr_groups() == groups_.size(),
               "nr_groups %llu, model %zu",
               static_cast<unsigned long long>(mc_->tree().nr_groups()),
               groups_.size());
    absl::StatusOr<std::vector<std::string>> listed =
        mc_->tree().ListGroups("/", true);
    FUZZ_CHECK(listed.ok() && listed->size() + 1 == groups_.size() &&
                   std::is_sorted(listed->begin(), listed->end()),
               "ListGroups(/) does not list the live groups sorted");
    const EngineCounters c = mc_->GetCounters();
    FUZZ_CHECK(c.charges_ok == charges_ok_ && c.charges_oom == charges_oom_ &&
                   c.charges_refused == charges_refused_ &&
                   c.charges_rejected == charges_rejected_ &&
                   c.uncharges == uncharges_,
               "counters ok/oom/refused/rejected/uncharges "
               "%llu/%llu/%llu/%llu/%llu, model %llu/%llu/%llu/%llu/%llu",
               static_cast<unsigned long long>(c.charges_ok),
               static_cast<unsigned long long>(c.charges_oom),
               static_cast<unsigned long long>(c.charges_refused),
               static_cast<unsigned long long>(c.charges_rejected),
               static_cast<unsigned long long>(c.uncharges),
               static_cast<unsigned long long>(charges_ok_),
               static_cast<unsigned long long>(charges_oom_),
               static_cast<unsigned long long>(charges_refused_),
               static_cast<unsigned long long>(charges_rejected_),
               static_cast<unsigned long long>(uncharges_));
    FUZZ_CHECK(local_group_kills + deleted_group_kills_ == group_kills_,
               "oom_group_kill events %llu (+%llu deleted), kills %llu",
               static_cast<unsigned long long>(local_group_kills),
               static_cast<unsigned long long>(deleted_group_kills_),
               static_cast<unsigned long long>(group_kills_));
    FUZZ_CHECK(c.oom_total == local_oom + deleted_oom_,
               "oom_total %llu, local oom events %llu (+%llu deleted)",
               static_cast<unsigned long long>(c.oom_total),
               static_cast<unsigned long long>(local_oom),
               static_cast<unsigned long long>(deleted_oom_));
  }

  static constexpr size_t kNrHandles = 4;
  static constexpr size_t kNrPeaks = 3;

  FuzzedDataProvider& in_;
  ManualClock clock_;
  int nr_cpus_ = 1;
  u64 pcm_ = 0;
  u64 ps_ = 0;
  std::unique_ptr<MemoryController> mc_;
  std::map<std::string, ModelGroup> groups_;  // live groups, "/" included
  std::map<u64, Monotone> monotone_;          // by group id
  std::array<HandleSlot, kNrHandles> handles_;
  std::array<PeakSlot, kNrPeaks> peaks_;
  bool localevents_ = false;
  // CheckAll's sum of local oom_group_kill events (set while it runs).
  u64* local_group_kills_ = nullptr;
  u64 group_kills_ = 0;          // kills the charges reported
  u64 deleted_group_kills_ = 0;  // local oom_group_kill of deleted groups
  u64 last_id_ = 0;
  u64 charges_ok_ = 0;
  u64 charges_oom_ = 0;
  u64 charges_refused_ = 0;
  u64 charges_rejected_ = 0;
  u64 uncharges_ = 0;
  u64 deleted_oom_ = 0;
};

}  // namespace
}  // namespace cgacct

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  cgacct::Harness harness(in);
  if (!harness.Init()) return 0;
  harness.Run();
  return 0;
}
