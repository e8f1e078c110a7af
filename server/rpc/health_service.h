// grpc.health.v1 (the standard gRPC health checking protocol), served by
// cgacctd's own code on --listen and --health_listen (docs/DESIGN.md §4.10).
//
// Why not gRPC's default health service: gRPC 1.51 serves it as a unary and
// a server-streaming method, whose request the library reads, whole and
// before any hook sees the call, up to any size its 5-byte prefix announces
// (the --max_message_bytes check comes once it is in). Health is
// unauthenticated, so four 500 MB health checks from anyone took cgacctd to
// 1.9 GB on --listen and 653 MB on --health_listen (issue 22's re-attack at
// 68c24d2). Here both methods are registered as bidi streams on the server
// side (the wire and every client are unchanged: a unary call is one read
// and one write, a server stream one read and any number of writes), so the
// request is read by the call's reactor, after the call has started: the
// receive guard (server/rpc/receive_guard.h) sees the read begin and holds
// it to ReceiveGuard::kHealthRequestMaxBytes, and a request that arrives
// larger than that is refused here.
//
// What it answers, as gRPC's default service does: Check gives the status of
// the named service ("" is the whole server), NOT_FOUND for a name it does
// not serve; Watch sends the status at once (SERVICE_UNKNOWN for a name it
// does not serve) and again each time it changes, the latest only (a slow
// reader never gets a backlog), until the client cancels or the statuses
// shut down (then it sends NOT_SERVING and ends UNAVAILABLE). Requests of
// more than kHealthRequestMaxBytes: RESOURCE_EXHAUSTED; not a
// HealthCheckRequest: INVALID_ARGUMENT. Open calls are bounded per client
// host (the peer's address without its port): kMaxCallsPerHost Checks and
// as many Watches, kMaxWatches Watches in all; a call past a bound is
// refused RESOURCE_EXHAUSTED before its request is read (40,000
// unauthenticated Watch streams held 737 MB, 20,000 half-sent Checks
// 440 MB: the re-attack at c1df8aa).
//
// Thread safety: HealthStatuses is thread-safe; a HealthService is used by
// gRPC (one per server: a grpc::Service registers with one server) and
// reads the statuses it was given, which must outlive it.
#ifndef CGACCT_SERVER_RPC_HEALTH_SERVICE_H_
#define CGACCT_SERVER_RPC_HEALTH_SERVICE_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>
#include <grpcpp/impl/service_type.h>

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.pb.h"

namespace cgacct {

using HealthStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

// The statuses the health services of one process answer from (both
// servers see one set).
class HealthStatuses {
 public:
  // A Watch stream. Told of its service's status outside the statuses'
  // lock, held alive meanwhile by Ref()/Unref() (it may end concurrently).
  class Watcher {
   public:
    virtual void OnHealthChanged(HealthStatus status) = 0;
    // The statuses shut down: after the NOT_SERVING it was told, the
    // stream ends.
    virtual void OnHealthShutdown() = 0;
    virtual void Ref() = 0;
    virtual void Unref() = 0;

   protected:
    ~Watcher() = default;
  };

  // `services`: the names served besides "" (the whole server). Every
  // status is NOT_SERVING until SetServing(true).
  explicit HealthStatuses(std::vector<std::string> services);
  HealthStatuses(const HealthStatuses&) = delete;
  HealthStatuses& operator=(const HealthStatuses&) = delete;

  // Every served name SERVING or NOT_SERVING, each watcher told; nothing
  // after Shutdown().
  void SetServing(bool serving);
  // NOT_SERVING for good: every watcher told, then told to end; later
  // Watch calls get NOT_SERVING and end.
  void Shutdown();

  // The status of `service`; nullopt when it is not served.
  std::optional<HealthStatus> Get(absl::string_view service) const;

  // Adds a watcher of `service` and sets *status to what it is now
  // (SERVICE_UNKNOWN when not served). False (not added; *status
  // NOT_SERVING) after Shutdown().
  bool AddWatcher(Watcher* watcher, const std::string& service,
                  HealthStatus* status);
  // Removes it; no call reaches it after this returns but those already
  // started (each holding a Ref).
  void RemoveWatcher(Watcher* watcher);

  // The bounds on open health calls (see the file comment).
  static constexpr int kMaxCallsPerHost = 64;
  static constexpr int kMaxWatches = 1024;
  enum class CallKind { kCheck, kWatch };
  // A call of `kind` from `host` opens: false (nothing taken) when a bound
  // is reached. EndCall gives it back.
  bool BeginCall(const std::string& host, CallKind kind);
  void EndCall(const std::string& host, CallKind kind);

 private:
  HealthStatus StatusLocked(absl::string_view service) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls `notify(watcher, status)` for every watcher, outside the lock.
  template <typename Notify>
  void NotifyAll(Notify notify) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Each watcher and the service it watches.
  absl::flat_hash_map<Watcher*, std::string> watchers_ ABSL_GUARDED_BY(mu_);
  // Open calls by host: {checks, watches}; and the watches in all.
  absl::flat_hash_map<std::string, std::pair<int, int>> calls_by_host_
      ABSL_GUARDED_BY(mu_);
  int watches_ ABSL_GUARDED_BY(mu_) = 0;
};

// grpc.health.v1.Health's Check and Watch over raw bytes, read after the
// call starts (see the file comment). Register one per server.
class HealthService final : public grpc::Service {
 public:
  explicit HealthService(HealthStatuses& statuses);
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_HEALTH_SERVICE_H_
