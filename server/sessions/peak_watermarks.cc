// SessionRegistry's memory.peak watermarks (server/sessions/
// session_registry.h): the open files of memory.peak that a session owns
// (Linux 6.12+ memory_peak_write() / memory_peak_show() / peak_release() in
// mm/memcontrol.c, through Engine::OpenPeakWatermark and its siblings).
//
// Thread safety: every method takes mu_ for the books and calls the engine
// with mu_ released. An open in progress counts against the identity's bound
// and as an op in flight of its session, so a close or expiry of the session
// waits for it and then closes the watermark it opened.
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "server/sessions/session_registry.h"
#include "server/sessions/session_state.h"

namespace cgacct {
namespace {

absl::Status NoSuchWatermark(uint64_t watermark_id) {
  return absl::NotFoundError(absl::StrCat(
      "watermark_id ", watermark_id,
      ": no such peak watermark (closed, its session ended, its group "
      "deleted, or not opened by this caller)"));
}

absl::Status CheckWatermarkId(uint64_t watermark_id) {
  if (watermark_id == 0)
    return absl::InvalidArgumentError(
        "watermark_id must be given (the id OpenPeakWatermark returned)");
  return absl::OkStatus();
}

// The engine's NOT_FOUND for a watermark whose group went away meanwhile,
// in the service's words.
absl::Status GroupGone(uint64_t watermark_id, absl::string_view path,
                       const absl::Status& engine) {
  if (!absl::IsNotFound(engine)) return engine;
  return absl::NotFoundError(absl::StrCat("watermark_id ", watermark_id,
                                          ": its group ", QuotePath(path),
                                          " was deleted"));
}

}  // namespace

absl::StatusOr<const SessionRegistry::Watermark*>
SessionRegistry::FindWatermarkLocked(const std::string& identity,
                                     uint64_t watermark_id) const {
  if (absl::Status s = CheckWatermarkId(watermark_id); !s.ok()) return s;
  auto it = watermarks_.find(watermark_id);
  if (it == watermarks_.end() || it->second.identity != identity)
    return NoSuchWatermark(watermark_id);
  return &it->second;
}

void SessionRegistry::UnlinkWatermarkLocked(uint64_t watermark_id) {
  auto it = watermarks_.find(watermark_id);
  if (it == watermarks_.end()) return;
  if (auto s = sessions_.find(it->second.session_id); s != sessions_.end())
    s->second->watermarks.erase(watermark_id);
  auto count = watermarks_per_identity_.find(it->second.identity);
  if (count != watermarks_per_identity_.end() && --count->second == 0)
    watermarks_per_identity_.erase(count);
  watermarks_.erase(it);
}

std::vector<std::pair<std::string, uint64_t>>
SessionRegistry::TakeWatermarksLocked(Session& session) {
  std::vector<std::pair<std::string, uint64_t>> taken;
  const absl::flat_hash_set<uint64_t> ids = std::move(session.watermarks);
  session.watermarks.clear();
  for (uint64_t id : ids) {
    auto it = watermarks_.find(id);
    if (it == watermarks_.end()) continue;
    taken.emplace_back(it->second.path, id);
    UnlinkWatermarkLocked(id);
  }
  return taken;
}

absl::StatusOr<SessionRegistry::PeakWatermarkValue>
SessionRegistry::OpenPeakWatermark(const std::string& identity,
                                   absl::string_view session_id,
                                   absl::string_view path) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock l(&mu_);
    if (session_id.empty())
      return absl::InvalidArgumentError(
          "session_id is required: a peak watermark belongs to a session of "
          "the caller and closes with it (OpenSession first)");
    absl::StatusOr<std::shared_ptr<Session>> found =
        FindLocked(&identity, session_id);
    if (!found.ok()) return found.status();
    uint32_t& count = watermarks_per_identity_[identity];
    if (count >= options_.max_peak_watermarks_per_identity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this caller already has ", count,
          " open peak watermarks (--max_peak_watermarks_per_identity ",
          options_.max_peak_watermarks_per_identity,
          "); close one first (ClosePeakWatermark or CloseSession)"));
    }
    ++count;  // reserved while the engine opens it
    session = *std::move(found);
    ++session->in_flight;  // a close of the session waits for this open
  }
  // The group instance: resolved before and after the open, so that a
  // watermark opened on a group deleted (and maybe created again) meanwhile
  // is closed rather than kept under the wrong instance.
  absl::StatusOr<GroupHandle> before = engine_.ResolveGroup(path);
  absl::StatusOr<uint64_t> id =
      before.ok() ? engine_.OpenPeakWatermark(path)
                  : absl::StatusOr<uint64_t>(before.status());
  absl::StatusOr<uint64_t> pages = id;  // an error, or replaced below
  if (id.ok()) {
    const absl::StatusOr<GroupHandle> after = engine_.ResolveGroup(path);
    if (after.ok() && after->id() == before->id()) {
      pages = engine_.ReadPeakWatermark(path, *id);
    } else {
      engine_.ClosePeakWatermark(path, *id).IgnoreError();
      pages = absl::NotFoundError(absl::StrCat(
          "group ", QuotePath(path), " was deleted while the watermark opened"));
    }
  }
  absl::MutexLock l(&mu_);
  if (--session->in_flight == 0 && session->closing) cv_.SignalAll();
  if (!pages.ok()) {
    auto count = watermarks_per_identity_.find(identity);
    if (count != watermarks_per_identity_.end() && --count->second == 0)
      watermarks_per_identity_.erase(count);
    return pages.status();
  }
  // Linked before the op ends, so a close of the session waiting for it
  // finds and closes this watermark.
  Watermark& w = watermarks_[*id];
  w.identity = identity;
  w.session_id = session->id;
  w.path = std::string(path);
  w.group_id = before->id();
  session->watermarks.insert(*id);
  return PeakWatermarkValue{*id, std::string(path), *pages};
}

absl::StatusOr<std::string> SessionRegistry::PeakWatermarkPath(
    const std::string& identity, uint64_t watermark_id) const {
  absl::MutexLock l(&mu_);
  absl::StatusOr<const Watermark*> w =
      FindWatermarkLocked(identity, watermark_id);
  if (!w.ok()) return w.status();
  return (*w)->path;
}

absl::StatusOr<SessionRegistry::PeakWatermarkValue>
SessionRegistry::PeakWatermarkIo(const std::string& identity,
                                 uint64_t watermark_id, bool reset) const {
  absl::StatusOr<std::string> path = PeakWatermarkPath(identity, watermark_id);
  if (!path.ok()) return path.status();
  // A close racing with this call: the engine answers NOT_FOUND.
  absl::StatusOr<uint64_t> pages =
      reset ? engine_.ResetPeakWatermark(*path, watermark_id)
            : engine_.ReadPeakWatermark(*path, watermark_id);
  if (!pages.ok()) return GroupGone(watermark_id, *path, pages.status());
  return PeakWatermarkValue{watermark_id, *std::move(path), *pages};
}

absl::StatusOr<SessionRegistry::PeakWatermarkValue>
SessionRegistry::ResetPeakWatermark(const std::string& identity,
                                    uint64_t watermark_id) {
  return PeakWatermarkIo(identity, watermark_id, /*reset=*/true);
}

absl::StatusOr<SessionRegistry::PeakWatermarkValue>
SessionRegistry::ReadPeakWatermark(const std::string& identity,
                                   uint64_t watermark_id) const {
  return PeakWatermarkIo(identity, watermark_id, /*reset=*/false);
}

absl::Status SessionRegistry::ClosePeakWatermark(const std::string& identity,
                                                 uint64_t watermark_id) {
  std::string path;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<const Watermark*> w =
        FindWatermarkLocked(identity, watermark_id);
    if (!w.ok()) return w.status();
    path = (*w)->path;
    UnlinkWatermarkLocked(watermark_id);
  }
  // NOT_FOUND: its group went meanwhile, which closed it.
  engine_.ClosePeakWatermark(path, watermark_id).IgnoreError();
  return absl::OkStatus();
}

}  // namespace cgacct
