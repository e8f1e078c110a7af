// The one adapter of the unary methods of cgacct.v1.Accounting, from raw
// bytes on gRPC's callback API to the pipeline and back (docs/DESIGN.md
// §2.4): every unary call passes
//
//   BeginCall (caller authenticated once) -> Admit -> Authenticate
//   -> decode (ParseRequest) -> the pipeline's body -> encode -> EndCall
//   (recorded once) -> the status converted once -> Finish
//
// A deferrable body (Charge, ChargeBatch) runs inside a
// RemoteDrainDeferral::Scope; when it comes back IsRemoteDrainDeferred()
// the call, its request, its response as it left it and its run state move
// to a DrainWaitPool thread, which runs the body again (it may wait there)
// and finishes the call.
//
// Thread safety: the functions are thread-safe; one call's state is used by
// one thread at a time.
#ifndef CGACCT_SERVER_RPC_UNARY_H_
#define CGACCT_SERVER_RPC_UNARY_H_

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/status/status.h"
#include "engine/remote_stock.h"
#include "server/pipeline/call.h"
#include "server/pipeline/pipeline.h"
#include "server/rpc/codec.h"
#include "server/rpc/peer.h"
#include "server/rpc/status.h"

namespace cgacct {
namespace rpc_internal {

// Ends `call` in the pipeline with `status` (recorded once, permit given
// back), converts the status once and finishes the call on `reactor` (null:
// the context's DefaultReactor(), which must not have been taken before).
grpc::ServerUnaryReactor* FinishUnary(
    Pipeline& pipeline, grpc::CallbackServerContext* context, CallContext& call,
    const absl::Status& status, grpc::ServerUnaryReactor* reactor = nullptr);

// The stages before the body: admission, authentication, decoding.
template <typename Request>
absl::Status Prologue(Pipeline& pipeline, CallContext& call,
                      Admission admission, const grpc::ByteBuffer& bytes,
                      Request* request) {
  absl::Status status = pipeline.Admit(call, admission, bytes.Length());
  if (status.ok()) status = pipeline.Authenticate(call);
  // A call reset before its request arrived (an HTTP/2 rapid-reset flood)
  // gets here with no message: INVALID_ARGUMENT "... carried no request
  // message" (counted, answered to nobody).
  if (status.ok()) status = ParseRequest(bytes, request);
  return status;
}

}  // namespace rpc_internal

// A unary call whose body is `(pipeline.*body)(call, request, response)`.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Unary(
    Pipeline& pipeline, grpc::CallbackServerContext* context, RpcMethod method,
    Admission admission, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes,
    absl::Status (Pipeline::*body)(CallContext&, const Request&, Response*)) {
  CallContext call = BeginCall(pipeline, method, *context);
  Request request;
  absl::Status status = rpc_internal::Prologue(pipeline, call, admission,
                                               *request_bytes, &request);
  if (status.ok()) {
    Response response;
    status = (pipeline.*body)(call, request, &response);
    if (status.ok()) status = SerializeResponse(response, response_bytes);
  }
  return rpc_internal::FinishUnary(pipeline, context, call, status);
}

// A unary call whose body `(pipeline.*body)(call, request, response, run)`
// may be deferred (see the file comment); `Run` carries its state.
template <typename Request, typename Response, typename Run>
grpc::ServerUnaryReactor* DeferrableUnary(
    Pipeline& pipeline, grpc::CallbackServerContext* context, RpcMethod method,
    const grpc::ByteBuffer* request_bytes, grpc::ByteBuffer* response_bytes,
    absl::Status (Pipeline::*body)(CallContext&, const Request&, Response*,
                                   Run*)) {
  CallContext call = BeginCall(pipeline, method, *context);
  Request request;
  absl::Status status = rpc_internal::Prologue(
      pipeline, call, Admission::kMessage, *request_bytes, &request);
  if (!status.ok())
    return rpc_internal::FinishUnary(pipeline, context, call, status);
  Response response;
  Run run;
  {
    RemoteDrainDeferral::Scope no_wait;  // a gRPC callback thread
    status = (pipeline.*body)(call, request, &response, &run);
  }
  if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(status))) {
    // Taken once: DefaultReactor() constructs the reactor anew.
    grpc::ServerUnaryReactor* const reactor = context->DefaultReactor();
    pipeline.drain_wait_pool().Run(
        [&pipeline, context, reactor, body, response_bytes,
         call = std::move(call), request = std::move(request),
         response = std::move(response), run = std::move(run)]() mutable {
          absl::Status s = (pipeline.*body)(call, request, &response, &run);
          if (s.ok()) s = SerializeResponse(response, response_bytes);
          rpc_internal::FinishUnary(pipeline, context, call, s, reactor);
        });
    return reactor;
  }
  if (status.ok()) status = SerializeResponse(response, response_bytes);
  return rpc_internal::FinishUnary(pipeline, context, call, status);
}

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_UNARY_H_
