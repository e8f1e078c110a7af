// Value types shared by the engine's public API.
//
// Thread safety: plain values, thread-compatible.
#ifndef CGACCT_ENGINE_TYPES_H_
#define CGACCT_ENGINE_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace cgacct {

// MEMCG_CHARGE_BATCH (include/linux/memcontrol.h): pages pre-charged per
// stock refill, and the stats-flush granularity.
inline constexpr uint32_t kChargeBatchPages = 64;
// NR_MEMCG_STOCK (mm/memcontrol.c): group slots per CPU in the page stock.
inline constexpr int kNrStockSlots = 7;
// MAX_RECLAIM_RETRIES (mm/memcontrol.c).
inline constexpr int kMaxReclaimRetries = 16;
// No kernel counterpart: how many more times one charge asks the remote
// drainer (drain_all_stock() over the network, engine/remote_stock.h) after
// a drain that gave back what the charge needs but left no room (a
// concurrent charge took it; MemoryController::TryChargeMemcg). The kernel
// drains once per charge.
inline constexpr int kMaxRemoteDrainRounds = 2;
// 1 << PAGE_ALLOC_COSTLY_ORDER (include/linux/mmzone.h, order 3): the largest
// charge, in pages, that is not "costly". A costly charge that fails does not
// OOM (mem_cgroup_oom() returns early), and reclaim progress does not spare
// it a retry.
inline constexpr uint64_t kCostlyChargePages = 8;
// Project cache-line size (GCC 12 warns on
// hardware_destructive_interference_size in headers).
inline constexpr size_t kCacheLineBytes = 64;

enum class PageKind : uint8_t {
  kAnon = 1,  // not reclaimable (no swap)
  kFile = 2,  // page cache, reclaimable
};

// How fresh a stats read must be (docs/DESIGN.md §3.5).
enum class FlushMode : uint8_t {
  kExact,      // flush the subtree first
  kThreshold,  // flush only past 64 x nr_cpus pending updates
  kNone,       // last flushed values
};

// Which flush-lock policy rstat uses (docs/DESIGN.md §9, engine/rstat.h).
enum class FlushLockPolicy : uint8_t {
  kPerCpu,  // drop and retake the lock for every CPU (Linux 6.15+)
  kWhole,   // hold across the CPU loop (<= 6.14); FlushPreemptModel says
            // whether it yields to a waiter
  kBatch,   // drop and retake every N CPUs ("batch:N")
  kAdaptive,  // skip clean CPUs without the lock; hold around each CPU with
              // updates, or across CPUs while under a time budget and
              // nobody waits
};

// Which kernel preemption model the flush lock's holder follows
// (docs/DESIGN.md §9, engine/rstat.h "Preempt models"). Only kWhole depends on
// it: cgroup_rstat_flush_locked() (<= 6.14) drops the lock inside its CPU loop
// only when need_resched() or spin_needbreak() says so, and spin_needbreak()
// is 0 without CONFIG_PREEMPTION.
enum class FlushPreemptModel : uint8_t {
  kNone,  // CONFIG_PREEMPT_NONE/VOLUNTARY (distribution server kernels):
          // kWhole holds the lock across every CPU, whoever waits
  kFull,  // CONFIG_PREEMPT: kWhole drops the lock between CPUs when another
          // flusher waits for it (spin_needbreak())
};

// One of the longest flush-lock holds seen: what the holder was doing.
struct FlushHoldRecord {
  std::string policy;     // e.g. "per_cpu", "batch:8"
  FlushPreemptModel preempt_model = FlushPreemptModel::kNone;
  std::string root_path;  // the flushed subtree
  // CPUs whose updated tree was unlinked and folded inside this hold (every
  // CPU walked, with or without updates; kAdaptive's lock-free passes over
  // clean CPUs are outside any hold and not counted).
  int cpus_walked = 0;
  // Entries folded inside this hold: (group, CPU) pairs, one per group on
  // each walked CPU's updated list (mem_cgroup_css_rstat_flush() calls).
  int groups_folded = 0;
  absl::Duration hold;
  absl::Time when;  // wall time of the release
};

// memory.events items, in the kernel's index order (enum memcg_memory_event,
// without the swap events). The engine never raises kSockThrottled (no
// sockets); it exists so that memory.events has every line of the kernel's
// file.
enum class MemoryEvent : uint8_t {
  kLow,
  kHigh,
  kMax,
  kOom,
  kOomKill,
  kOomGroupKill,
  kSockThrottled,
};
inline constexpr int kNrMemoryEvents = 7;

// memory.events or memory.events.local, counts.
struct MemoryEvents {
  uint64_t low = 0;
  uint64_t high = 0;
  uint64_t max = 0;
  uint64_t oom = 0;
  uint64_t oom_kill = 0;
  uint64_t oom_group_kill = 0;  // OOMs that killed this group whole
  uint64_t sock_throttled = 0;  // always 0: no socket memory
};

// One memory.events line: its name and the MemoryEvents field it prints.
struct MemoryEventField {
  const char* name;
  uint64_t MemoryEvents::*value;
};

// memory.events' lines in __memory_events_show()'s order (mm/memcontrol.c,
// Linux 6.16), indexed by MemoryEvent.
inline constexpr MemoryEventField kMemoryEventFields[kNrMemoryEvents] = {
    {"low", &MemoryEvents::low},
    {"high", &MemoryEvents::high},
    {"max", &MemoryEvents::max},
    {"oom", &MemoryEvents::oom},
    {"oom_kill", &MemoryEvents::oom_kill},
    {"oom_group_kill", &MemoryEvents::oom_group_kill},
    {"sock_throttled", &MemoryEvents::sock_throttled},
};
static_assert(sizeof(MemoryEvents) == kNrMemoryEvents * sizeof(uint64_t),
              "every MemoryEvents field has exactly one line");

// memory.max/high/min/low in pages. In an update, nullopt = unchanged. Values
// at or above Engine::page_counter_max() mean "max".
struct LimitsUpdate {
  std::optional<uint64_t> max_pages;
  std::optional<uint64_t> high_pages;
  std::optional<uint64_t> min_pages;
  std::optional<uint64_t> low_pages;
};

// The four limits of a group, in pages (page_counter_max() = "max").
struct Limits {
  uint64_t max_pages = 0;
  uint64_t high_pages = 0;
  uint64_t min_pages = 0;
  uint64_t low_pages = 0;
};

struct GroupInfo {
  std::string path;
  uint64_t id = 0;
  Limits limits;
};

// A page of a group listing (Engine::ListGroupsPage()): which paths, from
// where, how many.
struct GroupListing {
  // Children of the listed path only, or its whole subtree.
  bool recursive = false;
  // Resume strictly after this path (the last one of the previous page;
  // it need not exist any more). Empty: from the start.
  std::string after;
  // At most this many paths (0: none; the answer still says whether any
  // remain).
  size_t max_paths = SIZE_MAX;
  // Only paths at or below one of these subtrees (valid group paths; an
  // access-control view: a tenant listing "/" sees its grants' subtrees).
  // nullopt: every path; an empty list: none.
  std::optional<std::vector<std::string>> within;
};

struct GroupPage {
  std::vector<std::string> paths;  // byte order, each > GroupListing::after
  bool more = false;  // paths of the listing remain after the last one
  // Index entries the page looked at (paths returned or stepped over, and
  // seeks): its cost, O(page + |within| + 1) whatever the tree's size. For
  // tests and benchmarks.
  uint64_t nr_scanned = 0;
};

struct ChargeResult {
  uint64_t nr_pages = 0;
  // memory.high throttle the kernel would have applied (capped at 2 s).
  absl::Duration throttle = absl::ZeroDuration();
};

struct UnchargeResult {
  uint64_t nr_pages = 0;  // pages actually uncharged
};

// One memory.stat line: name and value in memory.stat units (bytes for state
// items such as anon/file, counts for events such as pgscan).
struct StatEntry {
  std::string name;
  uint64_t value = 0;
};

struct GroupStats {
  std::string path;
  uint64_t memory_current_pages = 0;  // includes pages parked in stocks
  uint64_t memory_peak_pages = 0;     // page_counter watermark
  bool oom_group = false;             // memory.oom.group
  Limits limits;
  std::vector<StatEntry> stat;  // memory.stat order
  MemoryEvents events;          // hierarchical
  MemoryEvents events_local;
  uint64_t failcnt = 0;
  uint64_t emin_pages = 0;
  uint64_t elow_pages = 0;
  bool flushed = false;  // this read flushed the subtree
  absl::Duration max_staleness = absl::ZeroDuration();
};

// memory.events and memory.events.local of one group (Engine::GetEvents).
struct GroupEvents {
  std::string path;
  uint64_t id = 0;      // GroupInfo::id
  MemoryEvents events;  // hierarchical
  MemoryEvents events_local;
};

struct EngineInfo {
  int nr_cpus = 0;
  uint64_t page_size_bytes = 0;
  uint32_t charge_batch_pages = kChargeBatchPages;
  FlushLockPolicy flush_lock_policy = FlushLockPolicy::kPerCpu;
  std::string flush_lock_policy_name;  // e.g. "batch:8"
  FlushPreemptModel flush_preempt_model = FlushPreemptModel::kNone;
  absl::Duration flush_hold_budget;    // kAdaptive
  absl::Duration periodic_flush_interval;
  int nr_stock_slots = kNrStockSlots;
  // The stock's additions (EngineOptions; 0/false: off, the kernel's).
  uint32_t stock_pool_buckets = 0;
  uint32_t stock_victim_sets = 0;
  bool uncharge_refills_stock = false;
  // The seed of the stock's eviction streams (EngineOptions'
  // stock_eviction_seed, or the one drawn when that was 0).
  uint64_t stock_eviction_seed = 0;
  bool memory_localevents = false;
  uint64_t nr_groups = 0;        // online, the root included
  uint64_t nr_dying_groups = 0;  // deleted, still holding pages
  // The longest hold of a flush not preempted meanwhile (the irqs-off
  // tracer's view), and the longest by the wall clock (preemption included).
  absl::Duration flush_lock_hold_max = absl::ZeroDuration();
  absl::Duration flush_lock_hold_wall_max = absl::ZeroDuration();
  uint64_t preempted_flushes = 0;
  // The most work one hold did since start (Rstat::hold_max_cpus_walked(),
  // hold_max_groups_folded()): CPUs walked, entries folded.
  int flush_lock_hold_max_cpus_walked = 0;
  int flush_lock_hold_max_groups_folded = 0;
  // The longest holds seen since start, longest first (at most 16).
  std::vector<FlushHoldRecord> longest_flush_holds;
};

// Monotonic engine-wide counters, summed over CPUs at read time.
struct EngineCounters {
  uint64_t charges_ok = 0;
  // Failed with RESOURCE_EXHAUSTED after an OOM (mem_cgroup_oom():
  // memory.events oom raised at the limiting group).
  uint64_t charges_oom = 0;
  // Failed with RESOURCE_EXHAUSTED without an OOM: a charge of more than 8
  // pages (mem_cgroup_oom() returns early for a costly order), or a drain
  // of remote stock that could not finish.
  uint64_t charges_refused = 0;
  uint64_t charges_rejected = 0;  // bad input / not found
  uint64_t uncharges = 0;
  uint64_t stock_hits = 0;         // charges served from a per-CPU stock slot
  uint64_t stock_victim_hits = 0;  // ... from a per-CPU stock's victim table
  uint64_t stock_pool_hits = 0;    // stock misses served from the stock's pool
  uint64_t stock_drains = 0;       // stock slots drained (any reason)
  uint64_t oom_total = 0;          // oom events raised
  uint64_t flushes = 0;
  // CPUs walked by flushes: per flush, those whose updated tree it locked
  // (all nr_cpus, except under kAdaptive, which passes clean CPUs without
  // the lock and does not count them). Rstat::flush_cpus().
  uint64_t flush_cpus = 0;
};

// "none", "full".
const char* FlushPreemptModelName(FlushPreemptModel model);
// Parses "none" or "full"; nullopt for anything else.
std::optional<FlushPreemptModel> ParseFlushPreemptModel(
    const std::string& name);

// "per_cpu", "whole", "batch", "adaptive".
const char* FlushLockPolicyName(FlushLockPolicy policy);
// Parses "per_cpu", "whole", "adaptive" or "batch:N" (1 <= N <= 4096; N is
// stored in *batch_cpus when given). nullopt for anything else.
std::optional<FlushLockPolicy> ParseFlushLockPolicy(const std::string& name,
                                                    int* batch_cpus = nullptr);

}  // namespace cgacct

#endif  // CGACCT_ENGINE_TYPES_H_
