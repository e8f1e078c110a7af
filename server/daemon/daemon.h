// Daemon: cgacctd's lifecycle (docs/DESIGN.md §4.13, §6.1): builds the
// engine, the state store, access control, the service, /metrics and the
// gRPC servers from a DaemonConfig; serves until SIGINT/SIGTERM (SIGHUP
// reloads the token table and the policy); shuts down in order (health
// NOT_SERVING, new calls refused, streams told, in-flight calls given a
// grace, a second signal cancels them).
//
// Thread safety: Start() and Run() from main()'s thread only.
#ifndef CGACCT_SERVER_DAEMON_DAEMON_H_
#define CGACCT_SERVER_DAEMON_DAEMON_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <memory>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "server/auth/authorizer.h"
#include "server/cluster/cluster_node.h"
#include "server/daemon/flags.h"
#include "server/daemon/memory_trim.h"
#include "server/events/events_hub.h"
#include "server/idempotency/sqlite_state_store.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/grpc_server_metrics.h"
#include "server/metrics/prometheus/exposer.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "server/rpc/health_service.h"
#include "server/rpc/receive_guard.h"

namespace cgacct {

class Daemon {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Builds everything and starts serving, then prints the start line on
  // stdout. 0, or the exit code after one line on stderr (kExitUsage: bad
  // engine options; kExitStore: the state store; kExitBind: a port).
  int Start();

  // Waits on `signals` (blocked in every thread): SIGHUP reloads access
  // control's files, SIGINT/SIGTERM shut down. Returns once stopped.
  void Run(const sigset_t& signals);

 private:
  int OpenStore();
  void BuildService();
  int StartCluster();
  int StartMetrics();
  int StartServers();
  // A receive guard for the server `builder` builds (not started; it needs
  // the bound port): its interceptor added to `interceptors`, compressed
  // requests refused; reads of `max_message_bytes` (named `limit_name` in
  // its refusals), --receive_guard_interval, the server's stream windows.
  std::unique_ptr<ReceiveGuard> AddReceiveGuard(
      grpc::ServerBuilder& builder,
      std::vector<std::unique_ptr<
          grpc::experimental::ServerInterceptorFactoryInterface>>&
          interceptors,
      uint64_t max_message_bytes, const std::string& limit_name);
  void PrintStartLine() const;
  void Reload();
  void Shutdown(const sigset_t& signals, int signal_number);

  const DaemonConfig config_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;  // for --listen
  std::string restored_;  // the start line's state words

  // Declaration order is destruction order reversed: the servers stop
  // first, then metrics, then the service, the engine and its observer.
  RstatFlushObserver flush_observer_;
  // The engine's observer: WatchEvents' fan-out, passing flush and reclaim
  // reports on to the metrics.
  EventsHub events_hub_{&flush_observer_};
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<SqliteStateStore> store_;  // outlives the service
  RpcMetrics rpc_metrics_;
  AuthFailureCounts auth_failures_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<AccountingService> service_;
  // Cluster mode: the node's part (its threads apply etcd's changes into
  // the service's pipeline: it goes before the service).
  std::unique_ptr<ClusterNode> cluster_;
  GrpcServerMetrics grpc_metrics_{CgacctdGrpcMethods()};
  std::unique_ptr<MetricsExposer> exposer_;
  std::optional<MemoryTrimmer> trimmer_;
  // What both servers' grpc.health.v1 answers ("" and
  // cgacct.v1.Accounting), and a health service per server; they outlive
  // the servers.
  HealthStatuses health_statuses_{{v1::Accounting::service_full_name()}};
  HealthService health_service_{health_statuses_};
  HealthService health_port_service_{health_statuses_};
  // Outlives server_ (its interceptors point at it); null when off.
  std::unique_ptr<ReceiveGuard> receive_guard_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  // --health_listen's answer to every method but health's.
  grpc::CallbackGenericService health_unimplemented_;
  // --health_listen's receive guard (always on with the port: it is
  // unauthenticated and may face any network); outlives its server.
  std::unique_ptr<ReceiveGuard> health_receive_guard_;
  std::unique_ptr<grpc::Server> health_server_;
  int health_port_ = 0;
  // Cluster mode: health follows the node's etcd lease (NOT_SERVING while
  // it has none within its fence), checked every 200 ms until shutdown.
  absl::Mutex health_mu_;
  bool health_stop_ ABSL_GUARDED_BY(health_mu_) = false;
  std::thread health_thread_;
  void StopHealthThread();
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_DAEMON_DAEMON_H_
