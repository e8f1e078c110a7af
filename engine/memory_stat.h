// memory.stat: a group's statistics as a typed struct, with the one table
// that names and orders its lines.
//
// Mirrors memory_stat_format() (mm/memcontrol.c) for the items the engine
// keeps: state items in bytes first (anon, file), then the synthetic
// pgscan/pgsteal sums, then the per-reclaimer event counts (kswapd and
// khugepaged are always 0: the engine has neither). pgpgin/pgpgout (charge
// and uncharge operations, the cgroup v1 names) come last.
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
  uint64_t anon = 0;     // bytes
  uint64_t file = 0;     // bytes
  uint64_t pgscan = 0;   // every reclaimer's pgscan_*
  uint64_t pgsteal = 0;  // every reclaimer's pgsteal_*
  uint64_t pgscan_kswapd = 0;
  uint64_t pgscan_direct = 0;
  uint64_t pgscan_khugepaged = 0;
  uint64_t pgscan_proactive = 0;
  uint64_t pgsteal_kswapd = 0;
  uint64_t pgsteal_direct = 0;
  uint64_t pgsteal_khugepaged = 0;
  uint64_t pgsteal_proactive = 0;
  uint64_t pgpgin = 0;   // charge operations
  uint64_t pgpgout = 0;  // uncharge operations
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
    {"pgpgin", &MemoryStat::pgpgin},
    {"pgpgout", &MemoryStat::pgpgout},
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
