// The metrics interceptor (server/rpc/metrics_interceptor.h).
#include "server/rpc/metrics_interceptor.h"

#include <grpcpp/server_context.h>

#include <chrono>

#include "absl/time/time.h"
#include "server/rpc/receive_guard.h"

namespace cgacct {
namespace {

using HookPoint = grpc::experimental::InterceptionHookPoints;

// One call's interceptor: created by the factory when the call starts, owned
// (and deleted) by gRPC when it ends. Hooks of one call are not run
// concurrently with each other for one batch, but reads and writes of a
// stream may run on different threads: only the members, all constant,
// are shared.
class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(GrpcServerMetrics* metrics, int method,
                     const grpc::ServerContextBase* context)
      : metrics_(metrics),
        context_(context),
        method_(method),
        ended_by_pipeline_(metrics->methods()[method].rpc_method.has_value()),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    // A failed read (the client half-closed, or the call ended) comes with
    // no message: not counted.
    if (methods->QueryInterceptionHookPoint(HookPoint::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() != nullptr) {
      metrics_->RecordReceived(method_);
    }
    if (methods->QueryInterceptionHookPoint(HookPoint::PRE_SEND_MESSAGE)) {
      metrics_->RecordSent(method_);
    }
    // The pipeline counts the end of a cgacct.v1.Accounting call itself
    // (RpcMetrics): one count per call.
    if (!ended_by_pipeline_ &&
        methods->QueryInterceptionHookPoint(HookPoint::PRE_SEND_STATUS)) {
      // A call the receive guard cancelled ended RESOURCE_EXHAUSTED for its
      // client, whatever its handler then said.
      // (Only a cancelled call is looked up: no lock on the common path.)
      const int code = context_ != nullptr && context_->IsCancelled() &&
                               GuardCancelReason(context_).has_value()
                           ? grpc::StatusCode::RESOURCE_EXHAUSTED
                           : methods->GetSendStatus().error_code();
      metrics_->RecordHandled(
          method_, code,
          absl::FromChrono(std::chrono::steady_clock::now() - start_));
    }
    methods->Proceed();
  }

 private:
  GrpcServerMetrics* const metrics_;
  const grpc::ServerContextBase* const context_;
  const int method_;
  const bool ended_by_pipeline_;
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
    return new MetricsInterceptor(metrics_, method, info->server_context());
  }

 private:
  GrpcServerMetrics* const metrics_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewMetricsInterceptorFactory(GrpcServerMetrics* metrics) {
  return std::make_unique<MetricsInterceptorFactory>(metrics);
}

}  // namespace cgacct
