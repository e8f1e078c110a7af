// The in-process server the service tests share: `service` on a real
// grpc::Server listening on 127.0.0.1 port 0 (the kernel picks a free port),
// and a channel to it.
#ifndef CGACCT_TESTS_SERVER_IN_PROCESS_SERVER_H_
#define CGACCT_TESTS_SERVER_IN_PROCESS_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "server/rpc/accounting_service.h"

namespace cgacct {

struct InProcessServer {
  std::unique_ptr<grpc::Server> server;  // nullptr if it did not start
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<cgacct::v1::Accounting::Stub> stub;
};

// Builds and starts the server; `service` must outlive it. Callers check
// `server != nullptr`. `interceptors`: server interceptor factories (e.g.
// GrpcServerMetrics::NewInterceptorFactory()).
inline InProcessServer StartInProcessServer(
    grpc::Service* service,
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors = {}) {
  InProcessServer out;
  grpc::ServerBuilder builder;
  if (!interceptors.empty()) {
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  // cgacct's service also brings SessionStream's completion queue and
  // thread (AccountingService::RegisterOn).
  auto* accounting = dynamic_cast<AccountingService*>(service);
  if (accounting != nullptr) {
    accounting->RegisterOn(builder);
  } else {
    builder.RegisterService(service);
  }
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || port == 0) return out;
  if (accounting != nullptr) accounting->StartSessionStreams();
  out.channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                    grpc::InsecureChannelCredentials());
  out.stub = cgacct::v1::Accounting::NewStub(out.channel);
  return out;
}

}  // namespace cgacct

#endif  // CGACCT_TESTS_SERVER_IN_PROCESS_SERVER_H_
