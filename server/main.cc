// cgacctd: the cgacct accounting daemon. Serves cgacct.v1.Accounting (plus
// grpc.health.v1 and server reflection) on --listen and Prometheus metrics on
// --metrics_listen, over one in-memory Engine.
//
// Exit codes: 0 after SIGINT/SIGTERM (clean shutdown); 1 when a port cannot
// be bound, or when Abseil's flag parser rejects a value that is not of the
// flag's type (e.g. --cpus=abc); 2 for flag values that parse but are out of
// range or inconsistent (a bad TLS, token or policy file included, and a
// plaintext or unauthenticated listener on a non-loopback address without
// --insecure); 3 when the state store (--state_dir) cannot be opened or
// restored. Every failure is one line on stderr.
//
// SIGHUP re-reads --tokens_file and --authz_policy (a bad file is reported
// on stderr and the previous one stays); certificates are re-read by gRPC
// every --tls_refresh_interval.
#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <time.h>

#include <chrono>
#include <climits>
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
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "engine/types.h"
#include "server/accounting_service.h"
#include "server/auth.h"
#include "server/caller_identity.h"
#include "server/tls.h"
#include "server/events_watch.h"
#include "server/limits.h"
#include "server/memory_trim.h"
#include "server/grpc_metrics.h"
#include "server/metrics.h"
#include "server/process_metrics.h"
#include "server/sqlite_state_store.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address HOST:PORT (port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus /metrics listen address HOST:PORT; empty disables");
ABSL_FLAG(int, cpus, 0,
          "per-CPU slots of the engine; 0 = the machine's online CPUs");
ABSL_FLAG(std::string, flush_lock_policy, "per_cpu",
          "rstat flush lock policy: per_cpu (retake per CPU), whole (hold "
          "across CPUs; see --flush_preempt_model), batch:N (retake every N "
          "CPUs) or adaptive (skip clean CPUs without the lock; hold per CPU "
          "with updates, or up to --flush_hold_budget)");
ABSL_FLAG(std::string, flush_preempt_model, "none",
          "kernel preemption model of the flush-lock holder: none (whole "
          "holds the lock across every CPU, as without CONFIG_PREEMPTION) or "
          "full (whole drops it between CPUs for a waiting flusher, as with "
          "CONFIG_PREEMPT); other policies are the same under both");
ABSL_FLAG(absl::Duration, flush_hold_budget, absl::ZeroDuration(),
          "adaptive policy: longest planned flush-lock hold, a duration "
          "with its unit (e.g. 50us), in [0, 1s]; with a budget the holder "
          "also drops the lock for a waiting flusher; 0 drops it after every "
          "CPU with updates (per_cpu's hold)");
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
ABSL_FLAG(uint32_t, stock_pool_buckets, 0,
          "opt-in addition (no kernel counterpart): buckets of a shared "
          "per-group pool behind the per-CPU stock (power of two <= 65536); "
          "memory.current then counts up to 2 x batch more per group; 0 "
          "(default) = the kernel's per-CPU stock alone");
ABSL_FLAG(uint32_t, stock_victim_sets, 0,
          "opt-in addition (no kernel counterpart): sets (4 ways each) of a "
          "per-CPU victim table behind the stock's 7 slots (power of two <= "
          "1024; nr_cpus x sets x 64 bytes); a CPU may then park (7 + 4 x "
          "sets) x batch pages; 0 (default) = the kernel's 7 slots alone");
ABSL_FLAG(bool, uncharge_refills_stock, false,
          "opt-in addition: ANON/FILE uncharges go back through the per-CPU "
          "stock (refill_stock(), the kernel's path for socket and kernel "
          "memory) instead of straight to the page counters (the kernel's "
          "uncharge_batch() for user pages, the default)");
ABSL_FLAG(uint64_t, stock_eviction_seed, 0,
          "seed of the per-CPU streams that pick the stock slot a full "
          "stock gives up (refill_stock()'s random slot); the same seed and "
          "operations evict the same slots; 0 (default) = a fresh seed");
ABSL_FLAG(bool, memory_localevents, false,
          "like the cgroup2 mount option: memory.events counts a group's own "
          "events only (as memory.events.local)");
ABSL_FLAG(std::string, state_dir, "",
          "directory of the state store (SQLite, WAL): groups, limits and "
          "the request-id window survive restarts (usage restarts at 0); "
          "empty = nothing persisted");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the server; with --tls_key turns TLS on "
          "(re-read every --tls_refresh_interval)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, client_ca, "",
          "PEM CA bundle: clients may present a certificate chaining to it "
          "(mTLS); its identity (SAN, else CN) names the caller");
ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Seconds(10),
          "how often the TLS files are re-read (>= 1s)");
ABSL_FLAG(std::string, tokens_file, "",
          "bearer tokens, one 'IDENTITY TOKEN' per line (>= 16-byte "
          "tokens); re-read on SIGHUP");
ABSL_FLAG(std::string, authz_policy, "",
          "authorization policy, one 'IDENTITY admin|ro PATH|rw PATH' per "
          "line; empty = every authenticated caller is admin; re-read on "
          "SIGHUP");
ABSL_FLAG(bool, insecure, false,
          "allow --listen on a non-loopback address without TLS and client "
          "authentication (and --metrics_listen without a token)");
ABSL_FLAG(std::string, metrics_token_file, "",
          "file holding a token /metrics then requires as the HTTP basic-auth "
          "password (any user name); needed for a non-loopback "
          "--metrics_listen of a server with access control");
ABSL_FLAG(std::string, reflection, "auto",
          "gRPC server reflection: on, off, or auto (on unless access control "
          "is on)");
ABSL_FLAG(int, metrics_group_depth, 3,
          "export per-group series (memory.current, memory.max, "
          "memory.events) for groups at most this many path segments deep "
          "(\"/\" = 0); 0 = off");
ABSL_FLAG(uint64_t, metrics_max_groups, 10000,
          "most groups with per-group series per scrape (the shallowest "
          "first); the rest are counted in cgacct_group_series_dropped");
ABSL_FLAG(uint64_t, max_charge_pages, cgacct::kDefaultMaxChargePages,
          "most pages one Charge (or the charge ops of one ChargeBatch / "
          "ChargeStream message together) may charge; more is "
          "INVALID_ARGUMENT; 0 = only PAGE_COUNTER_MAX");
ABSL_FLAG(uint32_t, max_streams_per_identity,
          cgacct::kDefaultMaxStreamsPerIdentity,
          "concurrent ChargeStreams, WatchEvents and SessionStream streams per caller identity; more are shed with "
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
ABSL_FLAG(std::string, health_listen, "",
          "a second, plaintext gRPC listen address HOST:PORT serving only "
          "grpc.health.v1 (for Kubernetes' native grpc probes, which speak "
          "no TLS); empty = none");
ABSL_FLAG(uint32_t, session_default_ttl_ms, 10000,
          "lease of a session opened with ttl_ms 0 (OpenSession), in ms; "
          "the client keeps it alive every ttl/3");
ABSL_FLAG(uint32_t, session_min_ttl_ms, 100,
          "shortest lease OpenSession grants, ms (>= 1); shorter is "
          "INVALID_ARGUMENT");
ABSL_FLAG(uint32_t, session_max_ttl_ms, 600000,
          "longest lease OpenSession grants, ms; longer is INVALID_ARGUMENT");
ABSL_FLAG(uint64_t, session_max_pages, uint64_t{1} << 20,
          "most pages one session may hold at once (all groups and kinds); a "
          "charge beyond it is RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, max_sessions_per_identity, 1024,
          "open sessions per caller identity (>= 1); one more is "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, session_drain_wait_threads, 256,
          "threads on which charges at memory.max wait for sessions' drain "
          "answers (off gRPC's callback threads), 1..4096; that many wait "
          "side by side, more queue");
ABSL_FLAG(uint32_t, session_drain_timeout_ms, 20,
          "how long a charge at memory.max waits for sessions to return "
          "their stock (drain_all_stock() over the network) before it goes "
          "on without the ones that did not answer, ms; 0 = do not wait");

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

// --tokens_file and --authz_policy (each absent when its flag is empty).
struct AuthFiles {
  std::optional<cgacct::TokenTable> tokens;
  std::optional<cgacct::AuthzPolicy> policy;
};

absl::StatusOr<AuthFiles> LoadAuthFiles() {
  AuthFiles out;
  const std::string tokens = absl::GetFlag(FLAGS_tokens_file);
  if (!tokens.empty()) {
    absl::StatusOr<cgacct::TokenTable> t = cgacct::TokenTable::LoadFile(tokens);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokens_file: ", t.status().message()));
    }
    out.tokens = *std::move(t);
  }
  const std::string policy = absl::GetFlag(FLAGS_authz_policy);
  if (!policy.empty()) {
    absl::StatusOr<cgacct::AuthzPolicy> p =
        cgacct::AuthzPolicy::LoadFile(policy);
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--authz_policy: ", p.status().message()));
    }
    out.policy = *std::move(p);
  }
  return out;
}

// The first line of `path`, whitespace trimmed ("" if unreadable).
std::string ReadToken(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[512];
  std::string out;
  if (std::fgets(buf, sizeof buf, f) != nullptr) out = buf;
  std::fclose(f);
  return std::string(absl::StripAsciiWhitespace(out));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "userspace memory-cgroup accounting service.\n"
      "  cgacctd [--listen=HOST:PORT] [--metrics_listen=HOST:PORT] [--cpus=N]\n"
      "          [--flush_lock_policy=per_cpu|whole|batch:N|adaptive]\n"
      "          [--flush_preempt_model=none|full]\n"
      "          [--flush_hold_budget=0] [--periodic_flush_interval=2s]\n"
      "          [--page_size=4096]\n"
      "          [--metrics_group_depth=3] [--metrics_max_groups=10000]\n"
      "          [--memory_recursiveprot] [--memory_localevents]\n"
      "          [--charge_batch_pages=64] [--stock_eviction_seed=0]\n"
      "          [--stock_pool_buckets=0] [--stock_victim_sets=0]\n"
      "          [--uncharge_refills_stock] [--max_charge_pages=1048576]\n"
      "          [--max_streams_per_identity=256]\n"
      "          [--max_in_flight_per_identity=1024]\n"
      "          [--max_message_bytes=4194304]\n"
      "          [--max_concurrent_streams_per_connection=100]\n"
      "          [--memory_trim_interval=1s]\n"
      "          [--tls_cert=PEM --tls_key=PEM [--client_ca=PEM]]\n"
      "          [--tokens_file=FILE] [--authz_policy=FILE] [--insecure]\n"
      "          [--metrics_token_file=FILE] [--reflection=auto|on|off]\n"
      "          [--state_dir=DIR] [--health_listen=HOST:PORT]");
  // --help lists the flags above (Abseil's default looks for them in a file
  // named after the program); Abseil's own flags stay under --helpfull.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  // --version: the project version and git revision (Abseil's default
  // prints only whether NDEBUG was defined).
  usage_config.version_string = [] {
    return absl::StrCat("cgacctd ", cgacct::CgacctVersion(), " (git ",
                        cgacct::CgacctRevision(), ")\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil keeps absl::Mutex's lock-order graph on; it costs about
  // 6x on every nested lock (measured here: 105 vs 18 ns for a lock pair).
  // The tests keep it on to catch lock-order inversions; the server does not
  // pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // SIGINT/SIGTERM/SIGHUP are taken by sigwait() below: block them before
  // any thread exists (engine, gRPC, civetweb) so every thread inherits the
  // mask. The first gRPC object (the credentials below) starts gRPC's
  // threads, so this comes before it.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

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

  // Access control and transport security, all checked before anything
  // starts.
  const std::string listen = absl::GetFlag(FLAGS_listen);
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  cgacct::TlsFiles tls_files;
  tls_files.cert = absl::GetFlag(FLAGS_tls_cert);
  tls_files.key = absl::GetFlag(FLAGS_tls_key);
  tls_files.client_ca = absl::GetFlag(FLAGS_client_ca);
  tls_files.refresh_interval = absl::GetFlag(FLAGS_tls_refresh_interval);
  if (tls_files.cert.empty() != tls_files.key.empty()) {
    return Fail(kExitUsage, "--tls_cert and --tls_key go together");
  }
  const bool tls = !tls_files.cert.empty();
  if (!tls && !tls_files.client_ca.empty()) {
    return Fail(kExitUsage, "--client_ca needs --tls_cert and --tls_key");
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::InsecureServerCredentials();
  if (tls) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> made =
        cgacct::MakeTlsServerCredentials(tls_files);
    if (!made.ok()) return Fail(kExitUsage, std::string(made.status().message()));
    credentials = *std::move(made);
  }
  absl::StatusOr<AuthFiles> auth_files = LoadAuthFiles();
  if (!auth_files.ok()) {
    return Fail(kExitUsage, std::string(auth_files.status().message()));
  }
  const bool access_control = !tls_files.client_ca.empty() ||
                              auth_files->tokens.has_value() ||
                              auth_files->policy.has_value();
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (!insecure && !cgacct::IsLoopbackListenAddress(listen) &&
      !(tls && access_control)) {
    return Fail(kExitUsage,
                absl::StrCat("--listen=", listen,
                             " is not a loopback address: it needs TLS "
                             "(--tls_cert, --tls_key) and client "
                             "authentication (--client_ca or --tokens_file), "
                             "or --insecure"));
  }
  const std::string metrics_token_file =
      absl::GetFlag(FLAGS_metrics_token_file);
  std::string metrics_token;
  if (!metrics_token_file.empty()) {
    metrics_token = ReadToken(metrics_token_file);
    if (metrics_token.size() < cgacct::TokenTable::kMinTokenBytes) {
      return Fail(kExitUsage,
                  absl::StrCat("--metrics_token_file=", metrics_token_file,
                               ": unreadable, or a token under ",
                               cgacct::TokenTable::kMinTokenBytes, " bytes"));
    }
  }
  if (!insecure && !metrics_listen.empty() && metrics_token.empty() &&
      (tls || access_control) &&
      !cgacct::IsLoopbackListenAddress(metrics_listen)) {
    return Fail(kExitUsage,
                absl::StrCat("--metrics_listen=", metrics_listen,
                             " is not a loopback address: with TLS or access "
                             "control on, /metrics needs --metrics_token_file "
                             "(or --insecure)"));
  }
  const std::string reflection = absl::GetFlag(FLAGS_reflection);
  if (reflection != "auto" && reflection != "on" && reflection != "off") {
    return Fail(kExitUsage, absl::StrCat("--reflection=\"", reflection,
                                         "\" is not auto, on or off"));
  }
  const bool serve_reflection =
      reflection == "on" || (reflection == "auto" && !access_control);


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
  if (*policy != cgacct::FlushLockPolicy::kAdaptive &&
      engine_options.flush_hold_budget != absl::ZeroDuration()) {
    std::fprintf(stderr,
                 "cgacctd: --flush_hold_budget applies to the adaptive "
                 "policy only; ignored under %s\n",
                 absl::GetFlag(FLAGS_flush_lock_policy).c_str());
  }
  engine_options.periodic_flush_interval =
      absl::GetFlag(FLAGS_periodic_flush_interval);
  engine_options.observer = &events_hub;
  engine_options.memory_recursiveprot =
      absl::GetFlag(FLAGS_memory_recursiveprot);
  engine_options.charge_batch_pages = absl::GetFlag(FLAGS_charge_batch_pages);
  engine_options.memory_localevents = absl::GetFlag(FLAGS_memory_localevents);
  engine_options.stock_pool_buckets = absl::GetFlag(FLAGS_stock_pool_buckets);
  engine_options.stock_victim_sets = absl::GetFlag(FLAGS_stock_victim_sets);
  engine_options.uncharge_refills_stock =
      absl::GetFlag(FLAGS_uncharge_refills_stock);
  engine_options.stock_eviction_seed = absl::GetFlag(FLAGS_stock_eviction_seed);
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
  auto auth_metrics = std::make_shared<cgacct::AuthMetrics>();
  std::unique_ptr<cgacct::Authorizer> authorizer;
  if (access_control) {
    cgacct::AuthConfig auth_config;
    auth_config.client_certificates = !tls_files.client_ca.empty();
    auth_config.tokens = std::move(auth_files->tokens);
    auth_config.policy = std::move(auth_files->policy);
    authorizer = std::make_unique<cgacct::Authorizer>(std::move(auth_config),
                                                      auth_metrics.get());
  }
  cgacct::InstallCallerIdentitySource(authorizer.get());
  cgacct::AccountingServiceOptions service_options;
  service_options.events_hub = &events_hub;
  service_options.store = store.get();
  service_options.max_charge_pages = absl::GetFlag(FLAGS_max_charge_pages);
  service_options.limits.max_streams_per_identity =
      absl::GetFlag(FLAGS_max_streams_per_identity);
  service_options.limits.max_in_flight_per_identity =
      absl::GetFlag(FLAGS_max_in_flight_per_identity);
  service_options.max_message_bytes = max_message_bytes;
  service_options.max_concurrent_streams_per_connection =
      streams_per_connection;
  service_options.authorizer = authorizer.get();
  service_options.sessions.default_ttl_ms =
      absl::GetFlag(FLAGS_session_default_ttl_ms);
  service_options.sessions.min_ttl_ms = absl::GetFlag(FLAGS_session_min_ttl_ms);
  service_options.sessions.max_ttl_ms = absl::GetFlag(FLAGS_session_max_ttl_ms);
  service_options.sessions.max_pages = absl::GetFlag(FLAGS_session_max_pages);
  service_options.sessions.max_sessions_per_identity =
      absl::GetFlag(FLAGS_max_sessions_per_identity);
  service_options.sessions.drain_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_session_drain_timeout_ms));
  service_options.sessions.drain_wait_threads = static_cast<int>(std::min<uint32_t>(
      absl::GetFlag(FLAGS_session_drain_wait_threads), 1u << 20));
  if (absl::Status s = service_options.sessions.Validate(); !s.ok())
    return Fail(kExitUsage, absl::StrCat("--", s.message()));
  cgacct::AccountingService service(**engine, rpc_metrics, service_options);
  // The start line's state words: none without --state_dir.
  std::string restored;
  if (store != nullptr) {
    absl::StatusOr<cgacct::RestoreReport> report = service.Restore();
    if (!report.ok()) {
      return Fail(kExitStore,
                  absl::StrCat("restoring ", store->path(), ": ",
                               report.status().message()));
    }
    restored = absl::StrCat(", state ", state_dir, ": ", report->groups,
                            " groups, ", report->requests, " request ids");
  }

  cgacct::MetricsOptions metrics_options;
  metrics_options.group_depth = group_depth;
  metrics_options.max_groups = absl::GetFlag(FLAGS_metrics_max_groups);
  metrics_options.on_first_drop = [](const std::string& message) {
    std::fprintf(stderr, "cgacctd: %s\n", message.c_str());
  };
  // grpc_server_* (go-grpc-prometheus names), recorded by an interceptor
  // on every service of the server.
  auto grpc_metrics =
      std::make_shared<cgacct::GrpcServerMetrics>(cgacct::CgacctdGrpcMethods());
  auto collector = std::make_shared<cgacct::MetricsCollector>(
      **engine, flush_observer, rpc_metrics, metrics_options);
  std::unique_ptr<cgacct::MetricsExposer> exposer;
  if (!metrics_listen.empty()) {
    cgacct::MetricsExposerOptions exposer_options;
    exposer_options.extra_collectables.push_back(auth_metrics);
    exposer_options.extra_collectables.push_back(
        cgacct::MakeSessionMetrics(service.sessions()));
    exposer_options.extra_collectables.push_back(grpc_metrics);
    exposer_options.extra_collectables.push_back(
        std::make_shared<cgacct::ProcessCollector>());
    exposer_options.extra_collectables.push_back(
        std::make_shared<cgacct::BuildInfoCollector>());
    exposer_options.basic_auth_password = metrics_token;
    absl::StatusOr<std::unique_ptr<cgacct::MetricsExposer>> started =
        cgacct::MetricsExposer::Start(metrics_listen, collector,
                                      std::move(exposer_options));
    if (!started.ok()) {
      return Fail(kExitBind, std::string(started.status().message()));
    }
    exposer = *std::move(started);
  }

  grpc::EnableDefaultHealthCheckService(true);
  // --health_listen: a server of its own with gRPC's health service alone,
  // plaintext on any address (health names no group and stays
  // unauthenticated on --listen too). Its builder is made before the
  // reflection plugin is registered (builders copy the plugins when made),
  // so it serves no reflection either.
  const std::string health_listen = absl::GetFlag(FLAGS_health_listen);
  std::unique_ptr<grpc::ServerBuilder> health_builder;
  int health_port = 0;
  if (!health_listen.empty()) {
    health_builder = std::make_unique<grpc::ServerBuilder>();
    health_builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // Unauthenticated and off loopback: health requests are a service name,
    // so messages stay small; streams per connection as on --listen.
    health_builder->SetMaxReceiveMessageSize(4096);
    health_builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                       static_cast<int>(streams_per_connection));
    health_builder->AddListeningPort(
        health_listen, grpc::InsecureServerCredentials(), &health_port);
  }
  if (serve_reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
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
  builder.AddListeningPort(listen, credentials, &port);
  service.RegisterOn(builder);  // + SessionStream's completion queue
  {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(grpc_metrics->NewInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server != nullptr) service.StartSessionStreams();
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

  std::unique_ptr<grpc::Server> health_server;
  if (health_builder != nullptr) {
    health_server = health_builder->BuildAndStart();
    if (health_server == nullptr || health_port == 0) {
      server->Shutdown();
      service.StopSessionStreams();
      return Fail(kExitBind, absl::StrCat("cannot listen on --health_listen=",
                                          health_listen,
                                          " (address in use or invalid)"));
    }
  }

  // Health by service name as well as the server's "" (grpc.health.v1):
  // both SERVING until shutdown begins, on --listen and --health_listen.
  std::vector<grpc::HealthCheckServiceInterface*> healths;
  for (grpc::Server* s : {server.get(), health_server.get()}) {
    if (s != nullptr && s->GetHealthCheckService() != nullptr) {
      healths.push_back(s->GetHealthCheckService());
    }
  }
  for (grpc::HealthCheckServiceInterface* health : healths) {
    health->SetServingStatus(cgacct::v1::Accounting::service_full_name(), true);
    health->SetServingStatus(true);
  }

  const std::string metrics_where =
      exposer ? absl::StrCat("metrics on ", HostOf(metrics_listen), ":",
                             exposer->port())
              : std::string("metrics off");
  std::string security;
  if (tls) absl::StrAppend(&security, ", tls");
  if (!tls_files.client_ca.empty()) absl::StrAppend(&security, ", mtls");
  if (access_control) {
    absl::StrAppend(&security, ", access control",
                    absl::GetFlag(FLAGS_authz_policy).empty() ? "" : " (policy)");
  }
  if (!serve_reflection) absl::StrAppend(&security, ", no reflection");
  if (health_server != nullptr) {
    absl::StrAppend(&security, ", health on ", HostOf(health_listen), ":",
                    health_port);
  }
  absl::StrAppend(&security, restored);
  const cgacct::EngineInfo started = (*engine)->GetInfo();
  std::string policy_text = started.flush_lock_policy_name;
  if (started.flush_lock_policy == cgacct::FlushLockPolicy::kAdaptive &&
      started.flush_hold_budget > absl::ZeroDuration()) {
    absl::StrAppend(&policy_text, ", budget=",
                    absl::FormatDuration(started.flush_hold_budget));
  }
  std::printf(
      "cgacctd listening on %s:%d (%s, cpus=%d, policy=%s, preempt=%s%s)\n",
      HostOf(listen).c_str(), port, metrics_where.c_str(),
      (*engine)->nr_cpus(), policy_text.c_str(),
      cgacct::FlushPreemptModelName(started.flush_preempt_model),
      security.c_str());
  std::fflush(stdout);

  int signal_number = 0;
  for (;;) {
    sigwait(&stop_signals, &signal_number);
    if (signal_number != SIGHUP) break;
    if (authorizer == nullptr) {
      std::fprintf(stderr, "cgacctd: SIGHUP: no access control to reload\n");
      continue;
    }
    absl::StatusOr<AuthFiles> reloaded = LoadAuthFiles();
    if (!reloaded.ok()) {
      std::fprintf(stderr, "cgacctd: SIGHUP: %s; keeping the previous files\n",
                   std::string(reloaded.status().message()).c_str());
      continue;
    }
    authorizer->Reload(std::move(reloaded->tokens),
                       std::move(reloaded->policy));
    std::fprintf(stderr, "cgacctd: SIGHUP: tokens and policy reloaded\n");
  }
  std::fprintf(stderr, "cgacctd: %s, shutting down\n",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  // Health checks answer NOT_SERVING from here on (load balancers stop
  // sending); new calls answer UNAVAILABLE with nothing applied; open
  // ChargeStreams answer what they have read and end UNAVAILABLE, and
  // WatchEvents streams end UNAVAILABLE, now rather than hold the grace
  // period open. Unary calls already running finish.
  for (grpc::HealthCheckServiceInterface* health : healths) {
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
    if ((again == SIGINT || again == SIGTERM) && !cancelled) {
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
  // SessionStream's queue before the server object goes: its last
  // completions (the calls requested but never matched) refer to it.
  service.StopSessionStreams();
  server.reset();
  // The health-only server last: probes see NOT_SERVING through the drain.
  if (health_server != nullptr) {
    health_server->Shutdown(std::chrono::system_clock::now());
    health_server.reset();
  }
  // The store closes with `store` (its last writes were committed by the
  // calls that made them).
  cgacct::InstallCallerIdentitySource(nullptr);
  return 0;
}
