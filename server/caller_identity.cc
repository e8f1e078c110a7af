// CallerIdentity() (server/caller_identity.h).
#include "server/caller_identity.h"

#include <atomic>

#include "server/auth.h"

namespace cgacct {
namespace {

// Written by InstallCallerIdentitySource(); the pointee's lifetime is the
// installer's contract (see the header).
std::atomic<const Authorizer*> g_source{nullptr};

}  // namespace

void InstallCallerIdentitySource(const Authorizer* authorizer) {
  g_source.store(authorizer, std::memory_order_release);
}

std::string CallerIdentity(const grpc::ServerContextBase* ctx) {
  if (ctx == nullptr) return "";
  if (const Authorizer* a = g_source.load(std::memory_order_acquire);
      a != nullptr) {
    return a->IdentityOf(*ctx);
  }
  const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  const std::vector<grpc::string_ref> ids = auth->GetPeerIdentity();
  if (ids.empty()) return "";
  return std::string(ids.front().data(), ids.front().size());
}

}  // namespace cgacct
