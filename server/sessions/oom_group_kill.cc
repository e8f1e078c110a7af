// SessionRegistry's memory.oom.group kills (server/sessions/
// session_registry.h): the kernel's oom_kill_process() with an oom_group
// (mem_cgroup_get_oom_group() in mm/memcontrol.c) kills every task of that
// group via mem_cgroup_scan_tasks(oom_group, oom_kill_memcg_member); here
// the tasks are the sessions holding pages at or below the group, and
// killing one is ending it through Finish(), which uncharges what it held.
//
// Thread safety: OnOomGroupKill() runs on the charge path under a
// group-tree reader slot and only queues under mu_ (the order reader slot ->
// mu_ is DrainRemoteStock()'s too); RunOomGroupKills() runs on the reaper
// thread and calls the engine with mu_ released.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/group_path.h"
#include "server/sessions/session_registry.h"
#include "server/sessions/session_state.h"

namespace cgacct {

void SessionRegistry::OnOomGroupKill(uint64_t group_id,
                                     absl::string_view path) {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  oom_kills_[std::string(path)] = group_id;
  cv_.SignalAll();  // wakes the reaper
}

size_t SessionRegistry::RunOomGroupKills() {
  std::vector<std::pair<std::string, uint64_t>> kills;
  std::vector<std::shared_ptr<Session>> killed;
  {
    absl::MutexLock l(&mu_);
    if (shut_down_ || oom_kills_.empty()) return 0;
    for (auto& [path, id] : oom_kills_) kills.emplace_back(path, id);
    oom_kills_.clear();
    for (const auto& [path, id] : kills) {
      ++stats_.oom_group_kills;
      for (auto& [sid, s] : sessions_) {
        if (s->closing) continue;
        for (const auto& [key, h] : s->holdings) {
          if (h.nr_pages > 0 && PathAtOrBelow(h.path, path)) {
            s->closing = true;
            s->oom_killed_by = path;
            killed.push_back(s);
            break;
          }
        }
      }
    }
  }
  for (std::shared_ptr<Session>& s : killed)
    Finish(std::move(s), EndReason::kOomKill);
  // drain_all_stock() of the killed group's subtree as a whole (Finish
  // drained the groups the sessions held pages of), so its memory.current
  // keeps no stocked page after the kill.
  for (const auto& [path, id] : kills) {
    absl::StatusOr<GroupHandle> group = engine_.ResolveGroup(path);
    if (group.ok() && group->id() == id)
      engine_.DrainStock(*group).IgnoreError();
  }
  return killed.size();
}

}  // namespace cgacct
