// What the rpc room takes from a gRPC call once, when it arrives, for the
// pipeline: the credentials the caller presented (server/auth/
// credentials.h), and the CallContext built from them.
//
// Thread safety: pure functions of the call's context.
#ifndef CGACCT_SERVER_RPC_PEER_H_
#define CGACCT_SERVER_RPC_PEER_H_

#include <grpcpp/server_context.h>

#include "server/auth/credentials.h"
#include "server/metrics/rpc_metrics.h"
#include "server/pipeline/call.h"
#include "server/pipeline/pipeline.h"

namespace cgacct {

// The "authorization" and "x-cgacct-client-cert" metadata (if sent) and the
// identities of the client certificate gRPC verified (server/auth/
// credentials.h; none without one).
Credentials CredentialsOf(const grpc::ServerContextBase& context);

// pipeline.BeginCall() for the call of `context`: its deadline, its
// credentials when the pipeline authenticates, and a cancellation probe.
// `context` must outlive the returned context.
CallContext BeginCall(const Pipeline& pipeline, RpcMethod method,
                      const grpc::ServerContextBase& context);

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_PEER_H_
