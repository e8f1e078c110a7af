// GroupOps (server/pipeline/groups.h).
#include "server/pipeline/groups.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/group_path.h"

namespace cgacct {
namespace {

// What a call waits for this node to apply a change (cluster mode).
absl::Time ApplyDeadline(const CallContext& call);

// A ListGroups page_token is empty or the last path of a previous page of
// the same listing: a valid group path strictly below `path` (it need not
// exist any more). Checked after `path` itself.
absl::Status ValidatePageToken(absl::string_view token,
                               absl::string_view path) {
  if (token.empty()) return absl::OkStatus();
  if (absl::Status s = ValidateGroupPath(token, "page_token"); !s.ok())
    return s;
  if (!PathStrictlyBelow(token, path))
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token ", QuotePath(token), " is not below path ", QuotePath(path),
        ": pass the next_page_token of the previous page of this listing"));
  return absl::OkStatus();
}

}  // namespace

GroupOps::GroupOps(Engine& engine, const WireUnits& units, StateStore& store,
                   SessionRegistry& sessions, const Authorizer* authorizer,
                   uint32_t max_groups_per_identity)
    : engine_(engine),
      units_(units),
      store_(store),
      sessions_(sessions),
      authorizer_(authorizer),
      max_groups_per_identity_(max_groups_per_identity) {}

uint32_t GroupOps::GroupsOf(absl::string_view identity) const {
  absl::MutexLock l(&config_mu_);
  auto it = created_.find(identity);
  return it == created_.end() ? 0 : it->second;
}

void GroupOps::ForgetFreedDyingLocked() {
  if (dying_creators_.empty()) return;
  const std::vector<uint64_t> ids = engine_.DyingGroupIds();
  const absl::flat_hash_set<uint64_t> dying(ids.begin(), ids.end());
  for (auto it = dying_creators_.begin(); it != dying_creators_.end();) {
    if (dying.contains(it->first)) {
      ++it;
      continue;
    }
    auto count = created_.find(it->second);
    if (count != created_.end() && --count->second == 0) created_.erase(count);
    dying_creators_.erase(it++);
  }
}

absl::StatusOr<RestoreReport> GroupOps::Restore(DedupTable& request_ids,
                                                DedupTable& batch_keys) {
  RestoreReport report;
  absl::MutexLock l(&config_mu_);
  // Entries older than the window are dropped by the store.
  const int64_t since_ns = absl::ToUnixNanos(
      absl::Now() - std::max(request_ids.window(), batch_keys.window()));
  absl::StatusOr<StateStore::Snapshot> snapshot = store_.Load(since_ns);
  if (!snapshot.ok()) return snapshot.status();
  for (const StoredGroup& group : snapshot->groups) {
    LimitsUpdate update;
    update.max_pages = group.limits.max_pages;
    update.high_pages = group.limits.high_pages;
    update.min_pages = group.limits.min_pages;
    update.low_pages = group.limits.low_pages;
    absl::StatusOr<GroupInfo> created = engine_.CreateGroup(group.path, update);
    absl::Status oom_group = created.status();
    if (created.ok() && group.oom_group)
      oom_group = engine_.SetOomGroup(group.path, true);
    if (!oom_group.ok()) {
      return absl::InternalError(
          absl::StrCat("restoring group ", group.path, " (generation ",
                       group.generation, "): ", oom_group.message()));
    }
    {
      absl::MutexLock g(&generations_mu_);
      generations_[created->id] = group.generation;
    }
    // A tenant's groups count against its bound across restarts.
    if (!group.creator.empty()) {
      creators_[created->id] = group.creator;
      ++created_[group.creator];
    }
    ++report.groups;
  }
  report.requests =
      RestoreRequests(snapshot->requests, request_ids, batch_keys);
  return report;
}

size_t GroupOps::RestoreRequests(const std::vector<StoredRequest>& requests,
                                 DedupTable& request_ids,
                                 DedupTable& batch_keys) {
  const absl::Time now = absl::Now();
  size_t restored = 0;
  for (const StoredRequest& r : requests) {
    const absl::Duration age = now - absl::FromUnixNanos(r.arrived_unix_ns);
    const std::string key = DedupKey(r.identity, r.scope, r.request_id);
    if (r.method == static_cast<int>(DedupFingerprint::Method::kBatch)) {
      DedupFingerprint fingerprint;
      fingerprint.method = DedupFingerprint::Method::kBatch;
      fingerprint.path_hash = r.digest;
      fingerprint.nr_pages = r.nr_pages;
      DedupAnswer answer;
      answer.body = r.body;
      batch_keys.Restore(key, fingerprint, std::move(answer), age);
      ++restored;
      continue;
    }
    if (r.method != static_cast<int>(DedupFingerprint::Method::kCharge) &&
        r.method != static_cast<int>(DedupFingerprint::Method::kUncharge))
      continue;
    DedupAnswer answer;
    answer.status =
        absl::Status(static_cast<absl::StatusCode>(r.code), r.message);
    answer.nr_pages = r.answer_nr_pages;
    answer.throttle_us = r.throttle_us;
    const std::optional<uint32_t> cpu =
        r.cpu >= 0 ? std::optional<uint32_t>(static_cast<uint32_t>(r.cpu))
                   : std::nullopt;
    request_ids.Restore(
        key,
        DedupFingerprint::Of(static_cast<DedupFingerprint::Method>(r.method),
                             r.path, r.nr_pages, r.kind, cpu),
        std::move(answer), age);
    ++restored;
  }
  return restored;
}

absl::Status GroupOps::CheckConfigure(const CallContext& call,
                                      absl::string_view path) const {
  if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
  return Authorize(authorizer_, call.caller(), Access::kConfigure, path);
}

absl::Status GroupOps::CheckGroupBoundLocked(const CallContext& call) {
  // A tenant's bound (admins are the operators: unbounded).
  if (call.caller().admin() || max_groups_per_identity_ == 0)
    return absl::OkStatus();
  auto it = created_.find(call.identity());
  if (it != created_.end() && it->second >= max_groups_per_identity_) {
    // At the bound: the dying groups freed since no longer count.
    ForgetFreedDyingLocked();
    it = created_.find(call.identity());
  }
  if (it != created_.end() && it->second >= max_groups_per_identity_) {
    uint32_t dying = 0;
    for (const auto& [id, identity] : dying_creators_)
      dying += identity == call.identity() ? 1 : 0;
    return absl::ResourceExhaustedError(absl::StrCat(
        "identity \"", call.identity(), "\" has ", it->second,
        " groups, at most ", max_groups_per_identity_,
        " (--max_groups_per_identity), ", dying,
        " of them deleted but still charged (dying); delete one, or "
        "uncharge what a deleted one still holds, first"));
  }
  return absl::OkStatus();
}

absl::Status GroupOps::Create(const CallContext& call,
                              const v1::CreateGroupRequest& request,
                              v1::Group* response) {
  if (absl::Status s = CheckConfigure(call, request.path()); !s.ok()) return s;
  if (cluster_ != nullptr) return CreateInCluster(call, request, response);
  absl::MutexLock l(&config_mu_);
  const bool tenant = !call.caller().admin();
  if (absl::Status s = CheckGroupBoundLocked(call); !s.ok()) return s;
  absl::StatusOr<GroupInfo> group = engine_.CreateGroup(
      request.path(), units_.LimitsFromProto(request.limits()));
  if (!group.ok()) return group.status();
  // memory.oom.group is written after the group is online, as a file
  // write after mkdir; the group is new, so nothing can have charged it.
  const bool oom_group = request.limits().oom_group();
  absl::Status oom_written = absl::OkStatus();
  if (oom_group) oom_written = engine_.SetOomGroup(group->path, true);
  absl::StatusOr<uint64_t> generation =
      !oom_written.ok() ? absl::StatusOr<uint64_t>(oom_written)
                        : store_.CreateGroup(group->path, group->limits,
                                             oom_group,
                                             tenant ? call.identity() : "");
  if (!generation.ok()) {
    // Not acknowledged, so not kept: the group is new and has no children.
    (void)engine_.DeleteGroup(group->path);
    return absl::UnavailableError(
        absl::StrCat("group ", group->path,
                     " not created: ", generation.status().message()));
  }
  {
    absl::MutexLock g(&generations_mu_);
    generations_[group->id] = *generation;
  }
  if (tenant) {
    creators_[group->id] = call.identity();
    ++created_[call.identity()];
  }
  units_.GroupToProto(*group, response);
  response->mutable_limits()->set_oom_group(oom_group);
  return absl::OkStatus();
}

absl::Status GroupOps::Delete(const CallContext& call,
                              const v1::DeleteGroupRequest& request,
                              v1::DeleteGroupResponse* response) {
  if (absl::Status s = CheckConfigure(call, request.path()); !s.ok()) return s;
  if (cluster_ != nullptr) return DeleteInCluster(call, request, response);
  const std::string& path = request.path();
  absl::MutexLock l(&config_mu_);
  const absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(path);
  // The store forgets the group first, so that a failed write leaves both
  // as they were; only when the engine will not refuse after it: the group
  // exists, is not the root and has no children (under config_mu_ none is
  // created or deleted meanwhile). Otherwise the engine's own refusal
  // (NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION) is the answer.
  std::optional<GroupStats> forgotten;  // what the store held, once forgotten
  if (handle.ok() && path != "/") {
    const absl::StatusOr<std::vector<std::string>> children =
        engine_.ListGroups(path, /*recursive=*/false);
    const absl::StatusOr<GroupStats> stats =
        engine_.GetStats(path, FlushMode::kNone);
    if (children.ok() && children->empty() && stats.ok()) {
      const absl::Status s = store_.DeleteGroup(path);
      // NOT_FOUND: a group the store never had (made on the engine alone).
      if (!s.ok() && !absl::IsNotFound(s)) {
        return absl::UnavailableError(
            absl::StrCat("group ", path, " not deleted: ", s.message()));
      }
      if (s.ok()) forgotten = *stats;
    }
  }
  absl::StatusOr<uint64_t> reparented = engine_.DeleteGroup(path);
  if (!reparented.ok()) {
    // Not expected after the checks above; the store takes the group back
    // (under a new generation) so that the two still agree.
    if (forgotten.has_value()) {
      const auto creator = creators_.find(handle->id());
      absl::StatusOr<uint64_t> generation = store_.CreateGroup(
          path, forgotten->limits, forgotten->oom_group,
          creator == creators_.end() ? "" : creator->second);
      absl::MutexLock g(&generations_mu_);
      if (generation.ok()) generations_[handle->id()] = *generation;
    }
    return reparented.status();
  }
  if (handle.ok()) {
    {
      absl::MutexLock g(&generations_mu_);
      generations_.erase(handle->id());
    }
    // The creator's count goes down, whoever deletes it, once the engine
    // frees the group: a group deleted with pages still charged stays in
    // the engine, dying (the kernel's dying memcg), until they are
    // uncharged, and counts until then (ForgetFreedDyingLocked). Otherwise
    // create, charge, delete, repeated, left any number of groups in the
    // engine within the bound.
    if (auto creator = creators_.find(handle->id()); creator != creators_.end()) {
      if (*reparented > 0) {
        dying_creators_[handle->id()] = creator->second;
      } else {
        auto count = created_.find(creator->second);
        if (count != created_.end() && --count->second == 0)
          created_.erase(count);
      }
      creators_.erase(creator);
    }
    // The engine gave the group's pages to its parent: so do the sessions.
    sessions_.OnGroupDeleted(handle->id(), path);
  }
  response->set_reparented_pages(*reparented);
  return absl::OkStatus();
}

absl::Status GroupOps::SetLimits(const CallContext& call,
                                 const v1::SetLimitsRequest& request,
                                 v1::Group* response) {
  if (absl::Status s = CheckConfigure(call, request.path()); !s.ok()) return s;
  if (cluster_ != nullptr) return SetLimitsInCluster(call, request, response);
  absl::MutexLock l(&config_mu_);
  // The limits before, to put back if the store cannot take the new ones.
  const absl::StatusOr<GroupStats> before =
      engine_.GetStats(request.path(), FlushMode::kNone);
  absl::StatusOr<GroupInfo> group = engine_.SetLimits(
      request.path(), units_.LimitsFromProto(request.limits()));
  if (!group.ok()) return group.status();
  // memory.oom.group after the limits (each a file write of its own in the
  // kernel); the group exists (config_mu_ keeps deletes out), so this write
  // cannot fail.
  const bool oom_group = request.limits().has_oom_group()
                             ? request.limits().oom_group()
                             : before.ok() && before->oom_group;
  absl::Status s = engine_.SetOomGroup(group->path, oom_group);
  if (s.ok()) s = store_.SetLimits(group->path, group->limits, oom_group);
  // NOT_FOUND: a group the store never had (made on the engine alone).
  if (!s.ok() && !absl::IsNotFound(s)) {
    if (before.ok()) {
      LimitsUpdate undo;
      undo.max_pages = before->limits.max_pages;
      undo.high_pages = before->limits.high_pages;
      undo.min_pages = before->limits.min_pages;
      undo.low_pages = before->limits.low_pages;
      (void)engine_.SetLimits(group->path, undo);
      (void)engine_.SetOomGroup(group->path, before->oom_group);
    }
    return absl::UnavailableError(absl::StrCat(
        "limits of ", group->path,
        " not changed (the previous ones are back; pages reclaimed under the "
        "new ones stay reclaimed): ",
        s.message()));
  }
  units_.GroupToProto(*group, response);
  response->mutable_limits()->set_oom_group(oom_group);
  return absl::OkStatus();
}

absl::Status GroupOps::List(const CallContext& call,
                            const v1::ListGroupsRequest& request,
                            v1::ListGroupsResponse* response) const {
  if (absl::Status s = ValidateGroupPath(request.path()); !s.ok()) return s;
  if (absl::Status s = ValidatePageToken(request.page_token(), request.path());
      !s.ok())
    return s;
  // Checked before the engine is asked: NOT_FOUND would tell a tenant
  // whether a group outside its grants exists.
  if (authorizer_ != nullptr) {
    if (absl::Status s = authorizer_->CheckList(call.caller(), request.path());
        !s.ok())
      return s;
  }
  // Cluster mode: every change committed before this call is in the
  // listing, whichever node made it (one etcd round trip).
  if (cluster_ != nullptr) {
    if (absl::Status s = cluster_->SyncRead(ApplyDeadline(call)); !s.ok())
      return s;
  }
  const size_t page_size =
      (request.page_size() == 0 || request.page_size() > kMaxListGroupsPageSize)
          ? kMaxListGroupsPageSize
          : request.page_size();
  // The engine seeks to the token (the last path already returned) and
  // reads one page, so a page costs O(page), not O(listing). A tenant sees
  // only what it may read: listing an ancestor of its grant shows the
  // grant's subtree, nothing beside it; the view is applied while seeking,
  // so page sizes and tokens work as without access control.
  GroupListing listing;
  listing.recursive = request.recursive();
  listing.after = request.page_token();
  listing.max_paths = page_size;
  listing.within = Authorizer::ReadableSubtrees(call.caller());
  absl::StatusOr<GroupPage> page =
      engine_.ListGroupsPage(request.path(), listing);
  if (!page.ok()) return page.status();
  // Also stop at kMaxListGroupsPageBytes of paths (at least one path), so a
  // page of long paths stays under gRPC's default 4 MiB message limit.
  size_t keep = page->paths.size();
  size_t bytes = 0;
  for (size_t i = 0; i < page->paths.size(); ++i) {
    bytes += page->paths[i].size() + 8;  // the path and its framing
    if (bytes > kMaxListGroupsPageBytes && i > 0) {
      keep = i;
      break;
    }
  }
  response->mutable_paths()->Reserve(static_cast<int>(keep));
  for (size_t i = 0; i < keep; ++i) {
    response->add_paths(std::move(page->paths[i]));
  }
  if (page->more || keep < page->paths.size()) {
    response->set_next_page_token(response->paths(response->paths_size() - 1));
  }
  return absl::OkStatus();
}

// --- cluster mode ---

namespace {

// Its own deadline, at most 10 s (a node whose watch is behind answers
// DEADLINE_EXCEEDED, the change committed).
absl::Time ApplyDeadline(const CallContext& call) {
  const absl::Time cap = absl::Now() + absl::Seconds(10);
  if (call.deadline == std::chrono::system_clock::time_point::max()) return cap;
  return std::min(cap, absl::FromChrono(call.deadline));
}

LimitsUpdate LimitsOfRecord(const cluster::v1::GroupRecord& record) {
  LimitsUpdate update;
  if (record.has_max_pages()) update.max_pages = record.max_pages();
  if (record.has_high_pages()) update.high_pages = record.high_pages();
  if (record.has_min_pages()) update.min_pages = record.min_pages();
  if (record.has_low_pages()) update.low_pages = record.low_pages();
  return update;
}

void MergeLimits(const LimitsUpdate& update, cluster::v1::GroupRecord* record) {
  if (update.max_pages) record->set_max_pages(*update.max_pages);
  if (update.high_pages) record->set_high_pages(*update.high_pages);
  if (update.min_pages) record->set_min_pages(*update.min_pages);
  if (update.low_pages) record->set_low_pages(*update.low_pages);
}

}  // namespace

void GroupOps::AttachCluster(ClusterNode* cluster) { cluster_ = cluster; }

absl::Status GroupOps::AnswerGroup(const std::string& path,
                                   v1::Group* response) const {
  absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(path);
  absl::StatusOr<GroupStats> stats = engine_.GetStats(path, FlushMode::kNone);
  // Deleted by another node since: the change was made all the same.
  if (!handle.ok() || !stats.ok()) {
    response->set_path(path);
    return absl::OkStatus();
  }
  GroupInfo info;
  info.path = path;
  info.id = handle->id();
  info.limits = stats->limits;
  units_.GroupToProto(info, response);
  response->mutable_limits()->set_oom_group(stats->oom_group);
  return absl::OkStatus();
}

absl::Status GroupOps::CreateInCluster(const CallContext& call,
                                       const v1::CreateGroupRequest& request,
                                       v1::Group* response) {
  const bool tenant = !call.caller().admin();
  {
    // Counted from the records every node applied: two creates of one
    // tenant at two nodes at once may pass the bound by one each.
    absl::MutexLock l(&config_mu_);
    if (absl::Status s = CheckGroupBoundLocked(call); !s.ok()) return s;
  }
  cluster::v1::GroupRecord record;
  MergeLimits(units_.LimitsFromProto(request.limits()), &record);
  record.set_oom_group(request.limits().oom_group());
  if (tenant) record.set_creator(call.identity());
  absl::StatusOr<int64_t> revision =
      cluster_->CommitCreate(request.path(), record);
  if (!revision.ok()) return revision.status();
  if (absl::Status s = cluster_->WaitApplied(*revision, ApplyDeadline(call));
      !s.ok())
    return s;
  return AnswerGroup(request.path(), response);
}

absl::Status GroupOps::DeleteInCluster(const CallContext& call,
                                       const v1::DeleteGroupRequest& request,
                                       v1::DeleteGroupResponse* response) {
  if (request.path() == "/") {
    // The engine's own refusal, with its words.
    absl::StatusOr<uint64_t> refused = engine_.DeleteGroup("/");
    return refused.ok() ? absl::InternalError("the root was deleted")
                        : refused.status();
  }
  absl::StatusOr<int64_t> revision = cluster_->CommitDelete(request.path());
  if (!revision.ok()) return revision.status();
  if (absl::Status s = cluster_->WaitApplied(*revision, ApplyDeadline(call));
      !s.ok())
    return s;
  absl::MutexLock l(&config_mu_);
  auto it = reparented_at_.find(*revision);
  if (it != reparented_at_.end()) {
    response->set_reparented_pages(it->second);
    reparented_at_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status GroupOps::SetLimitsInCluster(const CallContext& call,
                                          const v1::SetLimitsRequest& request,
                                          v1::Group* response) {
  if (request.path() == "/") {
    absl::StatusOr<GroupInfo> refused =
        engine_.SetLimits("/", units_.LimitsFromProto(request.limits()));
    return refused.ok() ? absl::InternalError("the root's limits were set")
                        : refused.status();
  }
  const LimitsUpdate update = units_.LimitsFromProto(request.limits());
  const v1::Limits& limits = request.limits();
  absl::StatusOr<int64_t> revision = cluster_->CommitLimits(
      request.path(), [&](cluster::v1::GroupRecord* record) {
        MergeLimits(update, record);
        if (limits.has_oom_group()) record->set_oom_group(limits.oom_group());
      });
  if (!revision.ok()) return revision.status();
  if (absl::Status s = cluster_->WaitApplied(*revision, ApplyDeadline(call));
      !s.ok())
    return s;
  return AnswerGroup(request.path(), response);
}

void GroupOps::ForgetGroupLocked(uint64_t id, uint64_t reparented) {
  {
    absl::MutexLock g(&generations_mu_);
    generations_.erase(id);
  }
  if (auto creator = creators_.find(id); creator != creators_.end()) {
    if (reparented > 0) {
      dying_creators_[id] = creator->second;
    } else {
      auto count = created_.find(creator->second);
      if (count != created_.end() && --count->second == 0)
        created_.erase(count);
    }
    creators_.erase(creator);
  }
}

void GroupOps::ApplyGroupPut(const std::string& path,
                             const cluster::v1::GroupRecord& record,
                             int64_t generation) {
  absl::MutexLock l(&config_mu_);
  absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(path);
  if (handle.ok() && GenerationOf(handle->id()) !=
                         static_cast<uint64_t>(generation)) {
    // Another instance of the path (deleted and made again while this node
    // was not watching): the old one goes first.
    absl::StatusOr<uint64_t> reparented = engine_.DeleteGroup(path);
    if (reparented.ok()) {
      ForgetGroupLocked(handle->id(), *reparented);
      sessions_.OnGroupDeleted(handle->id(), path);
    }
    handle = absl::NotFoundError(path);
  }
  if (handle.ok()) {
    // A limits change. The engine applies what is present; absent fields
    // are the defaults a group was created with.
    LimitsUpdate update = LimitsOfRecord(record);
    if (!update.max_pages) update.max_pages = engine_.page_counter_max();
    if (!update.high_pages) update.high_pages = engine_.page_counter_max();
    if (!update.min_pages) update.min_pages = 0;
    if (!update.low_pages) update.low_pages = 0;
    (void)engine_.SetLimits(path, update);
    (void)engine_.SetOomGroup(path, record.oom_group());
    return;
  }
  absl::StatusOr<GroupInfo> created =
      engine_.CreateGroup(path, LimitsOfRecord(record));
  if (!created.ok()) return;  // its parent is missing: not expected
  if (record.oom_group()) (void)engine_.SetOomGroup(path, true);
  {
    absl::MutexLock g(&generations_mu_);
    generations_[created->id] = static_cast<uint64_t>(generation);
  }
  if (!record.creator().empty()) {
    creators_[created->id] = record.creator();
    ++created_[record.creator()];
  }
}

void GroupOps::ApplyGroupDelete(const std::string& path, int64_t revision) {
  absl::MutexLock l(&config_mu_);
  absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(path);
  if (!handle.ok()) return;
  absl::StatusOr<uint64_t> reparented = engine_.DeleteGroup(path);
  if (!reparented.ok()) return;  // children: not expected (etcd checked)
  ForgetGroupLocked(handle->id(), *reparented);
  sessions_.OnGroupDeleted(handle->id(), path);
  reparented_at_[revision] = *reparented;
  while (reparented_at_.size() > kMaxReparentedKept)
    reparented_at_.erase(reparented_at_.begin());
}

std::vector<std::pair<std::string, int64_t>> GroupOps::AppliedGroups() {
  std::vector<std::pair<std::string, int64_t>> out;
  absl::MutexLock l(&config_mu_);
  absl::StatusOr<std::vector<std::string>> paths =
      engine_.ListGroups("/", /*recursive=*/true);
  if (!paths.ok()) return out;
  for (const std::string& path : *paths) {
    absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(path);
    if (handle.ok())
      out.emplace_back(path, static_cast<int64_t>(GenerationOf(handle->id())));
  }
  return out;
}

void GroupOps::OnShardsLost(const std::vector<std::string>& shard_roots) {
  // The sessions first: they uncharge what they hold (their clients charge
  // it again at the new owner).
  sessions_.EndSessionsHolding(shard_roots);
  // Then what was charged without a session: usage is soft state at the
  // owner, so a node that owns the shard again later starts at 0, as the
  // new owner did (docs/DESIGN.md §4.18). Deepest groups first, each
  // group's own pages and its dying descendants', then the per-CPU stock.
  for (const std::string& root : shard_roots) {
    absl::StatusOr<std::vector<std::string>> below =
        engine_.ListGroups(root, /*recursive=*/true);
    std::vector<std::string> paths = below.ok() ? *below
                                                : std::vector<std::string>();
    paths.push_back(root);
    std::sort(paths.begin(), paths.end(), std::greater<std::string>());
    for (const std::string& path : paths) {
      absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(path);
      if (!handle.ok()) continue;
      for (PageKind kind : {PageKind::kAnon, PageKind::kFile})
        (void)engine_.UnchargeAtMost(*handle, path, engine_.page_counter_max(),
                                     kind);
      (void)engine_.DrainStock(*handle, path);
    }
  }
}

bool GroupOps::ShardHoldsPages(const std::string& shard_root) {
  // Stocked pages are nobody's to re-charge: back to the counters first
  // (the node no longer admits there; OnShardsLost drains them anyway).
  absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(shard_root);
  if (!handle.ok()) return false;  // never applied here: holds nothing
  (void)engine_.DrainStock(*handle, shard_root);
  absl::StatusOr<GroupStats> stats =
      engine_.GetStats(shard_root, FlushMode::kNone);
  // A group this node never applied holds nothing here.
  return stats.ok() && stats->memory_current_pages > 0;
}

uint64_t GroupOps::GenerationOf(uint64_t group_id) const {
  absl::ReaderMutexLock l(&generations_mu_);
  auto it = generations_.find(group_id);
  return it != generations_.end() ? it->second : (uint64_t{1} << 63) | group_id;
}

}  // namespace cgacct
