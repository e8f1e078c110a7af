// MemcgStock: the per-CPU stock of pre-charged pages in front of the
// page_counters.
//
// Mirrors struct memcg_stock_pcp and consume_stock(), refill_stock(),
// drain_stock() and drain_all_stock() in mm/memcontrol.c as of "memcg:
// multi-memcg percpu charge cache" (2025): per CPU, 7 (owner, nr_pages)
// slots, a round-robin eviction cursor, batch 64 pages.
//
// Deliberate differences from the kernel:
//   - Each CPU slot's data is guarded by that slot's own mutex (the
//     userspace stand-in for local_lock/local_trylock); several threads may
//     share a slot, and any thread may drain any slot.
//   - DrainAll() drains remote CPUs synchronously instead of queueing work on
//     them, so when it returns the pages are back in the counters. Like the
//     kernel it is best effort: if another DrainAll is running it returns at
//     once (the kernel's mutex_trylock(&percpu_charge_mutex)).
//   - Slots hold no reference on their owner: the engine drains every slot
//     of a group (DrainOwner) before the group is freed.
//
// Thread safety: thread-safe.
#ifndef CGACCT_ENGINE_STOCK_H_
#define CGACCT_ENGINE_STOCK_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "engine/mutex.h"
#include "engine/page_counter.h"
#include "engine/types.h"

namespace cgacct {

class MemcgStock {
 public:
  // `batch_pages` <= 127 (slot counts are 8-bit).
  MemcgStock(int nr_cpus, uint32_t batch_pages = kChargeBatchPages);

  // consume_stock(): takes nr_pages of `counter`'s pre-charged pages from
  // `cpu`'s stock. False if nr_pages > batch, the slot is busy (trylock
  // failed), or the stock holds too few pages for `counter`.
  bool Consume(int cpu, PageCounter* counter, uint64_t nr_pages);

  // refill_stock(): parks nr_pages already charged to `counter` in `cpu`'s
  // stock. Over batch: uncharged directly. A slot that would exceed the batch
  // is drained whole; with no free slot the cursor's victim is drained.
  void Refill(int cpu, PageCounter* counter, uint64_t nr_pages);

  // drain_all_stock(root): drains every CPU whose stock holds pages of
  // `root` or a descendant (root == nullptr: every CPU). Best effort: returns
  // false without draining if another DrainAll is in progress.
  bool DrainAll(const PageCounter* root);

  // Drains every slot owned by `counter` on every CPU, waiting for a
  // concurrent DrainAll if needed. For group removal.
  void DrainOwner(const PageCounter* counter);

  // Pages parked for `counter` on `cpu` (tests).
  uint64_t StockedPages(int cpu, const PageCounter* counter) const;

  uint64_t hits() const;    // successful Consume() calls
  uint64_t drains() const;  // slots drained with pages in them

  uint32_t batch_pages() const { return batch_pages_; }

 private:
  struct alignas(kCacheLineBytes) Cpu {
    mutable Mutex mu;
    PageCounter* owner[kNrStockSlots] ABSL_GUARDED_BY(mu) = {};
    uint8_t nr_pages[kNrStockSlots] ABSL_GUARDED_BY(mu) = {};
    uint8_t evict_cursor ABSL_GUARDED_BY(mu) = 0;
    // Statistics, written by the slot's users and read at scrape: relaxed
    // atomics, each on this CPU's own lines.
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> drains{0};
  };
  static_assert(alignof(Cpu) == kCacheLineBytes, "per-CPU stock is aligned");

  void DrainSlotLocked(Cpu& stock, int slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);
  bool HoldsLocked(const Cpu& stock, const PageCounter* root) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stock.mu);

  const int nr_cpus_;
  const uint32_t batch_pages_;
  std::unique_ptr<Cpu[]> cpus_;
  // Serialises DrainAll/DrainOwner (percpu_charge_mutex).
  Mutex drain_mu_;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_STOCK_H_
