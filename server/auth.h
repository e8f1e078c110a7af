// Access control of cgacctd (docs/DESIGN.md §4.11): who is calling
// (authentication) and what they may touch (authorization).
//
//  - Identity: a bearer token ("authorization: Bearer TOKEN" metadata, looked
//    up in the --tokens_file table) or, without a token, the verified client
//    certificate's identity (gRPC's peer identity: the subject alternative
//    names, else the common name). A token, when sent, must be valid: it is
//    never silently ignored in favour of a certificate.
//  - Policy (--authz_policy): identity -> grants. A grant is `admin` (every
//    RPC on every group, unredacted GetEngineInfo), `ro SUBTREE` (read:
//    ListGroups, GetStats, WatchEvents) or `rw SUBTREE` (read, plus charge,
//    uncharge and reclaim in the subtree, plus create, delete and set limits
//    strictly below SUBTREE: the subtree's own root and its limits belong to
//    whoever granted it, so a tenant cannot lift its own memory.max).
//  - No policy: every caller that passes authentication is admin (the
//    behaviour before access control existed when no authentication source
//    is configured either).
//
// Errors: UNAUTHENTICATED (no identity when one is required, malformed or
// unknown token); PERMISSION_DENIED (identity not in the policy, or no grant
// covering the path with the needed right). Each is counted in AuthMetrics by
// reason (cgacct_auth_failures_total{code,reason}).
//
// Thread safety: every class here is thread-safe. Authorizer::Reload()
// swaps the policy and tokens atomically; a call or stream keeps the snapshot
// it authenticated with (AuthCaller holds it).
#ifndef CGACCT_SERVER_AUTH_H_
#define CGACCT_SERVER_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace cgacct {

// What a call needs on a path.
enum class Access : uint8_t {
  kRead,       // ListGroups, GetStats, WatchEvents
  kWrite,      // Charge, Uncharge, ChargeBatch/Stream ops, Reclaim
  kConfigure,  // CreateGroup, DeleteGroup, SetLimits (strictly below a grant)
};

// Why a call was refused: the `reason` label of cgacct_auth_failures_total.
enum class AuthFailure : uint8_t {
  // UNAUTHENTICATED
  kNoCredentials,  // neither a verified certificate nor a token
  kMalformedAuthorization,  // "authorization" metadata is not "Bearer TOKEN"
  kBadToken,                // token not in the table (or no table)
  // PERMISSION_DENIED
  kUnknownIdentity,  // authenticated, but not in the policy
  kOutsideGrants,    // no grant covers the path
  kReadOnly,         // only read-only grants cover the path
  kGrantRoot,        // configure the root of one's own grant
};
inline constexpr int kNrAuthFailures = 7;
// "no_credentials", "malformed_authorization", ...
const char* AuthFailureName(AuthFailure failure);
// true for the UNAUTHENTICATED reasons.
bool IsUnauthenticated(AuthFailure failure);

// True when `path` is `subtree` or below it. Both must be valid group paths
// (ValidateGroupPath).
bool PathWithin(absl::string_view path, absl::string_view subtree);

// One line of the policy.
struct Grant {
  std::string subtree;  // a valid group path
  bool write = false;   // rw (else ro)
};

struct Principal {
  std::string identity;
  bool admin = false;
  std::vector<Grant> grants;
};

// The --authz_policy file: one grant per line, "IDENTITY admin",
// "IDENTITY ro PATH" or "IDENTITY rw PATH"; '#' starts a comment; blank lines
// are ignored; an identity may have many lines. IDENTITY is a certificate
// identity (a SAN such as a DNS name or spiffe:// URI, or the CN when the
// certificate has no SAN) or a token's identity; it must not contain
// whitespace or control bytes.
class AuthzPolicy {
 public:
  // Errors: INVALID_ARGUMENT naming the line number and what is wrong.
  static absl::StatusOr<AuthzPolicy> Parse(absl::string_view text);
  // Errors: NOT_FOUND/PERMISSION_DENIED (cannot read, naming the file), or
  // Parse's, prefixed with the file name.
  static absl::StatusOr<AuthzPolicy> LoadFile(const std::string& path);

  // The principal named `identity`, or null.
  const Principal* Find(absl::string_view identity) const;
  size_t size() const { return principals_.size(); }

 private:
  absl::flat_hash_map<std::string, Principal> principals_;
};

// The --tokens_file table: one "IDENTITY TOKEN" per line ('#' comments,
// blank lines ignored). Tokens are at least kMinTokenBytes printable
// non-space ASCII bytes and unique. Lookups compare against every token in
// constant time per token (no early exit on the first differing byte).
class TokenTable {
 public:
  static constexpr size_t kMinTokenBytes = 16;
  static absl::StatusOr<TokenTable> Parse(absl::string_view text);
  static absl::StatusOr<TokenTable> LoadFile(const std::string& path);

  // The identity `token` belongs to, or nullopt.
  std::optional<std::string> Lookup(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string token;
    std::string identity;
  };
  std::vector<Entry> entries_;
};

// cgacct_auth_failures_total{code, reason}: refused calls (and refused
// ChargeBatch/ChargeStream ops, one per op) by reason.
//
// Thread safety: thread-safe; Record() is one relaxed atomic add (refusals
// are rare: no sharding).
class AuthMetrics final : public prometheus::Collectable {
 public:
  void Record(AuthFailure failure) {
    counts_[static_cast<size_t>(failure)].fetch_add(1,
                                                    std::memory_order_relaxed);
  }
  uint64_t count(AuthFailure failure) const {
    return counts_[static_cast<size_t>(failure)].load(
        std::memory_order_relaxed);
  }
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::array<std::atomic<uint64_t>, kNrAuthFailures> counts_{};
};

struct AuthConfig {
  // Certificates are verified by gRPC (--client_ca); when set, a caller with
  // neither a certificate nor a token is UNAUTHENTICATED.
  bool client_certificates = false;
  std::optional<TokenTable> tokens;
  std::optional<AuthzPolicy> policy;
};

// The authenticated caller of one call or stream. Holds the configuration
// snapshot it was authenticated against (a reload does not change it).
class AuthCaller {
 public:
  // The caller's identity ("" = anonymous: no authentication configured).
  const std::string& identity() const { return identity_; }
  bool admin() const { return principal_ == nullptr; }

  // The configuration snapshot (opaque; defined in auth.cc).
  struct State;

 private:
  friend class Authorizer;
  std::shared_ptr<const State> state_;
  std::string identity_;
  // Into state_'s policy; null = admin (no policy, or an admin grant).
  const Principal* principal_ = nullptr;
};

class Authorizer {
 public:
  // `metrics` (may be null) must outlive the Authorizer.
  Authorizer(AuthConfig config, AuthMetrics* metrics);
  Authorizer(const Authorizer&) = delete;
  Authorizer& operator=(const Authorizer&) = delete;

  // Replaces the tokens and policy (client_certificates stays). Calls in
  // flight keep the old ones.
  void Reload(std::optional<TokenTable> tokens,
              std::optional<AuthzPolicy> policy);

  // True when a caller must prove an identity (client CA, tokens or a
  // policy configured).
  bool RequiresIdentity() const;

  // Who is calling, from `context`'s metadata and TLS peer. Errors:
  // UNAUTHENTICATED (kNoCredentials, kMalformedAuthorization, kBadToken),
  // PERMISSION_DENIED (kUnknownIdentity); each counted.
  absl::StatusOr<AuthCaller> Authenticate(
      const grpc::ServerContextBase& context) const;

  // Whether `caller` may do `access` on `path` (a valid group path).
  // Errors: PERMISSION_DENIED naming the identity, the path and the right
  // (kOutsideGrants, kReadOnly, kGrantRoot); counted.
  absl::Status Check(const AuthCaller& caller, Access access,
                     absl::string_view path) const;
  // Check() without counting or a message: may `caller` read `path`?
  static bool CanRead(const AuthCaller& caller, absl::string_view path);
  // ListGroups of `path`: readable, or an ancestor of one of the caller's
  // grants (the listing is then filtered with CanRead). Errors and counting
  // as Check.
  absl::Status CheckList(const AuthCaller& caller,
                         absl::string_view path) const;

  // The identity of `context` without refusing anything: "" when anonymous
  // or when authentication fails. (CallerIdentity() in caller_identity.h.)
  std::string IdentityOf(const grpc::ServerContextBase& context) const;

 private:
  absl::Status Deny(AuthFailure failure, std::string message) const;
  std::shared_ptr<const AuthCaller::State> Snapshot() const;

  AuthMetrics* const metrics_;  // may be null; thread-safe
  mutable absl::Mutex mu_;
  std::shared_ptr<const AuthCaller::State> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_AUTH_H_
