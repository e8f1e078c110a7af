// RpcMetrics: what the request pipeline counts per call (docs/DESIGN.md §5):
// handled calls by method and code, their latency, rejected charges, shed
// calls, state-store write failures. Lock-free (server/metrics/histogram.h).
#ifndef CGACCT_SERVER_METRICS_RPC_METRICS_H_
#define CGACCT_SERVER_METRICS_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/types.h"
#include "server/metrics/histogram.h"

namespace cgacct {

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
  kOpenPeakWatermark,
  kResetPeakWatermark,
  kReadPeakWatermark,
  kClosePeakWatermark,
  kGetClusterMap,
};
inline constexpr int kNrRpcMethods = 21;

// "CreateGroup", ... (the proto method name).
const char* RpcMethodName(RpcMethod method);
// "OK", "INVALID_ARGUMENT", ... (the google.rpc.Code name of `code`, as
// absl::StatusCodeToString() spells it; "UNKNOWN" outside 0..16).
std::string StatusCodeName(int code);

// Why a call was shed (the `reason` label of cgacct_shed_total, and the value
// of the `cgacct-shed` trailing metadata; server/pipeline/call_limiter.h).
enum class ShedReason : uint8_t {
  kStreamsPerIdentity,
  kInFlightPerIdentity,
  kInFlightBytesPerIdentity,
  kChargeStreamsPerIdentity,
};
inline constexpr int kNrShedReasons = 4;
// "streams_per_identity", "in_flight_per_identity",
// "in_flight_bytes_per_identity", "charge_streams_per_identity".
const char* ShedReasonName(ShedReason reason);

// Per-method, per-code handled counts and per-method handling latency of the
// cgacct.v1.Accounting calls, plus the charges the service rejects and the
// calls it sheds. Recorded once per call by the pipeline when it answers
// (server/pipeline/pipeline.h); the grpc_server_* families take these
// methods' handled counts and latencies from here too (one count per call,
// server/metrics/grpc_server_metrics.h).
//
// Thread safety: thread-safe; Record*() are lock-free relaxed adds on the
// calling thread's shard.
class RpcMetrics {
 public:
  static constexpr int kNrCodes = 17;  // google.rpc.Code 0..16

  RpcMetrics() = default;
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  // One finished call of `method` with final `code` (a google.rpc.Code
  // number: grpc::StatusCode and absl::StatusCode share them), `latency`
  // after the call entered the pipeline. Codes outside 0..16 count as
  // UNKNOWN.
  void Record(RpcMethod method, int code, absl::Duration latency);
  // One charge (a Charge, or a charge op of ChargeBatch/ChargeStream) the
  // service answered with an error other than RESOURCE_EXHAUSTED, whichever
  // layer found it (the service's checks, which are the engine's exported
  // ones, or the engine). The only count behind
  // cgacct_charges_total{result="rejected"}: EngineCounters::charges_rejected
  // is the engine's own view (it also counts the NOT_FOUND of a stale
  // GroupHandle that the service retries) and is not added to it.
  void RecordChargeRejected();
  // The answer to one charge: counted as rejected unless it is OK or
  // RESOURCE_EXHAUSTED (the engine counts those).
  void RecordChargeAnswer(const absl::Status& status) {
    if (!status.ok() && status.code() != absl::StatusCode::kResourceExhausted)
      RecordChargeRejected();
  }
  // One write to the state store that failed after the engine applied the
  // change (a request-id entry not persisted: the call was answered, but a
  // retry after a restart would apply again).
  void RecordStateStoreError() {
    state_store_errors_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t state_store_errors() const {
    return state_store_errors_.load(std::memory_order_relaxed);
  }
  // One read cancelled by the receive guard (server/rpc/receive_guard.h):
  // its connection received more than its pending reads may hold.
  void RecordOversizedReadCancelled() {
    oversized_reads_cancelled_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t oversized_reads_cancelled() const {
    return oversized_reads_cancelled_.load(std::memory_order_relaxed);
  }
  // One connection closed by a receive guard: it had read more than its
  // calls could account for (an HTTP/2 header block that does not end).
  void RecordFloodingConnectionClosed() {
    flooding_connections_closed_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t flooding_connections_closed() const {
    return flooding_connections_closed_.load(std::memory_order_relaxed);
  }
  // One call shed by a per-identity limit (server/pipeline/call_limiter.h); the
  // only count behind cgacct_shed_total{reason}.
  void RecordShed(ShedReason reason);

  uint64_t handled(RpcMethod method, int code) const;
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
  std::atomic<uint64_t> oversized_reads_cancelled_{0};  // rare, too
  std::atomic<uint64_t> flooding_connections_closed_{0};  // rare, too
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_RPC_METRICS_H_
