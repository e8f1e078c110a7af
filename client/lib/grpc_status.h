// grpc::Status to cgacct::client::Status (the same google.rpc.Code
// numbers). Internal to the library (not installed).
//
// Thread safety: pure functions.
#ifndef CGACCT_CLIENT_LIB_GRPC_STATUS_H_
#define CGACCT_CLIENT_LIB_GRPC_STATUS_H_

#include "cgacct/status.h"
#include "grpcpp/support/status.h"

namespace cgacct::client::internal {

inline Status FromGrpc(const grpc::Status& s) {
  return Status(static_cast<StatusCode>(s.error_code()), s.error_message());
}

}  // namespace cgacct::client::internal

#endif  // CGACCT_CLIENT_LIB_GRPC_STATUS_H_
