// ReadFile(): the server's one reader of operator files (the token table and
// authorization policy, the TLS PEM files, the /metrics token).
//
// Thread safety: thread-safe (no shared state).
#ifndef CGACCT_SERVER_COMMON_READ_FILE_H_
#define CGACCT_SERVER_COMMON_READ_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace cgacct {

// Files the server reads are operator-written configuration: a few KiB. A
// larger one is refused rather than read into memory whole.
inline constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;

// The whole contents of `path`, bytes as they are. Errors: NOT_FOUND "cannot
// read PATH: <strerror>" when it cannot be opened or read (missing,
// permission, a directory); FAILED_PRECONDITION "PATH is N bytes; at most
// kMaxConfigFileBytes" for a larger file. The message names the path, never
// the contents (token files are secrets).
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace cgacct

#endif  // CGACCT_SERVER_COMMON_READ_FILE_H_
