#include "engine/page_counter.h"

#include <algorithm>

namespace cgacct {

template <template <class> class Layout>
BasicPageCounter<Layout>::BasicPageCounter(BasicPageCounter* parent,
                                           uint64_t page_counter_max) {
  f_.high.store(page_counter_max, std::memory_order_relaxed);
  f_.max.store(page_counter_max, std::memory_order_relaxed);
  f_.parent = parent;
  f_.page_counter_max = page_counter_max;
}

namespace {

// One half (min or low) of propagate_protected_usage(): caches
// min(usage, setting) in `cached` and moves the parent's children sum by the
// change. "mm: page_counter: remove unneeded atomic ops for low/min" (2022):
// read first and exchange only when the protected value changes, so with
// protection configured and usage above it, the common case, no atomic
// read-modify-write happens at all. `read_before_xchg` false is the pre-2022
// code (exchange whenever protection is or was configured).
void PropagateOne(int64_t usage, int64_t setting, bool read_before_xchg,
                  std::atomic<int64_t>& cached,
                  std::atomic<int64_t>& parent_children) {
  const int64_t protected_usage = std::min(usage, setting);
  if (read_before_xchg) {
    if (protected_usage == cached.load(std::memory_order_relaxed)) return;
  } else if (setting == 0 && cached.load(std::memory_order_relaxed) == 0) {
    return;
  }
  const int64_t old =
      cached.exchange(protected_usage, std::memory_order_relaxed);
  const int64_t delta = protected_usage - old;
  if (delta != 0) parent_children.fetch_add(delta, std::memory_order_relaxed);
}

}  // namespace

template <template <class> class Layout>
void BasicPageCounter<Layout>::PropagateProtectedUsage(int64_t usage) {
  // The root's protection is never consumed (no parent to account it to).
  BasicPageCounter* const parent = f_.parent;
  if (parent == nullptr) return;
  PropagateOne(
      usage, static_cast<int64_t>(f_.min.load(std::memory_order_relaxed)),
      f_.read_before_xchg, f_.min_usage, parent->f_.children_min_usage);
  PropagateOne(
      usage, static_cast<int64_t>(f_.low.load(std::memory_order_relaxed)),
      f_.read_before_xchg, f_.low_usage, parent->f_.children_low_usage);
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::UpdateWatermarks(int64_t usage) {
  // Racy by design, as in the kernel: peaks only ever move up between
  // resets, and local_watermark <= watermark holds because local is checked
  // first.
  const uint64_t u = static_cast<uint64_t>(usage);
  if (u > f_.local_watermark.load(std::memory_order_relaxed)) {
    f_.local_watermark.store(u, std::memory_order_relaxed);
    if (u > f_.watermark.load(std::memory_order_relaxed))
      f_.watermark.store(u, std::memory_order_relaxed);
  }
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::Cancel(uint64_t nr_pages) {
  int64_t new_usage = f_.usage.fetch_sub(static_cast<int64_t>(nr_pages),
                                         std::memory_order_relaxed) -
                      static_cast<int64_t>(nr_pages);
  if (new_usage < 0) {
    // Kernel: WARN_ONCE("page_counter underflow") and force 0.
    f_.underflows.fetch_add(1, std::memory_order_relaxed);
    f_.usage.fetch_add(-new_usage, std::memory_order_relaxed);
    new_usage = 0;
  }
  PropagateProtectedUsage(new_usage);
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::Charge(uint64_t nr_pages) {
  for (BasicPageCounter* c = this; c != nullptr; c = c->f_.parent) {
    // memory_order_relaxed: the counters only need atomicity; callers that
    // need ordering against limit changes use TryCharge's full barrier.
    int64_t new_usage = c->f_.usage.fetch_add(static_cast<int64_t>(nr_pages),
                                              std::memory_order_relaxed) +
                        static_cast<int64_t>(nr_pages);
    c->PropagateProtectedUsage(new_usage);
    c->UpdateWatermarks(new_usage);
  }
}

template <template <class> class Layout>
bool BasicPageCounter<Layout>::TryCharge(uint64_t nr_pages,
                                         BasicPageCounter** fail) {
  const int64_t n = static_cast<int64_t>(nr_pages);
  BasicPageCounter* c;
  for (c = this; c != nullptr; c = c->f_.parent) {
    // Speculative add, no CAS loop (see the kernel comment): a large charge
    // that fails can transiently make a concurrent small one fail too; the
    // error is bounded by the larger charge. seq_cst: the kernel's
    // atomic_long_add_return() is a full barrier, ordering it against SetMax.
    int64_t new_usage = c->f_.usage.fetch_add(n, std::memory_order_seq_cst) + n;
    if (static_cast<uint64_t>(new_usage) >
        c->f_.max.load(std::memory_order_relaxed)) {
      c->f_.usage.fetch_sub(n, std::memory_order_relaxed);
      c->f_.failcnt.fetch_add(1, std::memory_order_relaxed);
      *fail = c;
      for (BasicPageCounter* r = this; r != c; r = r->f_.parent)
        r->Cancel(nr_pages);
      return false;
    }
    c->PropagateProtectedUsage(new_usage);
    c->UpdateWatermarks(new_usage);
  }
  return true;
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::Uncharge(uint64_t nr_pages) {
  for (BasicPageCounter* c = this; c != nullptr; c = c->f_.parent)
    c->Cancel(nr_pages);
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::SetMax(uint64_t nr_pages) {
  // seq_cst pairs with TryCharge's full-barrier add.
  f_.max.store(std::min(nr_pages, f_.page_counter_max),
               std::memory_order_seq_cst);
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::SetHigh(uint64_t nr_pages) {
  f_.high.store(std::min(nr_pages, f_.page_counter_max),
                std::memory_order_relaxed);
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::SetMin(uint64_t nr_pages) {
  f_.min.store(std::min(nr_pages, f_.page_counter_max),
               std::memory_order_relaxed);
  for (BasicPageCounter* c = this; c != nullptr; c = c->f_.parent)
    c->PropagateProtectedUsage(c->f_.usage.load(std::memory_order_relaxed));
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::SetLow(uint64_t nr_pages) {
  f_.low.store(std::min(nr_pages, f_.page_counter_max),
               std::memory_order_relaxed);
  for (BasicPageCounter* c = this; c != nullptr; c = c->f_.parent)
    c->PropagateProtectedUsage(c->f_.usage.load(std::memory_order_relaxed));
}

template <template <class> class Layout>
uint64_t BasicPageCounter<Layout>::Margin() const {
  const uint64_t usage = Read();
  const uint64_t limit = max();
  return usage < limit ? limit - usage : 0;
}

template <template <class> class Layout>
bool BasicPageCounter<Layout>::IsDescendantOf(
    const BasicPageCounter* ancestor) const {
  for (const BasicPageCounter* c = this; c != nullptr; c = c->f_.parent)
    if (c == ancestor) return true;
  return false;
}

template <template <class> class Layout>
void BasicPageCounter<Layout>::ResetWatermark() {
  const uint64_t usage = Read();
  f_.local_watermark.store(usage, std::memory_order_relaxed);
  f_.watermark.store(usage, std::memory_order_relaxed);
}

template <template <class> class Layout>
uint64_t BasicPageCounter<Layout>::ResetLocalWatermark() {
  const uint64_t usage = Read();
  f_.local_watermark.store(usage, std::memory_order_relaxed);
  return usage;
}

// The engine's layout, and the pre-2022 one for the charge benchmark.
template class BasicPageCounter<CacheLinePaddedLayout>;
template class BasicPageCounter<PackedLayout>;

}  // namespace cgacct
