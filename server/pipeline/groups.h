// GroupOps: the configuration RPCs (CreateGroup, DeleteGroup, SetLimits,
// ListGroups) and what they keep beside the engine: the state store's copy
// of the tree and each group's store generation (docs/DESIGN.md §4.12).
//
// Each runs validate -> authorize -> engine -> persist -> answer (DeleteGroup
// persists first: its engine change cannot be undone). The changes are
// serialised with each other (config_mu_) so the store sees them in the
// engine's order, and a change is answered OK only once it is in the store.
// A store write that fails leaves the engine and the store agreeing: the
// change is undone (CreateGroup, SetLimits) or not made (DeleteGroup), and
// the call answered UNAVAILABLE.
//
// Cluster mode (AttachCluster(), docs/DESIGN.md §4.18): the tree is etcd's.
// Create/Delete/SetLimits are committed as etcd Txns by the ClusterNode,
// and every node, this one included, applies them to its engine from the
// node's Watch (the ClusterTreeApplier methods below); a call is answered
// once this node applied its revision. A group's generation is its key's
// create_revision. The state store then holds nothing of the tree.
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_PIPELINE_GROUPS_H_
#define CGACCT_SERVER_PIPELINE_GROUPS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/engine.h"
#include "server/auth/authorizer.h"
#include "server/cluster/cluster_node.h"
#include "server/common/wire.h"
#include "server/idempotency/dedup_table.h"
#include "server/idempotency/state_store.h"
#include "server/pipeline/call.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

// ListGroups page size used for page_size 0 or anything above it.
inline constexpr uint32_t kMaxListGroupsPageSize = 10000;
// ListGroups also ends a page once its paths reach this many bytes.
inline constexpr size_t kMaxListGroupsPageBytes = size_t{1} << 20;

// What GroupOps::Restore() put back.
struct RestoreReport {
  size_t groups = 0;
  size_t requests = 0;
};

// Default of --max_groups_per_identity.
inline constexpr uint32_t kDefaultMaxGroupsPerIdentity = 10000;

class GroupOps : public ClusterTreeApplier {
 public:
  // Every reference must outlive the object; `authorizer` may be null (no
  // access control). `max_groups_per_identity`: groups a caller that is
  // not admin may have created and not deleted (0 = no bound).
  GroupOps(Engine& engine, const WireUnits& units, StateStore& store,
           SessionRegistry& sessions, const Authorizer* authorizer,
           uint32_t max_groups_per_identity = kDefaultMaxGroupsPerIdentity);
  GroupOps(const GroupOps&) = delete;
  GroupOps& operator=(const GroupOps&) = delete;

  // Re-creates the store's groups (creation order, stored limits; usage 0)
  // in the engine with their creators' counts (--max_groups_per_identity)
  // and reloads the two de-duplication windows (entries younger than their
  // window). Call once, before serving, on an engine
  // with only the root. Errors: the store's (INTERNAL, DATA_LOSS, ...);
  // INTERNAL naming the path if the engine refuses a stored group.
  absl::StatusOr<RestoreReport> Restore(DedupTable& request_ids,
                                        DedupTable& batch_keys)
      ABSL_LOCKS_EXCLUDED(config_mu_);

  // Errors: INVALID_ARGUMENT bad path; PERMISSION_DENIED; NOT_FOUND parent;
  // ALREADY_EXISTS (the root included); RESOURCE_EXHAUSTED the caller (not
  // admin) has max_groups_per_identity groups (--max_groups_per_identity,
  // named in the message); UNAVAILABLE the state store failed (the group is
  // not created).
  absl::Status Create(const CallContext& call,
                      const v1::CreateGroupRequest& request,
                      v1::Group* response) ABSL_LOCKS_EXCLUDED(config_mu_);
  // Errors: INVALID_ARGUMENT bad path or root; PERMISSION_DENIED; NOT_FOUND;
  // FAILED_PRECONDITION has children; UNAVAILABLE the state store failed
  // (the group is not deleted).
  absl::Status Delete(const CallContext& call,
                      const v1::DeleteGroupRequest& request,
                      v1::DeleteGroupResponse* response)
      ABSL_LOCKS_EXCLUDED(config_mu_);
  // Errors: as Create's; UNAVAILABLE the state store failed (the previous
  // limits are put back; what reclaim the new ones started is not undone).
  absl::Status SetLimits(const CallContext& call,
                         const v1::SetLimitsRequest& request,
                         v1::Group* response) ABSL_LOCKS_EXCLUDED(config_mu_);
  // Sorted paths below `path`, paged (page_size 0 or > 10000 means 10000;
  // a page also ends at kMaxListGroupsPageBytes). The page token is the
  // last path of the previous page: paging is stable under concurrent
  // creates and deletes (no path present throughout is returned twice or
  // skipped). A caller with grants sees only the paths it may read. In
  // cluster mode the listing includes every change committed (at any node)
  // before the call (ClusterNode::SyncRead(): one etcd round trip).
  // Errors: INVALID_ARGUMENT bad path or page_token; PERMISSION_DENIED;
  // NOT_FOUND; cluster mode: UNAVAILABLE etcd, DEADLINE_EXCEEDED.
  absl::Status List(const CallContext& call,
                    const v1::ListGroupsRequest& request,
                    v1::ListGroupsResponse* response) const;

  // Cluster mode: the tree is `cluster`'s (not owned; outlives this). Call
  // once, before the node starts (its start applies the tree through this
  // object) and before serving; Restore() is then not called.
  void AttachCluster(ClusterNode* cluster);

  // ClusterTreeApplier: the watch thread applies etcd's changes.
  void ApplyGroupPut(const std::string& path,
                     const cluster::v1::GroupRecord& record,
                     int64_t generation) override
      ABSL_LOCKS_EXCLUDED(config_mu_);
  void ApplyGroupDelete(const std::string& path, int64_t revision) override
      ABSL_LOCKS_EXCLUDED(config_mu_);
  std::vector<std::pair<std::string, int64_t>> AppliedGroups() override
      ABSL_LOCKS_EXCLUDED(config_mu_);
  void OnShardsLost(const std::vector<std::string>& shard_roots) override;
  bool ShardHoldsPages(const std::string& shard_root) override;

  // The store generation of engine group `group_id`: what request ids and
  // idempotency keys are scoped to (stable across restarts). A group not
  // made through GroupOps (tests' engines) gets its engine id, offset so it
  // cannot meet a stored generation.
  uint64_t GenerationOf(uint64_t group_id) const
      ABSL_LOCKS_EXCLUDED(generations_mu_);

  // Groups `identity` created that still exist, restored ones included (the
  // store keeps each group's creator; groups stored before schema 4 count
  // for nobody), and deleted ones the engine still holds, dying (counted
  // until a create at the bound finds them freed).
  uint32_t GroupsOf(absl::string_view identity) const
      ABSL_LOCKS_EXCLUDED(config_mu_);

 private:
  // The configuration RPCs' first stages: the path's grammar, then the
  // caller's configure right on it.
  absl::Status CheckConfigure(const CallContext& call,
                              absl::string_view path) const;
  // The cluster-mode bodies of Create, Delete and SetLimits.
  absl::Status CreateInCluster(const CallContext& call,
                               const v1::CreateGroupRequest& request,
                               v1::Group* response);
  absl::Status DeleteInCluster(const CallContext& call,
                               const v1::DeleteGroupRequest& request,
                               v1::DeleteGroupResponse* response);
  absl::Status SetLimitsInCluster(const CallContext& call,
                                  const v1::SetLimitsRequest& request,
                                  v1::Group* response);
  // The tenant bound's refusal for `call`, or OK.
  absl::Status CheckGroupBoundLocked(const CallContext& call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // The group at `path` as this node's engine has it, into `response`.
  absl::Status AnswerGroup(const std::string& path, v1::Group* response) const;
  // Forgets group `id` (deleted): generation, creator counts.
  void ForgetGroupLocked(uint64_t id, uint64_t reparented)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  size_t RestoreRequests(const std::vector<StoredRequest>& requests,
                         DedupTable& request_ids, DedupTable& batch_keys);

  // Constant after construction.
  Engine& engine_;
  const WireUnits& units_;
  StateStore& store_;
  SessionRegistry& sessions_;
  const Authorizer* const authorizer_;  // may be null
  const uint32_t max_groups_per_identity_;  // 0 = none
  ClusterNode* cluster_ = nullptr;  // set once, before serving

  // Serialises Create/Delete/SetLimits (engine change + store write).
  mutable absl::Mutex config_mu_ ABSL_ACQUIRED_BEFORE(generations_mu_);
  // Engine group id -> the identity that created it (tenants only), and
  // identity -> how many of its groups exist: the per-identity bound.
  absl::flat_hash_map<uint64_t, std::string> creators_
      ABSL_GUARDED_BY(config_mu_);
  absl::flat_hash_map<std::string, uint32_t> created_
      ABSL_GUARDED_BY(config_mu_);
  // Engine id -> creator of the tenants' groups deleted with pages still
  // charged (dying in the engine): counted in created_ until freed.
  absl::flat_hash_map<uint64_t, std::string> dying_creators_
      ABSL_GUARDED_BY(config_mu_);
  // Drops from created_ the dying groups the engine has freed since.
  void ForgetFreedDyingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(config_mu_);
  // Cluster mode: the pages each applied delete reparented, by revision
  // (the last kMaxReparentedKept), for DeleteGroup's answer.
  static constexpr size_t kMaxReparentedKept = 4096;
  std::map<int64_t, uint64_t> reparented_at_ ABSL_GUARDED_BY(config_mu_);
  // Engine group id -> the group's store generation.
  mutable absl::Mutex generations_mu_;
  absl::flat_hash_map<uint64_t, uint64_t> generations_
      ABSL_GUARDED_BY(generations_mu_);
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_GROUPS_H_
