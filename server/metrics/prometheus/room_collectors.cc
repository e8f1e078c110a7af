// The rooms' collectables (server/metrics/prometheus/room_collectors.h).
#include "server/metrics/prometheus/room_collectors.h"

#include <algorithm>
#include <utility>

#include "server/metrics/prometheus/families.h"

namespace cgacct {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::vector<MetricFamily> GrpcServerCollector::Collect() const {
  MetricFamily started = Family("grpc_server_started_total",
                                "Total number of RPCs started on the server.",
                                MetricType::Counter);
  MetricFamily handled = Family(
      "grpc_server_handled_total",
      "Total number of RPCs completed on the server, regardless of success "
      "or failure.",
      MetricType::Counter);
  MetricFamily seconds =
      Family("grpc_server_handling_seconds",
             "Histogram of response latency (seconds) of gRPC that had been "
             "application-level handled by the server.",
             MetricType::Histogram);
  MetricFamily received =
      Family("grpc_server_msg_received_total",
             "Total number of RPC stream messages received on the server.",
             MetricType::Counter);
  MetricFamily sent =
      Family("grpc_server_msg_sent_total",
             "Total number of gRPC stream messages sent by the server.",
             MetricType::Counter);
  const std::vector<GrpcMethodInfo>& methods = grpc_.methods();
  for (size_t i = 0; i < methods.size(); ++i) {
    const int m = static_cast<int>(i);
    const GrpcMethodInfo& info = methods[i];
    const std::vector<ClientMetric::Label> labels = {
        {"grpc_method", info.method},
        {"grpc_service", info.service},
        {"grpc_type", info.type}};
    // A cgacct.v1.Accounting call ends in the pipeline, which counts it
    // (RpcMetrics); the interceptor counts the ends of the others.
    const bool by_pipeline = info.rpc_method.has_value() && rpc_ != nullptr;
    auto counter = [&labels](uint64_t value) {
      ClientMetric metric;
      metric.label = labels;
      metric.counter.value = static_cast<double>(value);
      return metric;
    };
    started.metric.push_back(counter(grpc_.started(m)));
    received.metric.push_back(counter(grpc_.received(m)));
    sent.metric.push_back(counter(grpc_.sent(m)));
    for (int c = 0; c < GrpcServerMetrics::kNrCodes; ++c) {
      const uint64_t n = by_pipeline ? rpc_->handled(*info.rpc_method, c)
                                     : grpc_.handled(m, c);
      // OK always (rates start at zero), other codes once seen.
      if (n == 0 && c != 0) continue;
      ClientMetric metric = counter(n);
      metric.label.insert(metric.label.begin(),
                          {"grpc_code", GrpcCodeGoName(c)});
      handled.metric.push_back(std::move(metric));
    }
    // A method's histogram (22 bucket series) once it has handled a call,
    // as go-grpc-prometheus creates it at the first observation: the ~30
    // methods' empty histograms were most of a scrape's series.
    const LatencyHistogram::Snapshot latency =
        by_pipeline ? rpc_->latency(*info.rpc_method) : grpc_.latency(m);
    if (latency.count > 0) {
      seconds.metric.push_back(HistogramMetric(latency, labels));
    }
  }
  std::vector<MetricFamily> out;
  out.push_back(std::move(started));
  out.push_back(std::move(handled));
  out.push_back(std::move(seconds));
  out.push_back(std::move(received));
  out.push_back(std::move(sent));
  return out;
}

namespace {

class AuthMetrics final : public prometheus::Collectable {
 public:
  explicit AuthMetrics(const AuthFailureCounts& counts) : counts_(counts) {}

  std::vector<MetricFamily> Collect() const override {
    MetricFamily family = Family(
        "cgacct_auth_failures_total",
        "Calls (and ChargeBatch/ChargeStream ops) refused by access control, "
        "by gRPC code and reason",
        MetricType::Counter);
    for (int i = 0; i < kNrAuthFailures; ++i) {
      const auto failure = static_cast<AuthFailure>(i);
      family.metric.push_back(CounterMetric(
          static_cast<double>(counts_.count(failure)),
          {{"code", IsUnauthenticated(failure) ? "UNAUTHENTICATED"
                                               : "PERMISSION_DENIED"},
           {"reason", AuthFailureName(failure)}}));
    }
    return {std::move(family)};
  }

 private:
  const AuthFailureCounts& counts_;
};

class SessionMetrics final : public prometheus::Collectable {
 public:
  explicit SessionMetrics(const SessionRegistry& registry)
      : registry_(registry) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::ClientMetric;
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    const SessionStats s = registry_.stats();
    std::vector<MetricFamily> out;
    auto counter = [](double v, std::vector<ClientMetric::Label> labels = {}) {
      return CounterMetric(v, std::move(labels));
    };
    auto add = [&](const char* name, const char* help, MetricType type,
                   std::vector<ClientMetric> metrics) {
      MetricFamily f = Family(name, help, type);
      f.metric = std::move(metrics);
      out.push_back(std::move(f));
    };
    const ClientMetric gauge = GaugeMetric(static_cast<double>(s.sessions));
    add("cgacct_sessions",
        "Sessions open now (OpenSession, not yet closed or expired).",
        MetricType::Gauge, {gauge});
    add("cgacct_sessions_opened_total", "Sessions opened.", MetricType::Counter,
        {counter(static_cast<double>(s.opened))});
    add("cgacct_sessions_closed_total", "Sessions ended by CloseSession.",
        MetricType::Counter, {counter(static_cast<double>(s.closed))});
    add("cgacct_sessions_expired_total",
        "Sessions ended because no keepalive came for their ttl_ms.",
        MetricType::Counter, {counter(static_cast<double>(s.expired))});
    add("cgacct_session_returned_pages_total",
        "Pages uncharged on behalf of sessions that ended, by how they ended.",
        MetricType::Counter,
        {counter(static_cast<double>(s.returned_pages_close),
                 {{"reason", "close"}}),
         counter(static_cast<double>(s.returned_pages_expire),
                 {{"reason", "expire"}}),
         counter(static_cast<double>(s.returned_pages_oom_kill),
                 {{"reason", "oom_kill"}}),
         counter(static_cast<double>(s.returned_pages_shard_moved),
                 {{"reason", "shard_moved"}})});
    add("cgacct_sessions_shard_moved_total",
        "Cluster mode: sessions ended because they held pages in a shard "
        "this node no longer owns (moved, or the node was fenced).",
        MetricType::Counter, {counter(static_cast<double>(s.shard_moved))});
    add("cgacct_sessions_oom_killed_total",
        "Sessions ended because an OOM killed a group (memory.oom.group) "
        "in which they held pages.",
        MetricType::Counter, {counter(static_cast<double>(s.oom_killed))});
    add("cgacct_peak_watermarks",
        "memory.peak watermarks open now (OpenPeakWatermark, not yet "
        "closed).",
        MetricType::Gauge,
        {GaugeMetric(static_cast<double>(s.peak_watermarks))});
    add("cgacct_session_drains_total",
        "Charges at memory.max that asked sessions to return their stock "
        "(drain_all_stock() over the network).",
        MetricType::Counter, {counter(static_cast<double>(s.drains))});
    add("cgacct_session_drains_joined_total",
        "Charges at memory.max that waited for another charge's drain in "
        "flight instead of asking sessions themselves.",
        MetricType::Counter, {counter(static_cast<double>(s.drains_joined))});
    add("cgacct_session_drains_deferred_total",
        "Charges that would have waited for drain answers on a gRPC "
        "callback thread and were moved to a waiting thread.",
        MetricType::Counter, {counter(static_cast<double>(s.drains_deferred))});
    add("cgacct_session_drain_requests_total",
        "Drain requests sent to sessions, by whether the session answered "
        "within --session_drain_timeout_ms (answered), did not (timeout), "
        "was still unanswered when other sessions had returned what the "
        "charge needed (unneeded), or was silent and not waited for "
        "(not_awaited).",
        MetricType::Counter,
        {counter(static_cast<double>(s.drain_requests_answered),
                 {{"result", "answered"}}),
         counter(static_cast<double>(s.drain_requests_timeout),
                 {{"result", "timeout"}}),
         counter(static_cast<double>(s.drain_requests_unneeded),
                 {{"result", "unneeded"}}),
         counter(static_cast<double>(s.drain_requests_not_awaited),
                 {{"result", "not_awaited"}})});
    add("cgacct_session_drain_answers_slow_total",
        "Drain answers that came later than half of "
        "--session_drain_timeout_ms after their request: each is a step "
        "towards silent, as a request left unanswered is.",
        MetricType::Counter,
        {counter(static_cast<double>(s.drain_answers_slow))});
    add("cgacct_session_drain_answers_short_total",
        "Drain answers that returned fewer pages than their request asked: "
        "the session's stock is then known empty, and charges do not wait "
        "for its answers until it holds more pages than before that answer.",
        MetricType::Counter,
        {counter(static_cast<double>(s.drain_answers_short))});
    add("cgacct_session_drain_identity_cooldowns_total",
        "Waits of a charge for another identity's sessions whose answers did "
        "not cover it: each cools that identity, whose sessions other "
        "identities' charges then do not wait for (100 ms, doubling with "
        "each such wait up to 6.4 s; still asked, their pages still "
        "returned).",
        MetricType::Counter,
        {counter(static_cast<double>(s.drain_identity_cooldowns))});
    add("cgacct_sessions_silent",
        "Sessions that left 2 drain requests in a row unanswered or "
        "answered slowly: charges no longer wait for them until they answer "
        "one promptly or attach a new stream.",
        MetricType::Gauge,
        {GaugeMetric(static_cast<double>(s.sessions_silent))});
    add("cgacct_sessions_silenced_total",
        "Times a session became silent (see cgacct_sessions_silent).",
        MetricType::Counter,
        {counter(static_cast<double>(s.sessions_silenced))});
    add("cgacct_session_drain_returned_pages_total",
        "Pages sessions returned in answer to drain requests.",
        MetricType::Counter,
        {counter(static_cast<double>(s.drain_returned_pages))});
    return out;
  }

 private:
  const SessionRegistry& registry_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeSessionMetrics(
    const SessionRegistry& registry) {
  return std::make_shared<SessionMetrics>(registry);
}

namespace {

class ClusterMetrics final : public prometheus::Collectable {
 public:
  ClusterMetrics(const ClusterNode& node,
                 std::function<uint64_t(RpcMethod)> forwarded)
      : node_(node), forwarded_(std::move(forwarded)) {}

  std::vector<MetricFamily> Collect() const override {
    const ClusterCounters c = node_.Counters();
    const ClusterMapView map = node_.Map();
    std::vector<MetricFamily> out;
    auto add = [&](const char* name, const char* help, MetricType type,
                   std::vector<ClientMetric> metrics) {
      MetricFamily f = Family(name, help, type);
      f.metric = std::move(metrics);
      out.push_back(std::move(f));
    };
    auto gauge = [](double v) { return GaugeMetric(v); };
    auto counter = [](uint64_t v, std::vector<ClientMetric::Label> labels = {}) {
      return CounterMetric(static_cast<double>(v), std::move(labels));
    };
    add("cgacct_cluster_shards_owned",
        "Shards this node owns and may admit for now.", MetricType::Gauge,
        {gauge(static_cast<double>(c.shards_owned))});
    add("cgacct_cluster_has_lease",
        "1 while this node holds a live etcd lease within its fence, else 0.",
        MetricType::Gauge, {gauge(map.has_lease ? 1 : 0)});
    add("cgacct_cluster_fence_remaining_seconds",
        "Time until this node stops admitting unless etcd renews its lease.",
        MetricType::Gauge, {gauge(absl::ToDoubleSeconds(map.fence_remaining))});
    add("cgacct_cluster_watch_lag_revisions",
        "etcd revisions seen but not yet applied by this node.",
        MetricType::Gauge,
        {gauge(static_cast<double>(
            std::max<int64_t>(0, c.seen_revision - c.applied_revision)))});
    add("cgacct_cluster_etcd_txns_total",
        "etcd Txns this node sent (group changes, shard claims), by result.",
        MetricType::Counter,
        {counter(c.txns - c.txn_failures, {{"result", "ok"}}),
         counter(c.txn_failures, {{"result", "unavailable"}})});
    add("cgacct_cluster_keepalives_total",
        "etcd lease keepalives of this node, by result.", MetricType::Counter,
        {counter(c.keepalives, {{"result", "ok"}}),
         counter(c.keepalive_failures, {{"result", "failed"}})});
    add("cgacct_cluster_etcd_txn_seconds",
        "Round trip of each etcd Txn this node sent (group changes, claims, "
        "give-backs, its registration), answered or not.",
        MetricType::Histogram, {HistogramMetric(node_.TxnLatency(), {})});
    add("cgacct_cluster_keepalive_seconds",
        "Round trip of each answered lease keepalive (the fence deadline "
        "counts from when it was sent).",
        MetricType::Histogram,
        {HistogramMetric(node_.KeepaliveLatency(), {})});
    add("cgacct_cluster_leases_lost_total",
        "Times etcd said this node's lease had expired.", MetricType::Counter,
        {counter(c.leases_lost)});
    add("cgacct_cluster_shard_changes_total",
        "Shards this node claimed, gave back (rebalancing, a planned stop) or "
        "lost (lease lost, fenced, taken).",
        MetricType::Counter,
        {counter(c.shards_claimed, {{"change", "claimed"}}),
         counter(c.shards_given_back, {{"change", "given_back"}}),
         counter(c.shards_lost, {{"change", "lost"}})});
    add("cgacct_cluster_takeovers_total",
        "Shards this node claimed from an earlier owner, each starting a "
        "takeover grace (--cluster_takeover_grace).",
        MetricType::Counter, {counter(c.takeovers_with_grace)});
    add("cgacct_cluster_grace_refusals_total",
        "Charges not marked resume refused UNAVAILABLE in a takeover grace.",
        MetricType::Counter, {counter(c.grace_refusals)});
    add("cgacct_cluster_resyncs_total",
        "Full re-reads of the tree after etcd compacted past this node.",
        MetricType::Counter, {counter(c.resyncs)});
    std::vector<ClientMetric> forwards;
    for (int m = 0; m < kNrRpcMethods; ++m) {
      const uint64_t n = forwarded_ ? forwarded_(static_cast<RpcMethod>(m)) : 0;
      if (n == 0) continue;
      forwards.push_back(counter(
          n, {{"method", RpcMethodName(static_cast<RpcMethod>(m))}}));
    }
    add("cgacct_cluster_forwards_total",
        "Unary calls this node forwarded to their shard's owner, by method.",
        MetricType::Counter, std::move(forwards));
    return out;
  }

 private:
  const ClusterNode& node_;
  const std::function<uint64_t(RpcMethod)> forwarded_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeClusterMetrics(
    const ClusterNode& node, std::function<uint64_t(RpcMethod)> forwarded) {
  return std::make_shared<ClusterMetrics>(node, std::move(forwarded));
}

std::shared_ptr<prometheus::Collectable> MakeAuthMetrics(
    const AuthFailureCounts& counts) {
  return std::make_shared<AuthMetrics>(counts);
}

}  // namespace cgacct
