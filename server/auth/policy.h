// The authorization policy (--authz_policy, docs/DESIGN.md §4.11): which
// identity may do what on which subtree.
//
// Thread safety: AuthzPolicy is immutable once parsed (thread-safe to read).
#ifndef CGACCT_SERVER_AUTH_POLICY_H_
#define CGACCT_SERVER_AUTH_POLICY_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cgacct {

// One "IDENTITY ro|rw PATH" line.
struct Grant {
  std::string subtree;  // a valid group path
  bool write = false;   // rw (else ro)
};

// Everything the policy says of one identity.
struct Principal {
  std::string identity;
  bool admin = false;
  std::vector<Grant> grants;
};

// The --authz_policy file: one grant per line, "IDENTITY admin",
// "IDENTITY ro PATH" or "IDENTITY rw PATH"; '#' starts a comment; blank lines
// are ignored; an identity may have many lines. IDENTITY names its kind
// (server/auth/credentials.h): "uri:spiffe://t/a", "dns:host", "email:a@b",
// "ip:10.0.0.1", "cn:name" for a certificate's names, "token:NAME" for a
// --tokens_file entry; it must not contain whitespace or control bytes.
class AuthzPolicy {
 public:
  // Errors: INVALID_ARGUMENT naming the line number and what is wrong.
  static absl::StatusOr<AuthzPolicy> Parse(absl::string_view text);
  // Errors: NOT_FOUND (cannot read, naming the file), or Parse's, prefixed
  // with the file name.
  static absl::StatusOr<AuthzPolicy> LoadFile(const std::string& path);

  // The principal named `identity`, or null.
  const Principal* Find(absl::string_view identity) const;
  size_t size() const { return principals_.size(); }

 private:
  absl::flat_hash_map<std::string, Principal> principals_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_AUTH_POLICY_H_
