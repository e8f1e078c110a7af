// Access control (server/auth.h, docs/DESIGN.md §4.11).
#include "server/auth.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/group_path.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace cgacct {

struct AuthCaller::State {
  bool client_certificates = false;
  std::optional<TokenTable> tokens;
  std::optional<AuthzPolicy> policy;
};

namespace {

constexpr const char* kFailureNames[kNrAuthFailures] = {
    "no_credentials", "malformed_authorization", "bad_token",
    "unknown_identity", "outside_grants", "read_only", "grant_root",
};

// Identity or token characters: printable ASCII, no spaces.
bool IsWord(absl::string_view s) {
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return !s.empty();
}

// Constant-time (in the contents of `a`) equality.
bool SameBytes(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  if (a.empty()) return b.empty();
  for (size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i % a.size()] ^ b[i]);
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The lines of `text` as (line number, words), comments and blank lines
// dropped.
std::vector<std::pair<int, std::vector<absl::string_view>>> Lines(
    absl::string_view text) {
  std::vector<std::pair<int, std::vector<absl::string_view>>> out;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (!words.empty()) out.emplace_back(number, std::move(words));
  }
  return out;
}

std::string Quote(absl::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, 256)), "\"");
}

}  // namespace

const char* AuthFailureName(AuthFailure failure) {
  return kFailureNames[static_cast<size_t>(failure)];
}

bool IsUnauthenticated(AuthFailure failure) {
  return failure == AuthFailure::kNoCredentials ||
         failure == AuthFailure::kMalformedAuthorization ||
         failure == AuthFailure::kBadToken;
}

bool PathWithin(absl::string_view path, absl::string_view subtree) {
  if (subtree == "/") return true;
  if (!absl::StartsWith(path, subtree)) return false;
  return path.size() == subtree.size() || path[subtree.size()] == '/';
}

// ---------------------------------------------------------------------------
// AuthzPolicy

absl::StatusOr<AuthzPolicy> AuthzPolicy::Parse(absl::string_view text) {
  AuthzPolicy policy;
  for (const auto& [number, words] : Lines(text)) {
    auto bad = [&, number = number](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", number, ": ", what,
          " (want \"IDENTITY admin\", \"IDENTITY ro PATH\" or "
          "\"IDENTITY rw PATH\")"));
    };
    if (!IsWord(words[0])) return bad("identity has non-printable bytes");
    Principal& p = policy.principals_[words[0]];
    p.identity = std::string(words[0]);
    if (words.size() == 2 && words[1] == "admin") {
      p.admin = true;
      continue;
    }
    if (words.size() != 3) return bad(absl::StrCat(words.size(), " words"));
    if (words[1] != "ro" && words[1] != "rw") {
      return bad(absl::StrCat("right ", Quote(words[1]),
                              " is not admin, ro or rw"));
    }
    if (absl::Status s = ValidateGroupPath(words[2], "subtree"); !s.ok()) {
      return bad(s.message());
    }
    p.grants.push_back(Grant{std::string(words[2]), words[1] == "rw"});
  }
  return policy;
}

absl::StatusOr<AuthzPolicy> AuthzPolicy::LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<AuthzPolicy> policy = Parse(*text);
  if (!policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", policy.status().message()));
  }
  return policy;
}

const Principal* AuthzPolicy::Find(absl::string_view identity) const {
  auto it = principals_.find(identity);
  return it == principals_.end() ? nullptr : &it->second;
}

// ---------------------------------------------------------------------------
// TokenTable

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text) {
  TokenTable table;
  for (const auto& [number, words] : Lines(text)) {
    if (words.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", number, ": ", words.size(),
          " words (want \"IDENTITY TOKEN\")"));
    }
    if (!IsWord(words[0]) || !IsWord(words[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": non-printable bytes"));
    }
    if (words[1].size() < kMinTokenBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": token of ", words[1].size(),
                       " bytes; at least ", kMinTokenBytes));
    }
    for (const Entry& e : table.entries_) {
      if (e.token == words[1]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", number, ": token already given to ", Quote(e.identity)));
      }
    }
    table.entries_.push_back(
        Entry{std::string(words[1]), std::string(words[0])});
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<TokenTable> table = Parse(*text);
  if (!table.ok()) {
    // The message never quotes a token.
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

std::optional<std::string> TokenTable::Lookup(absl::string_view token) const {
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    // No early exit: the time does not tell which entry matched.
    if (SameBytes(e.token, token)) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return found->identity;
}

// ---------------------------------------------------------------------------
// AuthMetrics

std::vector<prometheus::MetricFamily> AuthMetrics::Collect() const {
  prometheus::MetricFamily family;
  family.name = "cgacct_auth_failures_total";
  family.help =
      "Calls (and ChargeBatch/ChargeStream ops) refused by access control, "
      "by gRPC code and reason";
  family.type = prometheus::MetricType::Counter;
  for (int i = 0; i < kNrAuthFailures; ++i) {
    const auto failure = static_cast<AuthFailure>(i);
    prometheus::ClientMetric metric;
    metric.label = {
        {"code", IsUnauthenticated(failure) ? "UNAUTHENTICATED"
                                            : "PERMISSION_DENIED"},
        {"reason", AuthFailureName(failure)}};
    metric.counter.value = static_cast<double>(count(failure));
    family.metric.push_back(std::move(metric));
  }
  return {std::move(family)};
}

// ---------------------------------------------------------------------------
// Authorizer

Authorizer::Authorizer(AuthConfig config, AuthMetrics* metrics)
    : metrics_(metrics) {
  auto state = std::make_shared<AuthCaller::State>();
  state->client_certificates = config.client_certificates;
  state->tokens = std::move(config.tokens);
  state->policy = std::move(config.policy);
  state_ = std::move(state);
}

void Authorizer::Reload(std::optional<TokenTable> tokens,
                        std::optional<AuthzPolicy> policy) {
  absl::MutexLock l(&mu_);
  auto state = std::make_shared<AuthCaller::State>();
  state->client_certificates = state_->client_certificates;
  state->tokens = std::move(tokens);
  state->policy = std::move(policy);
  state_ = std::move(state);
}

std::shared_ptr<const AuthCaller::State> Authorizer::Snapshot() const {
  absl::MutexLock l(&mu_);
  return state_;
}

bool Authorizer::RequiresIdentity() const {
  std::shared_ptr<const AuthCaller::State> state = Snapshot();
  return state->client_certificates || state->tokens.has_value() ||
         state->policy.has_value();
}

absl::Status Authorizer::Deny(AuthFailure failure, std::string message) const {
  if (metrics_ != nullptr) metrics_->Record(failure);
  return IsUnauthenticated(failure)
             ? absl::UnauthenticatedError(std::move(message))
             : absl::PermissionDeniedError(std::move(message));
}

namespace {

// The identities `context` proves, or an error. `candidates` gets the
// certificate's identities (all SANs, or the CN), or the token's identity.
absl::StatusOr<std::vector<std::string>> ProvenIdentities(
    const AuthCaller::State& state, const grpc::ServerContextBase& context,
    AuthFailure* failure) {
  std::vector<std::string> out;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    const absl::string_view value(it->second.data(), it->second.size());
    absl::string_view token = value;
    if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
      *failure = AuthFailure::kMalformedAuthorization;
      return absl::UnauthenticatedError(
          "authorization metadata must be \"Bearer TOKEN\"");
    }
    std::optional<std::string> identity;
    if (state.tokens.has_value()) identity = state.tokens->Lookup(token);
    if (!identity.has_value()) {
      *failure = AuthFailure::kBadToken;
      return absl::UnauthenticatedError(
          state.tokens.has_value()
              ? "bearer token not recognised"
              : "bearer tokens are not accepted by this server (no "
                "--tokens_file)");
    }
    out.push_back(*std::move(identity));
    return out;
  }
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& id : auth->GetPeerIdentity()) {
      out.emplace_back(id.data(), id.size());
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<AuthCaller> Authorizer::Authenticate(
    const grpc::ServerContextBase& context) const {
  AuthCaller caller;
  caller.state_ = Snapshot();
  const AuthCaller::State& state = *caller.state_;
  AuthFailure failure = AuthFailure::kNoCredentials;
  absl::StatusOr<std::vector<std::string>> ids =
      ProvenIdentities(state, context, &failure);
  if (!ids.ok()) return Deny(failure, std::string(ids.status().message()));
  const bool required = state.client_certificates ||
                        state.tokens.has_value() || state.policy.has_value();
  if (ids->empty()) {
    if (required) {
      return Deny(AuthFailure::kNoCredentials,
                  "no client certificate and no bearer token: this server "
                  "requires one");
    }
    return caller;  // anonymous admin: no authentication configured
  }
  caller.identity_ = ids->front();
  if (!state.policy.has_value()) return caller;  // authenticated: admin
  // The first identity the policy knows (a certificate may carry several
  // SANs).
  for (const std::string& id : *ids) {
    if (const Principal* p = state.policy->Find(id); p != nullptr) {
      caller.identity_ = id;
      caller.principal_ = p->admin ? nullptr : p;
      return caller;
    }
  }
  return Deny(AuthFailure::kUnknownIdentity,
              absl::StrCat("identity ", Quote(caller.identity_),
                           " has no grant in the authorization policy"));
}

std::string Authorizer::IdentityOf(
    const grpc::ServerContextBase& context) const {
  std::shared_ptr<const AuthCaller::State> state = Snapshot();
  AuthFailure failure;
  absl::StatusOr<std::vector<std::string>> ids =
      ProvenIdentities(*state, context, &failure);
  if (!ids.ok() || ids->empty()) return "";
  if (state->policy.has_value()) {
    for (const std::string& id : *ids) {
      if (state->policy->Find(id) != nullptr) return id;
    }
  }
  return ids->front();
}

bool Authorizer::CanRead(const AuthCaller& caller, absl::string_view path) {
  if (caller.principal_ == nullptr) return true;
  for (const Grant& g : caller.principal_->grants) {
    if (PathWithin(path, g.subtree)) return true;
  }
  return false;
}

absl::Status Authorizer::Check(const AuthCaller& caller, Access access,
                               absl::string_view path) const {
  if (caller.principal_ == nullptr) return absl::OkStatus();
  bool covered = false;   // some grant covers the path
  bool writable = false;  // some rw grant covers it
  for (const Grant& g : caller.principal_->grants) {
    if (!PathWithin(path, g.subtree)) continue;
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
  return Deny(AuthFailure::kGrantRoot,
              absl::StrCat("identity ", who, " may not ", right, " ",
                           QuotePath(path),
                           ": the root of its own grant (only groups below "
                           "it can be created, deleted or limited)"));
}

absl::Status Authorizer::CheckList(const AuthCaller& caller,
                                   absl::string_view path) const {
  if (caller.principal_ == nullptr) return absl::OkStatus();
  for (const Grant& g : caller.principal_->grants) {
    if (PathWithin(path, g.subtree) || PathWithin(g.subtree, path))
      return absl::OkStatus();
  }
  return Check(caller, Access::kRead, path);
}

}  // namespace cgacct
