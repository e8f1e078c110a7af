#include "client/lib/stock.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "engine/group_path.h"

namespace cgacct::client::internal {

Stock::Stock(int nr_slots, int stock_groups, uint64_t batch_pages,
             uint64_t max_batch_pages)
    : nr_slots_(nr_slots),
      stock_groups_(stock_groups),
      batch_pages_(batch_pages),
      max_batch_pages_(max_batch_pages),
      slots_(std::make_unique<Slot[]>(nr_slots)) {}

uint64_t Stock::BatchAfterMiss(StockEntry& e) {
  const absl::Time now = absl::Now();
  const absl::Duration since = now - e.last_refill;
  if (since < absl::Milliseconds(100)) {
    e.batch = std::min(std::max<uint64_t>(e.batch, 1) * 2, max_batch_pages_);
  } else if (since > absl::Seconds(1)) {
    e.batch = std::max(e.batch / 2, batch_pages_);
  }
  e.last_refill = now;
  return e.batch;
}

void Stock::RefillNewEntry(Slot& slot, std::string_view group, int kind,
                           uint64_t nr_pages, std::vector<Returned>* excess) {
  if (cap() == 0) {
    excess->push_back({std::string(group), kind, nr_pages});
    return;
  }
  if (static_cast<int>(slot.entries.size()) >= stock_groups_) {
    auto lru = std::min_element(slot.entries.begin(), slot.entries.end(),
                                [](const StockEntry& a, const StockEntry& b) {
                                  return a.last_use < b.last_use;
                                });
    if (lru->nr_pages > 0) {
      excess->push_back({lru->path, lru->kind, lru->nr_pages});
    }
    slot.entries.erase(lru);
  }
  slot.entries.push_back(StockEntry{std::string(group), kind, 0, batch_pages_});
  AddToEntry(slot, slot.entries.back(), nr_pages, excess);
}

std::vector<Returned> Stock::Take(std::string_view subtree) {
  // Debian's Abseil has its own string_view, not std::string_view.
  const absl::string_view root(subtree.data(), subtree.size());
  std::map<HeldKey, uint64_t> sum;
  for (int i = 0; i < nr_slots_; ++i) {
    Slot& slot = slots_[i];
    SlotLock l(&slot.mu);
    for (StockEntry& e : slot.entries) {
      if (e.nr_pages == 0 || !PathAtOrBelow(e.path, root)) continue;
      sum[{e.path, e.kind}] += e.nr_pages;
      e.nr_pages = 0;
    }
  }
  std::vector<Returned> out;
  for (auto& [k, n] : sum) out.push_back({k.first, k.second, n});
  return out;
}

std::map<HeldKey, uint64_t> Stock::TakeAll() {
  std::map<HeldKey, uint64_t> taken;
  for (int i = 0; i < nr_slots_; ++i) {
    Slot& slot = slots_[i];
    SlotLock l(&slot.mu);
    for (StockEntry& e : slot.entries) {
      taken[{e.path, e.kind}] += e.nr_pages;
      e.nr_pages = 0;
    }
  }
  return taken;
}

uint64_t Stock::Remove(const HeldKey& key, uint64_t nr_pages) {
  for (int i = 0; i < nr_slots_ && nr_pages > 0; ++i) {
    Slot& slot = slots_[i];
    SlotLock l(&slot.mu);
    for (StockEntry& e : slot.entries) {
      if (e.kind != key.second || e.path != key.first) continue;
      const uint64_t take = std::min(e.nr_pages, nr_pages);
      e.nr_pages -= take;
      nr_pages -= take;
    }
  }
  return nr_pages;
}

void Stock::CountCharges(uint64_t* charges, uint64_t* stock_hits) const {
  for (int i = 0; i < nr_slots_; ++i) {
    const Slot& slot = slots_[i];
    SlotLock l(&slot.mu);
    *charges += slot.charges;
    *stock_hits += slot.stock_hits;
  }
}

uint64_t Stock::pages() const {
  uint64_t n = 0;
  for (int i = 0; i < nr_slots_; ++i) {
    const Slot& slot = slots_[i];
    SlotLock l(&slot.mu);
    for (const StockEntry& e : slot.entries) n += e.nr_pages;
  }
  return n;
}

uint64_t Stock::PagesOf(const HeldKey& key) const {
  uint64_t n = 0;
  for (int i = 0; i < nr_slots_; ++i) {
    const Slot& slot = slots_[i];
    SlotLock l(&slot.mu);
    for (const StockEntry& e : slot.entries) {
      if (e.kind == key.second && e.path == key.first) n += e.nr_pages;
    }
  }
  return n;
}

}  // namespace cgacct::client::internal
