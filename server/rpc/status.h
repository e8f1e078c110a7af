// The one place where absl::Status (the engine's errors, the pipeline's)
// becomes a gRPC status (docs/DESIGN.md §4.3): the pipeline works in
// absl::Status throughout and the rpc room converts once, when it answers.
#ifndef CGACCT_SERVER_RPC_STATUS_H_
#define CGACCT_SERVER_RPC_STATUS_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace cgacct {

// Converts `status` to a grpc::Status with the same code (absl::StatusCode and
// grpc::StatusCode share the google.rpc.Code numbering, so the mapping is 1:1)
// and the same message. OK maps to grpc::Status::OK. A code outside the
// canonical range (absl allows any int) becomes UNKNOWN with the message kept.
//
// Thread safety: pure function, thread-safe.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The code part of ToGrpcStatus(status), without copying the message.
grpc::StatusCode ToGrpcStatusCode(const absl::Status& status);

// ToGrpcStatus(status) for the call of `context`, which it may mark: a shed
// status (ShedReasonOf(), server/pipeline/call_limiter.h) adds the
// `cgacct-shed: <reason>` trailing metadata; a routing refusal
// (server/cluster/routing.h) adds `cgacct-owner: <HOST:PORT>`. Call before
// the call's Finish.
grpc::Status AnswerStatus(grpc::ServerContextBase* context,
                          const absl::Status& status);

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_STATUS_H_
