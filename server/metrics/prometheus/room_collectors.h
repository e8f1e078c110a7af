// The Prometheus collectables of cgacctd's other rooms, read at scrape time
// (docs/DESIGN.md §5): the standard grpc_server_* families, access control's
// refusals, the sessions. Each reads its room's own counters; none records
// anything.
//
// Thread safety: thread-safe; what each reads must outlive it.
#ifndef CGACCT_SERVER_METRICS_PROMETHEUS_ROOM_COLLECTORS_H_
#define CGACCT_SERVER_METRICS_PROMETHEUS_ROOM_COLLECTORS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/auth/authorizer.h"
#include "server/cluster/cluster_node.h"
#include "server/metrics/grpc_server_metrics.h"
#include "server/metrics/rpc_metrics.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

// grpc_server_{started,handled,msg_received,msg_sent}_total and
// grpc_server_handling_seconds (server/metrics/grpc_server_metrics.h). The
// handled counts and latencies of cgacct.v1.Accounting's methods are read
// from `rpc` (the pipeline's one count per call); null: from `grpc`, for a
// server whose interceptor counts every end.
class GrpcServerCollector final : public prometheus::Collectable {
 public:
  GrpcServerCollector(const GrpcServerMetrics& grpc, const RpcMetrics* rpc)
      : grpc_(grpc), rpc_(rpc) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const GrpcServerMetrics& grpc_;
  const RpcMetrics* const rpc_;  // may be null
};

// cgacct_auth_failures_total{code,reason}.
std::shared_ptr<prometheus::Collectable> MakeAuthMetrics(
    const AuthFailureCounts& counts);

// cgacct_sessions, cgacct_sessions_{opened,closed,expired}_total,
// cgacct_session_returned_pages_total{reason="close|expire"},
// cgacct_session_drains_total, cgacct_session_drains_joined_total,
// cgacct_session_drains_deferred_total,
// cgacct_session_drain_requests_total{result="answered|timeout|unneeded"},
// cgacct_session_drain_returned_pages_total.
std::shared_ptr<prometheus::Collectable> MakeSessionMetrics(
    const SessionRegistry& registry);

// Cluster mode (docs/DESIGN.md §4.18): cgacct_cluster_shards_owned,
// cgacct_cluster_has_lease, cgacct_cluster_fence_remaining_seconds,
// cgacct_cluster_watch_lag_revisions, cgacct_cluster_etcd_txns_total
// {result}, cgacct_cluster_keepalives_total{result},
// cgacct_cluster_etcd_txn_seconds and cgacct_cluster_keepalive_seconds
// (histograms),
// cgacct_cluster_leases_lost_total, cgacct_cluster_shard_changes_total
// {change="claimed|given_back|lost"}, cgacct_cluster_resyncs_total and
// cgacct_cluster_forwards_total{method} (`forwarded`: the rpc room's count
// of calls forwarded to their shard's owner, by method).
std::shared_ptr<prometheus::Collectable> MakeClusterMetrics(
    const ClusterNode& node, std::function<uint64_t(RpcMethod)> forwarded);

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_PROMETHEUS_ROOM_COLLECTORS_H_
