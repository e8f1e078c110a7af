#include "engine/memory_stat.h"

namespace cgacct {

MemoryStat ReadMemoryStat(const RstatGroup& group, uint64_t page_size_bytes) {
  auto total = [&](StatItem item) {
    return static_cast<uint64_t>(group.total(item));
  };
  MemoryStat s;
  s.anon = total(kStatAnon) * page_size_bytes;
  s.file = total(kStatFile) * page_size_bytes;
  s.inactive_anon = s.anon;
  s.inactive_file = s.file;
  s.pgscan_direct = total(kStatPgscanDirect);
  s.pgscan_proactive = total(kStatPgscanProactive);
  s.pgsteal_direct = total(kStatPgstealDirect);
  s.pgsteal_proactive = total(kStatPgstealProactive);
  s.pgscan = s.pgscan_kswapd + s.pgscan_direct + s.pgscan_khugepaged +
             s.pgscan_proactive;
  s.pgsteal = s.pgsteal_kswapd + s.pgsteal_direct + s.pgsteal_khugepaged +
              s.pgsteal_proactive;
  return s;
}

std::vector<StatEntry> MemoryStatEntries(const MemoryStat& stat) {
  std::vector<StatEntry> entries;
  entries.reserve(sizeof(kMemoryStatFields) / sizeof(kMemoryStatFields[0]));
  for (const MemoryStatField& field : kMemoryStatFields)
    entries.push_back({field.name, stat.*field.value});
  return entries;
}

}  // namespace cgacct
