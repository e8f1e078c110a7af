// What cgacctctl prints for the cgroup v2 files of a group: each file's
// text as the kernel prints it (memory.current, memory.max, ...,
// memory.stat, memory.events), its --json value, and the byte counts of
// tree and top.
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_CLIENT_CTL_CGROUP_FILES_H_
#define CGACCT_CLIENT_CTL_CGROUP_FILES_H_

#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "cgacct/v1/accounting.pb.h"
#include "nlohmann/json.hpp"

namespace cgacct::ctl {

using Json = nlohmann::ordered_json;

// The cgroup v2 files `cat` knows, in the order `cgacctctl --help` lists.
inline constexpr const char* kCatFiles[] = {
    "memory.current",   "memory.max",    "memory.high",
    "memory.min",       "memory.low",    "memory.peak",
    "memory.oom.group", "memory.stat",   "memory.events",
    "memory.events.local"};
inline constexpr size_t kNrCatFiles = std::size(kCatFiles);

// Whether `file` is one of kCatFiles.
bool IsCatFile(absl::string_view file);

// What `file` (one of kCatFiles) holds in `stats`, as the kernel prints the
// file (lines ending in '\n').
std::string CatText(const v1::GroupStats& stats, absl::string_view file);

// The same as JSON: a number (memory.oom.group: 0 or 1), "max" for an
// unlimited limit, an object of
// name: count for memory.stat and the memory.events files.
Json CatJson(const v1::GroupStats& stats, absl::string_view file);

// memory.events / memory.events.local as (name, count), in
// __memory_events_show()'s order.
std::vector<std::pair<const char*, uint64_t>> EventLines(
    const v1::MemoryEvents& e);

// EventLines() as a JSON object.
Json EventsJson(const v1::MemoryEvents& events);

// A limit as JSON: "max" for UINT64_MAX, the byte count otherwise.
Json LimitJson(uint64_t bytes);

// The limit files of `limits` as an object: "memory.max", "memory.high",
// "memory.min", "memory.low" (LimitJson each) and "memory.oom.group" (0 or
// 1); a field the message leaves unset is left out.
Json LimitsJson(const v1::Limits& limits);

// A group as create and set answer it: {"path", "id", then LimitsJson's
// files}, the keys `create`'s text prints.
Json GroupJson(const v1::Group& group);

// Everything GetStats answers, in cgroup file names: {"path",
// "memory.current", the limit files, "memory.peak", "memory.stat": {name:
// count}, "memory.events", "memory.events.local", then what no cgroup v2
// file holds under the proto's names: "memory.failcnt" (the v1 file),
// "emin_bytes", "elow_bytes", "flushed", "max_staleness_us",
// "summed_shards", "missing_shards"}.
Json GroupStatsJson(const v1::GroupStats& stats);

// systemd's format_bytes(): "512B", "4.0K", "1.5G"; "max" stays "max".
std::string HumanBytes(uint64_t bytes);

}  // namespace cgacct::ctl

#endif  // CGACCT_CLIENT_CTL_CGROUP_FILES_H_
