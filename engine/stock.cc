#include "engine/stock.h"

namespace cgacct {

MemcgStock::MemcgStock(int nr_cpus, uint32_t batch_pages)
    : nr_cpus_(nr_cpus), batch_pages_(batch_pages), cpus_(new Cpu[nr_cpus]) {}

bool MemcgStock::Consume(int cpu, PageCounter* counter, uint64_t nr_pages) {
  if (nr_pages > batch_pages_) return false;
  Cpu& stock = cpus_[cpu];
  // local_trylock(): a busy slot means "go to the counters", never a wait.
  if (!stock.mu.TryLock()) return false;
  bool ret = false;
  for (int i = 0; i < kNrStockSlots; ++i) {
    if (stock.owner[i] != counter) continue;
    // A counter owns at most one slot per CPU: stop at the first match.
    if (stock.nr_pages[i] >= nr_pages) {
      stock.nr_pages[i] -= static_cast<uint8_t>(nr_pages);
      ret = true;
    }
    break;
  }
  stock.mu.Unlock();
  if (ret) stock.hits.fetch_add(1, std::memory_order_relaxed);
  return ret;
}

void MemcgStock::DrainSlotLocked(Cpu& stock, int slot) {
  PageCounter* owner = stock.owner[slot];
  if (owner == nullptr) return;
  if (stock.nr_pages[slot] > 0) {
    owner->Uncharge(stock.nr_pages[slot]);
    stock.nr_pages[slot] = 0;
    stock.drains.fetch_add(1, std::memory_order_relaxed);
  }
  stock.owner[slot] = nullptr;
}

void MemcgStock::Refill(int cpu, PageCounter* counter, uint64_t nr_pages) {
  Cpu& stock = cpus_[cpu];
  if (nr_pages > batch_pages_ || !stock.mu.TryLock()) {
    counter->Uncharge(nr_pages);
    return;
  }
  int empty = -1;
  for (int i = 0; i < kNrStockSlots; ++i) {
    if (stock.owner[i] == counter) {
      stock.nr_pages[i] = static_cast<uint8_t>(stock.nr_pages[i] + nr_pages);
      // Past the batch the whole slot goes back, not just the excess.
      if (stock.nr_pages[i] > batch_pages_) DrainSlotLocked(stock, i);
      stock.mu.Unlock();
      return;
    }
    if (empty < 0 && stock.owner[i] == nullptr) empty = i;
  }
  if (empty < 0) {
    empty = stock.evict_cursor;
    stock.evict_cursor =
        static_cast<uint8_t>((stock.evict_cursor + 1) % kNrStockSlots);
    DrainSlotLocked(stock, empty);
  }
  stock.owner[empty] = counter;
  stock.nr_pages[empty] = static_cast<uint8_t>(nr_pages);
  stock.mu.Unlock();
}

bool MemcgStock::HoldsLocked(const Cpu& stock, const PageCounter* root) const {
  for (int i = 0; i < kNrStockSlots; ++i) {
    if (stock.owner[i] == nullptr || stock.nr_pages[i] == 0) continue;
    if (root == nullptr || stock.owner[i]->IsDescendantOf(root)) return true;
  }
  return false;
}

bool MemcgStock::DrainAll(const PageCounter* root) {
  if (!drain_mu_.TryLock()) return false;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
    Cpu& stock = cpus_[cpu];
    MutexLock l(&stock.mu);
    // Like drain_local_stock(): a CPU holding any of root's pages is
    // drained whole.
    if (!HoldsLocked(stock, root)) continue;
    for (int i = 0; i < kNrStockSlots; ++i) DrainSlotLocked(stock, i);
  }
  drain_mu_.Unlock();
  return true;
}

void MemcgStock::DrainOwner(const PageCounter* counter) {
  MutexLock drain(&drain_mu_);
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
    Cpu& stock = cpus_[cpu];
    MutexLock l(&stock.mu);
    for (int i = 0; i < kNrStockSlots; ++i)
      if (stock.owner[i] == counter) DrainSlotLocked(stock, i);
  }
}

uint64_t MemcgStock::StockedPages(int cpu, const PageCounter* counter) const {
  Cpu& stock = cpus_[cpu];
  MutexLock l(&stock.mu);
  for (int i = 0; i < kNrStockSlots; ++i)
    if (stock.owner[i] == counter) return stock.nr_pages[i];
  return 0;
}

uint64_t MemcgStock::hits() const {
  uint64_t sum = 0;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu)
    sum += cpus_[cpu].hits.load(std::memory_order_relaxed);
  return sum;
}

uint64_t MemcgStock::drains() const {
  uint64_t sum = 0;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu)
    sum += cpus_[cpu].drains.load(std::memory_order_relaxed);
  return sum;
}

}  // namespace cgacct
