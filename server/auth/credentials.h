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

namespace cgacct {

struct Credentials {
  // The value of the call's "authorization" metadata, if it sent one
  // (expected: "Bearer TOKEN").
  std::optional<std::string> authorization;
  // The identities of the client certificate gRPC verified against
  // --client_ca, as gRPC reports them (every subject alternative name, else
  // the common name); empty without a verified certificate.
  std::vector<std::string> certificate_identities;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_AUTH_CREDENTIALS_H_
