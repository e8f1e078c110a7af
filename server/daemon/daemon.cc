// cgacctd's lifecycle (server/daemon/daemon.h).
#include "server/daemon/daemon.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <grpcpp/resource_quota.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "server/common/bind_probe.h"
#include "server/common/log_line.h"
#include "server/common/read_file.h"
#include "server/metrics/prometheus/collector.h"
#include "server/metrics/prometheus/process_metrics.h"
#include "server/metrics/prometheus/room_collectors.h"
#include "server/rpc/metrics_interceptor.h"

namespace cgacct {
namespace {

// How long calls in flight get to finish after SIGINT/SIGTERM.
constexpr auto kShutdownGrace = std::chrono::seconds(5);
// Threads gRPC's sync server may run for reflection streams (--reflection=on).
constexpr int kMaxReflectionThreads = 64;

// "HOST:PORT" -> "HOST" ("[::]:0" -> "[::]").
std::string HostOf(absl::string_view address) {
  const size_t colon = address.rfind(':');
  return std::string(
      colon == absl::string_view::npos ? address : address.substr(0, colon));
}

// When the state directory (or, if it does not exist yet, the nearest
// directory above it) is not writable by this process: who the process is,
// who owns the directory and what to do, as "; ..." (a root-owned bind
// mount or volume in a container gave only "unable to open database file"
// or "Permission denied", with no hint about the uid: issue 26, item 2).
// "" when it is writable (the failure was something else).
std::string StateDirAccessHint(const std::string& dir) {
  std::string at = dir;
  struct stat st {};
  while (stat(at.c_str(), &st) != 0) {
    const size_t slash = at.find_last_of('/');
    if (slash == std::string::npos || at == "/") return "";
    at = slash == 0 ? "/" : at.substr(0, slash);
  }
  if (access(at.c_str(), W_OK | X_OK) == 0) return "";
  return absl::StrCat(
      "; cgacctd runs as uid ", geteuid(), " gid ", getegid(), ", and ", at,
      " is owned by uid ", st.st_uid, " gid ", st.st_gid, " mode ",
      absl::StrFormat("%04o", st.st_mode & 07777),
      ": let that user write it (chown ", geteuid(), ":", getegid(), " ", at,
      "), or run cgacctd as a user that can (the image runs as 65532:65532 and "
      "its /var/lib/cgacct is theirs: a named volume there starts so)");
}

int Fail(int code, absl::string_view message) {
  LogLine(message);
  return code;
}

// Takes gRPC's server reflection off a server: the reflection library,
// once loaded, adds its plugin to every ServerBuilder made after (a static
// initializer calls InitProtoReflectionServerBuilderPlugin()), so linking
// it is enough to serve reflection everywhere; this option removes the
// plugin from one builder before it builds.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                         return p->name() == kReflectionPluginName;
                       }),
        plugins->end());
  }

 private:
  // grpc::reflection::ProtoServerReflectionPlugin::name().
  static constexpr char kReflectionPluginName[] = "proto_server_reflection";
};

}  // namespace

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {}

Daemon::~Daemon() { StopHealthThread(); }

int Daemon::Start() {
  // The TLS files are checked before anything starts.
  credentials_ = grpc::InsecureServerCredentials();
  if (!config_.tls.cert.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> made =
        MakeTlsServerCredentials(config_.tls);
    if (!made.ok()) return Fail(kExitUsage, made.status().message());
    credentials_ = *std::move(made);
  }
  // The gRPC ports are probed before anything starts (the store, the
  // cluster): gRPC reports a failed bind as a raw core error tree on stderr
  // and leaves its completion queue to complain at exit.
  for (const auto& [flag, address] :
       {std::pair<const char*, const std::string*>{"--listen", &config_.listen},
        {"--health_listen", &config_.health_listen}}) {
    if (address->empty()) continue;
    if (absl::Status probe = ProbeBind(*address); !probe.ok()) {
      return Fail(kExitBind, absl::StrCat("cannot listen on ", flag, "=",
                                          *address, ": ", probe.message()));
    }
  }
  EngineOptions engine_options = config_.engine;
  engine_options.observer = &events_hub_;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(engine_options);
  if (!engine.ok()) {
    return Fail(kExitUsage, absl::StrCat("bad engine options: ",
                                         engine.status().message()));
  }
  engine_ = *std::move(engine);
  if (int rc = OpenStore(); rc != 0) return rc;
  BuildService();
  if (int rc = StartCluster(); rc != 0) return rc;
  if (!config_.state_dir.empty()) {
    absl::StatusOr<RestoreReport> report = service_->Restore();
    if (!report.ok()) {
      return Fail(kExitStore, absl::StrCat("restoring ", store_->path(), ": ",
                                           report.status().message()));
    }
    restored_ =
        absl::StrCat(", state ", config_.state_dir, ": ", report->groups,
                     " groups, ", report->requests, " request ids");
    // What --state_recover did, one line each, before the start line.
    for (const std::string& note : store_->recovery_notes()) {
      LogLine(absl::StrCat("--state_recover: ", note));
    }
  }
  if (int rc = StartMetrics(); rc != 0) return rc;
  if (int rc = StartServers(); rc != 0) return rc;
  PrintStartLine();
  return 0;
}

int Daemon::OpenStore() {
  if (config_.state_dir.empty()) return 0;
  SqliteStateStore::Options options;
  options.page_size_bytes = engine_->page_size_bytes();
  options.recover = config_.state_recover;
  // A failed write is said on stderr (at most one line per 10 s), besides
  // cgacct_state_store_errors_total and the caller's answer.
  options.on_write_error = [](const std::string& line) { LogLine(line); };
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> opened =
      SqliteStateStore::Open(config_.state_dir, options);
  if (!opened.ok()) {
    return Fail(kExitStore, absl::StrCat("--state_dir=", config_.state_dir,
                                         ": ", opened.status().message(),
                                         StateDirAccessHint(config_.state_dir)));
  }
  store_ = *std::move(opened);
  return 0;
}

void Daemon::BuildService() {
  if (config_.access_control) {
    AuthConfig auth_config;
    auth_config.client_certificates = !config_.tls.client_ca.empty();
    auth_config.tokens = config_.auth.tokens;
    auth_config.policy = config_.auth.policy;
    auth_config.trusted_proxies = config_.trusted_proxies;
    authorizer_ =
        std::make_unique<Authorizer>(std::move(auth_config), &auth_failures_);
  }
  AccountingServiceOptions options = config_.service;
  options.events_hub = &events_hub_;
  options.store = store_.get();
  options.authorizer = authorizer_.get();
  service_ =
      std::make_unique<AccountingService>(*engine_, rpc_metrics_, options);
}

int Daemon::StartCluster() {
  if (!config_.cluster_mode) return 0;
  ClusterOptions options = config_.cluster;
  options.page_size_bytes = engine_->page_size_bytes();
  if (!config_.etcd_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    for (const auto& [file, out] :
         {std::pair<const std::string*, std::string*>{&config_.etcd_ca_file,
                                                      &ssl.pem_root_certs},
          {&config_.etcd_cert_file, &ssl.pem_cert_chain},
          {&config_.etcd_key_file, &ssl.pem_private_key}}) {
      if (file->empty()) continue;
      absl::StatusOr<std::string> pem = ReadFile(*file);
      if (!pem.ok()) return Fail(kExitUsage, pem.status().message());
      *out = *std::move(pem);
    }
    options.etcd.credentials = grpc::SslCredentials(ssl);
  }
  cluster_ = std::make_unique<ClusterNode>(
      std::move(options), &service_->pipeline().cluster_applier());
  service_->pipeline().AttachCluster(cluster_.get());
  // Nodes dial each other in plaintext: a TLS node's clients follow the
  // cgacct-owner trailer instead (server/rpc/forwarder.h).
  if (config_.tls.cert.empty()) service_->EnableForwarding(cluster_.get());
  // etcd may be starting with us (a whole cluster brought up at once).
  const absl::Status started =
      cluster_->Start(absl::Now() + absl::Seconds(30));
  if (!started.ok()) {
    // Whatever it registered goes now, not at the lease's expiry.
    cluster_->Stop(/*resign=*/true);
    return Fail(kExitStore,
                absl::StrCat("cluster mode (--etcd_endpoints): ",
                             started.message()));
  }
  const ClusterMapView map = cluster_->Map();
  restored_ = absl::StrCat(", cluster node \"", map.node_name, "\" at ",
                           map.advertise_address, " (", map.nodes.size(),
                           map.nodes.size() == 1 ? " node, " : " nodes, ",
                           map.shards.size(),
                           map.shards.size() == 1 ? " shard, depth "
                                                  : " shards, depth ",
                           map.shard_depth, ", revision ",
                           map.applied_revision, ")");
  return 0;
}

int Daemon::StartMetrics() {
  if (config_.metrics_listen.empty()) return 0;
  MetricsOptions metrics_options = config_.metrics;
  metrics_options.on_first_drop = [](const std::string& message) {
    LogLine(message);
  };
  auto collector = std::make_shared<MetricsCollector>(
      *engine_, flush_observer_, rpc_metrics_, metrics_options);
  MetricsExposerOptions exposer_options;
  exposer_options.extra_collectables = {
      MakeAuthMetrics(auth_failures_), MakeSessionMetrics(service_->sessions()),
      // grpc_server_* (go-grpc-prometheus names): every service's calls,
      // cgacct.v1.Accounting's ends as the pipeline counted them.
      std::make_shared<GrpcServerCollector>(grpc_metrics_, &rpc_metrics_),
      std::make_shared<ProcessCollector>(),
      std::make_shared<BuildInfoCollector>()};
  if (cluster_ != nullptr) {
    const Forwarder* forwarder = service_->forwarder();
    exposer_options.extra_collectables.push_back(MakeClusterMetrics(
        *cluster_, [forwarder](RpcMethod m) -> uint64_t {
          return forwarder != nullptr ? forwarder->forwarded(m) : 0;
        }));
  }
  exposer_options.basic_auth_password = config_.metrics_token;
  absl::StatusOr<std::unique_ptr<MetricsExposer>> started =
      MetricsExposer::Start(config_.metrics_listen, collector,
                            std::move(exposer_options));
  if (!started.ok()) return Fail(kExitBind, started.status().message());
  exposer_ = *std::move(started);
  return 0;
}

std::unique_ptr<ReceiveGuard> Daemon::AddReceiveGuard(
    grpc::ServerBuilder& builder,
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>&
        interceptors,
    uint64_t max_message_bytes, const std::string& limit_name) {
  ReceiveGuard::Options options;
  options.max_message_bytes = max_message_bytes;
  options.limit_name = limit_name;
  options.interval = config_.receive_guard_interval;
  options.stream_window_bytes_per_connection =
      uint64_t{config_.streams_per_connection} *
      ReceiveGuard::kStreamWindowBytes;
  auto guard = std::make_unique<ReceiveGuard>(
      options, [this] { rpc_metrics_.RecordOversizedReadCancelled(); },
      [this] { rpc_metrics_.RecordFloodingConnectionClosed(); });
  interceptors.push_back(guard->InterceptorFactory());
  // A compressed message's wire size is hidden from the guard (it sees
  // the inflated message): gzip requests of ~4 KB inflating to 4 MiB
  // credited it enough to let a 1.5 GB message in alongside. Compressed
  // requests are refused UNIMPLEMENTED (no client of ours compresses).
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  return guard;
}

int Daemon::StartServers() {
  // grpc.health.v1 is cgacctd's own (server/rpc/health_service.h): gRPC's
  // default health service reads a request of any size whole.
  grpc::EnableDefaultHealthCheckService(false);
  // --health_listen: a server of its own with the health service alone,
  // plaintext on any address (health names no group and stays
  // unauthenticated on --listen too); never reflection.
  std::unique_ptr<grpc::ServerBuilder> health_builder;
  if (!config_.health_listen.empty()) {
    health_builder = std::make_unique<grpc::ServerBuilder>();
    health_builder->SetOption(std::make_unique<WithoutReflection>());
    health_builder->RegisterService(&health_port_service_);
    // Every other method answers UNIMPLEMENTED, as gRPC's own default does.
    health_builder->RegisterCallbackGenericService(&health_unimplemented_);
    health_builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // Unauthenticated and off loopback: health requests are a service name
    // (ReceiveGuard::kHealthRequestMaxBytes); gRPC 1.51 would still take a
    // larger message whole before refusing it, so the port has a receive
    // guard of its own, whose bound assumes the stream windows set here as
    // on --listen. Streams per connection as on --listen.
    health_builder->SetMaxReceiveMessageSize(
        static_cast<int>(ReceiveGuard::kHealthRequestMaxBytes));
    health_builder->AddChannelArgument(
        GRPC_ARG_MAX_CONCURRENT_STREAMS,
        static_cast<int>(config_.streams_per_connection));
    health_builder->AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    health_builder->AddChannelArgument(
        GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
        static_cast<int>(ReceiveGuard::kStreamWindowBytes));
    // Its calls are counted in the grpc_server_* families as --listen's.
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        health_interceptors;
    health_interceptors.push_back(NewMetricsInterceptorFactory(&grpc_metrics_));
    if (config_.receive_guard_interval > absl::ZeroDuration()) {
      health_receive_guard_ =
          AddReceiveGuard(*health_builder, health_interceptors,
                          ReceiveGuard::kHealthRequestMaxBytes,
                          "the health request limit");
    }
    health_builder->experimental().SetInterceptorCreators(
        std::move(health_interceptors));
    health_builder->AddListeningPort(config_.health_listen,
                                     grpc::InsecureServerCredentials(),
                                     &health_port_);
  }
  // Reflection only when asked for (--reflection=on): off, the plugin the
  // library registered is taken off the builder.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!config_.serve_reflection)
    builder.SetOption(std::make_unique<WithoutReflection>());
  // gRPC sets SO_REUSEPORT by default: a second cgacctd on the same port
  // would start and split the traffic instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Server limits (docs/DESIGN.md §4.10). Debian's gRPC 1.51 has no limit on
  // streams a client resets before they finish (the HTTP/2 "rapid reset"
  // protection came with gRPC releases of late 2023); these bound what each
  // connection and message can take.
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.max_message_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config_.streams_per_connection));
  // A request is read only once its call is admitted (server/rpc/unary.h);
  // until then its stream's HTTP/2 window is what it may send. The BDP probe
  // grew the windows: with it, one tenant's 400 waiting 4 MB requests were
  // buffered whole (1.86 GB), without it 165 MB.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
      static_cast<int>(ReceiveGuard::kStreamWindowBytes));
  // Each connection keeps the read buffers of its largest read (up to a
  // whole message) between reads: 200 connections churning SessionStreams
  // with 4 MB messages held 263 MB median, 381 MB peak (issue 22, row St2),
  // which no per-identity bound sees (it is per connection, before any
  // call). Under a quota gRPC frees those buffers as it fills and allocates
  // less (90 / 133 MB at 256 MiB), but past it gRPC 1.51 cancels streams of
  // connections in turn, not of those holding the memory: two tenants
  // within their own bounds got all 50 of a third's sessions cancelled. So
  // it is opt-in (docs/DESIGN.md §4.10).
  // Reflection is gRPC's only sync service here, whose server runs a thread
  // per open stream: 2,000 unauthenticated reflection streams were 2,150
  // threads (the re-attack at c1df8aa). The quota's thread limit bounds
  // them (a stream past it is refused RESOURCE_EXHAUSTED); it counts no
  // callback or async call.
  if (config_.grpc_memory_quota_bytes != 0 || config_.serve_reflection) {
    grpc::ResourceQuota quota("cgacctd");
    if (config_.grpc_memory_quota_bytes != 0)
      quota.Resize(static_cast<size_t>(config_.grpc_memory_quota_bytes));
    if (config_.serve_reflection) quota.SetMaxThreads(kMaxReflectionThreads);
    builder.SetResourceQuota(quota);
  }
  builder.AddListeningPort(config_.listen, credentials_, &port_);
  service_->RegisterOn(builder);  // + SessionStream's completion queue
  builder.RegisterService(&health_service_);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(NewMetricsInterceptorFactory(&grpc_metrics_));
  // With access control every Accounting request is read after admission,
  // so the receive guard sees each pending read (server/rpc/
  // receive_guard.h); without, gRPC reads unary requests first.
  if (config_.access_control &&
      config_.receive_guard_interval > absl::ZeroDuration()) {
    receive_guard_ = AddReceiveGuard(builder, interceptors,
                                     config_.max_message_bytes,
                                     "--max_message_bytes");
  }
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ != nullptr && port_ != 0 && receive_guard_ != nullptr) {
    receive_guard_->Start(NewSocketSource(static_cast<uint16_t>(port_)));
  }
  if (server_ != nullptr) service_->StartSessionStreams();
  if (config_.trim_interval > absl::ZeroDuration()) {
    MemoryTrimmer::Options trim_options;
    trim_options.interval = config_.trim_interval;
    trimmer_.emplace(trim_options);
  }
  if (server_ == nullptr || port_ == 0) {
    return Fail(kExitBind, absl::StrCat("cannot listen on ", config_.listen,
                                        " (address in use or invalid)"));
  }
  if (health_builder != nullptr) {
    health_server_ = health_builder->BuildAndStart();
    if (health_server_ != nullptr && health_port_ != 0 &&
        health_receive_guard_ != nullptr) {
      health_receive_guard_->Start(
          NewSocketSource(static_cast<uint16_t>(health_port_)));
    }
    if (health_server_ == nullptr || health_port_ == 0) {
      server_->Shutdown();
      service_->StopSessionStreams();
      return Fail(kExitBind, absl::StrCat("cannot listen on --health_listen=",
                                          config_.health_listen,
                                          " (address in use or invalid)"));
    }
  }
  // SERVING until shutdown begins; in cluster mode, while the node holds
  // its etcd lease.
  health_statuses_.SetServing(true);
  if (cluster_ != nullptr) {
    health_thread_ = std::thread([this] {
      bool serving = true;
      absl::MutexLock l(&health_mu_);
      while (!health_mu_.AwaitWithTimeout(absl::Condition(&health_stop_),
                                          absl::Milliseconds(200))) {
        const bool now = cluster_->HasLease();
        if (now != serving) {
          serving = now;
          health_statuses_.SetServing(serving);
        }
      }
    });
  }
  return 0;
}

void Daemon::PrintStartLine() const {
  const std::string metrics_where =
      exposer_ ? absl::StrCat("metrics on ", HostOf(config_.metrics_listen),
                              ":", exposer_->port())
               : std::string("metrics off");
  std::string security;
  if (!config_.tls.cert.empty()) absl::StrAppend(&security, ", tls");
  if (!config_.tls.client_ca.empty()) {
    absl::StrAppend(&security, config_.tls.require_client_cert
                                   ? ", mtls (certificate required)"
                                   : ", mtls");
  }
  if (config_.access_control) {
    absl::StrAppend(&security, ", access control",
                    config_.auth.policy.has_value() ? " (policy)" : "");
  }
  absl::StrAppend(&security, config_.serve_reflection
                                ? ", reflection (unauthenticated)"
                                : ", no reflection");
  if (config_.metrics_group_series_withheld) {
    absl::StrAppend(&security,
                    ", no per-group metrics without --metrics_token_file");
  }
  if (config_.metrics_group_series_open) {
    absl::StrAppend(&security,
                    ", per-group metrics open to local users (no "
                    "--metrics_token_file)");
  }
  if (health_server_ != nullptr) {
    absl::StrAppend(&security, ", health on ", HostOf(config_.health_listen),
                    ":", health_port_);
  }
  absl::StrAppend(&security, restored_);
  const EngineInfo started = engine_->GetInfo();
  std::string policy_text = started.flush_lock_policy_name;
  if (started.flush_lock_policy == FlushLockPolicy::kAdaptive &&
      started.flush_hold_budget > absl::ZeroDuration()) {
    absl::StrAppend(&policy_text, ", budget=",
                    absl::FormatDuration(started.flush_hold_budget));
  }
  std::printf(
      "cgacctd listening on %s:%d (%s, cpus=%d, policy=%s, preempt=%s%s)\n",
      HostOf(config_.listen).c_str(), port_, metrics_where.c_str(),
      engine_->nr_cpus(), policy_text.c_str(),
      FlushPreemptModelName(started.flush_preempt_model), security.c_str());
  std::fflush(stdout);
}

void Daemon::Reload() {
  if (authorizer_ == nullptr) {
    LogLine("SIGHUP: no access control to reload");
    return;
  }
  absl::StatusOr<AuthFiles> reloaded = LoadAuthFiles();
  if (!reloaded.ok()) {
    LogLine(absl::StrCat("SIGHUP: ", reloaded.status().message(),
                         "; keeping the previous files"));
    return;
  }
  authorizer_->Reload(std::move(reloaded->tokens), std::move(reloaded->policy));
  // Open WatchEvents streams check their caller's access again now, not at
  // their group's next event (a revoked tenant's stream ends at once).
  events_hub_.NotifyAll();
  LogLine("SIGHUP: tokens and policy reloaded");
}

void Daemon::Run(const sigset_t& signals) {
  int signal_number = 0;
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    Reload();
  }
  Shutdown(signals, signal_number);
}

void Daemon::StopHealthThread() {
  {
    absl::MutexLock l(&health_mu_);
    health_stop_ = true;
  }
  if (health_thread_.joinable()) health_thread_.join();
}

void Daemon::Shutdown(const sigset_t& signals, int signal_number) {
  LogLine(absl::StrCat(signal_number == SIGINT ? "SIGINT" : "SIGTERM",
                       ", shutting down"));
  StopHealthThread();
  // Health checks answer NOT_SERVING from here on (load balancers stop
  // sending); new calls answer UNAVAILABLE with nothing applied; open
  // ChargeStreams answer what they have read and end UNAVAILABLE, and
  // WatchEvents streams end UNAVAILABLE, now rather than hold the grace
  // period open. Unary calls already running finish.
  // Watch streams of health end after telling NOT_SERVING (as gRPC's own
  // health service does at shutdown); Check answers NOT_SERVING until the
  // servers are gone.
  health_statuses_.SetServing(false);
  health_statuses_.Shutdown();
  service_->BeginShutdown();
  // A planned stop gives the node's shards back at once (the lease is
  // revoked): other nodes own them within a watch round trip, not a TTL.
  if (cluster_ != nullptr) cluster_->Stop(/*resign=*/true);
  events_hub_.Shutdown();
  // In-flight calls get kShutdownGrace to finish, then are cancelled; a
  // second SIGINT/SIGTERM cancels them at once. The grace also bounds the
  // wait for connected clients to close after the GOAWAY: an idle client
  // that polls its connection rarely (gRPC C++ with no active call: every
  // 5 s) keeps the shutdown waiting until then.
  absl::Mutex shutdown_mu;
  bool shutdown_done = false;  // guarded by shutdown_mu
  std::thread shutdown_thread([&] {
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
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
    const int again = sigtimedwait(&signals, nullptr, &poll_interval);
    if ((again == SIGINT || again == SIGTERM) && !cancelled) {
      LogLine(absl::StrCat("second ", again == SIGINT ? "SIGINT" : "SIGTERM",
                           ", cancelling the calls still running"));
      // grpc::Server::Shutdown holds its lock until the grace ends; the C
      // core's cancel-all is what a second Shutdown cannot do (usable
      // only after shutdown began, as it has here).
      grpc_server_cancel_all_calls(server_->c_server());
      cancelled = true;
    }
  }
  shutdown_thread.join();
  // SessionStream's queue before the server object goes: its last
  // completions (the calls requested but never matched) refer to it.
  service_->StopSessionStreams();
  server_.reset();
  // The health-only server last: probes see NOT_SERVING through the drain.
  if (health_server_ != nullptr) {
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_.reset();
  }
  // The store closes with store_ (its last writes were committed by the
  // calls that made them).
}

}  // namespace cgacct
