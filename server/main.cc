// cgacctd: the cgacct accounting daemon. Serves cgacct.v1.Accounting (plus
// grpc.health.v1 and server reflection) on --listen and Prometheus metrics on
// --metrics_listen, over one in-memory Engine.
//
// Exit codes: 0 after SIGINT/SIGTERM (clean shutdown); 1 when a port cannot
// be bound, or when Abseil's flag parser rejects a value that is not of the
// flag's type (e.g. --cpus=abc); 2 for flag values that parse but are out of
// range or inconsistent; 3 when the state store (--state_dir) cannot be
// opened or restored. Every failure is one line on stderr.
#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "engine/types.h"
#include "server/accounting_service.h"
#include "server/events_watch.h"
#include "server/metrics.h"
#include "server/sqlite_state_store.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address HOST:PORT (port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics listen address HOST:PORT; empty disables");
ABSL_FLAG(int, cpus, 0,
          "per-CPU slots of the engine; 0 = the machine's online CPUs");
ABSL_FLAG(std::string, flush_lock_policy, "per_cpu",
          "rstat flush lock policy: per_cpu (retake per CPU), whole (hold "
          "across CPUs, yield to waiters), batch:N (retake every N CPUs) or "
          "adaptive (hold up to --flush_hold_budget, skip clean CPUs)");
ABSL_FLAG(absl::Duration, flush_hold_budget, absl::Microseconds(50),
          "adaptive policy: longest planned flush-lock hold");
ABSL_FLAG(absl::Duration, periodic_flush_interval, absl::Seconds(2),
          "background flush of the whole tree (the kernel's 2 s); 0 = off");
ABSL_FLAG(uint64_t, page_size, 4096, "bytes per page (power of two >= 512)");
ABSL_FLAG(bool, memory_recursiveprot, false,
          "like the cgroup2 mount option: memory.min/low of a group that its "
          "children do not claim protects them in proportion to their "
          "unprotected usage");
ABSL_FLAG(uint32_t, charge_batch_pages, cgacct::kChargeBatchPages,
          "pages per per-CPU stock refill (MEMCG_CHARGE_BATCH), 1..127; 1 "
          "turns the stock off");
ABSL_FLAG(uint32_t, stock_pool_buckets, 1024,
          "buckets of the stock's shared per-group pool (power of two); 0 "
          "= the kernel's per-CPU stock alone");
ABSL_FLAG(uint32_t, stock_victim_sets, 64,
          "sets (4 ways each) of every CPU's stock victim table, behind its 7 "
          "slots (power of two <= 1024; nr_cpus x sets x 64 bytes); 0 = the "
          "kernel's 7 slots alone");
ABSL_FLAG(std::string, state_dir, "",
          "directory of the state store (SQLite, WAL): groups, limits and "
          "the request-id window survive restarts (usage restarts at 0); "
          "empty = nothing persisted");
ABSL_FLAG(int, metrics_group_depth, 2,
          "export cgacct_group_memory_current_bytes for groups down to this "
          "depth; 0 = off");

namespace {

constexpr int kExitBind = 1;
constexpr int kExitUsage = 2;
constexpr int kExitStore = 3;
constexpr auto kShutdownGrace = std::chrono::seconds(5);

// "HOST:PORT" -> "HOST" ("[::]:0" -> "[::]").
std::string HostOf(absl::string_view address) {
  const size_t colon = address.rfind(':');
  return std::string(
      colon == absl::string_view::npos ? address : address.substr(0, colon));
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "cgacctd: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "userspace memory-cgroup accounting service.\n"
      "  cgacctd [--listen=HOST:PORT] [--metrics_listen=HOST:PORT] [--cpus=N]\n"
      "          [--flush_lock_policy=per_cpu|whole|batch:N|adaptive]\n"
      "          [--flush_hold_budget=50us] [--periodic_flush_interval=2s]\n"
      "          [--page_size=4096]\n"
      "          [--metrics_group_depth=2] [--memory_recursiveprot]\n"
      "          [--charge_batch_pages=64] [--stock_pool_buckets=1024]\n"
      "          [--stock_victim_sets=64] [--state_dir=DIR]");
  // --help lists the flags above (Abseil's default looks for them in a file
  // named after the program); Abseil's own flags stay under --helpfull.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil keeps absl::Mutex's lock-order graph on; it costs about
  // 6x on every nested lock (measured here: 105 vs 18 ns for a lock pair).
  // The tests keep it on to catch lock-order inversions; the server does not
  // pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  const std::string policy_name = absl::GetFlag(FLAGS_flush_lock_policy);
  int batch_cpus = 8;
  const std::optional<cgacct::FlushLockPolicy> policy =
      cgacct::ParseFlushLockPolicy(policy_name, &batch_cpus);
  if (!policy.has_value()) {
    return Fail(kExitUsage,
                absl::StrCat("--flush_lock_policy=\"", policy_name,
                             "\" is not per_cpu, whole, adaptive or batch:N "
                             "(1 <= N <= 4096)"));
  }
  const int cpus = absl::GetFlag(FLAGS_cpus);
  if (cpus < 0 || cpus > cgacct::Engine::kMaxCpus) {
    return Fail(kExitUsage, absl::StrCat("--cpus=", cpus, " out of range [0, ",
                                         cgacct::Engine::kMaxCpus, "]"));
  }
  const int group_depth = absl::GetFlag(FLAGS_metrics_group_depth);
  if (group_depth < 0) {
    return Fail(kExitUsage, absl::StrCat("--metrics_group_depth=", group_depth,
                                         " must be >= 0"));
  }

  // SIGINT/SIGTERM are taken by sigwait() below: block them before any
  // thread exists (engine, gRPC, civetweb) so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // Declaration order is destruction order reversed: the server stops first,
  // then metrics, then the service, the engine and its observer.
  cgacct::RstatFlushObserver flush_observer;
  // The engine's observer: WatchEvents' fan-out, passing flush and reclaim
  // reports on to the metrics.
  cgacct::EventsWatchHub events_hub(&flush_observer);
  cgacct::EngineOptions engine_options;
  engine_options.nr_cpus = cpus;
  engine_options.page_size_bytes = absl::GetFlag(FLAGS_page_size);
  engine_options.flush_lock_policy = *policy;
  engine_options.flush_batch_cpus = batch_cpus;
  engine_options.flush_hold_budget = absl::GetFlag(FLAGS_flush_hold_budget);
  engine_options.periodic_flush_interval =
      absl::GetFlag(FLAGS_periodic_flush_interval);
  engine_options.observer = &events_hub;
  engine_options.memory_recursiveprot =
      absl::GetFlag(FLAGS_memory_recursiveprot);
  engine_options.charge_batch_pages = absl::GetFlag(FLAGS_charge_batch_pages);
  engine_options.stock_pool_buckets = absl::GetFlag(FLAGS_stock_pool_buckets);
  engine_options.stock_victim_sets = absl::GetFlag(FLAGS_stock_victim_sets);
  absl::StatusOr<std::unique_ptr<cgacct::Engine>> engine =
      cgacct::Engine::Create(engine_options);
  if (!engine.ok()) {
    return Fail(kExitUsage, absl::StrCat("bad engine options: ",
                                         engine.status().message()));
  }

  // The state store outlives the service (declared before it).
  std::unique_ptr<cgacct::SqliteStateStore> store;
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  if (!state_dir.empty()) {
    absl::StatusOr<std::unique_ptr<cgacct::SqliteStateStore>> opened =
        cgacct::SqliteStateStore::Open(state_dir,
                                       (*engine)->page_size_bytes());
    if (!opened.ok()) {
      return Fail(kExitStore, absl::StrCat("--state_dir=", state_dir, ": ",
                                           opened.status().message()));
    }
    store = *std::move(opened);
  }

  cgacct::RpcMetrics rpc_metrics;
  cgacct::AccountingServiceOptions service_options;
  service_options.events_hub = &events_hub;
  service_options.store = store.get();
  cgacct::AccountingService service(**engine, rpc_metrics, service_options);
  std::string restored = "state not persisted";
  if (store != nullptr) {
    absl::StatusOr<cgacct::RestoreReport> report = service.Restore();
    if (!report.ok()) {
      return Fail(kExitStore,
                  absl::StrCat("restoring ", store->path(), ": ",
                               report.status().message()));
    }
    restored = absl::StrCat("state ", state_dir, ": ", report->groups,
                            " groups, ", report->requests, " request ids");
  }

  cgacct::MetricsOptions metrics_options;
  metrics_options.group_depth = group_depth;
  auto collector = std::make_shared<cgacct::MetricsCollector>(
      **engine, flush_observer, rpc_metrics, metrics_options);
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  std::unique_ptr<cgacct::MetricsExposer> exposer;
  if (!metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<cgacct::MetricsExposer>> started =
        cgacct::MetricsExposer::Start(metrics_listen, collector);
    if (!started.ok()) {
      return Fail(kExitBind, std::string(started.status().message()));
    }
    exposer = *std::move(started);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const std::string listen = absl::GetFlag(FLAGS_listen);
  int port = 0;
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second cgacctd on the same port
  // would start and split the traffic instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(kExitBind, absl::StrCat("cannot listen on ", listen,
                                        " (address in use or invalid)"));
  }

  // Health by service name as well as the server's "" (grpc.health.v1):
  // both SERVING until shutdown begins.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(cgacct::v1::Accounting::service_full_name(), true);
    health->SetServingStatus(true);
  }

  const std::string metrics_where =
      exposer ? absl::StrCat("metrics on ", HostOf(metrics_listen), ":",
                             exposer->port())
              : std::string("metrics off");
  std::printf("cgacctd listening on %s:%d (%s, cpus=%d, policy=%s; %s)\n",
              HostOf(listen).c_str(), port, metrics_where.c_str(),
              (*engine)->nr_cpus(),
              (*engine)->GetInfo().flush_lock_policy_name.c_str(),
              restored.c_str());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "cgacctd: %s, shutting down\n",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  // Health checks answer NOT_SERVING from here on (load balancers stop
  // sending); new calls answer UNAVAILABLE with nothing applied; open
  // ChargeStreams answer what they have read and end UNAVAILABLE, and
  // WatchEvents streams end UNAVAILABLE, now rather than hold the grace
  // period open. Unary calls already running finish.
  if (health != nullptr) {
    health->SetServingStatus(cgacct::v1::Accounting::service_full_name(),
                             false);
    health->SetServingStatus(false);
  }
  service.BeginShutdown();
  events_hub.Shutdown();
  // In-flight calls get kShutdownGrace to finish, then are cancelled; a
  // second SIGINT/SIGTERM cancels them at once. The grace also bounds the
  // wait for connected clients to close after the GOAWAY: an idle client
  // that polls its connection rarely (gRPC C++ with no active call: every
  // 5 s) keeps the shutdown waiting until then.
  absl::Mutex shutdown_mu;
  bool shutdown_done = false;  // guarded by shutdown_mu
  std::thread shutdown_thread([&] {
    server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    absl::MutexLock l(&shutdown_mu);
    shutdown_done = true;
  });
  bool cancelled = false;
  while (true) {
    {
      absl::MutexLock l(&shutdown_mu);
      if (shutdown_done) break;
    }
    const timespec poll_interval{0, 50 * 1000 * 1000};
    const int again = sigtimedwait(&stop_signals, nullptr, &poll_interval);
    if (again > 0 && !cancelled) {
      std::fprintf(stderr,
                   "cgacctd: second %s, cancelling the calls still running\n",
                   again == SIGINT ? "SIGINT" : "SIGTERM");
      // grpc::Server::Shutdown holds its lock until the grace ends; the C
      // core's cancel-all is what a second Shutdown cannot do (usable
      // only after shutdown began, as it has here).
      grpc_server_cancel_all_calls(server->c_server());
      cancelled = true;
    }
  }
  shutdown_thread.join();
  server.reset();
  // The store closes with `store` (its last writes were committed by the
  // calls that made them).
  return 0;
}
