#include "client/ctl/exit_status.h"

#include <iostream>

#include "absl/strings/str_replace.h"
#include "client/cli/grpc_util.h"

namespace cgacct::ctl {

int ExitStatusFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::OUT_OF_RANGE:
      return kExitRefused;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnavailable;
    default:
      return kExitOther;
  }
}

std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
}

int PrintUsageError(absl::string_view message) {
  std::cerr << "cgacctctl: " << OneLine(message) << "\ntry cgacctctl --help\n";
  return kExitUsage;
}

int PrintRpcError(absl::string_view what, const grpc::Status& status) {
  std::cerr << "cgacctctl: " << OneLine(what) << ": "
            << OneLine(cli::FormatStatus(status)) << "\n";
  return ExitStatusFor(status.error_code());
}

}  // namespace cgacct::ctl
