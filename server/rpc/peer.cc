// Credentials and call contexts from gRPC calls (server/rpc/peer.h).
#include "server/rpc/peer.h"

#include <memory>
#include <string>
#include <vector>

namespace cgacct {
namespace {

bool ContextCancelled(const void* context) {
  return static_cast<const grpc::ServerContextBase*>(context)->IsCancelled();
}

}  // namespace

Credentials CredentialsOf(const grpc::ServerContextBase& context) {
  Credentials out;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end())
    out.authorization.emplace(it->second.data(), it->second.size());
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& id : auth->GetPeerIdentity())
      out.certificate_identities.emplace_back(id.data(), id.size());
  }
  return out;
}

CallContext BeginCall(const Pipeline& pipeline, RpcMethod method,
                      const grpc::ServerContextBase& context) {
  CallContext call;
  if (pipeline.authenticates()) {
    const Credentials credentials = CredentialsOf(context);
    call = pipeline.BeginCall(method, context.deadline(), &credentials);
  } else {
    call = pipeline.BeginCall(method, context.deadline(), nullptr);
  }
  call.cancelled = &ContextCancelled;
  call.cancelled_arg = &context;
  return call;
}

}  // namespace cgacct
