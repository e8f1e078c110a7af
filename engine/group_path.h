// Group paths: the cgroup v2 path grammar and how paths appear in messages.
//
// Invariants:
//   - A valid path is "/" (the root) or "/seg/seg/..." with each segment of
//     1 to 255 characters from [A-Za-z0-9._-], not "." or "..", no trailing
//     '/', at most kMaxPathBytes bytes in all. Every path the engine stores
//     passed ValidateGroupPath().
//   - A path in an error message is at most 128 of its bytes, C-escaped (at
//     most 4 x 128 bytes), plus a short suffix (ShortPath()), so that a
//     status never outgrows a client's trailers or carries control bytes.
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_ENGINE_GROUP_PATH_H_
#define CGACCT_ENGINE_GROUP_PATH_H_

#include <cstddef>
#include <string>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cgacct {

// Longest accepted path, in bytes (PATH_MAX).
inline constexpr size_t kMaxPathBytes = 4096;

// Validates a cgroup v2 path ("/" or "/a/b", at most kMaxPathBytes);
// INVALID_ARGUMENT names `field` ("path \"/a/\" must not end with '/'").
absl::Status ValidateGroupPath(absl::string_view path,
                               absl::string_view field = "path");

// The check every Charge/Uncharge (and every ChargeBatch/ChargeStream op)
// runs right after ValidateGroupPath(): the root is never charged or
// uncharged directly, because the kernel never charges the root's
// page_counter itself (try_charge() returns 0 for the root memcg); the
// root's usage is the sum of its children's. INVALID_ARGUMENT naming `field`
// for "/", OK for any other path. Inline (every path charge runs it), with
// the message built out of line. Thread-safe.
absl::Status RootChargeError(absl::string_view field);
inline absl::Status RefuseRootCharge(absl::string_view path,
                                     absl::string_view field = "path") {
  if (ABSL_PREDICT_TRUE(path != "/")) return absl::OkStatus();
  return RootChargeError(field);
}

// `path` for an error message: its first 128 bytes (all of it when shorter,
// else followed by "... (N bytes)", for gRPC's 8 KiB metadata limit), C-escaped
// (absl::CHexEscape): control and non-ASCII bytes become \n, \x01, ..., and
// '"', '\'' and '\\' are backslashed, so a message never carries raw bytes a
// terminal or log parser would act on. A valid path is shown unchanged.
std::string ShortPath(absl::string_view path);
// ShortPath() in double quotes.
std::string QuotePath(absl::string_view path);

// Whether `path` is `subtree` or below it, at a segment boundary ("/ab" is
// not below "/a"; every path is at or below "/"). Both are valid group paths.
// The one containment test of the project (access grants, session holdings,
// ListGroups page tokens, the client library's drain answers): inline and
// header-only, so the client library uses it without linking the engine.
inline bool PathAtOrBelow(absl::string_view path, absl::string_view subtree) {
  if (subtree == "/") return true;
  if (path.size() < subtree.size() ||
      path.substr(0, subtree.size()) != subtree)
    return false;
  return path.size() == subtree.size() || path[subtree.size()] == '/';
}
// PathAtOrBelow() and not `subtree` itself.
inline bool PathStrictlyBelow(absl::string_view path,
                              absl::string_view subtree) {
  return path != subtree && PathAtOrBelow(path, subtree);
}

// The parent of a valid non-root path ("/a/b" -> "/a", "/a" -> "/").
absl::string_view ParentPath(absl::string_view path);
// The last segment of a valid non-root path ("/a/b" -> "b"): the group's key
// in its parent's children.
absl::string_view LeafName(absl::string_view path);

}  // namespace cgacct

#endif  // CGACCT_ENGINE_GROUP_PATH_H_
