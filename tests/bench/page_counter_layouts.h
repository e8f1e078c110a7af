// Benchmark-only copies of the page_counter charge path in two memory
// layouts, to isolate part (B) of "memcg: optimize charge codepath" (2022):
// "mm: page_counter: rearrange struct page_counter fields".
//
//   PaddedLayout  the layout of engine/page_counter.h (and the kernel since
//                 2022): `usage` alone on its cache line, protection
//                 bookkeeping and peaks on a second, limits and `parent` on a
//                 third (3 x 64 bytes).
//   PackedLayout  the pre-2022 field order (usage, min, low, high, max, emin,
//                 min_usage, children_min_usage, elow, low_usage,
//                 children_low_usage, watermark, failcnt, parent) with no
//                 padding: `usage`, written by every charging CPU, shares its
//                 line with max/min/min_usage that every charging CPU reads.
//
// The algorithm is a line-for-line copy of engine/page_counter.cc (TryCharge
// with speculative add and rollback, Cancel, propagate_protected_usage with
// and without the read-before-xchg check, watermarks), written once over the
// layout so that both layouts run the same code; charge_benchmark.cc also
// runs the engine's own PageCounter beside them to show the copy costs what
// the original does. Nothing here is used outside tests/bench.
//
// Thread safety: as engine/page_counter.h (lock-free charge path; setters
// serialised by the caller).
#ifndef CGACCT_TESTS_BENCH_PAGE_COUNTER_LAYOUTS_H_
#define CGACCT_TESTS_BENCH_PAGE_COUNTER_LAYOUTS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "engine/types.h"

namespace cgacct::bench {

template <class Counter>
struct PaddedLayout {
  alignas(kCacheLineBytes) std::atomic<int64_t> usage{0};
  std::atomic<uint64_t> failcnt{0};

  alignas(kCacheLineBytes) std::atomic<uint64_t> emin{0};
  std::atomic<uint64_t> elow{0};
  std::atomic<int64_t> min_usage{0};
  std::atomic<int64_t> low_usage{0};
  std::atomic<int64_t> children_min_usage{0};
  std::atomic<int64_t> children_low_usage{0};
  std::atomic<uint64_t> watermark{0};
  std::atomic<uint64_t> local_watermark{0};

  alignas(kCacheLineBytes) std::atomic<uint64_t> min{0};
  std::atomic<uint64_t> low{0};
  std::atomic<uint64_t> high{0};
  std::atomic<uint64_t> max{0};
  Counter* parent = nullptr;
  bool read_before_xchg = true;
};

// Aligned as a whole (so the split between its two lines is the same in every
// run), packed inside.
template <class Counter>
struct alignas(kCacheLineBytes) PackedLayout {
  std::atomic<int64_t> usage{0};
  std::atomic<uint64_t> min{0};
  std::atomic<uint64_t> low{0};
  std::atomic<uint64_t> high{0};
  std::atomic<uint64_t> max{0};
  std::atomic<uint64_t> emin{0};
  std::atomic<int64_t> min_usage{0};
  std::atomic<int64_t> children_min_usage{0};
  // Second line.
  std::atomic<uint64_t> elow{0};
  std::atomic<int64_t> low_usage{0};
  std::atomic<int64_t> children_low_usage{0};
  std::atomic<uint64_t> watermark{0};
  std::atomic<uint64_t> failcnt{0};
  Counter* parent = nullptr;
  // Not in the kernel struct (the pre-2022 kernel had no local_watermark);
  // kept for an identical algorithm, on the second line.
  std::atomic<uint64_t> local_watermark{0};
  bool read_before_xchg = true;
};

template <template <class> class Layout>
class BenchPageCounter {
 public:
  BenchPageCounter(BenchPageCounter* parent, uint64_t max_pages) {
    f_.parent = parent;
    f_.high.store(max_pages, std::memory_order_relaxed);
    f_.max.store(max_pages, std::memory_order_relaxed);
  }

  void set_read_before_xchg(bool on) { f_.read_before_xchg = on; }
  void SetMin(uint64_t v) {
    f_.min.store(v, std::memory_order_relaxed);
    for (BenchPageCounter* c = this; c != nullptr; c = c->f_.parent)
      c->Propagate(c->f_.usage.load(std::memory_order_relaxed));
  }
  void SetLow(uint64_t v) {
    f_.low.store(v, std::memory_order_relaxed);
    for (BenchPageCounter* c = this; c != nullptr; c = c->f_.parent)
      c->Propagate(c->f_.usage.load(std::memory_order_relaxed));
  }
  int64_t usage() const { return f_.usage.load(std::memory_order_relaxed); }

  bool TryCharge(uint64_t nr_pages) {
    const int64_t n = static_cast<int64_t>(nr_pages);
    for (BenchPageCounter* c = this; c != nullptr; c = c->f_.parent) {
      int64_t new_usage =
          c->f_.usage.fetch_add(n, std::memory_order_seq_cst) + n;
      if (static_cast<uint64_t>(new_usage) >
          c->f_.max.load(std::memory_order_relaxed)) {
        c->f_.usage.fetch_sub(n, std::memory_order_relaxed);
        c->f_.failcnt.fetch_add(1, std::memory_order_relaxed);
        for (BenchPageCounter* r = this; r != c; r = r->f_.parent)
          r->Cancel(nr_pages);
        return false;
      }
      c->Propagate(new_usage);
      c->UpdateWatermarks(new_usage);
    }
    return true;
  }

  void Uncharge(uint64_t nr_pages) {
    for (BenchPageCounter* c = this; c != nullptr; c = c->f_.parent)
      c->Cancel(nr_pages);
  }

 private:
  void Cancel(uint64_t nr_pages) {
    int64_t new_usage = f_.usage.fetch_sub(static_cast<int64_t>(nr_pages),
                                           std::memory_order_relaxed) -
                        static_cast<int64_t>(nr_pages);
    if (new_usage < 0) {
      f_.usage.fetch_add(-new_usage, std::memory_order_relaxed);
      new_usage = 0;
    }
    Propagate(new_usage);
  }

  static void PropagateOne(bool read_before_xchg, int64_t usage, int64_t limit,
                           std::atomic<int64_t>& cached,
                           std::atomic<int64_t>& parent_sum) {
    const int64_t protected_usage = std::min(usage, limit);
    if (read_before_xchg) {
      if (protected_usage == cached.load(std::memory_order_relaxed)) return;
    } else if (limit == 0 && cached.load(std::memory_order_relaxed) == 0) {
      return;
    }
    const int64_t old =
        cached.exchange(protected_usage, std::memory_order_relaxed);
    if (protected_usage != old)
      parent_sum.fetch_add(protected_usage - old, std::memory_order_relaxed);
  }

  void Propagate(int64_t usage) {
    BenchPageCounter* parent = f_.parent;
    if (parent == nullptr) return;
    PropagateOne(f_.read_before_xchg, usage,
                 static_cast<int64_t>(f_.min.load(std::memory_order_relaxed)),
                 f_.min_usage, parent->f_.children_min_usage);
    PropagateOne(f_.read_before_xchg, usage,
                 static_cast<int64_t>(f_.low.load(std::memory_order_relaxed)),
                 f_.low_usage, parent->f_.children_low_usage);
  }

  void UpdateWatermarks(int64_t usage) {
    const uint64_t u = static_cast<uint64_t>(usage);
    if (u > f_.local_watermark.load(std::memory_order_relaxed)) {
      f_.local_watermark.store(u, std::memory_order_relaxed);
      if (u > f_.watermark.load(std::memory_order_relaxed))
        f_.watermark.store(u, std::memory_order_relaxed);
    }
  }

  Layout<BenchPageCounter> f_;
};

using PaddedPageCounter = BenchPageCounter<PaddedLayout>;
using PackedPageCounter = BenchPageCounter<PackedLayout>;

static_assert(sizeof(PaddedPageCounter) == 3 * kCacheLineBytes,
              "padded: usage, protection and config on their own lines");
static_assert(sizeof(PackedPageCounter) == 2 * kCacheLineBytes,
              "packed: the pre-2022 fields in two lines");

}  // namespace cgacct::bench

#endif  // CGACCT_TESTS_BENCH_PAGE_COUNTER_LAYOUTS_H_
