#include "client/ctl/cgroup_files.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/cli_util.h"

namespace cgacct::ctl {
namespace {

// The value of a limit file (memory.max, .high, .min, .low); nullopt for
// any other file.
std::optional<uint64_t> LimitOf(const v1::Limits& limits,
                                absl::string_view file) {
  if (file == "memory.max") return limits.max_bytes();
  if (file == "memory.high") return limits.high_bytes();
  if (file == "memory.min") return limits.min_bytes();
  if (file == "memory.low") return limits.low_bytes();
  return std::nullopt;
}

const v1::MemoryEvents& EventsOf(const v1::GroupStats& stats,
                                 absl::string_view file) {
  return file == "memory.events" ? stats.events() : stats.events_local();
}

}  // namespace

bool IsCatFile(absl::string_view file) {
  return std::any_of(std::begin(kCatFiles), std::end(kCatFiles),
                     [&](const char* f) { return file == f; });
}

std::string CatText(const v1::GroupStats& stats, absl::string_view file) {
  if (file == "memory.current") {
    return absl::StrCat(stats.memory_current_bytes(), "\n");
  }
  if (file == "memory.peak") {
    return absl::StrCat(stats.memory_peak_bytes(), "\n");
  }
  if (file == "memory.oom.group") {
    return stats.limits().oom_group() ? "1\n" : "0\n";
  }
  if (const std::optional<uint64_t> limit = LimitOf(stats.limits(), file)) {
    return cli::FormatSizeBytes(*limit) + "\n";
  }
  std::string out;
  if (file == "memory.stat") {
    for (const v1::StatEntry& e : stats.stat()) {
      absl::StrAppend(&out, e.name(), " ", e.value(), "\n");
    }
    return out;
  }
  for (const auto& [name, value] : EventLines(EventsOf(stats, file))) {
    absl::StrAppend(&out, name, " ", value, "\n");
  }
  return out;
}

Json CatJson(const v1::GroupStats& stats, absl::string_view file) {
  if (file == "memory.current") return stats.memory_current_bytes();
  if (file == "memory.peak") return stats.memory_peak_bytes();
  if (file == "memory.oom.group") return stats.limits().oom_group() ? 1 : 0;
  if (const std::optional<uint64_t> limit = LimitOf(stats.limits(), file)) {
    return LimitJson(*limit);
  }
  if (file == "memory.stat") {
    Json json = Json::object();
    for (const v1::StatEntry& e : stats.stat()) json[e.name()] = e.value();
    return json;
  }
  return EventsJson(EventsOf(stats, file));
}

std::vector<std::pair<const char*, uint64_t>> EventLines(
    const v1::MemoryEvents& e) {
  return {{"low", e.low()},
          {"high", e.high()},
          {"max", e.max()},
          {"oom", e.oom()},
          {"oom_kill", e.oom_kill()},
          {"oom_group_kill", e.oom_group_kill()},
          {"sock_throttled", e.sock_throttled()}};
}

Json EventsJson(const v1::MemoryEvents& events) {
  Json json = Json::object();
  for (const auto& [name, value] : EventLines(events)) json[name] = value;
  return json;
}

Json LimitJson(uint64_t bytes) {
  return bytes == UINT64_MAX ? Json("max") : Json(bytes);
}

Json LimitsJson(const v1::Limits& limits) {
  Json json = Json::object();
  if (limits.has_max_bytes()) json["memory.max"] = LimitJson(limits.max_bytes());
  if (limits.has_high_bytes()) {
    json["memory.high"] = LimitJson(limits.high_bytes());
  }
  if (limits.has_min_bytes()) json["memory.min"] = LimitJson(limits.min_bytes());
  if (limits.has_low_bytes()) json["memory.low"] = LimitJson(limits.low_bytes());
  if (limits.has_oom_group()) json["memory.oom.group"] = limits.oom_group() ? 1 : 0;
  return json;
}

Json GroupJson(const v1::Group& group) {
  Json json = {{"path", group.path()}, {"id", group.id()}};
  json.update(LimitsJson(group.limits()));
  return json;
}

Json GroupStatsJson(const v1::GroupStats& stats) {
  Json json = Json::object();
  json["path"] = stats.path();
  for (const char* file : kCatFiles) json[file] = CatJson(stats, file);
  json["memory.failcnt"] = stats.failcnt();
  json["emin_bytes"] = stats.emin_bytes();
  json["elow_bytes"] = stats.elow_bytes();
  json["flushed"] = stats.flushed();
  json["max_staleness_us"] = stats.max_staleness_us();
  json["summed_shards"] = Json(std::vector<std::string>(
      stats.summed_shards().begin(), stats.summed_shards().end()));
  json["missing_shards"] = Json(std::vector<std::string>(
      stats.missing_shards().begin(), stats.missing_shards().end()));
  return json;
}

std::string HumanBytes(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "max";
  static const char kUnits[] = "KMGTPE";
  if (bytes < 1024) return absl::StrCat(bytes, "B");
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f%c", value, kUnits[unit]);
}

}  // namespace cgacct::ctl
