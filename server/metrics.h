// Prometheus metrics of cgacctd (docs/DESIGN.md §5).
//
// Two halves, after Envoy's stats model and prometheus-cpp's Collectable:
//  - Recording (hot path): LatencyHistogram, RstatFlushObserver and RpcMetrics
//    keep plain std::atomic<uint64_t> counters in pre-allocated,
//    cache-line-aligned shards, one shard per thread (modulo kNrMetricShards).
//    Recording is a few relaxed fetch_adds on the calling thread's own shard:
//    no prometheus-cpp call, no mutex, no allocation.
//  - Exposition (scrape): MetricsCollector::Collect() sums the shards, reads
//    EngineCounters/EngineInfo and per-group memory.current, and builds every
//    family at scrape time. MetricsExposer serves it on /metrics.
//
// Thread safety: every class here is thread-safe. Recording may run
// concurrently with Collect(); a scrape sees each counter at some point during
// the scrape (per-counter atomicity, not a consistent cut across counters).
//
// Memory ordering: every counter is a monotonic statistic read by nobody on
// the hot path, so all accesses are std::memory_order_relaxed; a scrape needs
// no ordering with the events counted.
#ifndef CGACCT_SERVER_METRICS_H_
#define CGACCT_SERVER_METRICS_H_

#include <grpcpp/support/status_code_enum.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/observer.h"
#include "engine/types.h"
#include "prometheus/collectable.h"
#include "server/limits.h"
#include "prometheus/metric_family.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace cgacct {

// Shards per recorder. Threads beyond this share shards (still correct, the
// adds are atomic; only cache-line ping-pong comes back).
inline constexpr int kNrMetricShards = 64;

// The calling thread's shard in [0, kNrMetricShards): assigned round-robin on
// the thread's first call, then fixed. Thread-safe, lock-free.
int ThisThreadMetricShard();

// Bucket layouts of a LatencyHistogram (docs/DESIGN.md §6.1).
enum class HistogramScale : uint8_t {
  // Upper bounds 2^0 .. 2^20 µs (~1.05 s), then +Inf: RPCs, flushes, reclaim.
  kPow2Micros,
  // Upper bounds in a 1-2-5 series from 50 ns to 1 s (50 ns, 100 ns, 200 ns,
  // 500 ns, 1 µs ... 500 ms, 1 s), then +Inf: flush-lock holds and waits,
  // where one per_cpu hold is a fraction of a microsecond.
  kHoldNanos,
};

// A latency histogram with fixed buckets (HistogramScale) plus +Inf,
// recorded lock-free into per-thread shards.
//
// Thread safety: thread-safe; Record() is wait-free except for the running
// maximum (a CAS loop only when a new per-shard maximum is seen).
class LatencyHistogram {
 public:
  // Finite buckets of kPow2Micros and of kHoldNanos.
  static constexpr int kNrFiniteBuckets = 21;
  static constexpr int kNrHoldFiniteBuckets = 23;
  // Storage for the larger layout's finite buckets and +Inf.
  static constexpr int kNrBuckets = kNrHoldFiniteBuckets + 1;

  // Summed over shards at read time. `buckets` are per bucket, not
  // cumulative; count is their sum. Buckets [0, nr_finite) are finite,
  // bucket nr_finite is +Inf, the rest are unused.
  struct Snapshot {
    std::array<uint64_t, kNrBuckets> buckets{};
    HistogramScale scale = HistogramScale::kPow2Micros;
    int nr_finite = kNrFiniteBuckets;
    // Upper bound of finite bucket i in seconds (the layout's).
    double upper_bound_seconds(int i) const {
      return scale == HistogramScale::kHoldNanos ? HoldUpperBoundSeconds(i)
                                                 : UpperBoundSeconds(i);
    }
    uint64_t count = 0;
    uint64_t sum_ns = 0;
    uint64_t max_ns = 0;
  };

  LatencyHistogram() : scale_(HistogramScale::kPow2Micros) {}
  explicit LatencyHistogram(HistogramScale scale) : scale_(scale) {}
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  // Records one observation. Negative durations count as 0.
  void Record(absl::Duration d) { RecordNanos(ToNanos(d)); }
  void RecordNanos(uint64_t ns);

  Snapshot Collect() const;

  HistogramScale scale() const { return scale_; }
  int nr_finite_buckets() const {
    return scale_ == HistogramScale::kHoldNanos ? kNrHoldFiniteBuckets
                                                : kNrFiniteBuckets;
  }

  // kPow2Micros: bucket index for a value in nanoseconds, the smallest i
  // with ns <= 2^i µs, or kNrFiniteBuckets (+Inf).
  static int BucketFor(uint64_t ns);
  // kPow2Micros: upper bound of finite bucket i in seconds.
  static double UpperBoundSeconds(int i);
  // kHoldNanos: the smallest i with ns <= bound i, or kNrHoldFiniteBuckets
  // (+Inf); and bound i in seconds.
  static int HoldBucketFor(uint64_t ns);
  static double HoldUpperBoundSeconds(int i);

  static uint64_t ToNanos(absl::Duration d);

 private:
  struct alignas(kCacheLineBytes) Shard {
    std::atomic<uint64_t> buckets[kNrBuckets];
    std::atomic<uint64_t> sum_ns;
    std::atomic<uint64_t> max_ns;
  };
  static_assert(sizeof(Shard) % kCacheLineBytes == 0,
                "shards must not share cache lines");

  const HistogramScale scale_;
  std::array<Shard, kNrMetricShards> shards_{};
};

// The EngineObserver of cgacctd: rstat flush-lock holds and waits (per
// policy) and flush durations, recorded into LatencyHistograms. Called by the
// engine once per lock hold (once per CPU per flush with the per_cpu policy,
// so hundreds of times per flush on a big machine): it only does relaxed
// atomic adds on the calling thread's shard. Also records reclaim cycles
// (duration per walk kind, pages scanned and stolen) the same way.
//
// Thread safety: thread-safe. Must outlive the Engine it is given to.
class RstatFlushObserver final : public EngineObserver {
 public:
  // Policies with their own histograms; FlushLockPolicy values at or above
  // this are folded into the last slot.
  static constexpr int kNrPolicySlots = 4;

  RstatFlushObserver() = default;

  void OnFlushLockHold(const FlushLockHold& hold) override;
  void OnFlushDone(absl::Duration duration, int cpus_walked,
                   int groups_folded) override;
  void OnReclaimDone(absl::Duration cycle, uint64_t scanned, uint64_t stolen,
                     bool full_walk) override;

  // Histogram of flush-lock hold times for `policy`.
  const LatencyHistogram& lock_hold(FlushLockPolicy policy) const;
  // Histogram of flush-lock acquisition waits for `policy`.
  const LatencyHistogram& lock_wait(FlushLockPolicy policy) const;
  // Histogram of whole subtree flushes (css_rstat_flush()).
  const LatencyHistogram& flush_duration() const { return flush_duration_; }
  // Histogram of reclaim cycles (try_to_free_mem_cgroup_pages()) that used
  // only partial walks (full_walk false) or walked whole subtrees (true).
  const LatencyHistogram& reclaim_cycle(bool full_walk) const {
    return reclaim_cycle_[full_walk ? 1 : 0];
  }
  // Pages scanned and reclaimed by all reclaim cycles, summed over shards.
  uint64_t reclaim_scanned() const;
  uint64_t reclaim_stolen() const;

 private:
  static int PolicySlot(FlushLockPolicy policy);

  struct alignas(kCacheLineBytes) ReclaimShard {
    std::atomic<uint64_t> scanned;
    std::atomic<uint64_t> stolen;
  };
  static_assert(sizeof(ReclaimShard) % kCacheLineBytes == 0,
                "shards must not share cache lines");

  // Holds and waits on the 1-2-5 scale from 50 ns: a per_cpu hold is a
  // fraction of a microsecond, a whole hold on 400 CPUs tens of them.
  static_assert(kNrPolicySlots == 4, "one initialiser per policy slot");
  std::array<LatencyHistogram, kNrPolicySlots> lock_hold_{
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos)};
  std::array<LatencyHistogram, kNrPolicySlots> lock_wait_{
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos),
      LatencyHistogram(HistogramScale::kHoldNanos)};
  LatencyHistogram flush_duration_;
  std::array<LatencyHistogram, 2> reclaim_cycle_;  // [partial, full]
  std::array<ReclaimShard, kNrMetricShards> reclaim_pages_{};
};

// The RPCs of cgacct.v1.Accounting, as metric label values.
enum class RpcMethod : uint8_t {
  kCreateGroup,
  kDeleteGroup,
  kListGroups,
  kSetLimits,
  kCharge,
  kUncharge,
  kChargeBatch,
  kChargeStream,
  kGetStats,
  kReclaim,
  kWatchEvents,
  kGetEngineInfo,
  kOpenSession,
  kCloseSession,
  kGetSession,
  kSessionStream,
};
inline constexpr int kNrRpcMethods = 16;

// "CreateGroup", ... (the proto method name).
const char* RpcMethodName(RpcMethod method);
// "OK", "INVALID_ARGUMENT", ... (the google.rpc.Code name, as
// absl::StatusCodeToString() spells it; "UNKNOWN" outside the enum).
std::string GrpcCodeName(grpc::StatusCode code);

// A family with no metrics yet, for Collectables building their scrape.
prometheus::MetricFamily Family(std::string name, std::string help,
                                prometheus::MetricType type);
// A Prometheus histogram of `snapshot`: cumulative bucket counts at its
// bounds (in seconds) plus +Inf, sum in seconds. Shared by every collector
// that exports a LatencyHistogram.
prometheus::ClientMetric HistogramMetric(
    const LatencyHistogram::Snapshot& snapshot,
    std::vector<prometheus::ClientMetric::Label> labels = {});

// Per-method, per-code handled counts and per-method handling latency of the
// gRPC service, plus the charges it rejects. Recorded by AccountingService on
// every call.
//
// Thread safety: thread-safe; Record*() are lock-free relaxed adds on the
// calling thread's shard.
class RpcMetrics {
 public:
  static constexpr int kNrCodes = 17;  // google.rpc.Code 0..16

  RpcMetrics() = default;
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // One finished call of `method` with final `code`, `latency` after the
  // handler was entered. Codes outside 0..16 count as UNKNOWN.
  void Record(RpcMethod method, grpc::StatusCode code, absl::Duration latency);
  // One charge (a Charge, or a charge op of ChargeBatch/ChargeStream) the
  // service answered with an error other than RESOURCE_EXHAUSTED, whichever
  // layer found it (the service's checks, which are the engine's exported
  // ones, or the engine). The only count behind
  // cgacct_charges_total{result="rejected"}: EngineCounters::charges_rejected
  // is the engine's own view (it also counts the NOT_FOUND of a stale
  // GroupHandle that the service retries) and is not added to it.
  void RecordChargeRejected();
  // One write to the state store that failed after the engine applied the
  // change (a request-id entry not persisted: the call was answered, but a
  // retry after a restart would apply again).
  void RecordStateStoreError() {
    state_store_errors_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t state_store_errors() const {
    return state_store_errors_.load(std::memory_order_relaxed);
  }
  // One call shed by a per-identity limit (server/limits.h); the only count
  // behind cgacct_shed_total{reason}.
  void RecordShed(ShedReason reason);

  uint64_t handled(RpcMethod method, grpc::StatusCode code) const;
  uint64_t shed(ShedReason reason) const;
  LatencyHistogram::Snapshot latency(RpcMethod method) const;
  uint64_t charges_rejected() const;

 private:
  struct alignas(kCacheLineBytes) HandledShard {
    std::atomic<uint64_t> handled[kNrRpcMethods][kNrCodes];
    std::atomic<uint64_t> charges_rejected;
    std::atomic<uint64_t> shed[kNrShedReasons];
  };
  static_assert(sizeof(HandledShard) % kCacheLineBytes == 0,
                "shards must not share cache lines");

  std::array<HandledShard, kNrMetricShards> shards_{};
  std::array<LatencyHistogram, kNrRpcMethods> latency_;
  std::atomic<uint64_t> state_store_errors_{0};  // rare: one shared counter
};

struct MetricsOptions {
  // Per-group series (cgacct_group_memory_current_bytes,
  // cgacct_group_memory_max_bytes, cgacct_group_memory_events_total) are
  // exported for groups with at most this many path segments ("/" has 0,
  // "/a" 1, "/a/b" 2). 0 turns them off; otherwise "/" is always included.
  // --metrics_group_depth.
  int group_depth = 3;
  // At most this many groups get per-group series per scrape (a cardinality
  // bound even for a wide tree): the shallowest first, then in path order
  // within a level. Groups left out are counted in
  // cgacct_group_series_dropped{reason="max_groups"}. --metrics_max_groups.
  size_t max_groups = 10000;
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
  // The per-group families and cgacct_group_series_dropped; `nr_groups`
  // from the same scrape's EngineInfo.
  void CollectGroups(std::vector<prometheus::MetricFamily>& out,
                     uint64_t nr_groups) const;

  // Constant after construction.
  Engine& engine_;
  const RstatFlushObserver& flush_;
  const RpcMetrics& rpc_;
  const MetricsOptions options_;
  // Set (once, by exchange) when on_first_drop has been called.
  mutable std::atomic<bool> drop_reported_{false};
};

// The Prometheus text exposition (format 0.0.4) of `collectable`, exactly
// what /metrics serves. Thread-safe if the collectable is.
std::string SerializeMetrics(const prometheus::Collectable& collectable);

// civetweb worker threads of the /metrics server, and how long one waits for
// a client's request before dropping the connection.
inline constexpr int kMetricsHttpThreads = 32;
inline constexpr int kMetricsHttpRequestTimeoutMs = 2000;

struct MetricsExposerOptions {
  // Served on /metrics after the main collectable (e.g. AuthMetrics).
  std::vector<std::shared_ptr<prometheus::Collectable>> extra_collectables;
  // Non-empty: /metrics requires HTTP basic auth with this password (any
  // user name; compared in constant time); 401 otherwise.
  std::string basic_auth_password;
};

// Serves a collectable on http://HOST:PORT/metrics (prometheus-cpp pull
// Exposer, kMetricsHttpThreads civetweb threads, each connection dropped
// after kMetricsHttpRequestTimeoutMs without a complete request).
//
// Thread safety: thread-safe after Start(); the destructor stops serving.
class MetricsExposer {
 public:
  // Binds `listen` ("HOST:PORT"; port 0 picks a free one) and registers
  // `collectable` on /metrics. Errors: UNAVAILABLE naming the address when
  // it cannot be bound and why ("address already in use"), in one line
  // (prometheus::Exposer throws; this catches it).
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& listen,
      std::shared_ptr<prometheus::Collectable> collectable,
      MetricsExposerOptions options = {});

  ~MetricsExposer();
  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  // The bound TCP port (the real one when 0 was asked for).
  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer,
                 std::vector<std::shared_ptr<prometheus::Collectable>>
                     collectables,
                 int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  // The Exposer keeps only weak_ptrs; this keeps the collectables alive.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  int port_ = 0;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_H_
