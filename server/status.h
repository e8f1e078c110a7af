// The one place where absl::Status (the engine's errors and the service's
// own) becomes a gRPC status (docs/DESIGN.md §4.3). The service
// works in absl::Status throughout and converts once, when it answers.
#ifndef CGACCT_SERVER_STATUS_H_
#define CGACCT_SERVER_STATUS_H_

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

// The code part of ToGrpcStatus(status), without copying the message (for
// ChargeBatch's per-op results, which carry the code as a number).
grpc::StatusCode ToGrpcStatusCode(const absl::Status& status);

}  // namespace cgacct

#endif  // CGACCT_SERVER_STATUS_H_
