#include "server/grpc_metrics.h"

#include <google/protobuf/descriptor.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cgacct {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using HookPoint = grpc::experimental::InterceptionHookPoints;

// One call's interceptor: created by the factory when the call starts, owned
// (and deleted) by gRPC when it ends. Hooks of one call are not run
// concurrently with each other for one batch, but reads and writes of a
// stream may run on different threads: only `metrics_`, `method_` and
// `start_` are shared, and they are constant.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(GrpcServerMetrics* metrics, int method)
      : metrics_(metrics),
        method_(method),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods)
      override {
    // A failed read (the client half-closed, or the call ended) comes with
    // no message: not counted.
    if (methods->QueryInterceptionHookPoint(HookPoint::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() != nullptr) {
      metrics_->RecordReceived(method_);
    }
    if (methods->QueryInterceptionHookPoint(HookPoint::PRE_SEND_MESSAGE)) {
      metrics_->RecordSent(method_);
    }
    if (methods->QueryInterceptionHookPoint(HookPoint::PRE_SEND_STATUS)) {
      metrics_->RecordHandled(
          method_, methods->GetSendStatus().error_code(),
          absl::FromChrono(std::chrono::steady_clock::now() - start_));
    }
    methods->Proceed();
  }

 private:
  GrpcServerMetrics* const metrics_;
  const int method_;
  const std::chrono::steady_clock::time_point start_;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(GrpcServerMetrics* metrics)
      : metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const int method =
        info->method() == nullptr ? -1 : metrics_->MethodIndex(info->method());
    if (method < 0) return nullptr;
    metrics_->RecordStarted(method);
    return new MetricsInterceptor(metrics_, method);
  }

 private:
  GrpcServerMetrics* const metrics_;
};

}  // namespace

std::vector<GrpcMethodInfo> CgacctdGrpcMethods() {
  std::vector<GrpcMethodInfo> methods;
  const google::protobuf::ServiceDescriptor* accounting =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "cgacct.v1.Accounting");
  if (accounting != nullptr) {
    for (int i = 0; i < accounting->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = accounting->method(i);
      const char* type = m->client_streaming()
                             ? (m->server_streaming() ? "bidi_stream"
                                                      : "client_stream")
                             : (m->server_streaming() ? "server_stream"
                                                      : "unary");
      methods.push_back({accounting->full_name(), m->name(), type});
    }
  }
  // gRPC's own services: their descriptors are not in the generated pool
  // (the health service is built without protobuf's C++ classes).
  methods.push_back({"grpc.health.v1.Health", "Check", "unary"});
  methods.push_back({"grpc.health.v1.Health", "Watch", "server_stream"});
  methods.push_back({"grpc.reflection.v1alpha.ServerReflection",
                     "ServerReflectionInfo", "bidi_stream"});
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

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcServerMetrics::NewInterceptorFactory() {
  return std::make_unique<MetricsInterceptorFactory>(this);
}

int GrpcServerMetrics::MethodIndex(absl::string_view full_method) const {
  const auto it = index_.find(full_method);
  return it == index_.end() ? -1 : it->second;
}

// Relaxed everywhere: statistics (server/metrics.h, Memory ordering).
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

void GrpcServerMetrics::RecordHandled(int method, grpc::StatusCode code,
                                      absl::Duration took) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNrCodes) c = grpc::StatusCode::UNKNOWN;
  (*shards_)[ThisThreadMetricShard()].handled[method][c].fetch_add(
      1, std::memory_order_relaxed);
  latency_[method]->Record(took);
}

uint64_t GrpcServerMetrics::Sum(Counters Shard::*counters,
                                int method) const {
  uint64_t total = 0;
  for (const Shard& shard : *shards_)
    total += (shard.*counters)[method].load(std::memory_order_relaxed);
  return total;
}

std::vector<MetricFamily> GrpcServerMetrics::Collect() const {
  MetricFamily started =
      Family("grpc_server_started_total",
             "Total number of RPCs started on the server.",
             MetricType::Counter);
  MetricFamily handled = Family(
      "grpc_server_handled_total",
      "Total number of RPCs completed on the server, regardless of success "
      "or failure.",
      MetricType::Counter);
  MetricFamily seconds = Family(
      "grpc_server_handling_seconds",
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
  for (size_t i = 0; i < methods_.size(); ++i) {
    const int m = static_cast<int>(i);
    const std::vector<ClientMetric::Label> labels = {
        {"grpc_method", methods_[i].method},
        {"grpc_service", methods_[i].service},
        {"grpc_type", methods_[i].type}};
    auto counter = [&labels](uint64_t value) {
      ClientMetric metric;
      metric.label = labels;
      metric.counter.value = static_cast<double>(value);
      return metric;
    };
    started.metric.push_back(counter(Sum(&Shard::started, m)));
    received.metric.push_back(counter(Sum(&Shard::received, m)));
    sent.metric.push_back(counter(Sum(&Shard::sent, m)));
    for (int c = 0; c < kNrCodes; ++c) {
      uint64_t n = 0;
      for (const Shard& shard : *shards_)
        n += shard.handled[m][c].load(std::memory_order_relaxed);
      // OK always (rates start at zero), other codes once seen.
      if (n == 0 && c != grpc::StatusCode::OK) continue;
      ClientMetric metric = counter(n);
      metric.label.insert(
          metric.label.begin(),
          {"grpc_code", GrpcCodeGoName(c)});
      handled.metric.push_back(std::move(metric));
    }
    seconds.metric.push_back(HistogramMetric(latency_[i]->Collect(), labels));
  }
  std::vector<MetricFamily> out;
  out.push_back(std::move(started));
  out.push_back(std::move(handled));
  out.push_back(std::move(seconds));
  out.push_back(std::move(received));
  out.push_back(std::move(sent));
  return out;
}

}  // namespace cgacct
