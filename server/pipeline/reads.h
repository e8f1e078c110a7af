// ReadOps: the read RPCs (GetStats, GetEngineInfo) and memory.reclaim
// (Reclaim), each validate -> authorize -> engine -> answer.
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_PIPELINE_READS_H_
#define CGACCT_SERVER_PIPELINE_READS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/engine.h"
#include "server/auth/authorizer.h"
#include "server/cluster/cluster_node.h"
#include "server/common/wire.h"
#include "server/pipeline/call.h"
#include "server/pipeline/call_limiter.h"
#include "server/pipeline/ops.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

// The limits of the gRPC server itself, which whoever builds it sets
// (cgacctd's daemon); reported in EngineInfo only. 0 = not set.
struct TransportLimits {
  uint32_t max_message_bytes = 0;
  uint32_t max_concurrent_streams_per_connection = 0;
};

class ReadOps {
 public:
  // Every reference must outlive the object; `authorizer` may be null.
  ReadOps(Engine& engine, const WireUnits& units, const OpValidator& validator,
          const CallLimiter& limiter, const SessionRegistry& sessions,
          const Authorizer* authorizer, TransportLimits transport);

  // memory.current/peak/stat/events of a group; FLUSH_MODE_UNSPECIFIED is
  // EXACT. Cluster mode, a group above the shard roots: current, stat and
  // events are the sums over the shard roots below it (or over
  // request.shard_roots) that this node owns, listed in summed_shards; the
  // others are in missing_shards (the rpc room asks their owners:
  // server/rpc/forwarder.h FanOutStats()). Errors: INVALID_ARGUMENT bad
  // path, unknown flush, or shard_roots naming what is not a shard root
  // below the path; PERMISSION_DENIED; NOT_FOUND.
  absl::Status GetStats(const CallContext& call,
                        const v1::GetStatsRequest& request,
                        v1::GroupStats* response) const;
  // memory.reclaim of nr_bytes (rounded down to pages) from the subtree.
  // Errors: INVALID_ARGUMENT nr_bytes 0 or bad path; PERMISSION_DENIED;
  // NOT_FOUND; UNAVAILABLE the target was not met (the kernel's EAGAIN).
  absl::Status Reclaim(const CallContext& call,
                       const v1::ReclaimRequest& request,
                       v1::ReclaimResponse* response) const;
  // The engine's and the server's configuration and the flush-lock record.
  // A caller that is not admin gets the configuration and the flushes of
  // subtrees it may read, not the engine's load: nr_groups and the
  // flush-lock maxima are 0 for it. No errors.
  void GetEngineInfo(const CallContext& call, v1::EngineInfo* response) const;

  // Cluster mode: GetStats and Reclaim of a shard this node does not own
  // are refused with its owner (server/cluster/routing.h); GetStats above
  // the shard depth sums the shards this node owns (GetStats()). Set once,
  // before serving.
  void AttachCluster(const ClusterNode* cluster) { cluster_ = cluster; }

 private:
  // The shard roots a GetStats above the shard depth sums:
  // request.shard_roots (INVALID_ARGUMENT naming it if one is not a shard
  // root below the path), else every shard root below the path in this
  // node's map.
  absl::StatusOr<std::vector<std::string>> ShardRootsBelow(
      const v1::GetStatsRequest& request) const;
  void StatsToProto(GroupStats stats, v1::GroupStats* response) const;
  // Replaces response's current, stat and events with the sums over
  // `roots` this node owns (summed_shards), the rest in missing_shards.
  void SumOwnedShards(const std::vector<std::string>& roots, FlushMode mode,
                      v1::GroupStats* response) const;

  Engine& engine_;
  const WireUnits& units_;
  const OpValidator& validator_;
  const CallLimiter& limiter_;
  const SessionRegistry& sessions_;
  const Authorizer* const authorizer_;  // may be null
  const TransportLimits transport_;
  const ClusterNode* cluster_ = nullptr;  // set once, before serving
};

// Adds one owner's answer for shard roots (`from`: memory_current_bytes,
// stat by name, events, summed_shards) to a sum above the shard roots
// `into`: its summed shards leave into's missing_shards; flushed is the
// AND, max_staleness_us the largest. Limits and the group's own fields of
// `into` are left as they are.
void AddShardSums(const v1::GroupStats& from, v1::GroupStats* into);

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_READS_H_
