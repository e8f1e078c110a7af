// cgacctctl's command line: its flags (defined in invocation.cc) and the
// words after them, checked and read into an Invocation before anything is
// sent. Every problem is a usage error (exit 2).
//
// Thread safety: the functions read the flags (thread-safe after
// absl::ParseCommandLine()); Invocation is a plain value.
#ifndef CGACCT_CLIENT_CTL_INVOCATION_H_
#define CGACCT_CLIENT_CTL_INVOCATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"

namespace cgacct::ctl {

// Everything the command line says.
struct Invocation {
  std::string command;
  std::string path;  // "/" when the command takes none; health: SERVICE
  std::vector<std::string> files;  // cat
  v1::Limits limits;               // create, set
  uint64_t nr_bytes = 0;  // reclaim; charge, uncharge given a SIZE (8M)
  uint64_t nr_pages = 0;  // charge, uncharge given NR_PAGES
  v1::PageKind kind = v1::PAGE_KIND_UNSPECIFIED;
  v1::FlushMode flush = v1::FLUSH_MODE_EXACT;
  int iterations = 0;  // top, events --watch; 0 = forever
  // From the flags.
  std::string target;
  absl::Duration connect_timeout;
  absl::Duration timeout;  // of each RPC
  bool json = false;
  std::optional<uint32_t> cpu;  // charge, uncharge; nullopt: the server's
  bool recursive = false;       // ls -r
  bool watch = false;           // events --watch
  bool local = false;           // events --local
  absl::Duration delay;         // top
};

// Parses the command line after the flags (`args`: COMMAND and its
// arguments). Errors: INVALID_ARGUMENT with the usage error's line.
absl::StatusOr<Invocation> ParseInvocation(
    const std::vector<std::string>& args);

// Applies `name`=`text` ("memory.max", "50M") to `limits`. Errors:
// INVALID_ARGUMENT naming the file.
absl::Status SetLimit(absl::string_view name, absl::string_view text,
                      v1::Limits* limits);


}  // namespace cgacct::ctl

#endif  // CGACCT_CLIENT_CTL_INVOCATION_H_
