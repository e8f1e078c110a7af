// The routing stage of the pipeline in cluster mode (docs/DESIGN.md §2.4
// step 6b, §4.18): whether this node may do a path's engine work, and the
// refusal that tells the caller where to go.
//
// Thread safety: thread-safe (pure functions over ClusterNode::Route()).
#ifndef CGACCT_SERVER_CLUSTER_ROUTING_H_
#define CGACCT_SERVER_CLUSTER_ROUTING_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/cluster/cluster_node.h"

namespace cgacct {

// OK when `cluster` is null (single-node mode), or when this node owns the
// shard of `path` within its fence; for a path above the shard depth ("/",
// and with --shard_depth above 1 the groups between), OK only for a read
// that answers this node's own view (`read_above_shards`: GetStats), else
// FAILED_PRECONDITION: charges, reclaim, memory.peak and events of such a
// group would be one node's alone. Otherwise:
//   FAILED_PRECONDITION  another node owns the shard: the message names it
//                        (node, address, epoch) and the status carries the
//                        owner's address (OwnerAddressOf(); the rpc room
//                        sends it as the `cgacct-owner` trailer);
//   UNAVAILABLE          nobody owns it now (a failover, or this node lost
//                        its etcd lease): retry within the lease TTL;
//   NOT_FOUND            no group is the path's shard root (as applied at
//                        this node): the path cannot exist.
// A `fresh_charge` (a charge not marked ChargeRequest.resume) of a shard
// this node took over from an earlier owner less than
// --cluster_takeover_grace ago is UNAVAILABLE, saying when to retry.
// Nothing was applied in any of these cases.
absl::Status RouteStatus(const ClusterNode* cluster, absl::string_view path,
                         bool read_above_shards = false,
                         bool fresh_charge = false);

// RouteStatus() for a charge of `path` (`resume`: ChargeRequest.resume;
// `in_session`: it names a session); then, on a node started with
// --cluster_require_sessions, a charge that names no session is
// FAILED_PRECONDITION: its pages would be lost at a failover with nobody
// to re-charge them. Nothing applied when not OK.
absl::Status ChargeRouteStatus(const ClusterNode* cluster,
                               absl::string_view path, bool resume,
                               bool in_session);

// The owner's address a RouteStatus() refusal carries.
std::optional<std::string> OwnerAddressOf(const absl::Status& status);

}  // namespace cgacct

#endif  // CGACCT_SERVER_CLUSTER_ROUTING_H_
