// The wire's enums as the command lines spell them: GetStats flush modes
// ("exact", "threshold", "none") and page kinds ("anon", "file"), shared by
// cgacct-load and cgacctctl.
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_CLIENT_CLI_WIRE_NAMES_H_
#define CGACCT_CLIENT_CLI_WIRE_NAMES_H_

#include <optional>

#include "absl/strings/string_view.h"
#include "cgacct/v1/accounting.pb.h"

namespace cgacct::cli {

// "exact", "threshold" or "none" (exactly, lower case); nullopt otherwise.
std::optional<v1::FlushMode> ParseFlushMode(absl::string_view name);

// "anon" or "file" (exactly, lower case); nullopt otherwise.
std::optional<v1::PageKind> ParsePageKind(absl::string_view name);

}  // namespace cgacct::cli

#endif  // CGACCT_CLIENT_CLI_WIRE_NAMES_H_
