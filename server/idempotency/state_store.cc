#include "server/idempotency/state_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cgacct {

absl::StatusOr<StateStore::Snapshot> MemoryStateStore::Load(
    int64_t requests_since_unix_ns) {
  absl::MutexLock l(&mu_);
  std::vector<std::pair<uint64_t, StoredGroup>> ordered;
  ordered.reserve(groups_.size());
  for (const auto& [path, entry] : groups_) ordered.push_back(entry);
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Snapshot snapshot;
  for (auto& [seq, group] : ordered)
    snapshot.groups.push_back(std::move(group));
  return snapshot;
}

absl::StatusOr<uint64_t> MemoryStateStore::CreateGroup(absl::string_view path,
                                                       const Limits& limits,
                                                       bool oom_group,
                                                       absl::string_view creator) {
  absl::MutexLock l(&mu_);
  const uint64_t generation = next_generation_++;
  auto [it, inserted] = groups_.try_emplace(
      std::string(path), generation,
      StoredGroup{std::string(path), limits, generation, oom_group,
                  std::string(creator)});
  if (!inserted)
    return absl::AlreadyExistsError(
        absl::StrCat("state store: ", path, " is stored"));
  return generation;
}

absl::Status MemoryStateStore::SetLimits(absl::string_view path,
                                         const Limits& limits,
                                         bool oom_group) {
  absl::MutexLock l(&mu_);
  auto it = groups_.find(path);
  if (it == groups_.end())
    return absl::NotFoundError(
        absl::StrCat("state store: ", path, " is not stored"));
  it->second.second.limits = limits;
  it->second.second.oom_group = oom_group;
  return absl::OkStatus();
}

absl::Status MemoryStateStore::DeleteGroup(absl::string_view path) {
  absl::MutexLock l(&mu_);
  if (groups_.erase(path) == 0)
    return absl::NotFoundError(
        absl::StrCat("state store: ", path, " is not stored"));
  return absl::OkStatus();
}

}  // namespace cgacct
