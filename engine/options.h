// EngineOptions: how an Engine is built, and the rules its values obey.
//
// Invariants: an Engine is only ever built from options that passed
// Validate(); every range below is checked there, in one place.
//
// Thread safety: a plain value, thread-compatible.
#ifndef CGACCT_ENGINE_OPTIONS_H_
#define CGACCT_ENGINE_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/clock.h"
#include "engine/observer.h"
#include "engine/types.h"

namespace cgacct {

struct EngineOptions {
  // The most per-CPU slots an engine models.
  static constexpr int kMaxCpus = 4096;

  // Per-CPU slots; 0 = the machine's online CPUs. At most kMaxCpus.
  int nr_cpus = 0;
  // Bytes per page; a power of two >= 512.
  uint64_t page_size_bytes = 4096;
  FlushLockPolicy flush_lock_policy = FlushLockPolicy::kPerCpu;
  // kBatch: CPUs per lock hold, 1..4096.
  int flush_batch_cpus = 8;
  // The kernel preemption model the flush-lock holder follows: under kNone
  // (the default, like the distribution server kernels seed 000 ran on)
  // kWhole holds the lock across every CPU even when another flusher waits;
  // under kFull it drops the lock between CPUs for a waiter. Other policies
  // behave the same under both. kNone or kFull.
  FlushPreemptModel flush_preempt_model = FlushPreemptModel::kNone;
  // kAdaptive: drop and retake the lock once a hold reaches this, in
  // [0, 1 s]. Zero (the default): drop it after every CPU with updates, so
  // adaptive's longest hold is per_cpu's (one CPU's work) while clean CPUs
  // are still passed without the lock.
  absl::Duration flush_hold_budget = absl::ZeroDuration();
  // Background flush of the whole tree (the kernel's FLUSH_TIME, 2 s);
  // zero disables the flusher thread.
  absl::Duration periodic_flush_interval = absl::Seconds(2);
  // Pages per per-CPU stock refill (MEMCG_CHARGE_BATCH), in [1, 127]: the
  // first charge attempt's size and the most a stock slot parks. 1 turns the
  // stock off (every charge and uncharge walks the page_counters). The rstat
  // flush threshold stays at kChargeBatchPages.
  uint32_t charge_batch_pages = kChargeBatchPages;
  // The engine's additions to the kernel's stock (engine/stock.h), all off
  // by default so that a plain engine keeps the kernel's books; each has a
  // cgacctd flag of the same name (README, "The engine, against the kernel").
  //
  // Buckets of the stock's shared pool: 0 = no pool (the kernel's stock
  // alone, the default), else a power of two <= 65536. Pages a slot gives
  // back go through a group's bucket instead of walking the page_counters,
  // and a stock miss takes them back from it; memory.current then counts up
  // to 2 x batch pages per group more than the kernel would.
  uint32_t stock_pool_buckets = 0;
  // Sets (4 ways each) of every CPU's victim table behind its 7 stock slots:
  // 0 = none (the kernel's 7 slots alone, the default), else a power of two
  // <= 1024. Lets one CPU serve far more than 7 groups from pre-charged
  // pages; a CPU may then park (7 + 4 x sets) x batch pages, all counted in
  // memory.current. Memory: nr_cpus x sets x 64 bytes, allocated at
  // Create() (4 KiB per CPU at 64 sets; 256 MiB at the extremes, 4096 CPUs x
  // 1024 sets), and a drain of a CPU with any way in use scans its sets
  // under its lock.
  uint32_t stock_victim_sets = 0;
  // ANON and FILE uncharges go back through the per-CPU stock
  // (refill_stock(), as the kernel does for socket and kernel memory only)
  // instead of straight to the page_counters (uncharge_batch() ->
  // memcg_uncharge(), the kernel's path for user pages; the default). On:
  // memory.current keeps up to a batch per group per CPU of uncharged pages
  // until a drain or a charge reuses them, and a charge/uncharge loop on one
  // CPU never walks the counters.
  bool uncharge_refills_stock = false;
  // Seeds the per-CPU generators that pick which stock slot a full stock
  // gives up (refill_stock()'s get_random_u32_below(NR_MEMCG_STOCK)): the
  // same seed and the same operations on a CPU evict the same slots. 0 (the
  // default): seeded from std::random_device at Create(), a different
  // sequence in every engine, as the kernel's.
  uint64_t stock_eviction_seed = 0;
  // Not owned; may be null. Must outlive the engine.
  EngineObserver* observer = nullptr;
  // The cgroup2 mount option memory_recursiveprot: a group's memory.min/low
  // left unclaimed by its children's settings protects the children in
  // proportion to their unprotected usage (effective_protection()).
  bool memory_recursiveprot = false;
  // The cgroup2 mount option memory_localevents: memory.events (events
  // hierarchical) counts only the group's own events, like
  // memory.events.local, and only the group's watchers are notified
  // (memcg_memory_event() stops after the group).
  bool memory_localevents = false;
  // Every reclaim walk is a full walk of the target's subtree (as kswapd's
  // are) instead of a partial walk on the target's shared cursor. For
  // benchmarks: the baseline of "restore incremental cgroup iteration".
  bool memcg_full_walk = false;
  // Where the engine reads all time (engine/clock.h); null = Clock::Real().
  // Not owned.
  const Clock* clock = nullptr;

  // INVALID_ARGUMENT naming the first field out of the ranges above
  // ("charge_batch_pages 0 out of range [1, 127]").
  absl::Status Validate() const;

  // nr_cpus, or for 0 the machine's online CPUs (at most kMaxCpus, at least
  // 1).
  int ResolvedNrCpus() const;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_OPTIONS_H_
