// The one place where engine errors (absl::Status) become gRPC errors
// (DESIGN.md §2, STYLE.md habit 6).
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

}  // namespace cgacct

#endif  // CGACCT_SERVER_STATUS_H_
