// CallerIdentity(): the identity of the caller of a gRPC call, for any part
// of the server that keys state per caller (request ids, per-identity
// limits). See server/auth.h for how identities are proven.
#ifndef CGACCT_SERVER_CALLER_IDENTITY_H_
#define CGACCT_SERVER_CALLER_IDENTITY_H_

#include <grpcpp/grpcpp.h>

#include <string>

namespace cgacct {

class Authorizer;

// The identity of the caller of `ctx`: the bearer token's identity (from the
// installed Authorizer's --tokens_file table), else the verified client
// certificate's identity (the first SAN the policy knows, else the first SAN,
// else the CN). "" = anonymous: no credentials, or credentials that do not
// authenticate (such a call is refused UNAUTHENTICATED by the service
// anyway). Never fails.
//
// Thread safety: thread-safe. Without an installed Authorizer, only the
// certificate identity is read.
std::string CallerIdentity(const grpc::ServerContextBase* ctx);

// Installs the Authorizer CallerIdentity() consults (null uninstalls). The
// Authorizer must stay alive until it is uninstalled; cgacctd installs its
// one Authorizer before the server starts and uninstalls it after the server
// is destroyed. Thread-safe (an atomic pointer).
void InstallCallerIdentitySource(const Authorizer* authorizer);

}  // namespace cgacct

#endif  // CGACCT_SERVER_CALLER_IDENTITY_H_
