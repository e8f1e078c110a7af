// MemcgStock: the per-CPU stock of pre-charged pages in front of the
// page_counters.
//
// Mirrors struct memcg_stock_pcp and consume_stock(), refill_stock(),
// drain_stock(), drain_local_memcg_stock() and drain_all_stock() in
// mm/memcontrol.c as of "memcg: multi-memcg percpu charge cache" (2025,
// Linux 6.16): per CPU, 7 (owner, nr_pages) slots, batch 64 pages; a refill
// for a group without a slot takes a free slot, else drains a random one
// (get_random_u32_below(NR_MEMCG_STOCK)); drain_all_stock(memcg) drains every
// slot of every CPU whose stock holds pages of memcg's subtree, whoever owns
// them (drain_local_memcg_stock() -> drain_stock_fully()).
//
// Deliberate differences from the kernel:
//   - Each CPU slot's data is guarded by that slot's own lock (the
//     userspace stand-in for local_lock/local_trylock); several threads may
//     share a slot, and any thread may drain any slot.
//   - The random slot comes from a per-CPU SplitMix64 stream seeded at
//     construction (EngineOptions::stock_eviction_seed; 0 draws a seed from
//     std::random_device), so a test can replay the kernel's choice; the
//     kernel's get_random_u32_below() is not reproducible.
//   - DrainAll() drains remote CPUs synchronously instead of queueing work on
//     them, so when it returns the pages are back in the counters. And every
//     engine caller (the charge path's retry, memory.high/max writes,
//     Engine::DrainAllStock, group offline) waits for a DrainAll already
//     running instead of returning at once as the kernel's
//     mutex_trylock(&percpu_charge_mutex) does: another group's drain must
//     not turn parked pages into a failed charge. The kernel's best-effort
//     mode (wait == false) is kept for tests.
//   - Slots hold no reference on their owner: the engine clears every entry
//     of a group (DrainOwner) before the group is freed.
//   - The per-CPU lock is a SpinLock (engine/spinlock.h): one exchange to
//     take it, a plain store to drop it, like local_trylock's cost class.
//
// Two additions with no kernel counterpart, both off unless asked for
// (EngineOptions; cgacctd --stock_pool_buckets, --stock_victim_sets):
//   - The pool (pool_buckets > 0): pages a slot gives back (overflow past
//     the batch, or eviction) are parked in a direct-mapped table of
//     per-group buckets shared by all CPUs instead of walking the
//     page_counters, and a charge that misses its CPU's slot takes up to a
//     batch from its group's bucket before it walks them. So when pages are
//     charged on one CPU and uncharged on another (netperf's sender and
//     receiver, with uncharges through the stock) or more than 7 groups
//     share a CPU, they move between CPUs through one bucket (one lock, one
//     cache line) instead of a walk over every level of the hierarchy. A
//     bucket holds at most 2 x batch pages of one group; a deposit for
//     another group evicts it (its pages are uncharged), pages past the cap
//     are uncharged. Pooled pages are charged pages, like stocked ones:
//     memory.current includes them (at most 2 x batch per group more than
//     the kernel's bound), and DrainAll / DrainOwner drain the pool too. The
//     closest kernel idea is the per-page_counter stock RFC (not merged).
//   - The per-CPU victim table (victim_sets > 0): behind each CPU's 7 slots,
//     `victim_sets` sets of 4 (owner, nr_pages) ways, found by a hash of the
//     owner and guarded by the same per-CPU lock. A slot a refill evicts
//     moves its pages into its owner's set instead of being drained;
//     Consume() and Refill() for a group that is not in a slot use its way,
//     so a CPU keeps serving far more than 7 groups from pre-charged pages
//     (64 groups charging round-robin on one CPU: every charge a hit, where
//     the 7 slots alone rarely hit). A group's pages on a CPU are in at most
//     one place, a slot or a way; a group stays where its pages are (no
//     promotion back to a slot). A full set evicts its ways round-robin to
//     the pool, else to the counters. Cost: the pages a CPU may park grow
//     from 7 x batch to (7 + 4 x victim_sets) x batch (all of it drained by
//     DrainAll under limit pressure, like the slots), and memory.current
//     includes them.
//
// Thread safety: thread-safe. Lock order: a CPU's lock, then a bucket's;
// a bucket's lock is a leaf (page_counter walks take no locks).
#ifndef CGACCT_ENGINE_STOCK_H_
#define CGACCT_ENGINE_STOCK_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "engine/mutex.h"
#include "engine/page_counter.h"
#include "engine/spinlock.h"
#include "engine/types.h"

namespace cgacct {

class MemcgStock {
 public:
  // `batch_pages` <= 127 (slot counts are 8-bit). `pool_buckets`: 0 (no
  // pool: the kernel's behaviour) or a power of two (see the file comment).
  // `victim_sets`: 0 (no victim table: the kernel's 7 slots) or a power of
  // two (the engine allows <= 1024; see the file comment).
  // `eviction_seed`: seeds the per-CPU streams that pick a full stock's
  // victim slot; 0 draws one from std::random_device.
  MemcgStock(int nr_cpus, uint32_t batch_pages = kChargeBatchPages,
             uint32_t pool_buckets = 0, uint32_t victim_sets = 0,
             uint64_t eviction_seed = 0);

  // consume_stock(): takes nr_pages of `counter`'s pre-charged pages from
  // `cpu`'s stock (its slot, else its way in the victim table). False if
  // nr_pages > batch, the CPU's stock is busy (trylock failed), or the stock
  // holds too few pages for `counter`.
  bool Consume(int cpu, PageCounter* counter, uint64_t nr_pages);

  // The pool's half of a stock miss: takes between nr_pages and batch pages
  // that `counter` has pooled and returns how many (already charged; the
  // caller refills its stock with the surplus), or 0 when the pool holds
  // fewer than nr_pages of `counter`, nr_pages > batch, the bucket is busy
  // or there is no pool.
  uint64_t TakePooled(PageCounter* counter, uint64_t nr_pages);

  // refill_stock(): parks nr_pages already charged to `counter` in `cpu`'s
  // stock: in its slot, else in its way of the victim table, else in a free
  // slot, else in a slot picked at random, whose pages move to the victim
  // table (or are drained when there is none). Over batch, or when the CPU's
  // stock is busy (trylock failed): uncharged directly. A slot or way that
  // would exceed the batch is drained whole. Drained pages go to the pool
  // when there is one, else to the counters.
  void Refill(int cpu, PageCounter* counter, uint64_t nr_pages);

  // drain_all_stock(root): drains every CPU whose stock holds pages of
  // `root` or a descendant (root == nullptr: every CPU), all of its slots
  // and victim table whoever owns them (drain_local_memcg_stock()), and the
  // pool's buckets of `root`'s subtree, to the counters. With
  // wait == false, best effort like the kernel's: returns false without
  // draining if another DrainAll is in progress. With wait == true it waits
  // for that drain and then drains (always returns true): every engine
  // caller (the charge path, limit writes, DrainAllStock) uses it, so pages
  // parked in stocks (many more than the kernel's 7 x batch per CPU with the
  // victim table) cannot make a charge fail just because another group's drain
  // was running.
  bool DrainAll(const PageCounter* root, bool wait = false);

  // Drains every slot owned by `counter` on every CPU, and its bucket,
  // waiting for a concurrent DrainAll if needed, and forgets `counter`: no
  // pointer to it remains afterwards. For freeing a group (the kernel's
  // slots drop their css reference when drained or evicted; the engine's
  // hold none, so a freed group must leave no slot behind, even an empty
  // one).
  void DrainOwner(const PageCounter* counter);

  // Pages parked for `counter` on `cpu`, slot or victim way (tests).
  uint64_t StockedPages(int cpu, const PageCounter* counter) const;
  // Of those, the pages in `cpu`'s victim table (tests).
  uint64_t VictimPages(int cpu, const PageCounter* counter) const;
  // Pages `counter` has in the pool (tests).
  uint64_t PooledPages(const PageCounter* counter) const;

  uint64_t hits() const;         // Consume() calls served by a slot
  uint64_t victim_hits() const;  // Consume() calls served by the victim table
  uint64_t pool_hits() const;    // successful TakePooled() calls
  uint64_t drains() const;       // slots drained with pages in them

  uint32_t batch_pages() const { return batch_pages_; }
  uint32_t nr_buckets() const { return nr_buckets_; }
  uint32_t nr_victim_sets() const { return nr_victim_sets_; }
  // The seed of the eviction streams (the one given, or the one drawn).
  uint64_t eviction_seed() const { return eviction_seed_; }

 private:
  struct VictimSet;
  struct alignas(kCacheLineBytes) Cpu {
    mutable SpinLock mu;
    PageCounter* owner[kNrStockSlots] ABSL_GUARDED_BY(mu) = {};
    uint8_t nr_pages[kNrStockSlots] ABSL_GUARDED_BY(mu) = {};
    // SplitMix64 state: the stream that picks the slot a full stock gives
    // up (RandomSlotLocked).
    uint64_t eviction_rng ABSL_GUARDED_BY(mu) = 0;
    // Ways of this CPU's victim table with an owner: DrainAll skips the
    // table's scan when 0.
    uint32_t nr_victim_ways ABSL_GUARDED_BY(mu) = 0;
    // This CPU's nr_victim_sets_ sets (a slice of victim_), guarded by `mu`;
    // null without a victim table. Every access to a set goes through this
    // pointer, so the analysis checks the lock.
    VictimSet* sets ABSL_PT_GUARDED_BY(mu) = nullptr;
    // Statistics, read at scrape. Written only under `mu`, so a relaxed
    // load + store (no read-modify-write) loses nothing; atomics so the
    // lock-free reader is not a data race.
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> victim_hits{0};
    std::atomic<uint64_t> drains{0};
  };
  static_assert(alignof(Cpu) == kCacheLineBytes, "per-CPU stock is aligned");

  // One set of a CPU's victim table: one cache line, guarded by the owning
  // CPU's Cpu::mu through Cpu::sets (ABSL_PT_GUARDED_BY; the fields cannot
  // name a lock in another object). SetOfLocked() hands out a set only to a
  // caller that holds that lock.
  struct alignas(kCacheLineBytes) VictimSet {
    static constexpr int kWays = 4;
    PageCounter* owner[kWays] = {};
    uint8_t nr_pages[kWays] = {};
    uint8_t evict_cursor = 0;
  };
  static_assert(sizeof(VictimSet) == kCacheLineBytes, "one line per set");

  // One pool bucket: pooled pages of one group. Own cache line.
  struct alignas(kCacheLineBytes) Bucket {
    mutable SpinLock mu;
    PageCounter* owner ABSL_GUARDED_BY(mu) = nullptr;
    uint64_t nr_pages ABSL_GUARDED_BY(mu) = 0;
    std::atomic<uint64_t> hits{0};  // written under mu, as Cpu::hits
  };

  static void Bump(std::atomic<uint64_t>& counter) {
    counter.store(counter.load(std::memory_order_relaxed) + 1,
                  std::memory_order_relaxed);
  }
  // get_random_u32_below(NR_MEMCG_STOCK) on `stock`'s stream.
  static int RandomSlotLocked(Cpu& stock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);
  Bucket& BucketOf(const PageCounter* counter) const;
  // Parks nr_pages of `counter` (already charged) in the pool, evicting
  // another group's bucket; uncharges what does not fit.
  void Pool(PageCounter* counter, uint64_t nr_pages);
  // Uncharges and clears `bucket` if its owner is `root` or below it
  // (root == nullptr: any owner).
  void DrainBucket(Bucket& bucket, const PageCounter* root, bool exact_owner);

  // Drains one (owner, nr_pages) entry of `stock`, a slot or a way of its
  // victim table: to the pool if to_pool and there is one, else to the
  // counters; counts a drain if it held pages; clears it.
  void DrainEntryLocked(Cpu& stock, PageCounter*& owner, uint8_t& nr_pages,
                        bool to_pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);
  void DrainSlotLocked(Cpu& stock, int slot, bool to_pool = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);
  // `stock`'s set for `counter`; nullptr without a victim table.
  VictimSet* SetOfLocked(const Cpu& stock, const PageCounter* counter) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);
  // Drains way `way` of `set` (to the pool if to_pool and there is one).
  void DrainWayLocked(Cpu& stock, VictimSet& set, int way, bool to_pool)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);
  // Moves an evicted slot's pages into its owner's set of `stock`.
  void MoveToVictimLocked(Cpu& stock, PageCounter* owner, uint8_t nr_pages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);
  // Whether `stock` holds pages of `root` or below it, in a slot or a way.
  bool HoldsLocked(const Cpu& stock, const PageCounter* root) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);

  const int nr_cpus_;
  const uint32_t batch_pages_;
  const uint32_t nr_buckets_;      // 0: no pool; else a power of two
  const uint32_t nr_victim_sets_;  // per CPU; 0: no victim table
  const uint64_t eviction_seed_;   // never 0 (resolved at construction)
  std::unique_ptr<Cpu[]> cpus_;
  // nr_cpus_ x nr_victim_sets_ sets, CPU-major; owns what the Cpu::sets
  // pointers point to (touched only through them).
  std::unique_ptr<VictimSet[]> victim_;
  std::unique_ptr<Bucket[]> buckets_;
  // Serialises DrainAll/DrainOwner (percpu_charge_mutex).
  Mutex drain_mu_;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_STOCK_H_
