// EtcdClient: the few etcd v3 calls cluster mode makes (docs/DESIGN.md
// §4.18), over stubs generated from etcd's own .proto files (KV, Lease,
// Watch; proto/CMakeLists.txt). It is deliberately thin: etcd's semantics
// (linearizable Txn with compares, leases, Watch from a revision) are the
// point, and this class only picks an endpoint, applies a deadline and turns
// gRPC's status into absl::Status naming the call and the endpoint.
//
// Endpoints: one channel per --etcd_endpoints entry; a call that fails
// UNAVAILABLE or DEADLINE_EXCEEDED moves the client to the next endpoint for
// the calls after it (the failed call is not retried here: its caller knows
// whether a retry is safe). Streams (Watch, LeaseKeepAlive) are opened on
// the current endpoint by their owners (server/cluster/cluster_node.h).
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_CLUSTER_ETCD_CLIENT_H_
#define CGACCT_SERVER_CLUSTER_ETCD_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace cgacct {

struct EtcdOptions {
  // HOST:PORT of each etcd member (--etcd_endpoints); at least one.
  std::vector<std::string> endpoints;
  // TLS to etcd (--etcd_ca_file, --etcd_cert_file, --etcd_key_file), or
  // insecure when null.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Deadline of each unary call.
  absl::Duration call_timeout = absl::Seconds(2);
};

class EtcdClient {
 public:
  explicit EtcdClient(EtcdOptions options);
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // etcd's KV.Txn: the compares, then success or failure ops, atomically.
  // Errors: UNAVAILABLE (no member answered in time, or etcd refused for
  // lack of quorum), with the endpoint and etcd's message.
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request);
  // etcd's KV.Range (linearizable unless request.serializable()).
  absl::StatusOr<etcdserverpb::RangeResponse> Range(
      const etcdserverpb::RangeRequest& request);
  // etcd's Lease.LeaseGrant of `ttl` (whole seconds, at least etcd's 2 s).
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(
      absl::Duration ttl);
  // etcd's Lease.LeaseRevoke: every key attached to `lease_id` is deleted.
  absl::Status LeaseRevoke(int64_t lease_id);

  // Stubs on the current endpoint, for the streams.
  std::shared_ptr<etcdserverpb::Watch::Stub> WatchStub();
  std::shared_ptr<etcdserverpb::Lease::Stub> LeaseStub();
  // The endpoint calls go to now (for messages).
  std::string CurrentEndpoint() const;
  // Moves to the next endpoint (a stream's owner saw it fail).
  void NextEndpoint();

 private:
  struct Member {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<etcdserverpb::KV::Stub> kv;
    std::shared_ptr<etcdserverpb::Lease::Stub> lease;
    std::shared_ptr<etcdserverpb::Watch::Stub> watch;
  };
  const Member& Current() const;
  // The status of a failed call: moves on when the member did not answer.
  absl::Status Failed(const char* call, const Member& member,
                      const grpc::Status& status);
  void SetDeadline(grpc::ClientContext* context) const;

  const EtcdOptions options_;
  std::vector<Member> members_;  // constant after construction
  std::atomic<size_t> current_{0};  // index into members_, modulo its size
};

// etcd's "prefix" range end: the key after every key that starts with
// `prefix` (the last byte below 0xff incremented, the rest dropped).
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace cgacct

#endif  // CGACCT_SERVER_CLUSTER_ETCD_CLIENT_H_
