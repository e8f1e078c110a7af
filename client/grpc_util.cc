#include "client/grpc_util.h"

#include "absl/strings/str_cat.h"

namespace cgacct::client {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           bool own_connection) {
  grpc::ChannelArguments args;
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   args);
}

absl::Status WaitForConnected(grpc::Channel& channel, absl::string_view target,
                              absl::Duration timeout) {
  if (channel.WaitForConnected(DeadlineAfter(timeout))) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat("cannot connect to cgacctd at ", target, " within ",
                   absl::FormatDuration(timeout), " (is the server running?)"));
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

absl::string_view StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "UNKNOWN_CODE";
  }
}

std::string FormatStatus(const grpc::Status& status) {
  if (status.error_message().empty() ||
      status.error_message() == StatusCodeName(status.error_code())) {
    return std::string(StatusCodeName(status.error_code()));
  }
  return absl::StrCat(StatusCodeName(status.error_code()), ": ",
                      status.error_message());
}

}  // namespace cgacct::client
