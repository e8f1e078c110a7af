// Credentials and call contexts from gRPC calls (server/rpc/peer.h).
#include "server/rpc/peer.h"

#include <memory>
#include <string>
#include <vector>

#include <grpc/grpc_security_constants.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/auth/forwarded_certificate.h"

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
  it = metadata.find(kForwardedClientCertKey);
  if (it != metadata.end())
    out.forwarded_certificate.emplace(it->second.data(), it->second.size());
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return out;
  auto add = [&](const char* property, const char* kind) {
    for (const grpc::string_ref& name : auth->FindPropertyValues(property))
      out.certificate_names.push_back(
          absl::StrCat(kind, absl::string_view(name.data(), name.size())));
  };
  // A SPIFFE ID is the one URI SAN of its certificate: with several, none
  // of them is the certificate's identity.
  if (auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME).size() == 1)
    add(GRPC_PEER_URI_PROPERTY_NAME, "uri:");
  add(GRPC_PEER_DNS_PROPERTY_NAME, "dns:");
  add(GRPC_PEER_EMAIL_PROPERTY_NAME, "email:");
  add(GRPC_PEER_IP_PROPERTY_NAME, "ip:");
  add(GRPC_X509_CN_PROPERTY_NAME, "cn:");
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
