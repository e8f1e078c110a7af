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
// follow the trailer). The same hop, under the same rules, fans a GetStats
// above the shard roots out to the owners of the shards below it
// (FanOutStats()).
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
#include "cgacct/v1/accounting.pb.h"
#include "google/protobuf/message.h"
#include "server/cluster/cluster_node.h"
#include "server/metrics/rpc_metrics.h"

namespace cgacct {

class Forwarder {
 public:
  // `authenticates`: access control is on (only token callers forwarded).
  // `cluster`: the node's map (who owns the shards a read above the shard
  // roots misses); must outlive the Forwarder.
  Forwarder(bool authenticates, const ClusterNode* cluster)
      : authenticates_(authenticates), cluster_(cluster) {}
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

  // GetStats above the shard roots (docs/DESIGN.md §4.18): whether this
  // node's answer `response` (ReadOps::GetStats(): the shards it owns)
  // misses shards, `request` named no shard_roots and the call may be
  // passed on (as Target(): not itself forwarded, a token caller under
  // access control).
  bool StatsFanOutWanted(const grpc::CallbackServerContext& context,
                         const v1::GetStatsRequest& request,
                         const v1::GroupStats& response) const;
  // Then: asks each owner of a missing shard once for GetStats of the same
  // path with shard_roots = the missing shards it owns (with the caller's
  // deadline and token, marked forwarded), adds their answers in
  // (AddShardSums()) and calls `done` once (on a gRPC thread; at once when
  // no missing shard has an owner now). An owner that fails leaves its
  // shards in missing_shards. `response` must stay valid until `done`.
  void FanOutStats(const grpc::CallbackServerContext& context,
                   const v1::GetStatsRequest& request,
                   v1::GroupStats* response, std::function<void()> done);

  // Calls forwarded, by method (cgacct_cluster_forwards_total).
  uint64_t forwarded(RpcMethod method) const {
    return forwarded_[static_cast<size_t>(method)].load(
        std::memory_order_relaxed);
  }

 private:
  std::shared_ptr<grpc::GenericStub> StubFor(const std::string& address);

  // Whether `context`'s call may be passed on to another node.
  bool MayPassOn(const grpc::CallbackServerContext& context) const;

  const bool authenticates_;
  const ClusterNode* const cluster_;
  absl::Mutex mu_;
  // One channel per owner address seen (a cluster has a few nodes).
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::GenericStub>> stubs_
      ABSL_GUARDED_BY(mu_);
  // Relaxed counters.
  std::array<std::atomic<uint64_t>, kNrRpcMethods> forwarded_{};
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_FORWARDER_H_
