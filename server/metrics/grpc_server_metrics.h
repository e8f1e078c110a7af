// The standard gRPC server metrics (docs/DESIGN.md §5), as go-grpc-prometheus
// and java-grpc-prometheus name them, so stock gRPC dashboards and alerts
// work on cgacctd:
//
//   grpc_server_started_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_handled_total{grpc_service,grpc_method,grpc_type,grpc_code}
//   grpc_server_handling_seconds{grpc_service,grpc_method,grpc_type}
//   (histogram)
//   grpc_server_msg_received_total{grpc_service,grpc_method,grpc_type}
//   grpc_server_msg_sent_total{grpc_service,grpc_method,grpc_type}
//
// grpc_type is unary, client_stream, server_stream or bidi_stream; grpc_code
// is the status code as Go's codes.Code prints it ("OK", "Canceled",
// "InvalidArgument", ...). A gRPC server interceptor records starts and
// messages of every registered service (server/rpc/metrics_interceptor.h),
// and the end of the calls the pipeline does not see (grpc.health.v1,
// server reflection). A cgacct.v1.Accounting call is counted once, by the
// pipeline, in RpcMetrics; its handled and handling_seconds rows are read
// from there at scrape (server/metrics/prometheus/grpc_server_collector.h).
//
// Recording: relaxed atomic adds on the calling thread's shard
// (server/metrics/histogram.h); the method is looked up once per call in a
// table built at construction (read-only after it, so without a lock).
#ifndef CGACCT_SERVER_METRICS_GRPC_SERVER_METRICS_H_
#define CGACCT_SERVER_METRICS_GRPC_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/metrics/histogram.h"
#include "server/metrics/rpc_metrics.h"

namespace cgacct {

// One RPC method the metrics track.
struct GrpcMethodInfo {
  std::string service;  // "cgacct.v1.Accounting"
  std::string method;   // "Charge"
  // "unary", "client_stream", "server_stream" or "bidi_stream".
  const char* type = "unary";
  // Set for the methods of cgacct.v1.Accounting: the pipeline counts their
  // ends in RpcMetrics, under this method.
  std::optional<RpcMethod> rpc_method;
};

// The methods of cgacct.v1.Accounting (from its generated descriptor),
// grpc.health.v1.Health (Check, Watch) and
// grpc.reflection.v1alpha.ServerReflection (ServerReflectionInfo).
std::vector<GrpcMethodInfo> CgacctdGrpcMethods();

// "OK", "Canceled", "Unknown", "InvalidArgument", ... (Go's codes.Code
// String(), which go-grpc-prometheus puts in grpc_code). Codes outside
// 0..16 print as "Unknown".
const char* GrpcCodeGoName(int code);

// The grpc_server_* counters.
//
// Thread safety: thread-safe; Record*() are lock-free relaxed adds, and the
// readers may run concurrently with them (per-counter atomicity).
class GrpcServerMetrics {
 public:
  // Most methods tracked; more in `methods` are ignored (not counted).
  static constexpr int kMaxMethods = 32;
  static constexpr int kNrCodes = 17;  // google.rpc.Code 0..16

  explicit GrpcServerMetrics(std::vector<GrpcMethodInfo> methods);
  GrpcServerMetrics(const GrpcServerMetrics&) = delete;
  GrpcServerMetrics& operator=(const GrpcServerMetrics&) = delete;

  // The method's index for a full name ("/cgacct.v1.Accounting/Charge"), or
  // -1 if it is not tracked.
  int MethodIndex(absl::string_view full_method) const;
  const std::vector<GrpcMethodInfo>& methods() const { return methods_; }

  // Recording, by method index (0 <= method < methods().size()). `code` is
  // a google.rpc.Code number (outside 0..16: UNKNOWN).
  void RecordStarted(int method);
  void RecordReceived(int method);
  void RecordSent(int method);
  void RecordHandled(int method, int code, absl::Duration took);

  // Reading, summed over shards.
  uint64_t started(int method) const;
  uint64_t received(int method) const;
  uint64_t sent(int method) const;
  uint64_t handled(int method, int code) const;
  LatencyHistogram::Snapshot latency(int method) const;

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

#endif  // CGACCT_SERVER_METRICS_GRPC_SERVER_METRICS_H_
