// MetricsCollector: every cgacct_* family of /metrics, built at scrape time
// from the engine and the recorders (docs/DESIGN.md §5).
#ifndef CGACCT_SERVER_METRICS_PROMETHEUS_COLLECTOR_H_
#define CGACCT_SERVER_METRICS_PROMETHEUS_COLLECTOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/types.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/rpc_metrics.h"

namespace cgacct {

// Per-group series down to this depth unless --metrics_group_depth says
// otherwise.
inline constexpr int kDefaultMetricsGroupDepth = 3;

struct MetricsOptions {
  // Per-group series (cgacct_group_memory_current_bytes,
  // cgacct_group_memory_max_bytes, cgacct_group_memory_events_total) are
  // exported for groups with at most this many path segments ("/" has 0,
  // "/a" 1, "/a/b" 2). 0 turns them off; otherwise "/" is always included.
  // --metrics_group_depth (resolved: its default -1 is
  // kDefaultMetricsGroupDepth or 0, server/daemon/flags.cc).
  int group_depth = kDefaultMetricsGroupDepth;
  // At most this many groups get per-group series per scrape (a cardinality
  // bound even for a wide tree): the shallowest first, then in path order
  // within a level. Groups left out are counted in
  // cgacct_group_series_dropped{reason="max_groups"}. --metrics_max_groups.
  size_t max_groups = 10000;
  // With group_depth 0: the per-group series are off because the server
  // has access control and /metrics no token (the default -1 resolved to
  // 0), so the groups left out count as reason="withheld", not "depth".
  bool group_series_withheld = false;
  // Called once per collector, the first time a scrape leaves groups out
  // because of max_groups, with a one-line message (cgacctd prints it on
  // stderr). May be empty. Called on a scrape thread.
  std::function<void(const std::string&)> on_first_drop = nullptr;
};

// Builds every cgacct_* family at scrape time from the engine (counters,
// info, per-group memory.current, memory.max and memory.events read with
// FlushMode::kNone, so a scrape never forces an rstat flush), the flush
// observer and the RPC metrics. Per-group series follow MetricsOptions'
// depth and count policy; cgacct_group_series_dropped{reason} counts the
// groups a scrape left out ("depth": deeper than group_depth; "max_groups":
// within the depth but past max_groups).
//
// Thread safety: thread-safe; Collect() may run on several scrape threads at
// once. `engine`, `flush` and `rpc` are not owned and must outlive this.
class MetricsCollector final : public prometheus::Collectable {
 public:
  MetricsCollector(Engine& engine, const RstatFlushObserver& flush,
                   const RpcMetrics& rpc, MetricsOptions options = {});

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  using Families = std::vector<prometheus::MetricFamily>;
  // One part of a scrape each, appended to `out`: the rstat flush lock and
  // flush durations; reclaim; the engine's counters and gauges; the RPC
  // families (cgacct_grpc_server_*, cgacct_shed_total).
  void CollectRstat(Families& out, const EngineInfo& info) const;
  void CollectReclaim(Families& out) const;
  void CollectEngineCounters(Families& out, const EngineCounters& counters,
                             const EngineInfo& info) const;
  void CollectRpc(Families& out) const;
  // The per-group families and cgacct_group_series_dropped; `nr_groups`
  // from the same scrape's EngineInfo.
  void CollectGroups(Families& out, uint64_t nr_groups) const;

  // Constant after construction.
  Engine& engine_;
  const RstatFlushObserver& flush_;
  const RpcMetrics& rpc_;
  const MetricsOptions options_;
  // Set (once, by exchange) when on_first_drop has been called.
  mutable std::atomic<bool> drop_reported_{false};
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_PROMETHEUS_COLLECTOR_H_
