// Routing refusals (server/cluster/routing.h).
#include "server/cluster/routing.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/group_path.h"

namespace cgacct {
namespace {

constexpr char kOwnerPayloadUrl[] = "type.cgacct.dev/cgacct.owner";

}  // namespace

absl::Status RouteStatus(const ClusterNode* cluster, absl::string_view path,
                         bool read_above_shards, bool fresh_charge) {
  if (cluster == nullptr) return absl::OkStatus();
  const ShardRoute route = cluster->Route(path);
  switch (route.kind) {
    case ShardRoute::Kind::kLocal:
      if (fresh_charge && route.grace_remaining > absl::ZeroDuration()) {
        cluster->NoteGraceRefusal();
        return absl::UnavailableError(absl::StrCat(
            "path ", QuotePath(path), " is in shard ",
            QuotePath(route.shard_root),
            ", which this node has just taken over from another: for "
            "--cluster_takeover_grace (",
            absl::FormatDuration(cluster->options().takeover_grace),
            ") only re-charges of pages clients held there (ChargeRequest."
            "resume, as the client libraries send when they resume) are "
            "admitted, so that they are counted before fresh charges; retry "
            "in ",
            absl::FormatDuration(absl::Ceil(route.grace_remaining,
                                            absl::Milliseconds(1)))));
      }
      return absl::OkStatus();
    case ShardRoute::Kind::kAboveShards:
      if (read_above_shards) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(
          "path ", QuotePath(path), " is above the shard roots (--shard_depth=",
          cluster->options().shard_depth,
          "): in cluster mode only groups at or below a shard root are "
          "charged, reclaimed or watched, each at its shard's owner"));
    case ShardRoute::Kind::kElsewhere: {
      absl::Status s = absl::FailedPreconditionError(absl::StrCat(
          "path ", QuotePath(path), " is in shard ", QuotePath(route.shard_root),
          ", owned by node \"", route.owner_node, "\" at ", route.owner_address,
          " (epoch ", route.epoch,
          "): send it there (trailer cgacct-owner; GetClusterMap lists every "
          "shard's owner)"));
      s.SetPayload(kOwnerPayloadUrl, absl::Cord(route.owner_address));
      return s;
    }
    case ShardRoute::Kind::kNoSuchShard:
      // As the engine says it (a fresh user's charge of /web before any
      // CreateGroup was told "no owner ... a failover in progress").
      return absl::NotFoundError(absl::StrCat(
          "path ", QuotePath(path), ": no such group (",
          route.shard_root == path
              ? std::string("create it first")
              : absl::StrCat("its shard root ", QuotePath(route.shard_root),
                             " does not exist"),
          ")"));
    case ShardRoute::Kind::kNoOwner:
      break;
  }
  return absl::UnavailableError(absl::StrCat(
      "path ", QuotePath(path), " is in shard ", QuotePath(route.shard_root),
      ", which has no owner this node can see now (a failover in progress, "
      "or this node lost its etcd lease): retry within --cluster_lease_ttl (",
      absl::FormatDuration(cluster->options().lease_ttl), ")"));
}

absl::Status ChargeRouteStatus(const ClusterNode* cluster,
                               absl::string_view path, bool resume,
                               bool in_session) {
  absl::Status s = RouteStatus(cluster, path, /*read_above_shards=*/false,
                               /*fresh_charge=*/!resume);
  if (!s.ok() || cluster == nullptr || in_session ||
      !cluster->options().require_sessions)
    return s;
  return absl::FailedPreconditionError(absl::StrCat(
      "path ", QuotePath(path),
      ": session_id is required (--cluster_require_sessions): a charge "
      "without a session is lost at a failover, with nobody to charge it "
      "again; OpenSession and name it"));
}

std::optional<std::string> OwnerAddressOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kOwnerPayloadUrl);
  if (!payload.has_value()) return std::nullopt;
  return std::string(*payload);
}

}  // namespace cgacct
