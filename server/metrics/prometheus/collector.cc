// MetricsCollector (server/metrics/prometheus/collector.h).
#include "server/metrics/prometheus/collector.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/metrics/prometheus/families.h"

namespace cgacct {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// cgacct_group_series_dropped{reason}: groups a scrape left out.
MetricFamily DroppedFamily(uint64_t by_depth, uint64_t by_max_groups,
                           uint64_t withheld = 0) {
  MetricFamily dropped =
      Family("cgacct_group_series_dropped",
             "Groups this scrape exported no per-group series for, by reason: "
             "depth (deeper than --metrics_group_depth), max_groups (past "
             "--metrics_max_groups) or withheld (access control on and no "
             "--metrics_token_file: per-group series only behind a token).",
             MetricType::Gauge);
  dropped.metric.push_back(
      GaugeMetric(static_cast<double>(by_depth), {{"reason", "depth"}}));
  dropped.metric.push_back(GaugeMetric(static_cast<double>(by_max_groups),
                                       {{"reason", "max_groups"}}));
  dropped.metric.push_back(
      GaugeMetric(static_cast<double>(withheld), {{"reason", "withheld"}}));
  return dropped;
}

}  // namespace

MetricsCollector::MetricsCollector(Engine& engine,
                                   const RstatFlushObserver& flush,
                                   const RpcMetrics& rpc,
                                   MetricsOptions options)
    : engine_(engine), flush_(flush), rpc_(rpc), options_(options) {}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  const EngineCounters counters = engine_.GetCounters();
  const EngineInfo info = engine_.GetInfo();
  std::vector<MetricFamily> out;
  CollectRstat(out, info);
  CollectReclaim(out);
  CollectEngineCounters(out, counters, info);
  CollectRpc(out);
  if (options_.group_depth > 0) {
    CollectGroups(out, info.nr_groups);
  } else {
    // Per-group series off: every group is left out, by depth or withheld.
    out.push_back(options_.group_series_withheld
                      ? DroppedFamily(0, 0, info.nr_groups)
                      : DroppedFamily(info.nr_groups, 0));
  }
  return out;
}

// rstat flush lock (the irqs-off tracer's view, docs/DESIGN.md §9.3).
void MetricsCollector::CollectRstat(Families& out,
                                    const EngineInfo& info) const {
  {
    MetricFamily hold = Family("cgacct_rstat_flush_lock_hold_seconds",
                               "Time the rstat flush lock was held, per hold.",
                               MetricType::Histogram);
    MetricFamily wait =
        Family("cgacct_rstat_flush_lock_wait_seconds",
               "Time spent acquiring the rstat flush lock, per acquisition.",
               MetricType::Histogram);
    for (FlushLockPolicy policy :
         {FlushLockPolicy::kPerCpu, FlushLockPolicy::kWhole,
          FlushLockPolicy::kBatch, FlushLockPolicy::kAdaptive}) {
      const LatencyHistogram::Snapshot h = flush_.lock_hold(policy).Collect();
      const LatencyHistogram::Snapshot w = flush_.lock_wait(policy).Collect();
      // The configured policy always shows (zero until the first flush);
      // another one only once it has been used.
      if (policy != info.flush_lock_policy && h.count == 0 && w.count == 0) {
        continue;
      }
      const std::vector<ClientMetric::Label> labels = {
          {"policy", policy == info.flush_lock_policy
                         ? info.flush_lock_policy_name
                         : std::string(FlushLockPolicyName(policy))}};
      hold.metric.push_back(HistogramMetric(h, labels));
      wait.metric.push_back(HistogramMetric(w, labels));
    }
    out.push_back(std::move(hold));
    out.push_back(std::move(wait));

    MetricFamily hold_max =
        Family("cgacct_rstat_flush_lock_hold_max_seconds",
               "Longest rstat flush lock hold since start, from flushes not "
               "preempted meanwhile (the irqs-off tracer's view).",
               MetricType::Gauge);
    hold_max.metric.push_back(
        GaugeMetric(absl::ToDoubleSeconds(info.flush_lock_hold_max)));
    out.push_back(std::move(hold_max));
    MetricFamily wall_max =
        Family("cgacct_rstat_flush_lock_hold_wall_max_seconds",
               "Longest rstat flush lock hold since start by the wall clock, "
               "preemption of the holder included.",
               MetricType::Gauge);
    wall_max.metric.push_back(
        GaugeMetric(absl::ToDoubleSeconds(info.flush_lock_hold_wall_max)));
    out.push_back(std::move(wall_max));

    MetricFamily duration =
        Family("cgacct_rstat_flush_duration_seconds",
               "Duration of one rstat subtree flush.", MetricType::Histogram);
    duration.metric.push_back(
        HistogramMetric(flush_.flush_duration().Collect()));
    out.push_back(std::move(duration));
  }
}

// Reclaim ("restore incremental cgroup iteration", docs/DESIGN.md §10.1).
void MetricsCollector::CollectReclaim(Families& out) const {
  {
    MetricFamily cycles = Family(
        "cgacct_reclaim_cycle_seconds",
        "Duration of one reclaim cycle (try_to_free_mem_cgroup_pages()), by "
        "walk: partial (shared cursor only) or full (whole subtree).",
        MetricType::Histogram);
    cycles.metric.push_back(
        HistogramMetric(flush_.reclaim_cycle(/*full_walk=*/false).Collect(),
                        {{"walk", "partial"}}));
    cycles.metric.push_back(
        HistogramMetric(flush_.reclaim_cycle(/*full_walk=*/true).Collect(),
                        {{"walk", "full"}}));
    out.push_back(std::move(cycles));
    MetricFamily pages =
        Family("cgacct_reclaim_pages_total",
               "Pages scanned and reclaimed (stolen) by reclaim.",
               MetricType::Counter);
    pages.metric.push_back(CounterMetric(
        static_cast<double>(flush_.reclaim_scanned()), {{"op", "scanned"}}));
    pages.metric.push_back(CounterMetric(
        static_cast<double>(flush_.reclaim_stolen()), {{"op", "stolen"}}));
    out.push_back(std::move(pages));
  }
}

void MetricsCollector::CollectEngineCounters(Families& out,
                                             const EngineCounters& counters,
                                             const EngineInfo& info) const {
  auto counter_family = [&out](const char* name, const char* help,
                               uint64_t value) {
    MetricFamily family = Family(name, help, MetricType::Counter);
    family.metric.push_back(CounterMetric(static_cast<double>(value)));
    out.push_back(std::move(family));
  };
  counter_family("cgacct_rstat_flushes_total", "rstat subtree flushes.",
                 counters.flushes);
  counter_family("cgacct_rstat_flushes_preempted_total",
                 "rstat flushes that took the lock and whose thread was "
                 "preempted while flushing.",
                 info.preempted_flushes);
  counter_family("cgacct_rstat_flush_cpus_total",
                 "Per-CPU rstat lists walked by flushes.", counters.flush_cpus);

  {
    MetricFamily charges = Family(
        "cgacct_charges_total",
        "Charge requests by result: ok; oom (RESOURCE_EXHAUSTED after an "
        "OOM: memory.events oom raised); refused (RESOURCE_EXHAUSTED without "
        "one: a charge of more than 8 pages at its limit, or a drain of "
        "remote stock that could not finish); rejected (any other error: bad "
        "input, missing group, request_id conflict); a request_id replay is "
        "not counted again.",
        MetricType::Counter);
    charges.metric.push_back(CounterMetric(
        static_cast<double>(counters.charges_ok), {{"result", "ok"}}));
    charges.metric.push_back(CounterMetric(
        static_cast<double>(counters.charges_oom), {{"result", "oom"}}));
    charges.metric.push_back(CounterMetric(
        static_cast<double>(counters.charges_refused), {{"result", "refused"}}));
    // ok, oom and refused are counted by the engine (once per charge it
    // applies or refuses at a limit), rejected by the service alone
    // (RpcMetrics): each charge request is in exactly one series.
    charges.metric.push_back(
        CounterMetric(static_cast<double>(rpc_.charges_rejected()),
                      {{"result", "rejected"}}));
    out.push_back(std::move(charges));
  }
  counter_family("cgacct_state_store_errors_total",
                 "request_id answers the state store failed to persist "
                 "(answered, but not replayable after a restart).",
                 rpc_.state_store_errors());
  counter_family("cgacct_oversized_reads_cancelled_total",
                 "Reads cancelled RESOURCE_EXHAUSTED by the receive guard "
                 "while their message was arriving: their connection had "
                 "received more than its pending reads may hold (a message "
                 "over --max_message_bytes).",
                 rpc_.oversized_reads_cancelled());
  counter_family("cgacct_flooding_connections_closed_total",
                 "Connections closed by the receive guard (on --listen or "
                 "--health_listen): they had read more than their calls "
                 "took or may hold, with or without a call (an HTTP/2 "
                 "header block that does not end).",
                 rpc_.flooding_connections_closed());
  counter_family("cgacct_uncharges_total", "Successful uncharges.",
                 counters.uncharges);
  counter_family("cgacct_stock_hits_total",
                 "Charges served from a per-CPU stock slot (consume_stock()).",
                 counters.stock_hits);
  counter_family("cgacct_stock_victim_hits_total",
                 "Charges served from a per-CPU stock's victim table (groups "
                 "evicted from the 7 slots).",
                 counters.stock_victim_hits);
  counter_family("cgacct_stock_pool_hits_total",
                 "Per-CPU stock misses served from the stock's shared "
                 "per-group pool.",
                 counters.stock_pool_hits);
  counter_family("cgacct_stock_drains_total",
                 "Per-CPU stock slots drained, for any reason.",
                 counters.stock_drains);
  counter_family("cgacct_oom_total", "memory.events oom raised.",
                 counters.oom_total);

  {
    MetricFamily groups =
        Family("cgacct_groups", "Accounting groups, root included.",
               MetricType::Gauge);
    groups.metric.push_back(GaugeMetric(static_cast<double>(info.nr_groups)));
    out.push_back(std::move(groups));
  }
}

// What the pipeline counts beyond the standard grpc_server_* families
// (GrpcServerCollector, which reads the same RpcMetrics for
// cgacct.v1.Accounting: there is one gRPC family, not two).
void MetricsCollector::CollectRpc(Families& out) const {
  {
    MetricFamily shed = Family(
        "cgacct_shed_total",
        "Calls shed with RESOURCE_EXHAUSTED by a per-identity limit, by "
        "reason (streams_per_identity, in_flight_per_identity); memory.max "
        "OOMs are cgacct_charges_total{result=\"oom\"}, never here.",
        MetricType::Counter);
    for (int r = 0; r < kNrShedReasons; ++r) {
      const ShedReason reason = static_cast<ShedReason>(r);
      shed.metric.push_back(
          CounterMetric(static_cast<double>(rpc_.shed(reason)),
                        {{"reason", ShedReasonName(reason)}}));
    }
    out.push_back(std::move(shed));
  }

}

void MetricsCollector::CollectGroups(Families& out, uint64_t nr_groups) const {
  MetricFamily current =
      Family("cgacct_group_memory_current_bytes",
             "memory.current of a group (pages in per-CPU stocks included).",
             MetricType::Gauge);
  MetricFamily max =
      Family("cgacct_group_memory_max_bytes",
             "memory.max of a group; +Inf when it is \"max\" (no limit).",
             MetricType::Gauge);
  MetricFamily events =
      Family("cgacct_group_memory_events_total",
             "memory.events of a group (hierarchical: the group and its "
             "descendants), by event.",
             MetricType::Counter);
  // memory.high, .min, .low and .peak beside current and max (issue 26,
  // item 8: an SRE comparing usage to memory.high had to call GetStats).
  MetricFamily high =
      Family("cgacct_group_memory_high_bytes",
             "memory.high of a group; +Inf when it is \"max\" (no limit).",
             MetricType::Gauge);
  MetricFamily min = Family(
      "cgacct_group_memory_min_bytes",
      "memory.min of a group (hard protection; +Inf when it is \"max\").",
      MetricType::Gauge);
  MetricFamily low = Family(
      "cgacct_group_memory_low_bytes",
      "memory.low of a group (best-effort protection; +Inf when it is "
      "\"max\").",
      MetricType::Gauge);
  MetricFamily peak =
      Family("cgacct_group_memory_peak_bytes",
             "memory.peak of a group: the highest memory.current since it "
             "was created (or since the daemon started).",
             MetricType::Gauge);
  const uint64_t page_size = engine_.page_size_bytes();
  const uint64_t page_counter_max = engine_.page_counter_max();
  const auto limit_bytes = [&](uint64_t pages) {
    return pages >= page_counter_max
               ? std::numeric_limits<double>::infinity()
               : static_cast<double>(pages * page_size);
  };
  uint64_t exported = 0;
  uint64_t dropped_max_groups = 0;
  // Level by level (the shallowest groups first), so the work is bounded by
  // the groups within the depth rather than by the whole tree: past the cap
  // a group is only counted, and listed for its children.
  std::vector<std::string> level = {"/"};
  for (int depth = 0; depth <= options_.group_depth && !level.empty();
       ++depth) {
    std::vector<std::string> next;
    for (const std::string& path : level) {
      if (exported < options_.max_groups) {
        // kNone: a scrape must not force an rstat flush; memory.current,
        // memory.max and memory.events are exact without one.
        absl::StatusOr<GroupStats> stats =
            engine_.GetStats(path, FlushMode::kNone);
        if (!stats.ok()) continue;  // deleted since it was listed
        ++exported;
        current.metric.push_back(GaugeMetric(
            static_cast<double>(stats->memory_current_pages * page_size),
            {{"path", path}}));
        max.metric.push_back(
            GaugeMetric(limit_bytes(stats->limits.max_pages), {{"path", path}}));
        high.metric.push_back(GaugeMetric(limit_bytes(stats->limits.high_pages),
                                          {{"path", path}}));
        min.metric.push_back(
            GaugeMetric(limit_bytes(stats->limits.min_pages), {{"path", path}}));
        low.metric.push_back(
            GaugeMetric(limit_bytes(stats->limits.low_pages), {{"path", path}}));
        peak.metric.push_back(GaugeMetric(
            static_cast<double>(stats->memory_peak_pages * page_size),
            {{"path", path}}));
        for (const MemoryEventField& field : kMemoryEventFields) {
          // sock_throttled is always 0 here (no socket memory): not
          // exported. oom_group_kill is: memory.oom.group kills.
          if (field.value == &MemoryEvents::sock_throttled) continue;
          events.metric.push_back(
              CounterMetric(static_cast<double>(stats->events.*field.value),
                            {{"event", field.name}, {"path", path}}));
        }
      } else {
        ++dropped_max_groups;
      }
      if (depth < options_.group_depth) {
        absl::StatusOr<std::vector<std::string>> children =
            engine_.ListGroups(path, /*recursive=*/false);
        if (!children.ok()) continue;
        for (std::string& child : *children) next.push_back(std::move(child));
      }
    }
    level = std::move(next);
  }
  out.push_back(std::move(current));
  out.push_back(std::move(max));
  out.push_back(std::move(high));
  out.push_back(std::move(min));
  out.push_back(std::move(low));
  out.push_back(std::move(peak));
  out.push_back(std::move(events));

  // Groups created or deleted during the walk can make the difference
  // negative: clamp.
  const uint64_t seen = exported + dropped_max_groups;
  const uint64_t dropped_depth = nr_groups > seen ? nr_groups - seen : 0;
  out.push_back(DroppedFamily(dropped_depth, dropped_max_groups));

  if (dropped_max_groups > 0 && options_.on_first_drop &&
      !drop_reported_.exchange(true, std::memory_order_relaxed)) {
    options_.on_first_drop(absl::StrCat(
        "/metrics: ", dropped_max_groups, " of ", seen,
        " groups within --metrics_group_depth=", options_.group_depth,
        " get no per-group series (--metrics_max_groups=", options_.max_groups,
        "); cgacct_group_series_dropped{reason=\"max_groups\"} counts them "
        "on every scrape; this is said once"));
  }
}

}  // namespace cgacct
