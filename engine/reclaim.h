// Reclaim: the memory controller's reclaim machinery (docs/DESIGN.md
// §10).
//
// Mirrors, in mm/vmscan.c: try_to_free_mem_cgroup_pages(),
// do_try_to_free_pages() with its retry ladder, shrink_node_memcgs(),
// shrink_lruvec() and get_scan_count()'s apply_proportional_protection(); in
// mm/memcontrol.c: mem_cgroup_iter() (siblings in creation order, as
// css_next_descendant_pre()) with the shared per-target cursor
// ("restore incremental cgroup iteration", 2024, and "restart if multiple
// traversals raced", 2024), invalidate_reclaim_iterators(),
// mem_cgroup_calculate_protection(), mem_cgroup_below_min/low(),
// mem_cgroup_protection(), reclaim_high(), mem_cgroup_handle_over_high(),
// calculate_high_delay() and memory_reclaim(); in mm/page_counter.c:
// page_counter_calculate_protection() and effective_protection().
//
// Deliberate differences from the kernel (no real pages, no swap, no kswapd):
//   - The LRU is a count (engine/lru.h): one FILE list per group, every
//     isolated page is freed (scanned == stolen), reclaim uncharges the
//     page_counter directly (as freeing folios does) and pgscan/pgsteal and
//     `file` (= inactive_file) move in rstat.
//   - ANON pages are never reclaimed: get_scan_count() always ends in
//     SCAN_FILE, as it does in the kernel without swap. No slab shrinkers,
//     no vmpressure, no writeback, no compaction, one NUMA node, no active
//     list (so no skipped_deactivate/force_deactivate rung in the ladder).
//   - No kswapd: every reclaim is direct (charge path, memory.high,
//     memory.max/high writes) or proactive (memory.reclaim). Engine option
//     memcg_full_walk makes every walk a full walk, as kswapd's are; the
//     benchmark uses it as the baseline.
//   - A deleted group stays in the walk, offline, while it holds pages, as
//     the kernel's dying memcg does, and get_scan_count()'s floor scrapes
//     out its cache: at least min(lru_size, SWAP_CLUSTER_MAX) pages at every
//     priority.
//   - Freeing a dying group the cursor points at moves the cursor back to
//     the group's pre-order predecessor, so the round goes on at the
//     following sibling; the kernel resets it to NULL (the next walker
//     starts again at the root without a new generation).
//   - memory.high: the engine has no return to user mode, so a Charge
//     request is one kernel entry and mem_cgroup_handle_over_high() runs at
//     its end whenever the charge found a level over high. The delay the
//     kernel would sleep (capped at 2 s) is returned for the client to honour
//     instead of slept. HZ is 1000: a jiffy is 1 ms. The delay is computed
//     in 128 bits, so it does not wrap where the kernel's 64-bit
//     max_overage * max_overage * HZ does (usage above ~130 x high). Its
//     retries reclaim SWAP_CLUSTER_MAX pages each, as the kernel's, for
//     kOverHighExactRounds rounds; past that (131,040 pages retried in one
//     request) a retry takes the worst level's overage at once.
//
// Thread safety: thread-safe. Every function that walks or reads the group
// tree must be called with a reader slot of the engine's tree lock held (the
// tree cannot change under it); InvalidateReclaimIterators() needs the
// writer side. Effective protection (emin/elow) is written racily by
// concurrent walks with different targets, as in the kernel
// (docs/DESIGN.md §10.1).
#ifndef CGACCT_ENGINE_RECLAIM_H_
#define CGACCT_ENGINE_RECLAIM_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/clock.h"
#include "engine/group.h"
#include "engine/observer.h"
#include "engine/rstat.h"
#include "engine/types.h"

namespace cgacct {

// SWAP_CLUSTER_MAX (include/linux/swap.h): the smallest reclaim target and
// the LRU scan chunk, in pages.
inline constexpr uint64_t kSwapClusterMax = 32;
// DEF_PRIORITY (mm/internal.h): the first scan priority; a walk at priority p
// scans lru_size >> p pages of each group.
inline constexpr int kDefPriority = 12;
// HZ assumed by the memory.high throttle (jiffies per second).
inline constexpr uint64_t kHz = 1000;
// MEMCG_MAX_HIGH_DELAY_JIFFIES: the longest memory.high throttle per return
// to user mode.
inline constexpr uint64_t kMemcgMaxHighDelayJiffies = 2 * kHz;
// The rounds of mem_cgroup_handle_over_high() that follow the kernel's
// 32-page retries exactly; later rounds of the same request take the worst
// level's overage at once (Reclaimer::HandleOverHigh).
inline constexpr uint64_t kOverHighExactRounds = 4096;
// MEMCG_DELAY_PRECISION_SHIFT and MEMCG_DELAY_SCALING_SHIFT.
inline constexpr int kMemcgDelayPrecisionShift = 20;
inline constexpr int kMemcgDelayScalingShift = 14;

// --- Effective protection (docs/DESIGN.md §10.2) -----------------------------

// effective_protection() (mm/page_counter.c): the protection (pages) a group
// gets from its declared `setting` (min or low), given its usage, its
// parent's usage and effective protection, and the sum of protected usage of
// the parent's children (siblings_protected, the group's own included).
// Overcommitted protection is split in proportion to protected usage; with
// recursive_protection (memory_recursiveprot) the parent's unclaimed
// protection is shared in proportion to unprotected usage. Unsigned page
// arithmetic with 128-bit products and truncating division, as the kernel.
// Pure; thread-safe.
uint64_t EffectiveProtection(uint64_t usage, uint64_t parent_usage,
                             uint64_t setting, uint64_t parent_effective,
                             uint64_t siblings_protected,
                             bool recursive_protection);

// mem_cgroup_calculate_protection() / page_counter_calculate_protection():
// computes and stores memcg's emin/elow for a walk rooted at `root`. Leaves
// them alone for the root itself and for an empty group (stale values are
// harmless: see BelowMin). Valid only in pre-order within one walk (it reads
// the parent's freshly computed values). Caller holds a tree reader slot.
void CalculateProtection(const Group* root, Group* memcg,
                         bool recursive_protection);

// mem_cgroup_below_min()/below_low(): memcg's effective min/low covers its
// usage. Never for the engine root or the reclaim target itself
// (mem_cgroup_unprotected()). An empty group is always below min (0 >= 0),
// so it is skipped before the low check and never gets a `low` event.
bool BelowMin(const Group* target, const Group* memcg);
bool BelowLow(const Group* target, const Group* memcg);

// get_scan_count()'s apply_proportional_protection(): scales the scan size
// `scan` (pages) of a group whose effective protection is (min, low) and
// usage cgroup_size, so pressure is proportional to usage above protection.
// Uses low outside the low-reclaim pass when low > min, and then sets
// *memcg_low_skipped (a later low pass is guaranteed before OOM). The result
// is at least kSwapClusterMax when any protection applies. Pure.
uint64_t ApplyProportionalProtection(uint64_t scan, uint64_t min, uint64_t low,
                                     uint64_t cgroup_size,
                                     bool memcg_low_reclaim,
                                     bool* memcg_low_skipped);

// --- The hierarchy walk (docs/DESIGN.md §10.1) -------------------------------

// css_next_descendant_pre(): the group after `pos` in pre-order under
// `root` (root first when pos is null); null at the end. Children are visited
// in creation order, as the kernel's parent->children list. Caller holds a
// tree reader slot.
Group* NextDescendantPre(const Group* pos, const Group* root);

// mem_cgroup_reclaim_cookie: a walker's round.
struct ReclaimCookie {
  int64_t generation = 0;
  // Not in the kernel: true while this walker has taken every step of its
  // round, from the round's start at the root, with no other walker moving
  // the cursor between its steps; a walk that ends (null) with it still true
  // saw every group of the subtree, as a full walk would.
  bool whole_round = false;
};

// mem_cgroup_iter(): the next group of a reclaim walk rooted at `root`.
// Without a cookie, a full walk: root, then its descendants in pre-order,
// then null. With a cookie, a partial walk on root's shared cursor
// (root->reclaim_iter()): a walker starting (prev == null) joins the current
// round and resumes where the last walker stopped; a walker whose round was
// completed by someone else gets null; a lost compare-and-swap on the cursor
// restarts the step instead of handing a group out twice; the walker that
// reaches the end bumps the generation, and a walker that just started
// begins a new round at the root so it sees at least one group. Keeps
// cookie->whole_round (see ReclaimCookie). Lock-free; caller holds a tree
// reader slot.
Group* MemCgroupIter(Group* root, Group* prev, ReclaimCookie* cookie);

// invalidate_reclaim_iterators() (mem_cgroup_css_released()): moves every
// cursor pointing at `dead` (a group without children about to be freed:
// those of its ancestors) to dead's pre-order predecessor, so the next
// walker goes on at dead's following sibling. Caller holds the tree lock's
// writer side, before unlinking `dead`.
void InvalidateReclaimIterators(Group* dead);

// --- memory.high (docs/DESIGN.md §10.3) --------------------------------------

// calculate_overage(): how far usage is over high, as a fixed-point ratio
// (<< kMemcgDelayPrecisionShift); 0 when usage <= high. Pure.
uint64_t CalculateOverage(uint64_t usage_pages, uint64_t high_pages);

// calculate_high_delay(): the throttle in jiffies (ms at HZ=1000) for a task
// that charged nr_pages while the worst level was max_overage over high.
// Quadratic in the overage, scaled by nr_pages / MEMCG_CHARGE_BATCH; not yet
// clamped (the caller clamps at 2 s). E.g. high=100M, one 64-page charge:
// 101M -> 6, 110M -> 639. Pure.
uint64_t CalculateHighDelay(uint64_t nr_pages, uint64_t max_overage);

// The try_charge_memcg() over-high check after a successful charge: true if
// memcg or any ancestor (the root included) has usage > high. Lock-free.
bool MemoryHighExceeded(const Group* memcg);

// --- Reclaimer -------------------------------------------------------------

// Who reclaims, for the pgscan_*/pgsteal_* split (reclaimer_offset()).
enum class ReclaimMode : uint8_t {
  kDirect,     // charge path, memory.high, memory.max/high writes
  kProactive,  // memory.reclaim
};

// Runs reclaim for the engine: owns nothing but its configuration.
//
// Thread safety: thread-safe. Callers hold a tree reader slot for every call.
class Reclaimer {
 public:
  // raise_event(group, event, cpu) raises a memory.events item (the engine's
  // memcg_memory_event()); it must be thread-safe.
  using RaiseEventFn = std::function<void(Group*, MemoryEvent, int)>;

  // `rstat`, `observer` (may be null) and `clock` (reclaim cycle timing)
  // must outlive the Reclaimer.
  // recursive_protection: the memory_recursiveprot mount option.
  // memcg_full_walk: every walk is a full walk (kswapd's behaviour; the
  // benchmark baseline), so the full-walk retry rung is already taken.
  Reclaimer(Rstat* rstat, EngineObserver* observer, const Clock& clock,
            bool recursive_protection, bool memcg_full_walk,
            RaiseEventFn raise_event);
  Reclaimer(const Reclaimer&) = delete;
  Reclaimer& operator=(const Reclaimer&) = delete;

  // try_to_free_mem_cgroup_pages() + do_try_to_free_pages(): reclaims at
  // least max(nr_pages, 32) pages from `target`'s subtree if it can, and
  // returns the pages reclaimed (may exceed the target by under a scan
  // chunk per group). One call is one reclaim cycle, reported to the
  // observer. Never fails; 0 means nothing could be reclaimed even after the
  // full-walk and low-breaching passes. `cpu` is the caller's CPU slot (for
  // stats). *groups_without_file (may be null): the number of groups a walk
  // of this cycle saw when it saw the whole subtree and not one FILE page in
  // it (protected groups included), else 0 (not in the kernel: lets a
  // refused charge skip its next cycles while no FILE page was charged,
  // MemoryController::TryChargeMemcg).
  uint64_t TryToFreeMemCgroupPages(Group* target, uint64_t nr_pages,
                                   ReclaimMode mode, int cpu,
                                   uint64_t* groups_without_file = nullptr);

  // memory_reclaim() (memory.reclaim): proactive reclaim of nr_pages from
  // `memcg`'s subtree in batches of (remaining) / 4 (reclaim raises each to
  // 32), ignoring memcg's own protection. Returns the pages reclaimed (at
  // least nr_pages). UNAVAILABLE (the kernel's EAGAIN) when 17 batches
  // reclaimed nothing before the target was met; what was reclaimed stays
  // reclaimed.
  absl::StatusOr<uint64_t> MemoryReclaim(Group* memcg, uint64_t nr_pages,
                                         int cpu);

  // The most pages memcg or an ancestor below the root has above its
  // memory.high (HandleOverHigh's retry amount past kOverHighExactRounds;
  // not in the kernel).
  static uint64_t PagesOverHigh(Group* memcg);
  // reclaim_high(): for memcg and each ancestor below the root with usage >
  // high, raises `high` there and reclaims nr_pages from it. Returns pages
  // reclaimed.
  uint64_t ReclaimHigh(Group* memcg, uint64_t nr_pages, int cpu);

  // mem_cgroup_handle_over_high() for a request that charged
  // nr_pages_over_high (the batch sizes of its over-high charges): reclaim
  // nr_pages_over_high from every over-high level (reclaim_high(), a `high`
  // event each), then, while the penalty exceeds 10 ms, retry with
  // SWAP_CLUSTER_MAX pages as long as reclaim makes progress (or 16 more
  // times without), and return the delay the task would sleep: 0 when the
  // penalty is at most 10 ms, else the penalty, at most 2 s.
  absl::Duration HandleOverHigh(Group* memcg, uint64_t nr_pages_over_high,
                                int cpu);

 private:
  struct ScanControl;

  uint64_t DoTryToFreePages(ScanControl& sc);
  // shrink_node_memcgs(): one walk of sc.target's subtree. Returns true if
  // the walk saw every group of it (a full walk, or a partial walk that had
  // the whole round to itself) and did not stop early at the goal.
  bool ShrinkNodeMemcgs(ScanControl& sc);
  void ShrinkLruvec(Group* memcg, ScanControl& sc);

  // Constant after construction.
  Rstat* const rstat_;
  EngineObserver* const observer_;
  const Clock& clock_;
  const bool recursive_protection_;
  const bool memcg_full_walk_;
  const RaiseEventFn raise_event_;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_RECLAIM_H_
