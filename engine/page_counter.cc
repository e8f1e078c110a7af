#include "engine/page_counter.h"

#include <algorithm>

namespace cgacct {

PageCounter::PageCounter(PageCounter* parent, uint64_t page_counter_max,
                         bool protection_support)
    : high_(page_counter_max),
      max_(page_counter_max),
      parent_(parent),
      page_counter_max_(page_counter_max),
      protection_support_(protection_support) {}

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

void PageCounter::PropagateProtectedUsage(int64_t usage) {
  // The root's protection is never consumed (no parent to account it to).
  if (parent_ == nullptr || !protection_support_) return;
  PropagateOne(usage,
               static_cast<int64_t>(min_.load(std::memory_order_relaxed)),
               read_before_xchg_, min_usage_, parent_->children_min_usage_);
  PropagateOne(usage,
               static_cast<int64_t>(low_.load(std::memory_order_relaxed)),
               read_before_xchg_, low_usage_, parent_->children_low_usage_);
}

void PageCounter::UpdateWatermarks(int64_t usage) {
  // Racy by design, as in the kernel: peaks only ever move up between
  // resets, and local_watermark <= watermark holds because local is checked
  // first.
  const uint64_t u = static_cast<uint64_t>(usage);
  if (u > local_watermark_.load(std::memory_order_relaxed)) {
    local_watermark_.store(u, std::memory_order_relaxed);
    if (u > watermark_.load(std::memory_order_relaxed))
      watermark_.store(u, std::memory_order_relaxed);
  }
}

void PageCounter::Cancel(uint64_t nr_pages) {
  int64_t new_usage = usage_.fetch_sub(static_cast<int64_t>(nr_pages),
                                       std::memory_order_relaxed) -
                      static_cast<int64_t>(nr_pages);
  if (new_usage < 0) {
    // Kernel: WARN_ONCE("page_counter underflow") and force 0.
    underflows_.fetch_add(1, std::memory_order_relaxed);
    usage_.fetch_add(-new_usage, std::memory_order_relaxed);
    new_usage = 0;
  }
  PropagateProtectedUsage(new_usage);
}

void PageCounter::Charge(uint64_t nr_pages) {
  for (PageCounter* c = this; c != nullptr; c = c->parent_) {
    // memory_order_relaxed: the counters only need atomicity; callers that
    // need ordering against limit changes use TryCharge's full barrier.
    int64_t new_usage = c->usage_.fetch_add(static_cast<int64_t>(nr_pages),
                                            std::memory_order_relaxed) +
                        static_cast<int64_t>(nr_pages);
    c->PropagateProtectedUsage(new_usage);
    c->UpdateWatermarks(new_usage);
  }
}

bool PageCounter::TryCharge(uint64_t nr_pages, PageCounter** fail) {
  const int64_t n = static_cast<int64_t>(nr_pages);
  PageCounter* c;
  for (c = this; c != nullptr; c = c->parent_) {
    // Speculative add, no CAS loop (see the kernel comment): a large charge
    // that fails can transiently make a concurrent small one fail too; the
    // error is bounded by the larger charge. seq_cst: the kernel's
    // atomic_long_add_return() is a full barrier, ordering it against SetMax.
    int64_t new_usage = c->usage_.fetch_add(n, std::memory_order_seq_cst) + n;
    if (static_cast<uint64_t>(new_usage) >
        c->max_.load(std::memory_order_relaxed)) {
      c->usage_.fetch_sub(n, std::memory_order_relaxed);
      c->failcnt_.fetch_add(1, std::memory_order_relaxed);
      *fail = c;
      for (PageCounter* r = this; r != c; r = r->parent_) r->Cancel(nr_pages);
      return false;
    }
    c->PropagateProtectedUsage(new_usage);
    c->UpdateWatermarks(new_usage);
  }
  return true;
}

void PageCounter::Uncharge(uint64_t nr_pages) {
  for (PageCounter* c = this; c != nullptr; c = c->parent_) c->Cancel(nr_pages);
}

void PageCounter::SetMax(uint64_t nr_pages) {
  // seq_cst pairs with TryCharge's full-barrier add.
  max_.store(std::min(nr_pages, page_counter_max_), std::memory_order_seq_cst);
}

void PageCounter::SetHigh(uint64_t nr_pages) {
  high_.store(std::min(nr_pages, page_counter_max_), std::memory_order_relaxed);
}

void PageCounter::SetMin(uint64_t nr_pages) {
  min_.store(std::min(nr_pages, page_counter_max_), std::memory_order_relaxed);
  for (PageCounter* c = this; c != nullptr; c = c->parent_)
    c->PropagateProtectedUsage(c->usage_.load(std::memory_order_relaxed));
}

void PageCounter::SetLow(uint64_t nr_pages) {
  low_.store(std::min(nr_pages, page_counter_max_), std::memory_order_relaxed);
  for (PageCounter* c = this; c != nullptr; c = c->parent_)
    c->PropagateProtectedUsage(c->usage_.load(std::memory_order_relaxed));
}

uint64_t PageCounter::Margin() const {
  uint64_t usage = Read();
  uint64_t limit = max();
  return usage < limit ? limit - usage : 0;
}

bool PageCounter::IsDescendantOf(const PageCounter* ancestor) const {
  for (const PageCounter* c = this; c != nullptr; c = c->parent_)
    if (c == ancestor) return true;
  return false;
}

void PageCounter::ResetWatermark() {
  uint64_t usage = Read();
  local_watermark_.store(usage, std::memory_order_relaxed);
  watermark_.store(usage, std::memory_order_relaxed);
}

}  // namespace cgacct
