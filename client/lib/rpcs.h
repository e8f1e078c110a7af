// The unary RPCs of one cgacct::client::Client, each retried: up to
// Options::max_attempts attempts of Options::call_timeout while the call
// fails with UNAVAILABLE, DEADLINE_EXCEEDED or ABORTED, every attempt with
// the same request (so the same request_id: the server applies it once).
// A charge-path call whose last attempt failed that way may or may not have
// been applied: it raises the needs-reconcile flag, which the keepalive
// thread takes (TakeNeedsReconcile()) to bring the books back to the
// server's.
//
// Thread safety: thread-safe; the counters and the flag are relaxed atomics
// (statistics and a hint: the keepalive thread re-reads the truth with
// GetSession). Internal to the library (not installed).
#ifndef CGACCT_CLIENT_LIB_RPCS_H_
#define CGACCT_CLIENT_LIB_RPCS_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "cgacct/client.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::client::internal {

// UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED or CANCELLED (a node shutting
// down cancels the calls in flight): worth another attempt.
bool Retryable(grpc::StatusCode code);

// UNAVAILABLE, DEADLINE_EXCEEDED, FAILED_PRECONDITION or CANCELLED (a node
// shutting down): the node did not serve the group (in a cluster: another node owns its shard, nobody does
// now, or this node has no lease), rather than refusing the request itself.
// A re-charge so refused is kept for ClusterClient's move; ClusterClient
// re-reads the map after it.
bool NotServedHere(grpc::StatusCode code);
inline bool NotServedHere(StatusCode code) {
  return NotServedHere(static_cast<grpc::StatusCode>(code));
}

// NOT_FOUND naming the session (closed, expired, server restarted), as
// opposed to NOT_FOUND naming a group.
bool SessionGone(const grpc::Status& s);

// Runs `call(context)` up to `attempts` times, each with a deadline of
// `timeout` from its start, while it fails with a Retryable() code (the
// caller sends the same request each time, so the same request_id),
// pausing 10, 20, 40 ... ms (at most 200) between attempts; counts each
// attempt after the first in *retries (if not null). Returns the last
// status. The retry loop of Rpcs and of Groups (groups.cc).
template <typename Call>
grpc::Status CallWithRetries(int attempts, std::chrono::milliseconds timeout,
                             Call call,
                             std::atomic<uint64_t>* retries = nullptr) {
  grpc::Status status;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) {
      if (retries != nullptr) retries->fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::min(10 << (attempt - 1), 200)));
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    status = call(&context);
    if (status.ok() || !Retryable(status.error_code())) return status;
  }
  return status;
}

class Rpcs {
 public:
  using SessionStream = grpc::ClientReaderWriter<v1::SessionClientMessage,
                                                 v1::SessionServerMessage>;

  // `options` must outlive this object.
  Rpcs(std::shared_ptr<grpc::Channel> channel, const Options& options);

  // One Charge on session `sid`. `batch_pages` > nr_pages sets
  // ChargeRequest.batch_pages (the server charges the batch if it fits at
  // once, else nr_pages); *throttle_us and *charged (if not null) get the
  // answer's throttle_us and nr_pages. `resume` marks a re-charge of pages
  // held under a lost session (ChargeRequest.resume: admitted in a cluster
  // node's takeover grace).
  grpc::Status Charge(const std::string& sid, std::string_view group,
                      uint64_t nr_pages, int kind, uint64_t* throttle_us,
                      uint64_t batch_pages = 0, uint64_t* charged = nullptr,
                      bool resume = false);

  // One Uncharge on session `sid`; `restock`: the client stocks its frees
  // again after it (UnchargeRequest.restock).
  grpc::Status Uncharge(const std::string& sid, std::string_view group,
                        uint64_t nr_pages, int kind, bool restock = false);

  // OpenSession with Options::session_ttl and client_name ("HOST:PID" when
  // empty).
  grpc::Status OpenSession(v1::OpenSessionResponse* response);

  grpc::Status GetSession(const std::string& sid, v1::SessionInfo* info);

  grpc::Status CloseSession(const std::string& sid);

  // A new SessionStream on `context` (not retried: the stream thread
  // re-attaches).
  std::unique_ptr<SessionStream> OpenStream(grpc::ClientContext* context);

  // Whether a charge-path call failed ambiguously since the last call;
  // clears the flag.
  bool TakeNeedsReconcile() { return needs_reconcile_.exchange(false); }
  // Raises it again (a reconcile that failed).
  void SetNeedsReconcile() { needs_reconcile_.store(true); }

  // Adds the RPC counters (charge_rpcs, uncharge_rpcs, retries) to *stats.
  void AddCounts(ClientStats* stats) const;

 private:
  // CallWithRetries() with Options::max_attempts and call_timeout, counted
  // in retries_.
  template <typename Call>
  grpc::Status WithRetries(Call call) {
    return CallWithRetries(options_.max_attempts, options_.call_timeout,
                           std::move(call), &retries_);
  }

  // Fills the fields every charge-path request has.
  template <typename Request>
  void FillPageRequest(const std::string& sid, std::string_view group,
                       uint64_t nr_pages, int kind, Request* request);

  std::string NextRequestId();

  const Options& options_;
  const std::unique_ptr<v1::Accounting::Stub> stub_;
  const std::string request_prefix_;  // random, per Client
  std::atomic<uint64_t> request_seq_{0};
  std::atomic<uint64_t> charge_rpcs_{0};    // attempts
  std::atomic<uint64_t> uncharge_rpcs_{0};  // attempts
  std::atomic<uint64_t> retries_{0};        // attempts after the first
  // Set by a charge-path call whose last attempt failed ambiguously.
  std::atomic<bool> needs_reconcile_{false};
};

}  // namespace cgacct::client::internal

#endif  // CGACCT_CLIENT_LIB_RPCS_H_
