// Access control of cgacctd (docs/DESIGN.md §4.11): who is calling
// (authentication) and what they may touch (authorization).
//
//  - Identity: a bearer token ("authorization: Bearer TOKEN", looked up in
//    the --tokens_file table: "token:NAME") or, without a token, the verified
//    client certificate's names, each typed by its source ("uri:", "dns:",
//    "email:", "ip:", "cn:"; server/auth/credentials.h), the first one the
//    policy names. A token, when sent, must be valid: it is never silently
//    ignored in favour of a certificate. Behind a front proxy that checks
//    client certificates itself (AuthConfig::trusted_proxies), the caller
//    is the client whose certificate the proxy passed on
//    (server/auth/forwarded_certificate.h), never the proxy.
//  - Policy (--authz_policy, server/auth/policy.h): identity -> grants. A
//    grant is `admin` (every RPC on every group, unredacted GetEngineInfo),
//    `ro SUBTREE` (read: ListGroups, GetStats, WatchEvents) or `rw SUBTREE`
//    (read, plus charge, uncharge and reclaim in the subtree, plus create,
//    delete and set limits strictly below SUBTREE: the subtree's own root and
//    its limits belong to whoever granted it, so a tenant cannot lift its
//    own memory.max).
//  - No policy: every caller that passes authentication is admin.
//
// The room reads Credentials (server/auth/credentials.h), never gRPC types:
// the rpc room takes them from the call once, and the pipeline authenticates
// each call once (server/pipeline/call.h).
//
// Errors: UNAUTHENTICATED (no identity when one is required, malformed or
// unknown token); PERMISSION_DENIED (identity not in the policy, or no grant
// covering the path with the needed right). Each refusal is counted by
// reason in AuthFailureCounts (cgacct_auth_failures_total{code,reason}).
//
// Thread safety: every class here is thread-safe. Authorizer::Reload()
// swaps the policy and tokens atomically; a call or stream keeps the
// snapshot it authenticated with (Caller holds it).
#ifndef CGACCT_SERVER_AUTH_AUTHORIZER_H_
#define CGACCT_SERVER_AUTH_AUTHORIZER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/auth/credentials.h"
#include "server/auth/forwarded_certificate.h"
#include "server/auth/policy.h"
#include "server/auth/tokens.h"

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
  kNoCredentials,           // neither a verified certificate nor a token
  kMalformedAuthorization,  // "authorization" metadata is not "Bearer TOKEN"
  kBadToken,                // token not in the table (or no table)
  // x-cgacct-client-cert sent by a caller that is not a --trusted_proxies
  // identity (a client forging the header, or a proxy not trusted)
  kUntrustedForwarder,
  // x-cgacct-client-cert from a trusted proxy that is not a certificate
  kBadForwardedCertificate,
  // PERMISSION_DENIED
  kUnknownIdentity,  // authenticated, but not in the policy
  kOutsideGrants,    // no grant covers the path
  kReadOnly,         // only read-only grants cover the path
  kGrantRoot,        // configure the root of one's own grant
  kCpuSlot,          // name a modelled CPU slot (`cpu`) without admin
};
inline constexpr int kNrAuthFailures = 10;
// "no_credentials", "malformed_authorization", ...
const char* AuthFailureName(AuthFailure failure);
// true for the UNAUTHENTICATED reasons.
bool IsUnauthenticated(AuthFailure failure);

// Refusals by reason (and ChargeBatch/ChargeStream ops, one per op): what
// cgacct_auth_failures_total exports (server/metrics/prometheus/).
// Thread safety: thread-safe; Record() is one relaxed atomic add (refusals
// are rare: no sharding).
class AuthFailureCounts {
 public:
  void Record(AuthFailure failure) {
    counts_[static_cast<size_t>(failure)].fetch_add(1,
                                                    std::memory_order_relaxed);
  }
  uint64_t count(AuthFailure failure) const {
    return counts_[static_cast<size_t>(failure)].load(
        std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<uint64_t>, kNrAuthFailures> counts_{};
};

struct AuthConfig {
  // Certificates are verified by gRPC (--client_ca); when set, a caller with
  // neither a certificate nor a token is UNAUTHENTICATED.
  bool client_certificates = false;
  std::optional<TokenTable> tokens;
  std::optional<AuthzPolicy> policy;
  // --trusted_proxies: certificate identities ("cn:front-proxy",
  // "uri:spiffe://..."; not token:) of front proxies that verify client
  // certificates themselves and pass each on in `x-cgacct-client-cert`. A
  // call whose verified certificate names one of these is the client's
  // (its token, else the forwarded certificate's names), never the
  // proxy's: with neither it is UNAUTHENTICATED. Fixed for the
  // Authorizer's life (a reload keeps it).
  std::vector<std::string> trusted_proxies;
};

// The caller of one call or stream: its identity, the one key of every
// per-caller table (limits, request ids, idempotency keys, sessions), and
// the configuration snapshot it was authenticated against (a reload does
// not change it). Default-constructed: the anonymous admin of a server
// without access control.
class Caller {
 public:
  // "" = anonymous (no access control, or credentials that prove nothing).
  const std::string& identity() const { return identity_; }
  bool admin() const { return principal_ == nullptr; }

  // The configuration snapshot (opaque; defined in authorizer.cc).
  struct State;

 private:
  friend class Authorizer;
  std::shared_ptr<const State> state_;
  std::string identity_;
  // Into state_'s policy; null = admin (no policy, or an admin grant).
  const Principal* principal_ = nullptr;
};

// What Authorizer::Authenticate() found. `caller.identity()` is meaningful
// even when `status` refuses (the identity the credentials name, or "" when
// they prove none): per-identity admission keys on it before the refusal is
// answered.
struct Authentication {
  Caller caller;
  absl::Status status;  // OK, UNAUTHENTICATED or PERMISSION_DENIED
  AuthFailure failure = AuthFailure::kNoCredentials;  // when not OK
};

class Authorizer {
 public:
  // `counts` (may be null) must outlive the Authorizer.
  Authorizer(AuthConfig config, AuthFailureCounts* counts);
  Authorizer(const Authorizer&) = delete;
  Authorizer& operator=(const Authorizer&) = delete;

  // Replaces the tokens and policy (client_certificates stays). Calls in
  // flight keep the old ones; streams re-authenticate when they see
  // generation() move (server/pipeline/pipeline.h Reauthenticate).
  void Reload(std::optional<TokenTable> tokens,
              std::optional<AuthzPolicy> policy);
  // How many times Reload() ran: a caller authenticated at an older
  // generation may hold grants the configuration no longer gives.
  uint64_t generation() const {
    // Acquire: pairs with Reload()'s release, so a reader that sees the new
    // generation authenticates against the new snapshot.
    return generation_.load(std::memory_order_acquire);
  }

  // Who `credentials` prove. Counts nothing: a refusal is counted when it
  // is answered (Refuse()), so a call shed before it is not.
  Authentication Authenticate(const Credentials& credentials) const;
  // Counts `authentication`'s refusal and returns its status (OK: nothing).
  absl::Status Refuse(const Authentication& authentication) const;

  // Whether `caller` may do `access` on `path` (a valid group path).
  // Errors: PERMISSION_DENIED naming the identity, the path and the right
  // (kOutsideGrants, kReadOnly, kGrantRoot); counted.
  absl::Status Check(const Caller& caller, Access access,
                     absl::string_view path) const;
  // Whether `caller` may name the modelled CPU slot of a charge or
  // uncharge (its `cpu` field): admin identities only. Each slot a group is
  // touched from gets its own per-CPU stats block (~150 B), so a tenant
  // naming every slot of --cpus=400 made each of its groups cost 60 KB more
  // (issue 22, finding 6); without the field a request runs on its own
  // thread's slot. Errors: PERMISSION_DENIED (kCpuSlot) naming the field
  // and the identity; counted.
  absl::Status CheckCpuSlot(const Caller& caller) const;
  // Check() without counting or a message: may `caller` read `path`? May it
  // do `access` there?
  static bool CanRead(const Caller& caller, absl::string_view path);
  static bool Allows(const Caller& caller, Access access,
                     absl::string_view path);
  // The subtrees `caller` may read (its grants'), for a listing's view
  // (GroupListing::within); nullopt for an admin (everything).
  static std::optional<std::vector<std::string>> ReadableSubtrees(
      const Caller& caller);
  // ListGroups of `path`: readable, or an ancestor of one of the caller's
  // grants (the listing is then filtered with CanRead). Errors and counting
  // as Check.
  absl::Status CheckList(const Caller& caller, absl::string_view path) const;

 private:
  absl::Status Deny(AuthFailure failure, std::string message) const;
  std::shared_ptr<const Caller::State> Snapshot() const;

  AuthFailureCounts* const counts_;  // may be null; thread-safe
  // Names of certificates passed on by trusted proxies; thread-safe.
  mutable ForwardedCertificateCache forwarded_names_;
  std::atomic<uint64_t> generation_{0};  // written under mu_
  mutable absl::Mutex mu_;
  std::shared_ptr<const Caller::State> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_AUTH_AUTHORIZER_H_
