// memory.oom.group as the engine reports it: the RESOURCE_EXHAUSTED of a
// charge whose OOM kills a whole group carries that group's path as a
// payload, beside EngineObserver::OnOomGroupKill (engine/observer.h).
//
// Thread safety: free functions on values; thread-safe.
#ifndef CGACCT_ENGINE_OOM_GROUP_H_
#define CGACCT_ENGINE_OOM_GROUP_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace cgacct {

// The payload key (absl::Status::SetPayload) of the killed group's path.
inline constexpr absl::string_view kOomGroupKillPayloadUrl =
    "type.cgacct.dev/cgacct.OomGroupKill";

// The path of the group an OOM killed whole (memory.oom.group), if `status`
// is such a charge's RESOURCE_EXHAUSTED; nullopt otherwise.
inline std::optional<std::string> OomGroupKillPath(const absl::Status& status) {
  auto path = status.GetPayload(kOomGroupKillPayloadUrl);  // absl::optional
  if (!path.has_value()) return std::nullopt;
  return std::string(*path);
}

}  // namespace cgacct

#endif  // CGACCT_ENGINE_OOM_GROUP_H_
