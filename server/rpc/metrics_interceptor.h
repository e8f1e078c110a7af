// The gRPC server interceptor behind the grpc_server_* families
// (server/metrics/grpc_server_metrics.h): counts every call's start and
// messages, and the end of calls of services the pipeline does not serve
// (health, reflection).
#ifndef CGACCT_SERVER_RPC_METRICS_INTERCEPTOR_H_
#define CGACCT_SERVER_RPC_METRICS_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "server/metrics/grpc_server_metrics.h"

namespace cgacct {

// An interceptor factory for grpc::ServerBuilder::experimental()
// .SetInterceptorCreators(). Calls of methods `metrics` does not track get
// no interceptor. `metrics` must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewMetricsInterceptorFactory(GrpcServerMetrics* metrics);

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_METRICS_INTERCEPTOR_H_
