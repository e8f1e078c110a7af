// cgacctctl's exit statuses, one per class of failure (README "cgacctctl"),
// and its one-line errors on stderr.
//
// Thread safety: thread-safe (the printers write to std::cerr).
#ifndef CGACCT_CLIENT_CTL_EXIT_STATUS_H_
#define CGACCT_CLIENT_CTL_EXIT_STATUS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace cgacct::ctl {

enum ExitStatus : int {
  kExitOk = 0,
  kExitOther = 1,        // any other failure (INTERNAL, UNIMPLEMENTED, ...)
  kExitUsage = 2,        // bad command line; nothing was sent
  kExitNotFound = 3,     // NOT_FOUND: no such group
  kExitRefused = 4,      // the server refused the request
  kExitUnavailable = 5,  // could not reach/complete: try again later
};

// The class of a failed RPC's code (kExitOk for OK).
int ExitStatusFor(grpc::StatusCode code);

// `text` on one line: CR, LF and CRLF become spaces, whatever the server
// wrote.
std::string OneLine(absl::string_view text);

// "cgacctctl: MESSAGE" and the pointer to --help on stderr; kExitUsage.
int PrintUsageError(absl::string_view message);

// "cgacctctl: WHAT: CODE: message" on stderr; the status's exit class.
int PrintRpcError(absl::string_view what, const grpc::Status& status);

}  // namespace cgacct::ctl

#endif  // CGACCT_CLIENT_CTL_EXIT_STATUS_H_
