// The remote per-CPU charge stock of one cgacct::client::Client (the
// kernel's struct memcg_stock_pcp, one per CPU, and consume_stock(),
// refill_stock(), drain_all_stock()): pre-charged pages of a few
// (group, kind) pairs per slot, each with its own adaptive batch.
//
// Consume() is the library's hot path: a charge served from the calling
// CPU's slot takes that slot's lock alone, allocates nothing and makes no
// virtual call; it is inline so that Client::Charge() compiles it in place.
//
// Thread safety: thread-safe. Each Slot is guarded by its own SlotMutex;
// a method that walks every slot takes their locks one at a time, in index
// order. Internal to the library (not installed).
#ifndef CGACCT_CLIENT_LIB_STOCK_H_
#define CGACCT_CLIENT_LIB_STOCK_H_

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace cgacct::client::internal {

// (group, kind): the key of the stock and of the session's holdings.
using HeldKey = std::pair<std::string, int>;

// A slot's lock: a plain futex mutex (std::mutex), annotated for clang's
// thread-safety analysis. Not absl::Mutex: Debian's Abseil keeps its
// deadlock detection on, whose global graph lookup on every Lock() would
// make every CPU's stock hit share one lock.
class ABSL_LOCKABLE SlotMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE SlotLock {
 public:
  explicit SlotLock(SlotMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~SlotLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  SlotLock(const SlotLock&) = delete;
  SlotLock& operator=(const SlotLock&) = delete;

 private:
  SlotMutex* const mu_;
};

// One (group, kind) of a slot's stock (struct memcg_stock_pcp's cached[i] /
// nr_pages[i]), with this slot's adaptive batch for it.
struct StockEntry {
  std::string path;
  int kind = 0;
  uint64_t nr_pages = 0;
  uint64_t batch = 0;
  absl::Time last_refill = absl::InfinitePast();
  uint64_t last_use = 0;  // LRU tick
};

// A per-CPU slot (struct memcg_stock_pcp). Cache-line aligned so that CPUs
// do not share lines.
struct alignas(64) Slot {
  mutable SlotMutex mu;
  std::vector<StockEntry> entries ABSL_GUARDED_BY(mu);
  uint64_t tick ABSL_GUARDED_BY(mu) = 0;
  // Per-slot counters (summed by Stock::CountCharges()), so the hot path
  // shares nothing.
  uint64_t charges ABSL_GUARDED_BY(mu) = 0;
  uint64_t stock_hits ABSL_GUARDED_BY(mu) = 0;
};

// Pages leaving the stock, to go back to the server.
struct Returned {
  std::string path;
  int kind;
  uint64_t nr_pages;
};

class Stock {
 public:
  // `nr_slots` >= 1 slots of at most `stock_groups` entries; a first batch
  // of `batch_pages` (0: no stock at all) adapting up to `max_batch_pages`,
  // which also caps what a slot keeps of one entry.
  Stock(int nr_slots, int stock_groups, uint64_t batch_pages,
        uint64_t max_batch_pages);

  int nr_slots() const { return nr_slots_; }

  // The calling CPU's slot (this_cpu_ptr()).
  ABSL_ATTRIBUTE_ALWAYS_INLINE Slot& MySlot() {
    const int cpu = sched_getcpu();
    return slots_[cpu < 0 ? 0 : cpu % nr_slots_];
  }

  // consume_stock(): takes `nr_pages` of (group, kind) from the calling
  // CPU's slot; true on a hit (counted as a charge and a stock hit). On a
  // miss *batch is what to charge at least: the slot's adapted batch for
  // the group (BatchAfterMiss()), or the first batch if the slot has none.
  // Always inlined: it is Client::Charge()'s whole hit path.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Consume(std::string_view group, int kind,
                                            uint64_t nr_pages,
                                            uint64_t* batch) {
    Slot& slot = MySlot();
    SlotLock l(&slot.mu);
    for (StockEntry& e : slot.entries) {
      if (e.kind != kind || e.path != group) continue;
      if (e.nr_pages >= nr_pages) {
        e.nr_pages -= nr_pages;
        e.last_use = ++slot.tick;
        ++slot.charges;
        ++slot.stock_hits;
        return true;
      }
      *batch = BatchAfterMiss(e);
      return false;
    }
    *batch = batch_pages_;
    return false;
  }

  // Counts a charge the stock did not serve, on the calling CPU's slot.
  void CountCharge() {
    Slot& slot = MySlot();
    SlotLock l(&slot.mu);
    ++slot.charges;
  }

  // refill_stock(): adds `nr_pages` of (group, kind) to the calling CPU's
  // slot; what leaves it is appended to *excess: the whole entry once it
  // passes max_batch_pages (AddToEntry()), or an evicted least-recently-used
  // entry when all stock_groups entries are taken. Inline while the slot has the entry (Uncharge()'s
  // usual path); a new entry is made out of line.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Refill(std::string_view group, int kind,
                                           uint64_t nr_pages,
                                           std::vector<Returned>* excess) {
    Slot& slot = MySlot();
    SlotLock l(&slot.mu);
    RefillLocked(slot, group, kind, nr_pages, excess);
  }

  // Refill() unless `held_off` is set, read under the slot's lock: then
  // all `nr_pages` go to *excess (back to the server) and it returns true.
  // A drain sets its flag before Take() locks the slots, so pages freed
  // while it takes the stock either are taken with it or go back to the
  // server; none is left in a stock the drain's answer said was empty.
  bool RefillUnlessHeldOff(std::string_view group, int kind, uint64_t nr_pages,
                           const std::atomic<bool>& held_off,
                           std::vector<Returned>* excess) {
    Slot& slot = MySlot();
    SlotLock l(&slot.mu);
    if (ABSL_PREDICT_FALSE(held_off.load(std::memory_order_relaxed))) {
      excess->push_back({std::string(group), kind, nr_pages});
      return true;
    }
    RefillLocked(slot, group, kind, nr_pages, excess);
    return false;
  }

  // A refill charged by the server (a Charge's batch beyond what the
  // caller asked for): Refill() and clears `held_off` if `drain_epoch` still
  // reads `epoch` under the slot's lock; else a drain answered while the
  // charge was on the network, and all `nr_pages` go to *excess. Same
  // ordering as RefillUnlessHeldOff(): the drain bumps the epoch before
  // Take() locks the slots.
  void RefillIfNoDrainSince(std::string_view group, int kind,
                            uint64_t nr_pages,
                            const std::atomic<uint64_t>& drain_epoch,
                            uint64_t epoch, std::atomic<bool>* held_off,
                            std::vector<Returned>* excess) {
    Slot& slot = MySlot();
    SlotLock l(&slot.mu);
    if (drain_epoch.load(std::memory_order_relaxed) != epoch) {
      excess->push_back({std::string(group), kind, nr_pages});
      return;
    }
    held_off->store(false, std::memory_order_relaxed);
    RefillLocked(slot, group, kind, nr_pages, excess);
  }

  // Takes every slot's stock of groups at or below `subtree` out of the
  // slots, summed per (group, kind).
  std::vector<Returned> Take(std::string_view subtree);

  // Empties every slot; returns what they held per (group, kind).
  std::map<HeldKey, uint64_t> TakeAll();

  // Removes up to `nr_pages` of `key` from the slots, in slot order;
  // returns how many of them the slots did not hold.
  uint64_t Remove(const HeldKey& key, uint64_t nr_pages);

  // Charges and stock hits over all slots.
  void CountCharges(uint64_t* charges, uint64_t* stock_hits) const;

  // Pages over all slots and entries.
  uint64_t pages() const;

  // Pages of `key` over all slots.
  uint64_t PagesOf(const HeldKey& key) const;

 private:
  // What a slot keeps of one entry: max_batch_pages, 0 without batching.
  uint64_t cap() const { return batch_pages_ == 0 ? 0 : max_batch_pages_; }

  // The body of Refill() on `slot`, whose lock the caller holds: the
  // existing entry inline, a new one out of line.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void RefillLocked(
      Slot& slot, std::string_view group, int kind, uint64_t nr_pages,
      std::vector<Returned>* excess) ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu) {
    for (StockEntry& e : slot.entries) {
      if (e.kind != kind || e.path != group) continue;
      AddToEntry(slot, e, nr_pages, excess);
      return;
    }
    RefillNewEntry(slot, group, kind, nr_pages, excess);
  }

  // Adds `nr_pages` to `e` of `slot`; once that passes cap(), the whole
  // entry goes to *excess (refill_stock() drains the stock entirely once it
  // passes MEMCG_CHARGE_BATCH, drain_stock()), so the frees after it
  // accumulate again instead of each sending its own pages back.
  void AddToEntry(Slot& slot, StockEntry& e, uint64_t nr_pages,
                  std::vector<Returned>* excess)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu) {
    e.last_use = ++slot.tick;
    e.nr_pages += nr_pages;
    if (e.nr_pages > cap()) {
      excess->push_back({e.path, e.kind, e.nr_pages});
      e.nr_pages = 0;
    }
  }

  // Refill() of a (group, kind) the slot has no entry for: a new entry,
  // evicting the least recently used one when the slot is full (nothing is
  // kept without batching).
  void RefillNewEntry(Slot& slot, std::string_view group, int kind,
                      uint64_t nr_pages, std::vector<Returned>* excess)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(slot.mu);

  // A miss on `e`: adapts the slot's batch for the group to the refill rate
  // (doubling, up to max_batch_pages, within 100 ms of the last refill;
  // halving, down to batch_pages, after 1 s without one) and returns it.
  uint64_t BatchAfterMiss(StockEntry& e);

  const int nr_slots_;
  const int stock_groups_;
  const uint64_t batch_pages_;
  const uint64_t max_batch_pages_;
  const std::unique_ptr<Slot[]> slots_;
};

}  // namespace cgacct::client::internal

#endif  // CGACCT_CLIENT_LIB_STOCK_H_
