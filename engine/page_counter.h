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
// second line, configuration and `parent` a third (CacheLinePaddedLayout).
// The counter is one template over where its fields sit,
// BasicPageCounter<Layout>; PageCounter is the engine's. PackedLayout, the
// pre-2022 order, exists so that tests/bench/charge_benchmark.cc measures
// the rearrangement with this very code. Both are instantiated once, in
// page_counter.cc.
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
// setters (SetMax/SetHigh/SetMin/SetLow) take no lock: calls for one counter
// must be serialised by the caller. The engine does so with its limits mutex
// (memory.* writes) or the group tree's writer lock (group creation and
// deletion, which exclude every other user of the group). min/low/high/max
// are atomics so the charge path reads them without a lock. Watermarks and
// the effective protection are updated racily by design (the kernel too).
#ifndef CGACCT_ENGINE_PAGE_COUNTER_H_
#define CGACCT_ENGINE_PAGE_COUNTER_H_

#include <atomic>
#include <cstdint>

#include "engine/types.h"

namespace cgacct {

// The engine's layout (and the kernel's since 2022): `usage` on a cache line
// of its own, protection bookkeeping and peaks on a second, read-mostly
// configuration and `parent` on a third. `Counter` is the counter type.
template <class Counter>
struct CacheLinePaddedLayout {
  // Cache line 1: written on every charge (plus the rarely written failcnt,
  // which the kernel keeps here too).
  alignas(kCacheLineBytes) std::atomic<int64_t> usage{0};
  std::atomic<uint64_t> failcnt{0};
  std::atomic<uint64_t> underflows{0};  // rarely written, like failcnt

  // Cache line 2: protection bookkeeping and peaks, written on charge only
  // when protection is configured or a new peak is reached.
  alignas(kCacheLineBytes) std::atomic<uint64_t> emin{0};
  std::atomic<uint64_t> elow{0};
  std::atomic<int64_t> min_usage{0};
  std::atomic<int64_t> low_usage{0};
  std::atomic<int64_t> children_min_usage{0};
  std::atomic<int64_t> children_low_usage{0};
  std::atomic<uint64_t> watermark{0};
  std::atomic<uint64_t> local_watermark{0};

  // Cache line 3: read-mostly configuration.
  alignas(kCacheLineBytes) std::atomic<uint64_t> min{0};
  std::atomic<uint64_t> low{0};
  std::atomic<uint64_t> high{0};
  std::atomic<uint64_t> max{0};
  Counter* parent = nullptr;      // constant after construction
  uint64_t page_counter_max = 0;  // constant after construction
  bool read_before_xchg = true;   // constant after construction
};

// Benchmark only: the pre-2022 kernel field order (usage, min, low, high,
// max, emin, min_usage, children_min_usage, elow, low_usage,
// children_low_usage, watermark, failcnt, parent) with no padding, so that
// `usage`, written by every charging CPU, shares its line with max/min/
// min_usage that every charging CPU reads. Aligned as a whole, so the split
// between lines is the same in every run.
template <class Counter>
struct alignas(kCacheLineBytes) PackedLayout {
  // Line 1.
  std::atomic<int64_t> usage{0};
  std::atomic<uint64_t> min{0};
  std::atomic<uint64_t> low{0};
  std::atomic<uint64_t> high{0};
  std::atomic<uint64_t> max{0};
  std::atomic<uint64_t> emin{0};
  std::atomic<int64_t> min_usage{0};
  std::atomic<int64_t> children_min_usage{0};
  // Line 2.
  std::atomic<uint64_t> elow{0};
  std::atomic<int64_t> low_usage{0};
  std::atomic<int64_t> children_low_usage{0};
  std::atomic<uint64_t> watermark{0};
  std::atomic<uint64_t> failcnt{0};
  Counter* parent = nullptr;
  // Not in the pre-2022 struct; what the charge path touches stays on line
  // 2, the cold rest goes to a line 3.
  std::atomic<uint64_t> local_watermark{0};
  bool read_before_xchg = true;
  alignas(kCacheLineBytes) std::atomic<uint64_t> underflows{0};
  uint64_t page_counter_max = 0;
};

template <template <class> class Layout>
class BasicPageCounter {
 public:
  // `page_counter_max` is PAGE_COUNTER_MAX for the engine's page size: the
  // value that means "max". `parent` may be null (root).
  BasicPageCounter(BasicPageCounter* parent, uint64_t page_counter_max);
  BasicPageCounter(const BasicPageCounter&) = delete;
  BasicPageCounter& operator=(const BasicPageCounter&) = delete;

  // page_counter_read(): current hierarchical usage in pages.
  uint64_t Read() const {
    int64_t usage = f_.usage.load(std::memory_order_relaxed);
    return usage < 0 ? 0 : static_cast<uint64_t>(usage);
  }

  // page_counter_charge(): charges nr_pages at every level, ignoring max.
  void Charge(uint64_t nr_pages);

  // page_counter_try_charge(): speculative add at each level up to the root;
  // on the first level that would exceed its max, rolls back the levels below
  // it, counts failcnt there and returns false with *fail set to that level.
  // usage == max is allowed. Peaks raised below the failing level stay.
  bool TryCharge(uint64_t nr_pages, BasicPageCounter** fail);

  // page_counter_uncharge(): cancels nr_pages at every level.
  void Uncharge(uint64_t nr_pages);

  // page_counter_cancel(): removes nr_pages from this level only.
  void Cancel(uint64_t nr_pages);

  // Limits (pages). SetMax is v2 memory.max: a plain exchange that accepts a
  // limit below usage (memory_max_write()); the caller then reclaims.
  uint64_t max() const { return f_.max.load(std::memory_order_relaxed); }
  uint64_t high() const { return f_.high.load(std::memory_order_relaxed); }
  uint64_t min() const { return f_.min.load(std::memory_order_relaxed); }
  uint64_t low() const { return f_.low.load(std::memory_order_relaxed); }
  void SetMax(uint64_t nr_pages);
  void SetHigh(uint64_t nr_pages);
  // page_counter_set_min()/set_low(): store, then propagate protected usage
  // at every level up to the root.
  void SetMin(uint64_t nr_pages);
  void SetLow(uint64_t nr_pages);

  // max - usage, or 0 when usage >= max (mem_cgroup_margin()).
  uint64_t Margin() const;

  uint64_t watermark() const {
    return f_.watermark.load(std::memory_order_relaxed);
  }
  uint64_t local_watermark() const {
    return f_.local_watermark.load(std::memory_order_relaxed);
  }
  // page_counter_reset_watermark(): local first, then global, to usage.
  void ResetWatermark();
  // What memory_peak_write() does to the counter: local_watermark = usage
  // (the global watermark stays). Returns usage. Serialised by the caller
  // (Group's peaks lock), racy against charges as the kernel's.
  uint64_t ResetLocalWatermark();
  uint64_t failcnt() const {
    return f_.failcnt.load(std::memory_order_relaxed);
  }

  // Protection bookkeeping (pages).
  uint64_t min_usage() const {
    return f_.min_usage.load(std::memory_order_relaxed);
  }
  uint64_t low_usage() const {
    return f_.low_usage.load(std::memory_order_relaxed);
  }
  uint64_t children_min_usage() const {
    return f_.children_min_usage.load(std::memory_order_relaxed);
  }
  uint64_t children_low_usage() const {
    return f_.children_low_usage.load(std::memory_order_relaxed);
  }
  // Effective protection as last computed by a reclaim walk.
  uint64_t emin() const { return f_.emin.load(std::memory_order_relaxed); }
  uint64_t elow() const { return f_.elow.load(std::memory_order_relaxed); }
  void set_effective_protection(uint64_t emin, uint64_t elow) {
    f_.emin.store(emin, std::memory_order_relaxed);
    f_.elow.store(elow, std::memory_order_relaxed);
  }

  BasicPageCounter* parent() const { return f_.parent; }
  // True if this counter is `ancestor` or below it
  // (mem_cgroup_is_descendant()).
  bool IsDescendantOf(const BasicPageCounter* ancestor) const;
  uint64_t page_counter_max() const { return f_.page_counter_max; }
  // Cancels that would have made usage negative (kernel: WARN_ONCE).
  uint64_t underflows() const {
    return f_.underflows.load(std::memory_order_relaxed);
  }

  // Test hooks for the "optimize charge codepath" variants (issue 4): when
  // false, propagation always exchanges (the pre-2022 code). Call before any
  // charge.
  void set_read_before_xchg(bool on) { f_.read_before_xchg = on; }

 private:
  // propagate_protected_usage(): keeps min_usage/low_usage and the parent's
  // children_*_usage in step with `usage`.
  void PropagateProtectedUsage(int64_t usage);
  void UpdateWatermarks(int64_t usage);

  Layout<BasicPageCounter> f_;
};

// Defined and instantiated in page_counter.cc.
extern template class BasicPageCounter<CacheLinePaddedLayout>;
extern template class BasicPageCounter<PackedLayout>;

// The engine's page counter.
using PageCounter = BasicPageCounter<CacheLinePaddedLayout>;

static_assert(sizeof(PageCounter) == 3 * kCacheLineBytes,
              "usage, protection and config must each own one cache line");
static_assert(sizeof(BasicPageCounter<PackedLayout>) == 3 * kCacheLineBytes,
              "packed: the pre-2022 fields in two lines, the rest in a third");

}  // namespace cgacct

#endif  // CGACCT_ENGINE_PAGE_COUNTER_H_
