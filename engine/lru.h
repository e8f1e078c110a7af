// The per-group reclaim state a Group carries: its FILE LRU and the shared
// reclaim cursor of walks that target it.
//
// LRU model. The engine has no pages, only counts, so a group's LRU is the
// number of FILE pages charged to the group itself: Group::nr_pages(kFile), the
// same exact count Uncharge takes FILE pages from. It is one list (the
// kernel's inactive file list); there is no active list because the engine
// sees no accesses that would promote a page (mark_page_accessed()). Every
// page on the list is clean, unmapped and unreferenced page cache, so a page
// that reclaim isolates is always freed: scanned == stolen. ANON pages are
// never on an LRU (no swap).
//
// Thread safety: thread-safe; everything here is atomic.
#ifndef CGACCT_ENGINE_LRU_H_
#define CGACCT_ENGINE_LRU_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace cgacct {

class Group;

// Takes up to nr_to_scan pages off `lru` (a group's FILE page count) and
// returns how many it took: isolate_lru_folios() for a list of counts.
// Racing Uncharge calls take from the same count with the same CAS, so a page
// is either reclaimed or uncharged, never both. Lock-free.
inline uint64_t LruIsolatePages(std::atomic<uint64_t>& lru,
                                uint64_t nr_to_scan) {
  uint64_t cur = lru.load(std::memory_order_relaxed);
  uint64_t take;
  do {
    take = std::min(cur, nr_to_scan);
    if (take == 0) return 0;
    // Relaxed: the count is the only data; the page_counter uncharge that
    // follows is ordered by its own atomics (as in Group::Uncharging).
  } while (
      !lru.compare_exchange_weak(cur, cur - take, std::memory_order_relaxed));
  return take;
}

// The shared cursor of reclaim walks rooted at one group
// (struct mem_cgroup_reclaim_iter, one per target; the engine has one NUMA
// node). `position` is the group last handed out in the current round, or
// null before the round's first group; `generation` counts finished rounds.
// Concurrent reclaimers with the same target share it and divide the subtree
// among themselves (mem_cgroup_iter(), engine/reclaim.h).
//
// Lifetime: `position` holds no reference (like the kernel since 2024). It is
// only followed by walkers holding a reader slot of the engine's tree lock;
// a deleted group stays linked (dying) while it holds pages, and freeing it
// holds the writer side and moves every cursor off it
// (InvalidateReclaimIterators()), so it never dangles.
//
// Memory ordering: seq_cst, as the kernel's cmpxchg()/atomic_inc() are fully
// ordered; the pointed-to groups are published by the tree lock, not by it.
struct MemcgReclaimIter {
  std::atomic<Group*> position{nullptr};
  std::atomic<int64_t> generation{0};
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_LRU_H_
