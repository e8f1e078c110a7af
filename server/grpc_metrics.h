// The standard gRPC server metrics (docs/DESIGN.md §5), as go-grpc-prometheus
// and java-grpc-prometheus name them, so stock gRPC dashboards and alerts
// work on cgacctd:
//
//   grpc_server_started_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_handled_total{grpc_service,grpc_method,grpc_type,grpc_code}
//   grpc_server_handling_seconds{grpc_service,grpc_method,grpc_type} (histogram)
//   grpc_server_msg_received_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_msg_sent_total{grpc_service,grpc_method,grpc_type}
//
// grpc_type is unary, client_stream, server_stream or bidi_stream; grpc_code
// is the status code as Go's codes.Code prints it ("OK", "Canceled",
// "InvalidArgument", ...). Recorded by a gRPC server interceptor
// (grpc::experimental), so every registered service is covered: cgacct's, and
// grpc.health.v1 and server reflection. These sit beside the cgacct_grpc_*
// families (server/metrics.h), which stay as they are.
//
// Recording, as in server/metrics.h: relaxed atomic adds on the calling
// thread's shard; the method is looked up once per call in a table built at
// construction (read-only after it, so without a lock).
#ifndef CGACCT_SERVER_GRPC_METRICS_H_
#define CGACCT_SERVER_GRPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status_code_enum.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/metrics.h"

namespace cgacct {

// One RPC method the metrics track.
struct GrpcMethodInfo {
  std::string service;  // "cgacct.v1.Accounting"
  std::string method;   // "Charge"
  // "unary", "client_stream", "server_stream" or "bidi_stream".
  const char* type = "unary";
};

// The methods of cgacct.v1.Accounting (from its generated descriptor),
// grpc.health.v1.Health (Check, Watch) and
// grpc.reflection.v1alpha.ServerReflection (ServerReflectionInfo).
std::vector<GrpcMethodInfo> CgacctdGrpcMethods();

// "OK", "Canceled", "Unknown", "InvalidArgument", ... (Go's codes.Code
// String(), which go-grpc-prometheus puts in grpc_code). Codes outside
// 0..16 print as "Unknown". Takes the number, not grpc::StatusCode: a value
// outside the enum cannot be held in it.
const char* GrpcCodeGoName(int code);

// The grpc_server_* families and the interceptor that records them.
//
// Thread safety: thread-safe; Record*() are lock-free relaxed adds and
// Collect() may run concurrently with them (per-counter atomicity).
class GrpcServerMetrics final : public prometheus::Collectable {
 public:
  // Most methods tracked; more in `methods` are ignored (not counted).
  static constexpr int kMaxMethods = 32;
  static constexpr int kNrCodes = 17;  // google.rpc.Code 0..16

  explicit GrpcServerMetrics(std::vector<GrpcMethodInfo> methods);
  GrpcServerMetrics(const GrpcServerMetrics&) = delete;
  GrpcServerMetrics& operator=(const GrpcServerMetrics&) = delete;

  // An interceptor factory for grpc::ServerBuilder::experimental()
  // .SetInterceptorCreators(). Calls of methods not in the table get no
  // interceptor. `this` must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

  // The method's index for a full name ("/cgacct.v1.Accounting/Charge"), or
  // -1 if it is not tracked.
  int MethodIndex(absl::string_view full_method) const;

  // Recording, by method index (0 <= method < number of methods).
  void RecordStarted(int method);
  void RecordReceived(int method);
  void RecordSent(int method);
  void RecordHandled(int method, grpc::StatusCode code, absl::Duration took);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct alignas(kCacheLineBytes) Shard {
    std::atomic<uint64_t> started[kMaxMethods];
    std::atomic<uint64_t> received[kMaxMethods];
    std::atomic<uint64_t> sent[kMaxMethods];
    std::atomic<uint64_t> handled[kMaxMethods][kNrCodes];
  };
  static_assert(sizeof(Shard) % kCacheLineBytes == 0,
                "shards must not share cache lines");

  using Counters = std::atomic<uint64_t>[kMaxMethods];
  uint64_t Sum(Counters Shard::*counters, int method) const;

  // Constant after construction.
  std::vector<GrpcMethodInfo> methods_;
  absl::flat_hash_map<std::string, int> index_;  // "/service/method" -> i
  std::vector<std::unique_ptr<LatencyHistogram>> latency_;  // per method

  std::unique_ptr<std::array<Shard, kNrMetricShards>> shards_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_GRPC_METRICS_H_
