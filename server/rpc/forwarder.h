// Forwarder: cluster mode's one hop (docs/DESIGN.md §4.18). A unary call
// that the routing stage refused because another node owns its shard
// (server/cluster/routing.h) is sent on to that owner, once, and the
// owner's answer (status, message, response) is the caller's.
//
// When it forwards: the status carries an owner (OwnerAddressOf()); the
// call is not itself a forwarded one (metadata `cgacct-forwarded`: never
// two hops, never a loop while the map changes); and the caller can be
// vouched for at the owner: without access control anyone, with it only a
// caller that presented a bearer token (`authorization`, passed on as it
// came). A caller known by its client certificate is not forwarded (the
// owner would see this node's connection, not the caller's): it gets the
// refusal with the `cgacct-owner` trailer and follows it. Nodes dial each
// other in plaintext: a node serving TLS does not forward (its clients
// follow the trailer).
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_RPC_FORWARDER_H_
#define CGACCT_SERVER_RPC_FORWARDER_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/message.h"
#include "server/metrics/rpc_metrics.h"

namespace cgacct {

class Forwarder {
 public:
  // `authenticates`: access control is on (only token callers forwarded).
  explicit Forwarder(bool authenticates) : authenticates_(authenticates) {}
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // The owner to send the call of `context` to, when `status` is a routing
  // refusal that may be forwarded (see the file comment).
  std::optional<std::string> Target(
      const absl::Status& status,
      const grpc::CallbackServerContext& context) const;

  // Sends `request` as `method` of cgacct.v1.Accounting to `address` with
  // the caller's deadline and token, marked forwarded; `done` gets the
  // owner's status and, when OK, its response bytes (on a gRPC thread).
  void Forward(const std::string& address, RpcMethod method,
               const grpc::CallbackServerContext& context,
               const google::protobuf::Message& request,
               std::function<void(const grpc::Status&, grpc::ByteBuffer)> done);

  // Calls forwarded, by method (cgacct_cluster_forwards_total).
  uint64_t forwarded(RpcMethod method) const {
    return forwarded_[static_cast<size_t>(method)].load(
        std::memory_order_relaxed);
  }

 private:
  std::shared_ptr<grpc::GenericStub> StubFor(const std::string& address);

  const bool authenticates_;
  absl::Mutex mu_;
  // One channel per owner address seen (a cluster has a few nodes).
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::GenericStub>> stubs_
      ABSL_GUARDED_BY(mu_);
  // Relaxed counters.
  std::array<std::atomic<uint64_t>, kNrRpcMethods> forwarded_{};
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_FORWARDER_H_
