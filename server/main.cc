// cgacctd: the cgacct accounting daemon. Serves cgacct.v1.Accounting (plus
// grpc.health.v1 and server reflection) on --listen and Prometheus metrics on
// --metrics_listen, over one in-memory Engine.
//
// Exit codes: 0 after SIGINT/SIGTERM (clean shutdown); 1 when a port cannot
// be bound, or when Abseil's flag parser rejects a value that is not of the
// flag's type (e.g. --cpus=abc); 2 for flag values that parse but are out of
// range or inconsistent. Every failure is one line on stderr.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
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
#include "server/limits.h"
#include "server/memory_trim.h"
#include "server/metrics.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address HOST:PORT (port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics listen address HOST:PORT; empty disables");
ABSL_FLAG(int, cpus, 0,
          "per-CPU slots of the engine; 0 = the machine's online CPUs");
ABSL_FLAG(std::string, flush_lock_policy, "per_cpu",
          "rstat flush lock policy: per_cpu (retake per CPU), whole (hold "
          "across CPUs; see --flush_preempt_model), batch:N (retake every N "
          "CPUs) or adaptive (hold up to --flush_hold_budget, skip clean "
          "CPUs)");
ABSL_FLAG(std::string, flush_preempt_model, "none",
          "kernel preemption model of the flush-lock holder: none (whole "
          "holds the lock across every CPU, as without CONFIG_PREEMPTION) or "
          "full (whole drops it between CPUs for a waiting flusher, as with "
          "CONFIG_PREEMPT); other policies are the same under both");
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
ABSL_FLAG(int, metrics_group_depth, 2,
          "export cgacct_group_memory_current_bytes for groups down to this "
          "depth; 0 = off");
ABSL_FLAG(uint64_t, max_charge_pages, cgacct::kDefaultMaxChargePages,
          "most pages one Charge (or the charge ops of one ChargeBatch / "
          "ChargeStream message together) may charge; more is "
          "INVALID_ARGUMENT; 0 = only PAGE_COUNTER_MAX");
ABSL_FLAG(uint32_t, max_streams_per_identity,
          cgacct::kDefaultMaxStreamsPerIdentity,
          "concurrent ChargeStreams per caller identity; more are shed with "
          "RESOURCE_EXHAUSTED; 0 = no limit");
ABSL_FLAG(uint32_t, max_in_flight_per_identity,
          cgacct::kDefaultMaxInFlightPerIdentity,
          "concurrent in-flight messages (unary calls, stream requests not "
          "yet answered) per caller identity; more are shed with "
          "RESOURCE_EXHAUSTED; 0 = no limit");
ABSL_FLAG(uint32_t, max_message_bytes, 4u << 20,
          "largest gRPC request or response message in bytes, 4096 .. "
          "2147483647 (gRPC answers RESOURCE_EXHAUSTED above it)");
ABSL_FLAG(uint32_t, max_concurrent_streams_per_connection, 100,
          "HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS of every connection, >= 1");
ABSL_FLAG(absl::Duration, memory_trim_interval, absl::Seconds(1),
          "how often to give malloc's free heap back to the kernel when more "
          "than 4 MiB of it is free; 0 = never");

namespace {

constexpr int kExitBind = 1;
constexpr int kExitUsage = 2;
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
      "          [--flush_preempt_model=none|full]\n"
      "          [--flush_hold_budget=50us] [--periodic_flush_interval=2s]\n"
      "          [--page_size=4096]\n"
      "          [--metrics_group_depth=2] [--memory_recursiveprot]\n"
      "          [--charge_batch_pages=64] [--stock_pool_buckets=1024]\n"
      "          [--stock_victim_sets=64] [--max_charge_pages=1048576]\n"
      "          [--max_streams_per_identity=256]\n"
      "          [--max_in_flight_per_identity=1024]\n"
      "          [--max_message_bytes=4194304]\n"
      "          [--max_concurrent_streams_per_connection=100]\n"
      "          [--memory_trim_interval=1s]");
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
  const std::string preempt_name = absl::GetFlag(FLAGS_flush_preempt_model);
  const std::optional<cgacct::FlushPreemptModel> preempt_model =
      cgacct::ParseFlushPreemptModel(preempt_name);
  if (!preempt_model.has_value()) {
    return Fail(kExitUsage, absl::StrCat("--flush_preempt_model=\"",
                                         preempt_name,
                                         "\" is not none or full"));
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
  const uint32_t max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_message_bytes < 4096 || max_message_bytes > INT_MAX) {
    return Fail(kExitUsage,
                absl::StrCat("--max_message_bytes=", max_message_bytes,
                             " out of range [4096, ", INT_MAX, "]"));
  }
  const uint32_t streams_per_connection =
      absl::GetFlag(FLAGS_max_concurrent_streams_per_connection);
  if (streams_per_connection < 1 || streams_per_connection > INT_MAX) {
    return Fail(kExitUsage,
                absl::StrCat("--max_concurrent_streams_per_connection=",
                             streams_per_connection, " out of range [1, ",
                             INT_MAX, "]"));
  }
  const absl::Duration trim_interval =
      absl::GetFlag(FLAGS_memory_trim_interval);
  if (trim_interval < absl::ZeroDuration()) {
    return Fail(kExitUsage, "--memory_trim_interval must be >= 0");
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
  engine_options.flush_preempt_model = *preempt_model;
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

  cgacct::RpcMetrics rpc_metrics;
  cgacct::AccountingServiceOptions service_options;
  service_options.events_hub = &events_hub;
  service_options.max_charge_pages = absl::GetFlag(FLAGS_max_charge_pages);
  service_options.limits.max_streams_per_identity =
      absl::GetFlag(FLAGS_max_streams_per_identity);
  service_options.limits.max_in_flight_per_identity =
      absl::GetFlag(FLAGS_max_in_flight_per_identity);
  service_options.max_message_bytes = max_message_bytes;
  service_options.max_concurrent_streams_per_connection =
      streams_per_connection;
  cgacct::AccountingService service(**engine, rpc_metrics, service_options);

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
  // Server limits (docs/DESIGN.md §4.10). Debian's gRPC 1.51 has no limit on
  // streams a client resets before they finish (the HTTP/2 "rapid reset"
  // protection came with gRPC releases of late 2023); these bound what each
  // connection and message can take.
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(streams_per_connection));
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  std::optional<cgacct::MemoryTrimmer> trimmer;
  if (trim_interval > absl::ZeroDuration()) {
    cgacct::MemoryTrimmer::Options trim_options;
    trim_options.interval = trim_interval;
    trimmer.emplace(trim_options);
  }
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
  const cgacct::EngineInfo started = (*engine)->GetInfo();
  std::printf(
      "cgacctd listening on %s:%d (%s, cpus=%d, policy=%s, preempt=%s)\n",
      HostOf(listen).c_str(), port, metrics_where.c_str(),
      (*engine)->nr_cpus(), started.flush_lock_policy_name.c_str(),
      cgacct::FlushPreemptModelName(started.flush_preempt_model));
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "cgacctd: %s, shutting down\n",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  // In-flight calls get kShutdownGrace to finish, then are cancelled. The
  // grace also bounds the wait for connected clients to close after the
  // GOAWAY: an idle client that polls its connection rarely (gRPC C++ with
  // no active call: every 5 s) keeps the shutdown waiting until then.
  // Health checks answer NOT_SERVING from here on (load balancers stop
  // sending), and WatchEvents streams end UNAVAILABLE now rather than hold
  // the grace period open.
  if (health != nullptr) {
    health->SetServingStatus(cgacct::v1::Accounting::service_full_name(),
                             false);
    health->SetServingStatus(false);
  }
  events_hub.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server.reset();
  return 0;
}
