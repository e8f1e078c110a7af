// cgacct::client::Status (include/cgacct/status.h).
#include "cgacct/status.h"

#include <string>

namespace cgacct::client {

std::string StatusCodeName(StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  const int n = static_cast<int>(code);
  if (n < 0 || n >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return "CODE_" + std::to_string(n);
  }
  return kNames[n];
}

std::string Status::ToString() const {
  std::string s = StatusCodeName(code_);
  if (!message_.empty()) s += ": " + message_;
  return s;
}

}  // namespace cgacct::client
