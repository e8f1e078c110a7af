// Forwarder (server/rpc/forwarder.h).
#include "server/rpc/forwarder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/cluster/routing.h"

namespace cgacct {
namespace {

constexpr char kForwardedKey[] = "cgacct-forwarded";
constexpr char kAuthorizationKey[] = "authorization";

// What one forwarded call keeps until its answer.
struct Pending {
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  std::shared_ptr<grpc::GenericStub> stub;  // keeps the channel
  std::function<void(const grpc::Status&, grpc::ByteBuffer)> done;
};

}  // namespace

std::optional<std::string> Forwarder::Target(
    const absl::Status& status,
    const grpc::CallbackServerContext& context) const {
  std::optional<std::string> owner = OwnerAddressOf(status);
  if (!owner.has_value()) return std::nullopt;
  const auto& metadata = context.client_metadata();
  if (metadata.find(kForwardedKey) != metadata.end()) return std::nullopt;
  if (authenticates_ &&
      metadata.find(kAuthorizationKey) == metadata.end())
    return std::nullopt;
  return owner;
}

std::shared_ptr<grpc::GenericStub> Forwarder::StubFor(
    const std::string& address) {
  absl::MutexLock l(&mu_);
  auto it = stubs_.find(address);
  if (it != stubs_.end()) return it->second;
  auto stub = std::make_shared<grpc::GenericStub>(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  stubs_[address] = stub;
  return stub;
}

void Forwarder::Forward(
    const std::string& address, RpcMethod method,
    const grpc::CallbackServerContext& context,
    const google::protobuf::Message& request,
    std::function<void(const grpc::Status&, grpc::ByteBuffer)> done) {
  forwarded_[static_cast<size_t>(method)].fetch_add(1,
                                                    std::memory_order_relaxed);
  auto* pending = new Pending;
  pending->done = std::move(done);
  pending->stub = StubFor(address);
  pending->context.set_deadline(context.deadline());
  pending->context.AddMetadata(kForwardedKey, "1");
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find(kAuthorizationKey); it != metadata.end())
    pending->context.AddMetadata(kAuthorizationKey,
                                 std::string(it->second.data(),
                                             it->second.size()));
  std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  pending->request = grpc::ByteBuffer(&slice, 1);
  pending->stub->UnaryCall(
      &pending->context,
      absl::StrCat("/cgacct.v1.Accounting/", RpcMethodName(method)),
      grpc::StubOptions(), &pending->request, &pending->response,
      [pending](grpc::Status status) {
        pending->done(status, status.ok() ? std::move(pending->response)
                                          : grpc::ByteBuffer());
        delete pending;
      });
}

}  // namespace cgacct
