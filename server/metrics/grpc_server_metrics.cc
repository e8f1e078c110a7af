// The grpc_server_* counters (server/metrics/grpc_server_metrics.h).
#include "server/metrics/grpc_server_metrics.h"

#include <google/protobuf/descriptor.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.pb.h"

namespace cgacct {

std::vector<GrpcMethodInfo> CgacctdGrpcMethods() {
  std::vector<GrpcMethodInfo> methods;
  // Through a message of the file: referencing it links the generated
  // descriptor in (a lookup by name in the generated pool finds nothing in
  // a binary that uses no cgacct.v1 type).
  const google::protobuf::ServiceDescriptor* accounting =
      v1::ChargeRequest::descriptor()->file()->FindServiceByName("Accounting");
  if (accounting != nullptr) {
    for (int i = 0; i < accounting->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = accounting->method(i);
      const char* type =
          m->client_streaming()
              ? (m->server_streaming() ? "bidi_stream" : "client_stream")
              : (m->server_streaming() ? "server_stream" : "unary");
      GrpcMethodInfo info{accounting->full_name(), m->name(), type, {}};
      for (int r = 0; r < kNrRpcMethods; ++r) {
        if (m->name() == RpcMethodName(static_cast<RpcMethod>(r)))
          info.rpc_method = static_cast<RpcMethod>(r);
      }
      methods.push_back(std::move(info));
    }
  }
  // gRPC's own services: their descriptors are not in the generated pool
  // (the health service is built without protobuf's C++ classes).
  methods.push_back({"grpc.health.v1.Health", "Check", "unary", {}});
  methods.push_back({"grpc.health.v1.Health", "Watch", "server_stream", {}});
  methods.push_back({"grpc.reflection.v1alpha.ServerReflection",
                     "ServerReflectionInfo",
                     "bidi_stream",
                     {}});
  return methods;
}

const char* GrpcCodeGoName(int code) {
  static constexpr const char* kNames[GrpcServerMetrics::kNrCodes] = {
      "OK",
      "Canceled",
      "Unknown",
      "InvalidArgument",
      "DeadlineExceeded",
      "NotFound",
      "AlreadyExists",
      "PermissionDenied",
      "ResourceExhausted",
      "FailedPrecondition",
      "Aborted",
      "OutOfRange",
      "Unimplemented",
      "Internal",
      "Unavailable",
      "DataLoss",
      "Unauthenticated",
  };
  return (code >= 0 && code < GrpcServerMetrics::kNrCodes) ? kNames[code]
                                                           : "Unknown";
}

// make_unique<T>() value-initialises: every counter starts at 0.
GrpcServerMetrics::GrpcServerMetrics(std::vector<GrpcMethodInfo> methods)
    : shards_(std::make_unique<std::array<Shard, kNrMetricShards>>()) {
  if (methods.size() > static_cast<size_t>(kMaxMethods)) {
    methods.resize(kMaxMethods);
  }
  methods_ = std::move(methods);
  for (size_t i = 0; i < methods_.size(); ++i) {
    index_.emplace(
        absl::StrCat("/", methods_[i].service, "/", methods_[i].method),
        static_cast<int>(i));
    latency_.push_back(std::make_unique<LatencyHistogram>());
  }
}

int GrpcServerMetrics::MethodIndex(absl::string_view full_method) const {
  const auto it = index_.find(full_method);
  return it == index_.end() ? -1 : it->second;
}

// Relaxed everywhere: statistics (server/metrics/histogram.h, Memory
// ordering).
void GrpcServerMetrics::RecordStarted(int method) {
  (*shards_)[ThisThreadMetricShard()].started[method].fetch_add(
      1, std::memory_order_relaxed);
}

void GrpcServerMetrics::RecordReceived(int method) {
  (*shards_)[ThisThreadMetricShard()].received[method].fetch_add(
      1, std::memory_order_relaxed);
}

void GrpcServerMetrics::RecordSent(int method) {
  (*shards_)[ThisThreadMetricShard()].sent[method].fetch_add(
      1, std::memory_order_relaxed);
}

void GrpcServerMetrics::RecordHandled(int method, int code,
                                      absl::Duration took) {
  const int c = (code >= 0 && code < kNrCodes)
                    ? code
                    : static_cast<int>(absl::StatusCode::kUnknown);
  (*shards_)[ThisThreadMetricShard()].handled[method][c].fetch_add(
      1, std::memory_order_relaxed);
  latency_[method]->Record(took);
}

uint64_t GrpcServerMetrics::Sum(Counters Shard::*counters, int method) const {
  uint64_t total = 0;
  for (const Shard& shard : *shards_)
    total += (shard.*counters)[method].load(std::memory_order_relaxed);
  return total;
}

uint64_t GrpcServerMetrics::started(int method) const {
  return Sum(&Shard::started, method);
}

uint64_t GrpcServerMetrics::received(int method) const {
  return Sum(&Shard::received, method);
}

uint64_t GrpcServerMetrics::sent(int method) const {
  return Sum(&Shard::sent, method);
}

uint64_t GrpcServerMetrics::handled(int method, int code) const {
  uint64_t total = 0;
  for (const Shard& shard : *shards_)
    total += shard.handled[method][code].load(std::memory_order_relaxed);
  return total;
}

LatencyHistogram::Snapshot GrpcServerMetrics::latency(int method) const {
  return latency_[method]->Collect();
}

}  // namespace cgacct
