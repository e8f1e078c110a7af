// Credentials: what a call presents to prove who is calling, as the rpc room
// takes it from the transport (server/rpc/peer.h). The auth room reads only
// this, never gRPC's types, so its decisions are plain functions of it.
//
// Thread safety: a value type (thread-compatible).
#ifndef CGACCT_SERVER_AUTH_CREDENTIALS_H_
#define CGACCT_SERVER_AUTH_CREDENTIALS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cgacct {

// An identity says where its name came from, and a grant names the kind it
// grants (docs/DESIGN.md §4.11): "uri:spiffe://t/b" (a URI SAN), "dns:host"
// (a DNS SAN), "email:a@b" (an email SAN), "ip:10.0.0.1" (an IP SAN),
// "cn:name" (the subject's common name), "token:name" (a --tokens_file
// entry). The same name of two kinds is two identities: a certificate whose
// CN reads like a URI never holds a uri: grant.
inline constexpr const char* kIdentityKinds[] = {"uri:",  "dns:", "email:",
                                                 "ip:",   "cn:",  "token:"};

// True when `identity` starts with one of kIdentityKinds and names
// something after it.
bool HasIdentityKind(absl::string_view identity);

struct Credentials {
  // The value of the call's "authorization" metadata, if it sent one
  // (expected: "Bearer TOKEN").
  std::optional<std::string> authorization;
  // The names of the client certificate gRPC verified against --client_ca,
  // each with its kind (kIdentityKinds): its URI SAN (only when the
  // certificate has exactly one, as SPIFFE requires of an SVID: several
  // name no URI identity), its DNS, email and IP SANs, then its CN. Empty
  // without a verified certificate.
  std::vector<std::string> certificate_names;
  // The `x-cgacct-client-cert` metadata (server/auth/forwarded_certificate.h)
  // as it came, if sent: a client certificate a front proxy verified and
  // passed on. Believed only from a --trusted_proxies caller.
  std::optional<std::string> forwarded_certificate;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_AUTH_CREDENTIALS_H_
