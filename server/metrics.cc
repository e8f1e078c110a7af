#include "server/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"

namespace cgacct {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr double kNanosPerSecond = 1e9;

std::atomic<int> next_thread_shard{0};

void AtomicMax(std::atomic<uint64_t>& slot, uint64_t value) {
  // Relaxed: a statistic; the CAS only runs when a new maximum is seen.
  uint64_t current = slot.load(std::memory_order_relaxed);
  while (value > current && !slot.compare_exchange_weak(
                                current, value, std::memory_order_relaxed)) {
  }
}

ClientMetric CounterMetric(double value,
                           std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.counter.value = value;
  return metric;
}

ClientMetric GaugeMetric(double value,
                         std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  return metric;
}


// cgacct_group_series_dropped{reason}: groups a scrape left out.
MetricFamily DroppedFamily(uint64_t by_depth, uint64_t by_max_groups) {
  MetricFamily dropped = Family(
      "cgacct_group_series_dropped",
      "Groups this scrape exported no per-group series for, by reason: "
      "depth (deeper than --metrics_group_depth) or max_groups (past "
      "--metrics_max_groups).",
      MetricType::Gauge);
  dropped.metric.push_back(
      GaugeMetric(static_cast<double>(by_depth), {{"reason", "depth"}}));
  dropped.metric.push_back(GaugeMetric(static_cast<double>(by_max_groups),
                                       {{"reason", "max_groups"}}));
  return dropped;
}

// Why `listen` ("HOST:PORT", "[V6]:PORT" or "PORT") cannot be bound: the
// errno of a probe bind (with SO_REUSEADDR, as civetweb binds), or "invalid
// address". The probe socket is closed at once.
std::string WhyCannotBind(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host =
      colon == std::string::npos ? std::string() : listen.substr(0, colon);
  const std::string port =
      colon == std::string::npos ? listen : listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                  &found) != 0 ||
      found == nullptr) {
    return "invalid address (want HOST:PORT)";
  }
  std::string why = "cannot bind (civetweb refused it)";
  const int fd = socket(found->ai_family, SOCK_STREAM, 0);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
      why = errno == EADDRINUSE ? "address already in use (another cgacctd, "
                                  "or another program, has the port)"
                                : std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return why;
}

}  // namespace

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

ClientMetric HistogramMetric(const LatencyHistogram::Snapshot& snapshot,
                             std::vector<ClientMetric::Label> labels) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.histogram.sample_count = snapshot.count;
  metric.histogram.sample_sum =
      static_cast<double>(snapshot.sum_ns) / kNanosPerSecond;
  uint64_t cumulative = 0;
  for (int i = 0; i <= snapshot.nr_finite; ++i) {
    cumulative += snapshot.buckets[i];
    ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < snapshot.nr_finite
                             ? snapshot.upper_bound_seconds(i)
                             : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back(bucket);
  }
  return metric;
}

int ThisThreadMetricShard() {
  // Relaxed: only uniqueness of the ticket matters, not ordering.
  thread_local const int shard =
      next_thread_shard.fetch_add(1, std::memory_order_relaxed) %
      kNrMetricShards;
  return shard;
}

// ---------------------------------------------------------------------------
// LatencyHistogram

int LatencyHistogram::BucketFor(uint64_t ns) {
  // Round up to whole microseconds so that bucket i holds (2^(i-1), 2^i] µs.
  const uint64_t us = ns / 1000 + (ns % 1000 != 0 ? 1 : 0);
  if (us <= 1) return 0;
  const int bucket = 64 - __builtin_clzll(us - 1);  // ceil(log2(us))
  return std::min(bucket, kNrFiniteBuckets);
}

double LatencyHistogram::UpperBoundSeconds(int i) {
  // Divided, not multiplied by 1e-6: the quotient is correctly rounded, so
  // the bound prints as the decimal it is (le="0.008", never
  // "0.008000000000000002").
  return static_cast<double>(uint64_t{1} << i) / 1e6;
}

namespace {

// kHoldNanos bounds: 1-2-5 from 50 ns to 1 s.
constexpr uint64_t kHoldBoundsNs[LatencyHistogram::kNrHoldFiniteBuckets] = {
    50,         100,        200,        500,        1'000,
    2'000,      5'000,      10'000,     20'000,     50'000,
    100'000,    200'000,    500'000,    1'000'000,  2'000'000,
    5'000'000,  10'000'000, 20'000'000, 50'000'000, 100'000'000,
    200'000'000, 500'000'000, 1'000'000'000};

}  // namespace

int LatencyHistogram::HoldBucketFor(uint64_t ns) {
  // The first bound >= ns; a binary search of 23 (5 compares).
  return static_cast<int>(std::lower_bound(std::begin(kHoldBoundsNs),
                                           std::end(kHoldBoundsNs), ns) -
                          std::begin(kHoldBoundsNs));
}

double LatencyHistogram::HoldUpperBoundSeconds(int i) {
  // Divided (see UpperBoundSeconds): le="5e-07", not 5.000000000000001e-07.
  return static_cast<double>(kHoldBoundsNs[i]) / 1e9;
}

uint64_t LatencyHistogram::ToNanos(absl::Duration d) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

void LatencyHistogram::RecordNanos(uint64_t ns) {
  Shard& shard = shards_[ThisThreadMetricShard()];
  // Relaxed: statistics (see the header's Memory ordering paragraph).
  const int bucket = scale_ == HistogramScale::kHoldNanos ? HoldBucketFor(ns)
                                                         : BucketFor(ns);
  shard.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  shard.sum_ns.fetch_add(ns, std::memory_order_relaxed);
  AtomicMax(shard.max_ns, ns);
}

LatencyHistogram::Snapshot LatencyHistogram::Collect() const {
  Snapshot snapshot;
  snapshot.scale = scale_;
  snapshot.nr_finite = nr_finite_buckets();
  for (const Shard& shard : shards_) {
    for (int i = 0; i < kNrBuckets; ++i) {
      const uint64_t n = shard.buckets[i].load(std::memory_order_relaxed);
      snapshot.buckets[i] += n;
      snapshot.count += n;
    }
    snapshot.sum_ns += shard.sum_ns.load(std::memory_order_relaxed);
    snapshot.max_ns =
        std::max(snapshot.max_ns, shard.max_ns.load(std::memory_order_relaxed));
  }
  return snapshot;
}

// ---------------------------------------------------------------------------
// RstatFlushObserver

int RstatFlushObserver::PolicySlot(FlushLockPolicy policy) {
  return std::min(static_cast<int>(policy), kNrPolicySlots - 1);
}

void RstatFlushObserver::OnFlushLockHold(const FlushLockHold& hold) {
  const int slot = PolicySlot(hold.policy);
  lock_hold_[slot].Record(hold.hold);
  lock_wait_[slot].Record(hold.wait);
}

void RstatFlushObserver::OnFlushDone(absl::Duration duration, int cpus_walked,
                                     int groups_folded) {
  // CPUs walked and flushes are counted by the engine (EngineCounters).
  flush_duration_.Record(duration);
}

void RstatFlushObserver::OnReclaimDone(absl::Duration cycle, uint64_t scanned,
                                       uint64_t stolen, bool full_walk) {
  reclaim_cycle_[full_walk ? 1 : 0].Record(cycle);
  ReclaimShard& shard = reclaim_pages_[ThisThreadMetricShard()];
  // Relaxed: statistics (see the header's Memory ordering paragraph).
  shard.scanned.fetch_add(scanned, std::memory_order_relaxed);
  shard.stolen.fetch_add(stolen, std::memory_order_relaxed);
}

uint64_t RstatFlushObserver::reclaim_scanned() const {
  uint64_t total = 0;
  for (const ReclaimShard& shard : reclaim_pages_)
    total += shard.scanned.load(std::memory_order_relaxed);
  return total;
}

uint64_t RstatFlushObserver::reclaim_stolen() const {
  uint64_t total = 0;
  for (const ReclaimShard& shard : reclaim_pages_)
    total += shard.stolen.load(std::memory_order_relaxed);
  return total;
}

const LatencyHistogram& RstatFlushObserver::lock_hold(
    FlushLockPolicy policy) const {
  return lock_hold_[PolicySlot(policy)];
}

const LatencyHistogram& RstatFlushObserver::lock_wait(
    FlushLockPolicy policy) const {
  return lock_wait_[PolicySlot(policy)];
}

// ---------------------------------------------------------------------------
// RpcMetrics

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kCreateGroup:
      return "CreateGroup";
    case RpcMethod::kDeleteGroup:
      return "DeleteGroup";
    case RpcMethod::kListGroups:
      return "ListGroups";
    case RpcMethod::kSetLimits:
      return "SetLimits";
    case RpcMethod::kCharge:
      return "Charge";
    case RpcMethod::kUncharge:
      return "Uncharge";
    case RpcMethod::kChargeBatch:
      return "ChargeBatch";
    case RpcMethod::kChargeStream:
      return "ChargeStream";
    case RpcMethod::kGetStats:
      return "GetStats";
    case RpcMethod::kReclaim:
      return "Reclaim";
    case RpcMethod::kWatchEvents:
      return "WatchEvents";
    case RpcMethod::kGetEngineInfo:
      return "GetEngineInfo";
    case RpcMethod::kOpenSession:
      return "OpenSession";
    case RpcMethod::kCloseSession:
      return "CloseSession";
    case RpcMethod::kGetSession:
      return "GetSession";
    case RpcMethod::kSessionStream:
      return "SessionStream";
  }
  return "unknown";
}

std::string GrpcCodeName(grpc::StatusCode code) {
  // gRPC's and Abseil's codes share their numbers (google.rpc.Code).
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

namespace {
int CodeSlot(grpc::StatusCode code) {
  const int i = static_cast<int>(code);
  return (i >= 0 && i < RpcMetrics::kNrCodes) ? i : grpc::StatusCode::UNKNOWN;
}
}  // namespace

void RpcMetrics::Record(RpcMethod method, grpc::StatusCode code,
                        absl::Duration latency) {
  const int m = static_cast<int>(method);
  // Relaxed: statistics (see the header's Memory ordering paragraph).
  shards_[ThisThreadMetricShard()].handled[m][CodeSlot(code)].fetch_add(
      1, std::memory_order_relaxed);
  latency_[m].Record(latency);
}

void RpcMetrics::RecordChargeRejected() {
  shards_[ThisThreadMetricShard()].charges_rejected.fetch_add(
      1, std::memory_order_relaxed);
}

void RpcMetrics::RecordShed(ShedReason reason) {
  shards_[ThisThreadMetricShard()]
      .shed[static_cast<int>(reason)]
      .fetch_add(1, std::memory_order_relaxed);
}

uint64_t RpcMetrics::shed(ShedReason reason) const {
  uint64_t total = 0;
  for (const HandledShard& shard : shards_) {
    total += shard.shed[static_cast<int>(reason)].load(
        std::memory_order_relaxed);
  }
  return total;
}

uint64_t RpcMetrics::handled(RpcMethod method, grpc::StatusCode code) const {
  const int m = static_cast<int>(method);
  const int c = CodeSlot(code);
  uint64_t total = 0;
  for (const HandledShard& shard : shards_) {
    total += shard.handled[m][c].load(std::memory_order_relaxed);
  }
  return total;
}

LatencyHistogram::Snapshot RpcMetrics::latency(RpcMethod method) const {
  return latency_[static_cast<int>(method)].Collect();
}

uint64_t RpcMetrics::charges_rejected() const {
  uint64_t total = 0;
  for (const HandledShard& shard : shards_) {
    total += shard.charges_rejected.load(std::memory_order_relaxed);
  }
  return total;
}

// ---------------------------------------------------------------------------
// MetricsCollector

MetricsCollector::MetricsCollector(Engine& engine,
                                   const RstatFlushObserver& flush,
                                   const RpcMetrics& rpc,
                                   MetricsOptions options)
    : engine_(engine), flush_(flush), rpc_(rpc), options_(options) {}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  const EngineCounters counters = engine_.GetCounters();
  const EngineInfo info = engine_.GetInfo();
  std::vector<MetricFamily> out;

  // rstat flush lock (the irqs-off tracer's view, docs/DESIGN.md §9.3).
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

  // Reclaim ("restore incremental cgroup iteration", docs/DESIGN.md §10.1).
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
        "Charge requests by result: ok, oom (RESOURCE_EXHAUSTED), rejected "
        "(any other error: bad input, missing group, request_id conflict); "
        "a request_id replay is not counted again.",
        MetricType::Counter);
    charges.metric.push_back(CounterMetric(
        static_cast<double>(counters.charges_ok), {{"result", "ok"}}));
    charges.metric.push_back(CounterMetric(
        static_cast<double>(counters.charges_oom), {{"result", "oom"}}));
    // ok and oom are counted by the engine (once per charge it applies or
    // refuses at a limit), rejected by the service alone (RpcMetrics): each
    // charge request is in exactly one series.
    charges.metric.push_back(
        CounterMetric(static_cast<double>(rpc_.charges_rejected()),
                      {{"result", "rejected"}}));
    out.push_back(std::move(charges));
  }
  counter_family("cgacct_state_store_errors_total",
                 "request_id answers the state store failed to persist "
                 "(answered, but not replayable after a restart).",
                 rpc_.state_store_errors());
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

  // gRPC server.
  {
    MetricFamily handled = Family("cgacct_grpc_server_handled_total",
                                  "RPCs completed, by method and status code.",
                                  MetricType::Counter);
    MetricFamily seconds = Family("cgacct_grpc_server_handling_seconds",
                                  "RPC handling time in the server, by method.",
                                  MetricType::Histogram);
    for (int m = 0; m < kNrRpcMethods; ++m) {
      const RpcMethod method = static_cast<RpcMethod>(m);
      const char* method_name = RpcMethodName(method);
      for (int c = 0; c < RpcMetrics::kNrCodes; ++c) {
        const grpc::StatusCode code = static_cast<grpc::StatusCode>(c);
        const uint64_t n = rpc_.handled(method, code);
        // OK is always exported (so rates start at zero); other codes once
        // seen, which keeps the series count near the codes in use.
        if (n == 0 && code != grpc::StatusCode::OK) continue;
        handled.metric.push_back(CounterMetric(
            static_cast<double>(n),
            {{"code", GrpcCodeName(code)}, {"method", method_name}}));
      }
      seconds.metric.push_back(
          HistogramMetric(rpc_.latency(method), {{"method", method_name}}));
    }
    out.push_back(std::move(handled));
    out.push_back(std::move(seconds));
  }
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

  if (options_.group_depth > 0) {
    CollectGroups(out, info.nr_groups);
  } else {
    // Per-group series off: every group is left out by depth.
    out.push_back(DroppedFamily(info.nr_groups, 0));
  }
  return out;
}

void MetricsCollector::CollectGroups(std::vector<MetricFamily>& out,
                                     uint64_t nr_groups) const {
  MetricFamily current =
      Family("cgacct_group_memory_current_bytes",
             "memory.current of a group (pages in per-CPU stocks included).",
             MetricType::Gauge);
  MetricFamily max = Family(
      "cgacct_group_memory_max_bytes",
      "memory.max of a group; +Inf when it is \"max\" (no limit).",
      MetricType::Gauge);
  MetricFamily events = Family(
      "cgacct_group_memory_events_total",
      "memory.events of a group (hierarchical: the group and its "
      "descendants), by event.",
      MetricType::Counter);
  const uint64_t page_size = engine_.page_size_bytes();
  const uint64_t page_counter_max = engine_.page_counter_max();
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
        max.metric.push_back(GaugeMetric(
            stats->limits.max_pages >= page_counter_max
                ? std::numeric_limits<double>::infinity()
                : static_cast<double>(stats->limits.max_pages * page_size),
            {{"path", path}}));
        for (const MemoryEventField& field : kMemoryEventFields) {
          // oom_group_kill and sock_throttled are always 0 here (no
          // memory.oom.group, no socket memory): not exported.
          if (field.value == &MemoryEvents::oom_group_kill ||
              field.value == &MemoryEvents::sock_throttled) {
            continue;
          }
          events.metric.push_back(CounterMetric(
              static_cast<double>(stats->events.*field.value),
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
        " get no per-group series (--metrics_max_groups=",
        options_.max_groups,
        "); cgacct_group_series_dropped{reason=\"max_groups\"} counts them "
        "on every scrape; this is said once"));
  }
}

std::string SerializeMetrics(const prometheus::Collectable& collectable) {
  return prometheus::TextSerializer().Serialize(collectable.Collect());
}

// ---------------------------------------------------------------------------
// MetricsExposer

MetricsExposer::MetricsExposer(
    std::unique_ptr<prometheus::Exposer> exposer,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    int port)
    : exposer_(std::move(exposer)),
      collectables_(std::move(collectables)),
      port_(port) {}

MetricsExposer::~MetricsExposer() = default;

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& listen,
    std::shared_ptr<prometheus::Collectable> collectable,
    MetricsExposerOptions options) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // civetweb serves one connection per worker thread, and a worker waits
    // up to request_timeout_ms for a slow client's request: with 8 workers
    // and 5 s, 16 half-open connections held a scrape for ~10 s. 32 workers
    // serve a scrape at once behind up to 31 slow connections; past that a
    // scrape waits at most 2 s per 32 of them.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", listen, "num_threads",
        std::to_string(kMetricsHttpThreads), "request_timeout_ms",
        std::to_string(kMetricsHttpRequestTimeoutMs)});
    // No linger_timeout_ms: civetweb's default closes gracefully. With 0
    // (SO_LINGER 0) the close reset the connection while a large body was
    // still in flight: clients that do not ask for gzip lost scrapes above
    // ~2,000 groups ("Connection reset by peer").
  } catch (const std::exception& e) {
    // civetweb reports a taken port or a bad address by throwing, with a
    // message about its own internals ("null context when constructing
    // CivetServer"); say what the operator can act on instead.
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", listen, ": ", WhyCannotBind(listen),
        " (--metrics_listen)"));
  }
  if (!options.basic_auth_password.empty()) {
    // Registered before any collectable, so /metrics never answers without
    // it. Every byte compared: the time does not tell how much matched.
    exposer->RegisterAuth(
        [password = options.basic_auth_password](const std::string&,
                                                 const std::string& given) {
          unsigned char diff = given.size() == password.size() ? 0 : 1;
          for (size_t i = 0; i < password.size(); ++i) {
            diff |= static_cast<unsigned char>(
                password[i] ^ (given.empty() ? 0 : given[i % given.size()]));
          }
          return diff == 0;
        },
        "cgacct");
  }
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  collectables.push_back(std::move(collectable));
  for (auto& extra : options.extra_collectables)
    collectables.push_back(std::move(extra));
  for (const auto& c : collectables) exposer->RegisterCollectable(c);
  const std::vector<int> ports = exposer->GetListeningPorts();
  const int port = ports.empty() ? 0 : ports.front();
  return std::unique_ptr<MetricsExposer>(
      new MetricsExposer(std::move(exposer), std::move(collectables), port));
}

}  // namespace cgacct
