#include "engine/stock.h"

#include <algorithm>
#include <random>

namespace cgacct {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state word per CPU, a
// Weyl step and a mixing function; plenty for picking one of 7 slots.
constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += kGoldenGamma);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t ResolveSeed(uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

}  // namespace

MemcgStock::MemcgStock(int nr_cpus, uint32_t batch_pages, uint32_t pool_buckets,
                       uint32_t victim_sets, uint64_t eviction_seed)
    : nr_cpus_(nr_cpus),
      batch_pages_(batch_pages),
      nr_buckets_(pool_buckets),
      nr_victim_sets_(victim_sets),
      eviction_seed_(ResolveSeed(eviction_seed)),
      cpus_(new Cpu[nr_cpus]),
      victim_(victim_sets > 0
                  ? new VictimSet[static_cast<size_t>(nr_cpus) * victim_sets]
                  : nullptr),
      buckets_(pool_buckets > 0 ? new Bucket[pool_buckets] : nullptr) {
  for (int cpu = 0; cpu < nr_cpus; ++cpu) {
    Cpu& stock = cpus_[cpu];
    SpinLockHolder l(&stock.mu);
    // A distinct stream per CPU: the seed's stream, advanced by the CPU.
    uint64_t state = eviction_seed_ + static_cast<uint64_t>(cpu) * kGoldenGamma;
    stock.eviction_rng = SplitMix64(state);
    if (victim_ != nullptr)
      stock.sets = &victim_[static_cast<size_t>(cpu) * victim_sets];
  }
}

int MemcgStock::RandomSlotLocked(Cpu& stock) {
  // get_random_u32_below(NR_MEMCG_STOCK): the high 32 bits of a draw,
  // scaled to [0, 7) by a multiply and shift (Lemire's method, whose bias
  // of at most 7 / 2^32 the kernel's rejection step removes).
  const uint64_t draw = SplitMix64(stock.eviction_rng) >> 32;
  return static_cast<int>((draw * kNrStockSlots) >> 32);
}

namespace {
// Counters are cache-line aligned: drop those bits, then a multiplicative
// hash (Fibonacci) so neighbouring groups spread over a table.
uint64_t HashCounter(const PageCounter* counter) {
  const uint64_t key = reinterpret_cast<uintptr_t>(counter) / kCacheLineBytes;
  return key * 0x9E3779B97F4A7C15ull;
}
}  // namespace

MemcgStock::VictimSet* MemcgStock::SetOfLocked(
    const Cpu& stock, const PageCounter* counter) const {
  if (nr_victim_sets_ == 0) return nullptr;
  // Bits 40.. of the hash: independent of the pool's bucket index (bits 32..).
  const uint64_t index = (HashCounter(counter) >> 40) & (nr_victim_sets_ - 1);
  return &stock.sets[index];
}

void MemcgStock::DrainEntryLocked(Cpu& stock, PageCounter*& owner,
                                  uint8_t& nr_pages, bool to_pool) {
  if (owner == nullptr) return;
  if (nr_pages > 0) {
    if (to_pool && nr_buckets_ > 0) {
      Pool(owner, nr_pages);
    } else {
      owner->Uncharge(nr_pages);
    }
    nr_pages = 0;
    Bump(stock.drains);
  }
  owner = nullptr;
}

void MemcgStock::DrainWayLocked(Cpu& stock, VictimSet& set, int way,
                                bool to_pool) {
  if (set.owner[way] == nullptr) return;
  DrainEntryLocked(stock, set.owner[way], set.nr_pages[way], to_pool);
  --stock.nr_victim_ways;
}

void MemcgStock::MoveToVictimLocked(Cpu& stock, PageCounter* owner,
                                    uint8_t nr_pages) {
  VictimSet& set = *SetOfLocked(stock, owner);
  int free_way = -1;
  for (int w = 0; w < VictimSet::kWays; ++w) {
    // The owner was in a slot, so it has no way here (one place per CPU).
    if (set.owner[w] == nullptr) {
      free_way = w;
      break;
    }
  }
  if (free_way < 0) {
    free_way = set.evict_cursor;
    set.evict_cursor =
        static_cast<uint8_t>((set.evict_cursor + 1) % VictimSet::kWays);
    DrainWayLocked(stock, set, free_way, /*to_pool=*/true);
  }
  set.owner[free_way] = owner;
  set.nr_pages[free_way] = nr_pages;
  ++stock.nr_victim_ways;
}

bool MemcgStock::Consume(int cpu, PageCounter* counter, uint64_t nr_pages) {
  if (nr_pages > batch_pages_) return false;
  Cpu& stock = cpus_[cpu];
  // local_trylock(): a busy slot means "go to the counters", never a wait.
  if (!stock.mu.TryLock()) return false;
  bool ret = false;
  bool found = false;
  for (int i = 0; i < kNrStockSlots; ++i) {
    if (stock.owner[i] != counter) continue;
    // A counter owns at most one slot per CPU: stop at the first match.
    found = true;
    if (stock.nr_pages[i] >= nr_pages) {
      stock.nr_pages[i] -= static_cast<uint8_t>(nr_pages);
      ret = true;
      Bump(stock.hits);
    }
    break;
  }
  if (!found) {
    if (VictimSet* set = SetOfLocked(stock, counter)) {
      for (int w = 0; w < VictimSet::kWays; ++w) {
        if (set->owner[w] != counter) continue;
        if (set->nr_pages[w] >= nr_pages) {
          set->nr_pages[w] -= static_cast<uint8_t>(nr_pages);
          ret = true;
          Bump(stock.victim_hits);
        }
        break;
      }
    }
  }
  stock.mu.Unlock();
  return ret;
}

MemcgStock::Bucket& MemcgStock::BucketOf(const PageCounter* counter) const {
  return buckets_[(HashCounter(counter) >> 32) & (nr_buckets_ - 1)];
}

uint64_t MemcgStock::TakePooled(PageCounter* counter, uint64_t nr_pages) {
  if (nr_buckets_ == 0 || nr_pages > batch_pages_) return 0;
  Bucket& bucket = BucketOf(counter);
  if (!bucket.mu.TryLock()) return 0;
  uint64_t taken = 0;
  if (bucket.owner == counter && bucket.nr_pages >= nr_pages) {
    taken = std::min<uint64_t>(bucket.nr_pages, batch_pages_);
    bucket.nr_pages -= taken;
    Bump(bucket.hits);
  }
  bucket.mu.Unlock();
  return taken;
}

void MemcgStock::Pool(PageCounter* counter, uint64_t nr_pages) {
  Bucket& bucket = BucketOf(counter);
  const uint64_t cap = 2 * uint64_t{batch_pages_};
  PageCounter* victim = nullptr;
  uint64_t victim_pages = 0;
  uint64_t excess;
  {
    SpinLockHolder l(&bucket.mu);
    if (bucket.owner != counter) {
      victim = bucket.owner;
      victim_pages = bucket.nr_pages;
      bucket.owner = counter;
      bucket.nr_pages = 0;
    }
    const uint64_t put = std::min(nr_pages, cap - bucket.nr_pages);
    bucket.nr_pages += put;
    excess = nr_pages - put;
  }
  // Walks outside the bucket lock (they take no locks).
  if (victim != nullptr && victim_pages > 0) victim->Uncharge(victim_pages);
  if (excess > 0) counter->Uncharge(excess);
}

void MemcgStock::DrainBucket(Bucket& bucket, const PageCounter* root,
                             bool exact_owner) {
  PageCounter* owner;
  uint64_t nr_pages;
  {
    SpinLockHolder l(&bucket.mu);
    owner = bucket.owner;
    if (owner == nullptr) return;
    const bool match = exact_owner
                           ? owner == root
                           : root == nullptr || owner->IsDescendantOf(root);
    if (!match) return;
    nr_pages = bucket.nr_pages;
    bucket.owner = nullptr;
    bucket.nr_pages = 0;
  }
  if (nr_pages > 0) owner->Uncharge(nr_pages);
}

void MemcgStock::DrainSlotLocked(Cpu& stock, int slot, bool to_pool) {
  DrainEntryLocked(stock, stock.owner[slot], stock.nr_pages[slot], to_pool);
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
      if (stock.nr_pages[i] > batch_pages_) {
        DrainSlotLocked(stock, i, /*to_pool=*/true);
      }
      stock.mu.Unlock();
      return;
    }
    if (empty < 0 && stock.owner[i] == nullptr) empty = i;
  }
  if (VictimSet* set = SetOfLocked(stock, counter)) {
    for (int w = 0; w < VictimSet::kWays; ++w) {
      if (set->owner[w] != counter) continue;
      set->nr_pages[w] = static_cast<uint8_t>(set->nr_pages[w] + nr_pages);
      if (set->nr_pages[w] > batch_pages_) {
        DrainWayLocked(stock, *set, w, /*to_pool=*/true);
      }
      stock.mu.Unlock();
      return;
    }
  }
  if (empty < 0) {
    // refill_stock(): every slot taken, a random one gives way.
    empty = RandomSlotLocked(stock);
    if (nr_victim_sets_ > 0 && stock.nr_pages[empty] > 0) {
      MoveToVictimLocked(stock, stock.owner[empty], stock.nr_pages[empty]);
      stock.owner[empty] = nullptr;
      stock.nr_pages[empty] = 0;
    } else {
      DrainSlotLocked(stock, empty, /*to_pool=*/true);
    }
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
  if (stock.nr_victim_ways == 0) return false;
  for (uint32_t s = 0; s < nr_victim_sets_; ++s) {
    for (int w = 0; w < VictimSet::kWays; ++w) {
      const PageCounter* owner = stock.sets[s].owner[w];
      if (owner == nullptr || stock.sets[s].nr_pages[w] == 0) continue;
      if (root == nullptr || owner->IsDescendantOf(root)) return true;
    }
  }
  return false;
}

bool MemcgStock::DrainAll(const PageCounter* root, bool wait) {
  if (wait) {
    drain_mu_.Lock();
  } else if (!drain_mu_.TryLock()) {
    return false;
  }
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
    Cpu& stock = cpus_[cpu];
    SpinLockHolder l(&stock.mu);
    // Like drain_local_stock(): a CPU holding any of root's pages is
    // drained whole.
    if (!HoldsLocked(stock, root)) continue;
    for (int i = 0; i < kNrStockSlots; ++i) DrainSlotLocked(stock, i);
    for (uint32_t s = 0; s < nr_victim_sets_ && stock.nr_victim_ways > 0; ++s) {
      for (int w = 0; w < VictimSet::kWays; ++w)
        DrainWayLocked(stock, stock.sets[s], w, /*to_pool=*/false);
    }
  }
  for (uint32_t b = 0; b < nr_buckets_; ++b) {
    DrainBucket(buckets_[b], root, /*exact_owner=*/false);
  }
  drain_mu_.Unlock();
  return true;
}

void MemcgStock::DrainOwner(const PageCounter* counter) {
  MutexLock drain(&drain_mu_);
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
    Cpu& stock = cpus_[cpu];
    SpinLockHolder l(&stock.mu);
    for (int i = 0; i < kNrStockSlots; ++i)
      if (stock.owner[i] == counter) DrainSlotLocked(stock, i);
    if (VictimSet* set = SetOfLocked(stock, counter)) {
      for (int w = 0; w < VictimSet::kWays; ++w)
        if (set->owner[w] == counter)
          DrainWayLocked(stock, *set, w, /*to_pool=*/false);
    }
  }
  // After the slots: their drains went to the counters, not to the pool.
  if (nr_buckets_ > 0) DrainBucket(BucketOf(counter), counter, true);
}

uint64_t MemcgStock::StockedPages(int cpu, const PageCounter* counter) const {
  Cpu& stock = cpus_[cpu];
  SpinLockHolder l(&stock.mu);
  for (int i = 0; i < kNrStockSlots; ++i)
    if (stock.owner[i] == counter) return stock.nr_pages[i];
  if (const VictimSet* set = SetOfLocked(stock, counter)) {
    for (int w = 0; w < VictimSet::kWays; ++w)
      if (set->owner[w] == counter) return set->nr_pages[w];
  }
  return 0;
}

uint64_t MemcgStock::VictimPages(int cpu, const PageCounter* counter) const {
  Cpu& stock = cpus_[cpu];
  SpinLockHolder l(&stock.mu);
  if (const VictimSet* set = SetOfLocked(stock, counter)) {
    for (int w = 0; w < VictimSet::kWays; ++w)
      if (set->owner[w] == counter) return set->nr_pages[w];
  }
  return 0;
}

uint64_t MemcgStock::PooledPages(const PageCounter* counter) const {
  if (nr_buckets_ == 0) return 0;
  Bucket& bucket = BucketOf(counter);
  SpinLockHolder l(&bucket.mu);
  return bucket.owner == counter ? bucket.nr_pages : 0;
}

uint64_t MemcgStock::hits() const {
  uint64_t sum = 0;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu)
    sum += cpus_[cpu].hits.load(std::memory_order_relaxed);
  return sum;
}

uint64_t MemcgStock::victim_hits() const {
  uint64_t sum = 0;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu)
    sum += cpus_[cpu].victim_hits.load(std::memory_order_relaxed);
  return sum;
}

uint64_t MemcgStock::pool_hits() const {
  uint64_t sum = 0;
  for (uint32_t b = 0; b < nr_buckets_; ++b)
    sum += buckets_[b].hits.load(std::memory_order_relaxed);
  return sum;
}

uint64_t MemcgStock::drains() const {
  uint64_t sum = 0;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu)
    sum += cpus_[cpu].drains.load(std::memory_order_relaxed);
  return sum;
}

}  // namespace cgacct
