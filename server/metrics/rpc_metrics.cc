// RpcMetrics (server/metrics/rpc_metrics.h).
#include "server/metrics/rpc_metrics.h"

#include "absl/status/status.h"

namespace cgacct {

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
    case RpcMethod::kGetClusterMap:
      return "GetClusterMap";
    case RpcMethod::kOpenSession:
      return "OpenSession";
    case RpcMethod::kCloseSession:
      return "CloseSession";
    case RpcMethod::kGetSession:
      return "GetSession";
    case RpcMethod::kSessionStream:
      return "SessionStream";
    case RpcMethod::kOpenPeakWatermark:
      return "OpenPeakWatermark";
    case RpcMethod::kResetPeakWatermark:
      return "ResetPeakWatermark";
    case RpcMethod::kReadPeakWatermark:
      return "ReadPeakWatermark";
    case RpcMethod::kClosePeakWatermark:
      return "ClosePeakWatermark";
  }
  return "unknown";
}

std::string StatusCodeName(int code) {
  // gRPC's and Abseil's codes share their numbers (google.rpc.Code).
  if (code < 0 || code >= RpcMetrics::kNrCodes) return "UNKNOWN";
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

const char* ShedReasonName(ShedReason reason) {
  switch (reason) {
    case ShedReason::kStreamsPerIdentity:
      return "streams_per_identity";
    case ShedReason::kInFlightPerIdentity:
      return "in_flight_per_identity";
    case ShedReason::kInFlightBytesPerIdentity:
      return "in_flight_bytes_per_identity";
    case ShedReason::kChargeStreamsPerIdentity:
      return "charge_streams_per_identity";
  }
  return "unknown";
}

namespace {
constexpr int kUnknownCode = static_cast<int>(absl::StatusCode::kUnknown);
int CodeSlot(int code) {
  return (code >= 0 && code < RpcMetrics::kNrCodes) ? code : kUnknownCode;
}
}  // namespace

void RpcMetrics::Record(RpcMethod method, int code, absl::Duration latency) {
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
  shards_[ThisThreadMetricShard()].shed[static_cast<int>(reason)].fetch_add(
      1, std::memory_order_relaxed);
}

uint64_t RpcMetrics::shed(ShedReason reason) const {
  uint64_t total = 0;
  for (const HandledShard& shard : shards_) {
    total +=
        shard.shed[static_cast<int>(reason)].load(std::memory_order_relaxed);
  }
  return total;
}

uint64_t RpcMetrics::handled(RpcMethod method, int code) const {
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

}  // namespace cgacct
