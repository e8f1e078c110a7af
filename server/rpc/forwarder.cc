// Forwarder (server/rpc/forwarder.h).
#include "server/rpc/forwarder.h"

#include <utility>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/cluster/routing.h"
#include "server/pipeline/reads.h"
#include "server/rpc/codec.h"

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

bool Forwarder::MayPassOn(const grpc::CallbackServerContext& context) const {
  const auto& metadata = context.client_metadata();
  if (metadata.find(kForwardedKey) != metadata.end()) return false;
  return !authenticates_ ||
         metadata.find(kAuthorizationKey) != metadata.end();
}

std::optional<std::string> Forwarder::Target(
    const absl::Status& status,
    const grpc::CallbackServerContext& context) const {
  std::optional<std::string> owner = OwnerAddressOf(status);
  if (!owner.has_value() || !MayPassOn(context)) return std::nullopt;
  return owner;
}

bool Forwarder::StatsFanOutWanted(const grpc::CallbackServerContext& context,
                                  const v1::GetStatsRequest& request,
                                  const v1::GroupStats& response) const {
  return cluster_ != nullptr && !response.missing_shards().empty() &&
         request.shard_roots().empty() && MayPassOn(context);
}

void Forwarder::FanOutStats(const grpc::CallbackServerContext& context,
                            const v1::GetStatsRequest& request,
                            v1::GroupStats* response,
                            std::function<void()> done) {
  // The missing shards by owner (none now: left missing).
  std::map<std::string, v1::GetStatsRequest> asks;
  for (const std::string& root : response->missing_shards()) {
    const ShardRoute route = cluster_->Route(root);
    if (route.kind != ShardRoute::Kind::kElsewhere) continue;
    v1::GetStatsRequest& ask = asks[route.owner_address];
    if (ask.path().empty()) {
      ask.set_path(request.path());
      ask.set_flush(request.flush());
    }
    ask.add_shard_roots(root);
  }
  if (asks.empty()) {
    done();
    return;
  }
  // The answers come on gRPC's threads: the sums and the count under mu.
  struct FanOut {
    FanOut(v1::GroupStats* r, size_t n, std::function<void()> d)
        : response(r), pending(n), done(std::move(d)) {}
    absl::Mutex mu;
    v1::GroupStats* const response ABSL_PT_GUARDED_BY(mu);
    size_t pending ABSL_GUARDED_BY(mu);
    const std::function<void()> done;
  };
  auto state = std::make_shared<FanOut>(response, asks.size(), std::move(done));
  for (const auto& [address, ask] : asks) {
    Forward(address, RpcMethod::kGetStats, context, ask,
            [state](const grpc::Status& status, grpc::ByteBuffer bytes) {
              v1::GroupStats answer;
              const bool ok = status.ok() &&
                              ParseRequest(bytes, &answer).ok();
              bool last;
              {
                absl::MutexLock l(&state->mu);
                if (ok) AddShardSums(answer, state->response);
                last = --state->pending == 0;
              }
              if (last) state->done();
            });
  }
}

namespace {

// A forward that failed in transport (the owner dead, stopped, or not
// listening: gRPC's "failed to connect to all addresses; last error: ...")
// says so in the caller's terms: which node, and that a failover moves the
// shard. An owner's own answer (its grace refusal, a memory.max) passes
// unchanged.
grpc::Status OwnerUnreachable(const std::string& address,
                              const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return status;
  const std::string& message = status.error_message();
  bool transport = false;
  for (const char* sign :
       {"failed to connect", "Socket closed", "Connection reset",
        "Broken pipe", "Connection refused", "connections to all backends failing"}) {
    transport = transport || absl::StrContains(message, sign);
  }
  if (!transport) return status;
  return grpc::Status(
      grpc::StatusCode::UNAVAILABLE,
      absl::StrCat("the owner of this shard, node ", address,
                   ", did not answer (", message,
                   "): if it is gone, another node takes the shard within "
                   "its lease TTL (--cluster_lease_ttl); retry then"));
}

}  // namespace

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
      [pending, address](grpc::Status status) {
        pending->done(OwnerUnreachable(address, status),
                      status.ok() ? std::move(pending->response)
                                  : grpc::ByteBuffer());
        delete pending;
      });
}

}  // namespace cgacct
