// cgacct::client::Status (include/cgacct/status.h).
#include "cgacct/status.h"

#include <string>

#include "absl/status/status.h"

namespace cgacct::client {

std::string StatusCodeName(StatusCode code) {
  // google.rpc.Code is absl::StatusCode too.
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "CODE_" + std::to_string(static_cast<int>(code))
                      : name;
}

std::string Status::ToString() const {
  std::string s = StatusCodeName(code_);
  if (!message_.empty()) s += ": " + message_;
  return s;
}

}  // namespace cgacct::client
