// PageCounter: one node of the hierarchical page counter tree.
//
// Mirrors struct page_counter and its operations in mm/page_counter.c and
// include/linux/page_counter.h. All values are in pages. A counter's usage
// includes the usage of all its descendants; charge/uncharge walk from the
// counter to the root.
//
// Layout: like the kernel since "mm: page_counter: rearrange struct
// page_counter fields" (2022), `usage` (written by every charging CPU) sits on
// a cache line of its own, away from the read-mostly limits `high`/`max` that
// every charging CPU reads; the protection bookkeeping and watermarks share a
// second line, configuration and `parent` a third.
//
// Deliberate differences from the kernel:
//   - failcnt is counted on every counter (the kernel counts it only for
//     cgroup v1 counters since track_failcnt); it is reported, not used.
//   - cancel() on underflow clamps to zero and counts the underflow
//     (WARN_ONCE in the kernel). Engine callers check before uncharging, so
//     an underflow is an engine bug, exposed through underflows().
//
// Thread safety: thread-safe. Charges and uncharges are lock-free (atomic
// adds, speculative try-charge with rollback, exactly as the kernel). Limit
// setters for one counter must be serialised by the caller (the engine holds
// the group tree lock); min/low/high/max are atomics so the charge path reads
// them without a lock. Watermarks are updated racily by design (monotone).
#ifndef CGACCT_ENGINE_PAGE_COUNTER_H_
#define CGACCT_ENGINE_PAGE_COUNTER_H_

#include <atomic>
#include <cstdint>

#include "engine/types.h"

namespace cgacct {

class PageCounter {
 public:
  // `max_pages` is PAGE_COUNTER_MAX for the engine's page size: the value
  // that means "max". `parent` may be null (root). `protection_support`
  // enables min/low protected-usage propagation (the v2 memory counter).
  PageCounter(PageCounter* parent, uint64_t page_counter_max,
              bool protection_support = true);
  PageCounter(const PageCounter&) = delete;
  PageCounter& operator=(const PageCounter&) = delete;

  // page_counter_read(): current hierarchical usage in pages.
  uint64_t Read() const {
    int64_t usage = usage_.load(std::memory_order_relaxed);
    return usage < 0 ? 0 : static_cast<uint64_t>(usage);
  }

  // page_counter_charge(): charges nr_pages at every level, ignoring max.
  void Charge(uint64_t nr_pages);

  // page_counter_try_charge(): speculative add at each level up to the root;
  // on the first level that would exceed its max, rolls back the levels below
  // it, counts failcnt there and returns false with *fail set to that level.
  // usage == max is allowed. Peaks raised below the failing level stay.
  bool TryCharge(uint64_t nr_pages, PageCounter** fail);

  // page_counter_uncharge(): cancels nr_pages at every level.
  void Uncharge(uint64_t nr_pages);

  // page_counter_cancel(): removes nr_pages from this level only.
  void Cancel(uint64_t nr_pages);

  // Limits (pages). SetMax is v2 memory.max: a plain exchange that accepts a
  // limit below usage (memory_max_write()); the caller then reclaims.
  uint64_t max() const { return max_.load(std::memory_order_relaxed); }
  uint64_t high() const { return high_.load(std::memory_order_relaxed); }
  uint64_t min() const { return min_.load(std::memory_order_relaxed); }
  uint64_t low() const { return low_.load(std::memory_order_relaxed); }
  void SetMax(uint64_t nr_pages);
  void SetHigh(uint64_t nr_pages);
  // page_counter_set_min()/set_low(): store, then propagate protected usage
  // at every level up to the root.
  void SetMin(uint64_t nr_pages);
  void SetLow(uint64_t nr_pages);

  // max - usage, or 0 when usage >= max (mem_cgroup_margin()).
  uint64_t Margin() const;

  uint64_t watermark() const {
    return watermark_.load(std::memory_order_relaxed);
  }
  uint64_t local_watermark() const {
    return local_watermark_.load(std::memory_order_relaxed);
  }
  // page_counter_reset_watermark(): local first, then global, to usage.
  void ResetWatermark();
  uint64_t failcnt() const { return failcnt_.load(std::memory_order_relaxed); }

  // Protection bookkeeping (pages).
  uint64_t min_usage() const {
    return min_usage_.load(std::memory_order_relaxed);
  }
  uint64_t low_usage() const {
    return low_usage_.load(std::memory_order_relaxed);
  }
  uint64_t children_min_usage() const {
    return children_min_usage_.load(std::memory_order_relaxed);
  }
  uint64_t children_low_usage() const {
    return children_low_usage_.load(std::memory_order_relaxed);
  }
  // Effective protection as last computed by a reclaim walk.
  uint64_t emin() const { return emin_.load(std::memory_order_relaxed); }
  uint64_t elow() const { return elow_.load(std::memory_order_relaxed); }
  void set_effective_protection(uint64_t emin, uint64_t elow) {
    emin_.store(emin, std::memory_order_relaxed);
    elow_.store(elow, std::memory_order_relaxed);
  }

  PageCounter* parent() const { return parent_; }
  // True if this counter is `ancestor` or below it
  // (mem_cgroup_is_descendant()).
  bool IsDescendantOf(const PageCounter* ancestor) const;
  uint64_t page_counter_max() const { return page_counter_max_; }
  // Cancels that would have made usage negative (kernel: WARN_ONCE).
  uint64_t underflows() const {
    return underflows_.load(std::memory_order_relaxed);
  }

  // Test hooks for the "optimize charge codepath" variants (issue 4): when
  // false, propagation always exchanges (the pre-2022 code).
  void set_read_before_xchg(bool on) { read_before_xchg_ = on; }

 private:
  // propagate_protected_usage(): keeps min_usage/low_usage and the parent's
  // children_*_usage in step with `usage`.
  void PropagateProtectedUsage(int64_t usage);
  void UpdateWatermarks(int64_t usage);

  // Cache line 1: written on every charge (plus the rarely written failcnt,
  // which the kernel keeps here too).
  alignas(kCacheLineBytes) std::atomic<int64_t> usage_{0};
  std::atomic<uint64_t> failcnt_{0};
  std::atomic<uint64_t> underflows_{0};  // rarely written, like failcnt

  // Cache line 2: protection bookkeeping and peaks, written on charge only
  // when protection is configured or a new peak is reached.
  alignas(kCacheLineBytes) std::atomic<uint64_t> emin_{0};
  std::atomic<uint64_t> elow_{0};
  std::atomic<int64_t> min_usage_{0};
  std::atomic<int64_t> low_usage_{0};
  std::atomic<int64_t> children_min_usage_{0};
  std::atomic<int64_t> children_low_usage_{0};
  std::atomic<uint64_t> watermark_{0};
  std::atomic<uint64_t> local_watermark_{0};

  // Cache line 3: read-mostly configuration.
  alignas(kCacheLineBytes) std::atomic<uint64_t> min_{0};
  std::atomic<uint64_t> low_{0};
  std::atomic<uint64_t> high_;
  std::atomic<uint64_t> max_;
  PageCounter* const parent_;
  const uint64_t page_counter_max_;
  const bool protection_support_;
  bool read_before_xchg_ = true;  // constant after construction
};

static_assert(sizeof(PageCounter) == 3 * kCacheLineBytes,
              "usage, protection and config must each own one cache line");

}  // namespace cgacct

#endif  // CGACCT_ENGINE_PAGE_COUNTER_H_
