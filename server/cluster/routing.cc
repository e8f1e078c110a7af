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
                         bool read_above_shards) {
  if (cluster == nullptr) return absl::OkStatus();
  const ShardRoute route = cluster->Route(path);
  switch (route.kind) {
    case ShardRoute::Kind::kLocal:
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
    case ShardRoute::Kind::kNoOwner:
      break;
  }
  return absl::UnavailableError(absl::StrCat(
      "path ", QuotePath(path), " is in shard ", QuotePath(route.shard_root),
      ", which has no owner this node can see now (a failover in progress, "
      "or this node lost its etcd lease): retry within --cluster_lease_ttl (",
      absl::FormatDuration(cluster->options().lease_ttl), ")"));
}

std::optional<std::string> OwnerAddressOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kOwnerPayloadUrl);
  if (!payload.has_value()) return std::nullopt;
  return std::string(*payload);
}

}  // namespace cgacct
