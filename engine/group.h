// Group: one node of the engine's hierarchy (struct mem_cgroup).
//
// Thread safety: the tree links (parent, children) and the group's lifetime
// are protected by the engine's group-tree lock (readers may use a group
// while holding it); counters are atomics or guarded as their classes say.
#ifndef CGACCT_ENGINE_GROUP_H_
#define CGACCT_ENGINE_GROUP_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "engine/lru.h"
#include "engine/page_counter.h"
#include "engine/rstat.h"
#include "engine/types.h"

namespace cgacct {

struct Group {
  Group(std::string path_in, uint64_t id_in, Group* parent_in, Rstat* rstat,
        uint64_t page_counter_max)
      : path(std::move(path_in)),
        id(id_in),
        parent(parent_in),
        memory(parent_in ? &parent_in->memory : nullptr, page_counter_max),
        rstat_group(rstat, parent_in ? &parent_in->rstat_group : nullptr,
                    path) {
    memory.set_owner(this);
  }

  bool is_root() const { return parent == nullptr; }

  // Constant after construction.
  const std::string path;
  const uint64_t id;
  Group* const parent;

  // Guarded by the engine's group-tree lock (written under its writer side).
  std::map<std::string, Group*> children;  // by name, sorted
  uint32_t handle_slot = 0;  // index in the engine's GroupHandle table

  PageCounter memory;  // memory.current / max / high / min / low
  RstatGroup rstat_group;

  // memory.events (hierarchical) and memory.events.local; relaxed atomics.
  std::atomic<uint64_t> events[kNrMemoryEvents] = {};
  std::atomic<uint64_t> events_local[kNrMemoryEvents] = {};

  // Pages charged to this group itself, by kind: exact and synchronous (unlike
  // rstat), so Uncharge can refuse more ANON than is held before any counter
  // moves. Incremented after the page_counter charge, decremented before the
  // uncharge, so usage never falls below them. Own cache line.
  alignas(kCacheLineBytes) std::atomic<uint64_t> nr_anon_pages{0};
  std::atomic<uint64_t> nr_file_pages{0};  // also the FILE LRU (engine/lru.h)

  // Shared cursor of reclaim walks that target this group (engine/lru.h).
  MemcgReclaimIter reclaim_iter;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_GROUP_H_
