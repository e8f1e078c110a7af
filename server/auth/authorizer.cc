// Access control (server/auth/authorizer.h, docs/DESIGN.md §4.11).
#include "server/auth/authorizer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/group_path.h"
#include "server/auth/config_text.h"
#include "server/auth/forwarded_certificate.h"

namespace cgacct {

using auth_internal::Quote;

struct Caller::State {
  bool client_certificates = false;
  std::optional<TokenTable> tokens;
  std::optional<AuthzPolicy> policy;
  std::vector<std::string> trusted_proxies;
};

namespace {

constexpr const char* kFailureNames[kNrAuthFailures] = {
    "no_credentials",      "malformed_authorization",
    "bad_token",           "untrusted_forwarder",
    "bad_forwarded_certificate",
    "unknown_identity",    "outside_grants",
    "read_only",           "grant_root",
    "cpu_slot",
};

absl::Status Refusal(AuthFailure failure, std::string message) {
  return IsUnauthenticated(failure)
             ? absl::UnauthenticatedError(std::move(message))
             : absl::PermissionDeniedError(std::move(message));
}

}  // namespace

const char* AuthFailureName(AuthFailure failure) {
  return kFailureNames[static_cast<size_t>(failure)];
}

bool IsUnauthenticated(AuthFailure failure) {
  return failure == AuthFailure::kNoCredentials ||
         failure == AuthFailure::kMalformedAuthorization ||
         failure == AuthFailure::kBadToken ||
         failure == AuthFailure::kUntrustedForwarder ||
         failure == AuthFailure::kBadForwardedCertificate;
}

Authorizer::Authorizer(AuthConfig config, AuthFailureCounts* counts)
    : counts_(counts) {
  auto state = std::make_shared<Caller::State>();
  state->client_certificates = config.client_certificates;
  state->tokens = std::move(config.tokens);
  state->policy = std::move(config.policy);
  state->trusted_proxies = std::move(config.trusted_proxies);
  state_ = std::move(state);
}

void Authorizer::Reload(std::optional<TokenTable> tokens,
                        std::optional<AuthzPolicy> policy) {
  absl::MutexLock l(&mu_);
  auto state = std::make_shared<Caller::State>();
  state->client_certificates = state_->client_certificates;
  state->trusted_proxies = state_->trusted_proxies;
  state->tokens = std::move(tokens);
  state->policy = std::move(policy);
  state_ = std::move(state);
  generation_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const Caller::State> Authorizer::Snapshot() const {
  absl::MutexLock l(&mu_);
  return state_;
}

absl::Status Authorizer::Deny(AuthFailure failure, std::string message) const {
  if (counts_ != nullptr) counts_->Record(failure);
  return Refusal(failure, std::move(message));
}

Authentication Authorizer::Authenticate(const Credentials& credentials) const {
  Authentication out;
  out.caller.state_ = Snapshot();
  const Caller::State& state = *out.caller.state_;
  auto refuse = [&out](AuthFailure failure, std::string message) {
    out.failure = failure;
    out.status = Refusal(failure, std::move(message));
    return std::move(out);
  };
  // A caller whose own certificate names a trusted proxy speaks for the
  // client behind it; anyone else's x-cgacct-client-cert is a forgery.
  bool via_proxy = false;
  for (const std::string& name : credentials.certificate_names) {
    for (const std::string& proxy : state.trusted_proxies)
      via_proxy = via_proxy || name == proxy;
  }
  if (credentials.forwarded_certificate.has_value() && !via_proxy) {
    return refuse(AuthFailure::kUntrustedForwarder,
                  absl::StrCat(kForwardedClientCertKey,
                               " metadata is accepted only from a front "
                               "proxy named by --trusted_proxies"));
  }
  // The identities the credentials prove: the token's, else the
  // certificate's (all SANs, or the CN): behind a trusted proxy the
  // certificate it passed on, none without one (never the proxy's own).
  std::vector<std::string> ids;
  if (credentials.authorization.has_value()) {
    absl::string_view token = *credentials.authorization;
    if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
      return refuse(AuthFailure::kMalformedAuthorization,
                    "authorization metadata must be \"Bearer TOKEN\"");
    }
    std::optional<std::string> identity;
    if (state.tokens.has_value()) identity = state.tokens->Lookup(token);
    if (!identity.has_value()) {
      return refuse(AuthFailure::kBadToken,
                    state.tokens.has_value()
                        ? "bearer token not recognised"
                        : "bearer tokens are not accepted by this server (no "
                          "--tokens_file)");
    }
    ids.push_back(absl::StrCat("token:", *identity));
  } else if (via_proxy) {
    if (credentials.forwarded_certificate.has_value()) {
      absl::StatusOr<std::shared_ptr<const std::vector<std::string>>> names =
          forwarded_names_.Names(*credentials.forwarded_certificate);
      if (!names.ok()) {
        return refuse(AuthFailure::kBadForwardedCertificate,
                      std::string(names.status().message()));
      }
      ids = **names;
    }
  } else {
    ids = credentials.certificate_names;
  }
  const bool required = state.client_certificates || state.tokens.has_value() ||
                        state.policy.has_value();
  if (ids.empty()) {
    if (required) {
      return refuse(AuthFailure::kNoCredentials,
                    "no client certificate and no bearer token: this server "
                    "requires one");
    }
    return out;  // anonymous admin: no authentication configured
  }
  out.caller.identity_ = ids.front();
  if (!state.policy.has_value()) return out;  // authenticated: admin
  // The first identity the policy knows (a certificate may carry several
  // SANs).
  for (const std::string& id : ids) {
    if (const Principal* p = state.policy->Find(id); p != nullptr) {
      out.caller.identity_ = id;
      out.caller.principal_ = p->admin ? nullptr : p;
      return out;
    }
  }
  std::string message =
      absl::StrCat("identity ", Quote(out.caller.identity_),
                   " has no grant in the authorization policy");
  return refuse(AuthFailure::kUnknownIdentity, std::move(message));
}

absl::Status Authorizer::Refuse(const Authentication& authentication) const {
  if (authentication.status.ok()) return absl::OkStatus();
  if (counts_ != nullptr) counts_->Record(authentication.failure);
  return authentication.status;
}

bool Authorizer::CanRead(const Caller& caller, absl::string_view path) {
  if (caller.principal_ == nullptr) return true;
  for (const Grant& g : caller.principal_->grants) {
    if (PathAtOrBelow(path, g.subtree)) return true;
  }
  return false;
}

std::optional<std::vector<std::string>> Authorizer::ReadableSubtrees(
    const Caller& caller) {
  if (caller.principal_ == nullptr) return std::nullopt;
  std::vector<std::string> subtrees;
  subtrees.reserve(caller.principal_->grants.size());
  for (const Grant& g : caller.principal_->grants) {
    subtrees.push_back(g.subtree);
  }
  return subtrees;
}

bool Authorizer::Allows(const Caller& caller, Access access,
                        absl::string_view path) {
  if (caller.principal_ == nullptr) return true;
  bool covered = false;
  for (const Grant& g : caller.principal_->grants) {
    if (!PathAtOrBelow(path, g.subtree)) continue;
    covered = true;
    if (!g.write) continue;
    if (access != Access::kConfigure || path != g.subtree) return true;
  }
  return covered && access == Access::kRead;
}

absl::Status Authorizer::Check(const Caller& caller, Access access,
                               absl::string_view path) const {
  if (caller.principal_ == nullptr) return absl::OkStatus();
  bool covered = false;   // some grant covers the path
  bool writable = false;  // some rw grant covers it
  for (const Grant& g : caller.principal_->grants) {
    if (!PathAtOrBelow(path, g.subtree)) continue;
    covered = true;
    if (!g.write) continue;
    writable = true;
    switch (access) {
      case Access::kRead:
      case Access::kWrite:
        return absl::OkStatus();
      case Access::kConfigure:
        if (path != g.subtree) return absl::OkStatus();
        break;
    }
  }
  if (covered && access == Access::kRead) return absl::OkStatus();
  const char* right = access == Access::kRead    ? "read"
                      : access == Access::kWrite ? "charge"
                                                 : "configure";
  const std::string who = Quote(caller.identity_);
  if (!covered) {
    return Deny(AuthFailure::kOutsideGrants,
                absl::StrCat("identity ", who, " may not ", right, " ",
                             QuotePath(path), ": outside its grants"));
  }
  if (!writable) {
    return Deny(AuthFailure::kReadOnly,
                absl::StrCat("identity ", who, " may not ", right, " ",
                             QuotePath(path), ": read-only grant"));
  }
  return Deny(
      AuthFailure::kGrantRoot,
      absl::StrCat("identity ", who, " may not ", right, " ", QuotePath(path),
                   ": the root of its own grant (only groups below "
                   "it can be created, deleted or limited)"));
}

absl::Status Authorizer::CheckCpuSlot(const Caller& caller) const {
  if (caller.principal_ == nullptr) return absl::OkStatus();
  return Deny(AuthFailure::kCpuSlot,
              absl::StrCat("cpu: identity ", Quote(caller.identity_),
                           " may not name a modelled CPU slot (admin "
                           "identities only); without the field the request "
                           "runs on its own thread's slot"));
}

absl::Status Authorizer::CheckList(const Caller& caller,
                                   absl::string_view path) const {
  if (caller.principal_ == nullptr) return absl::OkStatus();
  for (const Grant& g : caller.principal_->grants) {
    if (PathAtOrBelow(path, g.subtree) || PathAtOrBelow(g.subtree, path))
      return absl::OkStatus();
  }
  return Check(caller, Access::kRead, path);
}

}  // namespace cgacct
