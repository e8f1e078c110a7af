#include "server/rpc/status.h"

#include <optional>
#include <string>

#include "server/cluster/routing.h"
#include "server/pipeline/call_limiter.h"

namespace cgacct {
namespace {

// Both enums are google.rpc.Code; pin the numbering so a mismatch fails the
// build instead of silently remapping codes.
static_assert(static_cast<int>(absl::StatusCode::kOk) == grpc::StatusCode::OK);
static_assert(static_cast<int>(absl::StatusCode::kCancelled) ==
              grpc::StatusCode::CANCELLED);
static_assert(static_cast<int>(absl::StatusCode::kInvalidArgument) ==
              grpc::StatusCode::INVALID_ARGUMENT);
static_assert(static_cast<int>(absl::StatusCode::kNotFound) ==
              grpc::StatusCode::NOT_FOUND);
static_assert(static_cast<int>(absl::StatusCode::kAlreadyExists) ==
              grpc::StatusCode::ALREADY_EXISTS);
static_assert(static_cast<int>(absl::StatusCode::kResourceExhausted) ==
              grpc::StatusCode::RESOURCE_EXHAUSTED);
static_assert(static_cast<int>(absl::StatusCode::kFailedPrecondition) ==
              grpc::StatusCode::FAILED_PRECONDITION);
static_assert(static_cast<int>(absl::StatusCode::kAborted) ==
              grpc::StatusCode::ABORTED);
static_assert(static_cast<int>(absl::StatusCode::kUnimplemented) ==
              grpc::StatusCode::UNIMPLEMENTED);
static_assert(static_cast<int>(absl::StatusCode::kUnavailable) ==
              grpc::StatusCode::UNAVAILABLE);
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) ==
              grpc::StatusCode::UNAUTHENTICATED);

}  // namespace

grpc::StatusCode ToGrpcStatusCode(const absl::Status& status) {
  const int code = status.raw_code();
  return (code >= grpc::StatusCode::OK &&
          code <= grpc::StatusCode::UNAUTHENTICATED)
             ? static_cast<grpc::StatusCode>(code)
             : grpc::StatusCode::UNKNOWN;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcStatusCode(status), std::string(status.message()));
}

grpc::Status AnswerStatus(grpc::ServerContextBase* context,
                          const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  if (const std::optional<ShedReason> shed = ShedReasonOf(status))
    context->AddTrailingMetadata(kShedMetadataKey, ShedReasonName(*shed));
  // Cluster mode: the shard's owner, for the client to follow.
  if (const std::optional<std::string> owner = OwnerAddressOf(status))
    context->AddTrailingMetadata("cgacct-owner", *owner);
  return ToGrpcStatus(status);
}

}  // namespace cgacct
