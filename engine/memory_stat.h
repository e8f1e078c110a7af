// memory.stat: a group's statistics as a typed struct, with the one table
// that names and orders its lines.
//
// Mirrors cgroup v2's memcg_stat_format() (mm/memcontrol.c) of Linux 6.16,
// for the items the engine keeps, in that version's order: memory_stats[]
// (anon, file, ..., inactive_anon, active_anon, inactive_file, active_file,
// unevictable, ...), then the synthetic pgscan/pgsteal sums, then
// memcg_vm_event_stat[] (pgscan_* and pgsteal_* by reclaimer; 6.16 is the
// first release with the *_proactive items, "mm: vmscan: split proactive
// reclaim statistics from direct reclaim statistics"). pgpgin/pgpgout are
// cgroup v1 items, which v2 skips, so the engine has none.
//
// One LRU list per kind: new pages go to the inactive list
// (folio_add_lru()), and the engine sees no accesses that would activate
// them, so inactive_anon = anon, inactive_file = file, and active_anon,
// active_file and unevictable are 0. kswapd and khugepaged are always 0: the
// engine has neither. The cgroup v1 file memory.failcnt is not a memory.stat
// line (GroupStats::failcnt).
//
// Invariants: kMemoryStatFields lists every MemoryStat field exactly once,
// in memory.stat order; nothing else names a memory.stat line.
//
// Thread safety: plain values and pure functions, thread-safe.
#ifndef CGACCT_ENGINE_MEMORY_STAT_H_
#define CGACCT_ENGINE_MEMORY_STAT_H_

#include <cstdint>
#include <vector>

#include "engine/rstat.h"
#include "engine/types.h"

namespace cgacct {

struct MemoryStat {
  uint64_t anon = 0;           // bytes
  uint64_t file = 0;           // bytes
  uint64_t inactive_anon = 0;  // bytes: = anon (one list, nothing activated)
  uint64_t active_anon = 0;    // bytes: always 0
  uint64_t inactive_file = 0;  // bytes: = file, the FILE LRU (engine/lru.h)
  uint64_t active_file = 0;    // bytes: always 0
  uint64_t unevictable = 0;    // bytes: always 0 (no mlock)
  uint64_t pgscan = 0;         // every reclaimer's pgscan_*
  uint64_t pgsteal = 0;        // every reclaimer's pgsteal_*
  uint64_t pgscan_kswapd = 0;
  uint64_t pgscan_direct = 0;
  uint64_t pgscan_khugepaged = 0;
  uint64_t pgscan_proactive = 0;
  uint64_t pgsteal_kswapd = 0;
  uint64_t pgsteal_direct = 0;
  uint64_t pgsteal_khugepaged = 0;
  uint64_t pgsteal_proactive = 0;
};

// One memory.stat line: its name and the MemoryStat field it prints.
struct MemoryStatField {
  const char* name;
  uint64_t MemoryStat::*value;
};

// The name table, in memory.stat order.
inline constexpr MemoryStatField kMemoryStatFields[] = {
    {"anon", &MemoryStat::anon},
    {"file", &MemoryStat::file},
    {"inactive_anon", &MemoryStat::inactive_anon},
    {"active_anon", &MemoryStat::active_anon},
    {"inactive_file", &MemoryStat::inactive_file},
    {"active_file", &MemoryStat::active_file},
    {"unevictable", &MemoryStat::unevictable},
    {"pgscan", &MemoryStat::pgscan},
    {"pgsteal", &MemoryStat::pgsteal},
    {"pgscan_kswapd", &MemoryStat::pgscan_kswapd},
    {"pgscan_direct", &MemoryStat::pgscan_direct},
    {"pgscan_khugepaged", &MemoryStat::pgscan_khugepaged},
    {"pgscan_proactive", &MemoryStat::pgscan_proactive},
    {"pgsteal_kswapd", &MemoryStat::pgsteal_kswapd},
    {"pgsteal_direct", &MemoryStat::pgsteal_direct},
    {"pgsteal_khugepaged", &MemoryStat::pgsteal_khugepaged},
    {"pgsteal_proactive", &MemoryStat::pgsteal_proactive},
};
static_assert(sizeof(kMemoryStatFields) / sizeof(kMemoryStatFields[0]) ==
                  sizeof(MemoryStat) / sizeof(uint64_t),
              "every MemoryStat field has exactly one line");

// A group's memory.stat from its rstat totals as of the last flush that
// reached it (the caller flushes first if it wants them fresh). Lock-free.
MemoryStat ReadMemoryStat(const RstatGroup& group, uint64_t page_size_bytes);

// The lines of `stat` in kMemoryStatFields order (GroupStats::stat).
std::vector<StatEntry> MemoryStatEntries(const MemoryStat& stat);

}  // namespace cgacct

#endif  // CGACCT_ENGINE_MEMORY_STAT_H_
