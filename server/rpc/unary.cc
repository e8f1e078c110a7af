// The unary adapter's finishing step (server/rpc/unary.h).
#include "server/rpc/unary.h"

namespace cgacct::rpc_internal {

grpc::ServerUnaryReactor* FinishUnary(Pipeline& pipeline,
                                      grpc::CallbackServerContext* context,
                                      CallContext& call,
                                      const absl::Status& status,
                                      grpc::ServerUnaryReactor* reactor) {
  const grpc::Status answer = AnswerStatus(context, status);
  pipeline.EndCall(call, status);
  if (reactor == nullptr) reactor = context->DefaultReactor();
  reactor->Finish(answer);
  return reactor;
}

}  // namespace cgacct::rpc_internal
