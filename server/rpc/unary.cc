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

grpc::ServerUnaryReactor* MaybeForward(
    Forwarder* forwarder, Pipeline& pipeline,
    grpc::CallbackServerContext* context, CallContext& call,
    const absl::Status& status, const google::protobuf::Message& request,
    grpc::ByteBuffer* response_bytes, grpc::ServerUnaryReactor* reactor) {
  if (forwarder == nullptr) return nullptr;
  std::optional<std::string> owner = forwarder->Target(status, *context);
  if (!owner.has_value()) return nullptr;
  if (reactor == nullptr) reactor = context->DefaultReactor();
  // The call's context moves into the completion: ended there, once.
  auto ended = std::make_shared<CallContext>(std::move(call));
  forwarder->Forward(
      *owner, ended->method, *context, request,
      [&pipeline, reactor, response_bytes, ended](const grpc::Status& answer,
                                                  grpc::ByteBuffer bytes) {
        pipeline.EndCall(*ended,
                         absl::Status(static_cast<absl::StatusCode>(
                                          answer.error_code()),
                                      answer.error_message()));
        if (answer.ok()) *response_bytes = std::move(bytes);
        reactor->Finish(answer);
      });
  return reactor;
}

grpc::ServerUnaryReactor* FanOutStats(Forwarder& forwarder, Pipeline& pipeline,
                                      grpc::CallbackServerContext* context,
                                      CallContext& call,
                                      const v1::GetStatsRequest& request,
                                      v1::GroupStats response,
                                      grpc::ByteBuffer* response_bytes) {
  grpc::ServerUnaryReactor* const reactor = context->DefaultReactor();
  // The call and its answer move into the completion: ended there, once.
  struct State {
    CallContext call;
    v1::GroupStats response;
  };
  auto state = std::make_shared<State>();
  state->call = std::move(call);
  state->response = std::move(response);
  forwarder.FanOutStats(
      *context, request, &state->response,
      [&pipeline, context, reactor, response_bytes, state] {
        const absl::Status s =
            SerializeResponse(state->response, response_bytes);
        FinishUnary(pipeline, context, state->call, s, reactor);
      });
  return reactor;
}

}  // namespace cgacct::rpc_internal
