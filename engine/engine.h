// Engine: a userspace memory controller (cgroup v2 memcg) for a hierarchy of
// accounting groups.
//
// The engine keeps a tree of groups named by cgroup v2 paths ("/" is the
// root, segments [A-Za-z0-9._-]{1,255}, not "." or ".."). Each group has a
// hierarchical page_counter (memory.current/max/high/min/low), memory.events,
// and rstat statistics (memory.stat). Charges go through a per-CPU stock of
// pre-charged pages (batch 64, 7 group slots per CPU) in front of the
// counters, following try_charge_memcg() in mm/memcontrol.c. FILE pages sit
// on their group's LRU and are reclaimed the kernel's way (engine/reclaim.h):
// on the charge path at memory.max and memory.high, on limit writes, and on
// Reclaim (memory.reclaim), honouring memory.min/memory.low.
//
// Thread safety: thread-safe. Every public method may be called concurrently
// from any thread. Operations name a per-CPU slot (`cpu`); when absent, the
// calling thread's sched_getcpu() (modulo nr_cpus) is used, or the override of
// a ScopedCpuOverride on the calling thread.
//
// Errors (absl::Status codes, messages name the offending field):
//   INVALID_ARGUMENT    bad path, nr_pages == 0, cpu >= nr_cpus, root where
//                       the root is not allowed
//   NOT_FOUND           the group (or the parent, for CreateGroup) is missing
//   ALREADY_EXISTS      CreateGroup on an existing path
//   FAILED_PRECONDITION DeleteGroup with children; Uncharge of more ANON pages
//                       than the group holds
//   RESOURCE_EXHAUSTED  Charge hit OOM; the message names the limiting group
//   UNAVAILABLE         Reclaim could not reclaim the requested amount
// A failed call changes nothing.
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
#include "engine/clock.h"
#include "engine/group_handle.h"
#include "engine/observer.h"
#include "engine/types.h"

namespace cgacct {

struct EngineOptions {
  // Per-CPU slots; 0 = the machine's online CPUs. At most kMaxCpus.
  int nr_cpus = 0;
  // Bytes per page; a power of two >= 512.
  uint64_t page_size_bytes = 4096;
  FlushLockPolicy flush_lock_policy = FlushLockPolicy::kPerCpu;
  // kBatch: CPUs per lock hold, 1..4096.
  int flush_batch_cpus = 8;
  // kAdaptive: drop and retake the lock once a hold reaches this, > 0.
  absl::Duration flush_hold_budget = absl::Microseconds(50);
  // Background flush of the whole tree (the kernel's FLUSH_TIME, 2 s);
  // zero disables the flusher thread.
  absl::Duration periodic_flush_interval = absl::Seconds(2);
  // Pages per per-CPU stock refill (MEMCG_CHARGE_BATCH), in [1, 127]: the
  // first charge attempt's size and the most a stock slot parks. 1 turns the
  // stock off (every charge and uncharge walks the page_counters). The rstat
  // flush threshold stays at kChargeBatchPages.
  uint32_t charge_batch_pages = kChargeBatchPages;
  // Buckets of the stock's shared pool (engine/stock.h): 0 = no pool (the
  // kernel's stock alone), else a power of two <= 65536. Pages moving
  // between CPUs or between more than 7 groups on a CPU go through a
  // group's bucket instead of walking the page_counters.
  uint32_t stock_pool_buckets = 1024;
  // Sets (4 ways each) of every CPU's victim table behind its 7 stock slots
  // (engine/stock.h): 0 = none (the kernel's 7 slots alone), else a power
  // of two <= 1024. Lets one CPU serve far more than 7 groups from
  // pre-charged pages; a CPU may then park (7 + 4 x sets) x batch pages.
  // Memory: nr_cpus x sets x 64 bytes, allocated at Create() (4 KiB per CPU
  // at 64 sets; 256 MiB at the extremes, 4096 CPUs x 1024 sets), and a
  // drain of a CPU with any way in use scans its sets under its lock.
  uint32_t stock_victim_sets = 64;
  // Not owned; may be null. Must outlive the engine.
  EngineObserver* observer = nullptr;
  // The cgroup2 mount option memory_recursiveprot: a group's memory.min/low
  // left unclaimed by its children's settings protects the children in
  // proportion to their unprotected usage (effective_protection()).
  bool memory_recursiveprot = false;
  // Every reclaim walk is a full walk of the target's subtree (as kswapd's
  // are) instead of a partial walk on the target's shared cursor. For
  // benchmarks: the baseline of "restore incremental cgroup iteration".
  bool memcg_full_walk = false;
  // Where the engine reads all time (engine/clock.h); null = Clock::Real().
  // Not owned.
  const Clock* clock = nullptr;
};

class EngineImpl;

class Engine {
 public:
  static constexpr int kMaxCpus = 4096;

  // Errors: INVALID_ARGUMENT for options out of range.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Creates `path` under its existing parent with `limits` (absent = "max"
  // for max/high, 0 for min/low). Mirrors mem_cgroup_css_alloc()/online().
  absl::StatusOr<GroupInfo> CreateGroup(absl::string_view path,
                                        const LimitsUpdate& limits);

  // Removes a group without children, like rmdir. Stocks holding it are
  // drained, its stats are flushed into the parent, and the pages still
  // charged to it become the parent's (returned). Its events stay counted in
  // its ancestors' hierarchical memory.events.
  absl::StatusOr<uint64_t> DeleteGroup(absl::string_view path);

  // Paths below `path` (children, or the whole subtree if recursive), sorted;
  // `path` itself excluded.
  absl::StatusOr<std::vector<std::string>> ListGroups(absl::string_view path,
                                                      bool recursive) const;

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
  // progress), then OOM (RESOURCE_EXHAUSTED naming the limiting group; `oom`
  // is raised on it, `oom_kill` on the charging group as the "killed"
  // request). A charge that leaves a level over memory.high then runs
  // mem_cgroup_handle_over_high() (reclaim, `high` events) and returns the
  // throttle the kernel would sleep (0, or over 10 ms and at most 2 s).
  absl::StatusOr<ChargeResult> Charge(absl::string_view path, uint64_t nr_pages,
                                      PageKind kind,
                                      std::optional<int> cpu = std::nullopt);

  // Uncharges nr_pages (> 0) of `kind` from `path`. The pages go back through
  // the per-CPU stock (refill_stock(), as socket and kernel memory do). ANON:
  // more than the group holds is FAILED_PRECONDITION. FILE: uncharges what is
  // left of nr_pages (reclaim may have taken some) and returns that number.
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

  // Charge(path, ...) on a resolved group: same semantics, results and
  // errors, except NOT_FOUND means the handle's group was deleted (or the
  // handle is empty). Thread-safe; the fast path takes only the calling
  // CPU's tree reader lock and the CPU's stock lock.
  absl::StatusOr<ChargeResult> Charge(GroupHandle group, uint64_t nr_pages,
                                      PageKind kind,
                                      std::optional<int> cpu = std::nullopt);

  // Uncharge(path, ...) on a resolved group; NOT_FOUND as for Charge above.
  absl::StatusOr<UnchargeResult> Uncharge(
      GroupHandle group, uint64_t nr_pages, PageKind kind,
      std::optional<int> cpu = std::nullopt);

  // memory.current/peak/stat/events of `path`, flushed per `mode`.
  absl::StatusOr<GroupStats> GetStats(absl::string_view path,
                                      FlushMode mode = FlushMode::kExact);

  // Drains every CPU's stock (drain_all_stock() for the root), synchronously.
  void DrainAllStock();

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

// Forces the CPU slot used by operations on this thread that name no cpu
// (tests; TCMalloc's ScopedFakeCpuId). Nests; restores on destruction.
class ScopedCpuOverride {
 public:
  explicit ScopedCpuOverride(int cpu);
  ~ScopedCpuOverride();
  ScopedCpuOverride(const ScopedCpuOverride&) = delete;
  ScopedCpuOverride& operator=(const ScopedCpuOverride&) = delete;

 private:
  int previous_;
};

// Longest accepted path, in bytes (PATH_MAX).
inline constexpr size_t kMaxPathBytes = 4096;

// Validates a cgroup v2 path ("/" or "/a/b", at most kMaxPathBytes);
// INVALID_ARGUMENT names `field`.
absl::Status ValidateGroupPath(absl::string_view path,
                               absl::string_view field = "path");

}  // namespace cgacct

#endif  // CGACCT_ENGINE_ENGINE_H_
