#include "engine/reclaim.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/lru.h"

namespace cgacct {
namespace {

using u128 = unsigned __int128;

// children_min/low_usage are sums of signed per-child values that can be
// transiently negative under racing charges (propagate_protected_usage() is
// not atomic across levels); the kernel reads them as unsigned long, where
// that would be huge. Read as 0 instead.
uint64_t ProtectedSum(uint64_t value) {
  return static_cast<int64_t>(value) < 0 ? 0 : value;
}

// The deepest last descendant of g (g itself if it has no children): the
// last group of g's subtree in pre-order.
Group* LastDescendant(Group* g) {
  while (g->has_children()) g = g->last_child();
  return g;
}

}  // namespace

// --- Effective protection ----------------------------------------------------

uint64_t EffectiveProtection(uint64_t usage, uint64_t parent_usage,
                             uint64_t setting, uint64_t parent_effective,
                             uint64_t siblings_protected,
                             bool recursive_protection) {
  const uint64_t protected_usage = std::min(usage, setting);
  // Overcommit: the parent's effective protection is split in proportion to
  // each child's utilised protection (siblings_protected includes ours).
  if (siblings_protected > parent_effective)
    return static_cast<uint64_t>(u128{protected_usage} * parent_effective /
                                 siblings_protected);
  uint64_t ep = protected_usage;
  if (!recursive_protection) return ep;
  // memory_recursiveprot: what the parent's protection leaves unclaimed by
  // explicit settings goes to the children in proportion to their
  // unprotected usage.
  if (parent_effective > siblings_protected &&
      parent_usage > siblings_protected && usage > protected_usage) {
    const u128 unclaimed = u128{parent_effective - siblings_protected} *
                           (usage - protected_usage) /
                           (parent_usage - siblings_protected);
    ep += static_cast<uint64_t>(unclaimed);
  }
  return ep;
}

void CalculateProtection(const Group* root, Group* memcg,
                         bool recursive_protection) {
  // The target's own values are never used (mem_cgroup_protection()), so
  // they are not computed and may be stale.
  if (memcg == root) return;
  const uint64_t usage = memcg->memory().Read();
  if (usage == 0) return;
  const Group* parent = memcg->parent();
  if (parent == root) {
    memcg->memory().set_effective_protection(memcg->memory().min(),
                                             memcg->memory().low());
    return;
  }
  const uint64_t parent_usage = parent->memory().Read();
  const uint64_t emin = EffectiveProtection(
      usage, parent_usage, memcg->memory().min(), parent->memory().emin(),
      ProtectedSum(parent->memory().children_min_usage()),
      recursive_protection);
  const uint64_t elow = EffectiveProtection(
      usage, parent_usage, memcg->memory().low(), parent->memory().elow(),
      ProtectedSum(parent->memory().children_low_usage()),
      recursive_protection);
  memcg->memory().set_effective_protection(emin, elow);
}

namespace {

// mem_cgroup_unprotected(): the root takes no protection, and the target's
// own protection is ignored.
bool Unprotected(const Group* target, const Group* memcg) {
  return memcg->is_root() || memcg == target;
}

// mem_cgroup_protection(): (emin, elow) as seen from `root`; (0, 0) for the
// target itself, whatever stale values an earlier walk left.
void MemCgroupProtection(const Group* root, const Group* memcg, uint64_t* min,
                         uint64_t* low) {
  *min = *low = 0;
  if (root == memcg) return;
  *min = memcg->memory().emin();
  *low = memcg->memory().elow();
}

}  // namespace

bool BelowMin(const Group* target, const Group* memcg) {
  if (Unprotected(target, memcg)) return false;
  return memcg->memory().emin() >= memcg->memory().Read();
}

bool BelowLow(const Group* target, const Group* memcg) {
  if (Unprotected(target, memcg)) return false;
  return memcg->memory().elow() >= memcg->memory().Read();
}

uint64_t ApplyProportionalProtection(uint64_t scan, uint64_t min, uint64_t low,
                                     uint64_t cgroup_size,
                                     bool memcg_low_reclaim,
                                     bool* memcg_low_skipped) {
  if (min == 0 && low == 0) return scan;
  uint64_t protection;
  if (!memcg_low_reclaim && low > min) {
    // memory.low scaling: make sure a low pass follows before OOM.
    protection = low;
    *memcg_low_skipped = true;
  } else {
    protection = min;
  }
  // Guards against the usage having dropped since the below_min/low check.
  cgroup_size = std::max(cgroup_size, protection);
  scan -=
      static_cast<uint64_t>(u128{scan} * protection / (u128{cgroup_size} + 1));
  // Keep reclaim moving without dropping the priority further than needed.
  return std::max(scan, kSwapClusterMax);
}

// --- The hierarchy walk ------------------------------------------------------

Group* NextDescendantPre(const Group* pos, const Group* root) {
  if (pos == nullptr) return const_cast<Group*>(root);
  // The first child, else the next sibling of pos or of its nearest
  // ancestor below root that has one (css_next_child() order: creation).
  if (pos->has_children()) return pos->first_child();
  while (pos != root) {
    if (pos->next_sibling() != nullptr) return pos->next_sibling();
    pos = pos->parent();
  }
  return nullptr;
}

Group* MemCgroupIter(Group* root, Group* prev, ReclaimCookie* cookie) {
  if (cookie == nullptr) return NextDescendantPre(prev, root);
  MemcgReclaimIter& iter = root->reclaim_iter();
  for (;;) {
    // On start, join the current round; stop when another walker has
    // completed the round this walker joined.
    const int64_t generation = iter.generation.load();
    if (prev != nullptr && cookie->generation != generation) {
      cookie->whole_round = false;
      return nullptr;
    }
    Group* pos = iter.position.load();
    if (prev == nullptr) {
      cookie->generation = generation;
      cookie->whole_round = pos == nullptr;  // the round starts at the root
    } else if (pos != prev) {
      cookie->whole_round = false;  // another walker took a step
    }
    Group* next = NextDescendantPre(pos, root);
    // The cursor may have moved since it was read: restart rather than
    // reclaim from the same group twice ("mm: restart if multiple
    // traversals raced").
    if (!iter.position.compare_exchange_strong(pos, next)) continue;
    if (next == nullptr) {
      iter.generation.fetch_add(1);
      // A walker that joined right at the end of a round starts the next
      // one, so it sees at least one group.
      if (prev == nullptr) continue;
    }
    return next;
  }
}

void InvalidateReclaimIterators(Group* dead) {
  // dead has no children (a group is freed after its children), so its
  // pre-order predecessor is the last group of its previous sibling's
  // subtree, or its parent. Both are inside every ancestor's subtree.
  Group* parent = dead->parent();
  if (parent == nullptr) return;
  Group* predecessor = dead->prev_sibling() != nullptr
                           ? LastDescendant(dead->prev_sibling())
                           : parent;
  for (Group* a = parent; a != nullptr; a = a->parent()) {
    Group* expected = dead;
    a->reclaim_iter().position.compare_exchange_strong(expected, predecessor);
  }
}

// --- memory.high -------------------------------------------------------------

uint64_t CalculateOverage(uint64_t usage_pages, uint64_t high_pages) {
  if (usage_pages <= high_pages) return 0;
  // Act as if the threshold were 1 page, to avoid dividing by 0.
  const uint64_t high = std::max<uint64_t>(high_pages, 1);
  return static_cast<uint64_t>(
      (u128{usage_pages - high} << kMemcgDelayPrecisionShift) / high);
}

uint64_t CalculateHighDelay(uint64_t nr_pages, uint64_t max_overage) {
  if (max_overage == 0) return 0;
  // Lenient on small overages, increasingly harsh on large ones: quadratic.
  u128 penalty = u128{max_overage} * max_overage * kHz;
  penalty >>= kMemcgDelayPrecisionShift;
  penalty >>= kMemcgDelayScalingShift;
  // Four N-page charges are throttled like one 4N-page charge.
  return static_cast<uint64_t>(penalty * nr_pages / kChargeBatchPages);
}

bool MemoryHighExceeded(const Group* memcg) {
  for (const Group* m = memcg; m != nullptr; m = m->parent())
    if (m->memory().Read() > m->memory().high()) return true;
  return false;
}

namespace {

// mem_find_max_overage(): the worst overage of memcg and its ancestors
// below the root.
uint64_t MemFindMaxOverage(const Group* memcg) {
  uint64_t max_overage = 0;
  for (const Group* m = memcg; m != nullptr && !m->is_root(); m = m->parent())
    max_overage = std::max(
        max_overage, CalculateOverage(m->memory().Read(), m->memory().high()));
  return max_overage;
}

}  // namespace

// --- Reclaimer ---------------------------------------------------------------

// struct scan_control, the parts the engine models.
struct Reclaimer::ScanControl {
  Group* target = nullptr;
  uint64_t nr_to_reclaim = 0;
  ReclaimMode mode = ReclaimMode::kDirect;
  int cpu = 0;
  int priority = kDefPriority;
  uint64_t nr_reclaimed = 0;
  uint64_t nr_scanned = 0;         // this cycle (the kernel resets it per prio)
  bool memcg_full_walk = false;    // no shared cursor: walk the whole subtree
  bool memcg_low_reclaim = false;  // the low-breaching pass
  bool memcg_low_skipped = false;  // a group was spared for its low
  // The last walk found a FILE page in a group it did not skip for its
  // protection (not in the kernel; see DoTryToFreePages()).
  bool walk_saw_reclaimable = false;
  // The last walk saw a FILE page anywhere (protected groups too), and the
  // groups it saw.
  bool walk_saw_file = false;
  uint64_t walk_groups = 0;
  // Groups of a walk of this cycle that saw the whole subtree and no FILE
  // page in it (0: none did).
  uint64_t groups_without_file = 0;
};

Reclaimer::Reclaimer(Rstat* rstat, EngineObserver* observer, const Clock& clock,
                     bool recursive_protection, bool memcg_full_walk,
                     RaiseEventFn raise_event)
    : rstat_(rstat),
      observer_(observer),
      clock_(clock),
      recursive_protection_(recursive_protection),
      memcg_full_walk_(memcg_full_walk),
      raise_event_(std::move(raise_event)) {}

uint64_t Reclaimer::TryToFreeMemCgroupPages(Group* target, uint64_t nr_pages,
                                            ReclaimMode mode, int cpu,
                                            uint64_t* groups_without_file) {
  const int64_t start_ns = clock_.NowNs();
  ScanControl sc;
  sc.target = target;
  sc.nr_to_reclaim = std::max(nr_pages, kSwapClusterMax);
  sc.mode = mode;
  sc.cpu = cpu;
  sc.priority = kDefPriority;
  sc.memcg_full_walk = memcg_full_walk_;
  const uint64_t reclaimed = DoTryToFreePages(sc);
  if (groups_without_file != nullptr)
    *groups_without_file = reclaimed == 0 ? sc.groups_without_file : 0;
  if (observer_ != nullptr)
    observer_->OnReclaimDone(absl::Nanoseconds(clock_.NowNs() - start_ns),
                             sc.nr_scanned, reclaimed, sc.memcg_full_walk);
  return reclaimed;
}

uint64_t Reclaimer::DoTryToFreePages(ScanControl& sc) {
  const int initial_priority = sc.priority;
  for (;;) {
    // Not in the kernel: a walk that saw every group of the subtree and
    // found no FILE page outside the groups it spared for their protection
    // ends this pass's priority loop. Lower priorities scan lru_size >>
    // priority of the same lists, which are empty, and spare the same
    // groups (a pass's memcg_low_reclaim is fixed), so they would reclaim
    // nothing either; only a racing charge of FILE pages could differ, and
    // the caller's next retry sees it. Without this, a charge refused at a
    // max whose subtree holds N groups and no cache walked N groups 13
    // times per pass, 2-3 passes per cycle, 17 cycles per charge: one
    // tenant's 10,000 empty groups cost each of its refused charges ~60 ms
    // of the server's CPU (issue 22's attack round).
    bool saw_whole_subtree = false;
    do {
      saw_whole_subtree = ShrinkNodeMemcgs(sc);
      if (sc.nr_reclaimed >= sc.nr_to_reclaim) break;
      if (saw_whole_subtree && !sc.walk_saw_reclaimable) break;
    } while (--sc.priority >= 0);

    if (sc.nr_reclaimed > 0) return sc.nr_reclaimed;

    // Partial walks share the cursor with every concurrent reclaimer of the
    // target, so under contention one of them may see too few groups: one
    // full walk before giving up avoids a premature OOM. Not needed when the
    // last partial walk saw every group itself (not in the kernel: the full
    // walk would visit the same groups and find the same nothing).
    if (!sc.memcg_full_walk) {
      sc.priority = initial_priority;
      sc.memcg_full_walk = true;
      if (!saw_whole_subtree || sc.walk_saw_reclaimable) continue;
    }
    // (No active list: the skipped_deactivate/force_deactivate rung never
    // applies.)
    // Untapped memory.low reserves: breach them rather than OOM. Only after
    // a pass that reclaimed nothing, so `low` events mean protected memory
    // really had to be taken.
    if (sc.memcg_low_skipped) {
      sc.priority = initial_priority;
      sc.memcg_low_reclaim = true;
      sc.memcg_low_skipped = false;
      continue;
    }
    return 0;
  }
}

bool Reclaimer::ShrinkNodeMemcgs(ScanControl& sc) {
  Group* const target = sc.target;
  ReclaimCookie cookie;
  ReclaimCookie* partial = sc.memcg_full_walk ? nullptr : &cookie;
  sc.walk_saw_reclaimable = false;
  sc.walk_saw_file = false;
  sc.walk_groups = 0;
  for (Group* memcg = MemCgroupIter(target, nullptr, partial); memcg != nullptr;
       memcg = MemCgroupIter(target, memcg, partial)) {
    ++sc.walk_groups;
    if (memcg->nr_pages(PageKind::kFile) > 0) sc.walk_saw_file = true;
    CalculateProtection(target, memcg, recursive_protection_);
    if (BelowMin(target, memcg)) continue;  // hard protection
    if (BelowLow(target, memcg)) {
      // Soft protection: honoured while other groups have unprotected
      // memory to give.
      if (!sc.memcg_low_reclaim) {
        sc.memcg_low_skipped = true;
        continue;
      }
      raise_event_(memcg, MemoryEvent::kLow, sc.cpu);
    }
    ShrinkLruvec(memcg, sc);
    // A partial walk stops as soon as the goal is met; the cursor stays on
    // this group for the next walker (mem_cgroup_iter_break() has no
    // reference to drop).
    if (partial != nullptr && sc.nr_reclaimed >= sc.nr_to_reclaim)
      return false;
  }
  const bool whole = partial == nullptr || cookie.whole_round;
  if (whole && !sc.walk_saw_file) sc.groups_without_file = sc.walk_groups;
  return whole;
}

void Reclaimer::ShrinkLruvec(Group* memcg, ScanControl& sc) {
  // get_scan_count(): without swap only the file list is scanned
  // (SCAN_FILE), lru_size >> priority, scaled by protection.
  // The protection scaling runs (and may set memcg_low_skipped) even for an
  // empty list, as the kernel's does for every evictable list.
  const uint64_t lru_size = memcg->nr_pages(PageKind::kFile);
  uint64_t min, low;
  MemCgroupProtection(sc.target, memcg, &min, &low);
  uint64_t scan =
      ApplyProportionalProtection(lru_size, min, low, memcg->memory().Read(),
                                  sc.memcg_low_reclaim, &sc.memcg_low_skipped);
  if (lru_size == 0) return;
  sc.walk_saw_reclaimable = true;
  scan >>= sc.priority;
  // A deleted group's remaining cache is scraped out: at least
  // min(lru_size, SWAP_CLUSTER_MAX) at every priority.
  if (scan == 0 && !memcg->online()) scan = std::min(lru_size, kSwapClusterMax);

  // shrink_lruvec(): SWAP_CLUSTER_MAX chunks until the scan budget is spent,
  // the list runs dry, or this group alone met the goal (cgroup reclaim is
  // not proportional). Every chunk is freed whole (scanned == stolen), so
  // the loop's outcome is known in advance: min(scan budget, the list, the
  // goal rounded up to whole chunks). Taken in one isolation instead of a
  // loop of 32-page chunks: the engine's page counts are not bounded by RAM
  // (up to PAGE_COUNTER_MAX), and the loop made a reclaim of a group with
  // 2^40 FILE pages run for hours (found by tests/fuzz/engine_ops_fuzzer).
  // A racing Uncharge takes from the same count with the same CAS, so the
  // one isolation is the loop's outcome with no uncharge between chunks.
  const uint64_t goal_chunks =
      sc.nr_to_reclaim / kSwapClusterMax +
      (sc.nr_to_reclaim % kSwapClusterMax != 0 ? 1 : 0);
  const uint64_t goal = goal_chunks > UINT64_MAX / kSwapClusterMax
                            ? UINT64_MAX
                            : goal_chunks * kSwapClusterMax;
  // shrink_inactive_list(): every isolated page is clean, unreferenced page
  // cache here, so it is freed.
  const uint64_t nr_reclaimed = memcg->IsolateLruPages(std::min(scan, goal));
  const uint64_t nr_scanned = nr_reclaimed;
  if (nr_scanned == 0) return;
  // Freeing the folios uncharges them directly (not through the stock).
  memcg->memory().Uncharge(nr_reclaimed);
  int64_t deltas[kNrStatItems] = {};
  deltas[kStatFile] = -static_cast<int64_t>(nr_reclaimed);
  const bool proactive = sc.mode == ReclaimMode::kProactive;
  deltas[proactive ? kStatPgscanProactive : kStatPgscanDirect] =
      static_cast<int64_t>(nr_scanned);
  deltas[proactive ? kStatPgstealProactive : kStatPgstealDirect] =
      static_cast<int64_t>(nr_reclaimed);
  rstat_->Update(&memcg->rstat_group(), sc.cpu, deltas,
                 2 * nr_reclaimed + nr_scanned);
  sc.nr_reclaimed += nr_reclaimed;
  sc.nr_scanned += nr_scanned;
}

absl::StatusOr<uint64_t> Reclaimer::MemoryReclaim(Group* memcg,
                                                  uint64_t nr_pages, int cpu) {
  uint64_t nr_reclaimed = 0;
  int nr_retries = kMaxReclaimRetries;
  while (nr_reclaimed < nr_pages) {
    // Converges on zero; reclaim enforces its 32-page minimum.
    const uint64_t batch = (nr_pages - nr_reclaimed) / 4;
    const uint64_t reclaimed =
        TryToFreeMemCgroupPages(memcg, batch, ReclaimMode::kProactive, cpu);
    if (reclaimed == 0 && nr_retries-- == 0)
      return absl::UnavailableError(absl::StrCat(
          "memory.reclaim of ", memcg->path(), ": reclaimed ", nr_reclaimed,
          " of ", nr_pages, " pages; nothing more is reclaimable now"));
    nr_reclaimed += reclaimed;
  }
  return nr_reclaimed;
}

// The most pages any of `memcg` and its ancestors below the root has above
// its memory.high (0 if none is over).
uint64_t Reclaimer::PagesOverHigh(Group* memcg) {
  uint64_t worst = 0;
  for (Group* m = memcg; m != nullptr && !m->is_root(); m = m->parent()) {
    const uint64_t usage = m->memory().Read();
    const uint64_t high = m->memory().high();
    if (usage > high) worst = std::max(worst, usage - high);
  }
  return worst;
}

uint64_t Reclaimer::ReclaimHigh(Group* memcg, uint64_t nr_pages, int cpu) {
  uint64_t nr_reclaimed = 0;
  for (Group* m = memcg; m != nullptr && !m->is_root(); m = m->parent()) {
    if (m->memory().Read() <= m->memory().high()) continue;
    raise_event_(m, MemoryEvent::kHigh, cpu);
    nr_reclaimed +=
        TryToFreeMemCgroupPages(m, nr_pages, ReclaimMode::kDirect, cpu);
  }
  return nr_reclaimed;
}

absl::Duration Reclaimer::HandleOverHigh(Group* memcg,
                                         uint64_t nr_pages_over_high, int cpu) {
  if (nr_pages_over_high == 0 || memcg->is_root()) return absl::ZeroDuration();
  int nr_retries = kMaxReclaimRetries;
  // The charging task reclaims at least its batch; a retry only what is
  // necessary, SWAP_CLUSTER_MAX pages per over-high level.
  uint64_t nr_to_reclaim = nr_pages_over_high;
  for (uint64_t nr_rounds = 1;; ++nr_rounds) {
    const uint64_t reclaimed = ReclaimHigh(memcg, nr_to_reclaim, cpu);
    // No swap: swap_find_max_overage() is always 0.
    uint64_t penalty_jiffies =
        CalculateHighDelay(nr_pages_over_high, MemFindMaxOverage(memcg));
    penalty_jiffies = std::min(penalty_jiffies, kMemcgMaxHighDelayJiffies);
    // Not worth sleeping for a small overrun.
    if (penalty_jiffies <= kHz / 100) return absl::ZeroDuration();
    // Reclaim making progress is preferred to throttling.
    if (reclaimed != 0 || nr_retries-- > 0) {
      // Past kOverHighExactRounds rounds in one request, a retry takes the
      // worst level's overage at once (at least 32): with page counts up
      // to PAGE_COUNTER_MAX the kernel's 32-page loop could run for hours
      // (a group 2^40 FILE pages over memory.high, found by
      // tests/fuzz/engine_ops_fuzzer).
      nr_to_reclaim = nr_rounds < kOverHighExactRounds
                          ? kSwapClusterMax
                          : std::max(kSwapClusterMax, PagesOverHigh(memcg));
      continue;
    }
    return absl::Milliseconds(
        static_cast<int64_t>(penalty_jiffies * 1000 / kHz));
  }
}

}  // namespace cgacct
