// cgacctd's flags and their checks (server/daemon/flags.h).
#include "server/daemon/flags.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli_util.h"
#include "engine/engine.h"
#include "engine/types.h"
#include "server/auth/credentials.h"
#include "server/common/log_line.h"
#include "server/common/read_file.h"
#include "server/metrics/prometheus/process_metrics.h"
#include "server/pipeline/call_limiter.h"
#include "server/pipeline/ops.h"

// The flags are global (Abseil's ABSL_FLAG) but read only here.
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
ABSL_FLAG(bool, state_recover, false,
          "start from a damaged --state_dir instead of refusing it (exit 3): "
          "rows failing their checksum are dropped (with the groups below "
          "them), a file failing SQLite's check is rebuilt from the rows "
          "that can be read (the damaged one kept beside it), acknowledged "
          "group changes missing from the store are accepted as lost; what "
          "was done is said on stderr");
ABSL_FLAG(std::string, etcd_endpoints, "",
          "cluster mode: HOST:PORT,... of the etcd members that hold the "
          "group tree and elect shard owners (docs/DESIGN.md §4.18); empty "
          "(default) = single-node mode");
ABSL_FLAG(std::string, etcd_prefix, "/cgacct",
          "cluster mode: every etcd key of this cluster is under it");
ABSL_FLAG(std::string, node_name, "",
          "cluster mode: this node's name, unique in the cluster; default "
          "--advertise_address");
ABSL_FLAG(std::string, advertise_address, "",
          "cluster mode: HOST:PORT clients and other nodes dial for this "
          "node; default --listen when its host is not a wildcard");
ABSL_FLAG(absl::Duration, cluster_lease_ttl, absl::Seconds(5),
          "cluster mode: TTL of the node's etcd lease (whole seconds, at least "
          "3 s); a dead node's shards move after it, a node stops admitting "
          "a little before it unless etcd renewed it (the fence)");
ABSL_FLAG(absl::Duration, cluster_takeover_grace, absl::Seconds(10),
          "cluster mode: after taking over a shard that had an owner before, "
          "admit there only charges marked resume (the client libraries' "
          "re-charges of pages they held) for this long, so that they are "
          "counted before fresh charges; 0 = no grace, at most 10m");
ABSL_FLAG(bool, cluster_require_sessions, false,
          "cluster mode: refuse (FAILED_PRECONDITION) charges that name no "
          "session: their pages are lost at a failover, with nobody to "
          "charge them again");
ABSL_FLAG(uint32_t, shard_depth, 1,
          "cluster mode: the groups at this depth are shard roots, each "
          "owned by one node (1: each child of /); the same on every node");
ABSL_FLAG(std::string, etcd_ca_file, "",
          "cluster mode: PEM CA bundle that etcd's server certificates chain "
          "to; turns TLS to etcd on");
ABSL_FLAG(std::string, etcd_cert_file, "",
          "cluster mode: PEM client certificate for etcd (with "
          "--etcd_key_file and --etcd_ca_file)");
ABSL_FLAG(std::string, etcd_key_file, "",
          "cluster mode: PEM private key of --etcd_cert_file");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the server; with --tls_key turns TLS on "
          "(re-read every --tls_refresh_interval)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, client_ca, "",
          "PEM CA bundle: clients may present a certificate chaining to it "
          "(mTLS); its identity (SAN, else CN) names the caller");
ABSL_FLAG(bool, require_client_cert, false,
          "with --client_ca: the TLS handshake refuses clients without a "
          "certificate from it (no bearer-token-only clients), so their "
          "traffic never reaches HTTP/2");
ABSL_FLAG(std::vector<std::string>, trusted_proxies, {},
          "with --client_ca: certificate identities (uri:, dns:, email:, ip:, "
          "cn:) of front proxies that verify client certificates themselves "
          "and pass each on in x-cgacct-client-cert (deploy/front-proxy/"
          "haproxy-mtls.cfg); their calls are the client's, never theirs");
ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Seconds(10),
          "how often the TLS files are re-read (>= 1s)");
ABSL_FLAG(std::string, tokens_file, "",
          "bearer tokens, one 'NAME TOKEN' per line (>= 16-byte tokens; "
          "the caller is then token:NAME); re-read on SIGHUP");
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
ABSL_FLAG(std::string, reflection, "off",
          "gRPC server reflection (v1alpha) on --listen: off (the default), "
          "on, or auto (on unless access control is on); never on "
          "--health_listen. Reflection is not access-controlled: with on, "
          "any client that can connect, unauthenticated ones included, "
          "reads the service's descriptors");
ABSL_FLAG(int, metrics_group_depth, -1,
          "export per-group series (memory.current, memory.max, "
          "memory.events) for groups at most this many path segments deep "
          "(\"/\" = 0); 0 = off; -1 (the default) = 3, or 0 when access "
          "control is on and /metrics has no --metrics_token_file (the "
          "series name every tenant's groups, and an open /metrics answers "
          "anyone who can reach it)");
ABSL_FLAG(uint64_t, metrics_max_groups, 10000,
          "most groups with per-group series per scrape (the shallowest "
          "first); the rest are counted in cgacct_group_series_dropped");
ABSL_FLAG(uint64_t, max_charge_pages, cgacct::kDefaultMaxChargePages,
          "most pages one Charge (or the charge ops of one ChargeBatch / "
          "ChargeStream message together) may charge; more is "
          "INVALID_ARGUMENT; 0 = only PAGE_COUNTER_MAX");
ABSL_FLAG(uint32_t, max_streams_per_identity,
          cgacct::kDefaultMaxStreamsPerIdentity,
          "concurrent ChargeStreams, WatchEvents and SessionStream streams per "
          "caller identity; more are shed with "
          "RESOURCE_EXHAUSTED; 0 = no limit");
ABSL_FLAG(uint32_t, max_groups_per_identity,
          cgacct::kDefaultMaxGroupsPerIdentity,
          "groups a caller that is not admin may have created and not "
          "deleted (across restarts with --state_dir); one more is "
          "RESOURCE_EXHAUSTED; 0 = no "
          "bound");
ABSL_FLAG(uint32_t, max_in_flight_per_identity,
          cgacct::kDefaultMaxInFlightPerIdentity,
          "concurrent in-flight messages (unary calls, stream requests not "
          "yet answered) per caller identity; more are shed with "
          "RESOURCE_EXHAUSTED; 0 = no limit");
ABSL_FLAG(uint64_t, max_in_flight_bytes_per_identity,
          cgacct::kDefaultMaxInFlightBytesPerIdentity,
          "encoded bytes of a caller identity's in-flight messages; a message "
          "that would pass it is shed with RESOURCE_EXHAUSTED (one alone is "
          "always admitted); 0 = no limit");
ABSL_FLAG(uint32_t, max_message_bytes, 4u << 20,
          "largest gRPC request or response message in bytes, 4096 .. "
          "2147483647 (gRPC answers RESOURCE_EXHAUSTED above it)");
ABSL_FLAG(uint64_t, grpc_memory_quota_bytes, 0,
          "bytes gRPC's transports may hold over all connections (their read "
          "buffers and the messages being received): a grpc::ResourceQuota. "
          "As it fills, gRPC frees the read buffers idle connections keep and "
          "allocates less; past it, it cancels streams of any connection, "
          "whoever's (RESOURCE_EXHAUSTED): see README before setting it. "
          ">= 16777216, or 0 (the default) = no quota");
ABSL_FLAG(absl::Duration, receive_guard_interval, absl::Milliseconds(20),
          "with access control, how often the receive guard samples the "
          "kernel's count of bytes received on connections with a read "
          "pending, to cancel (RESOURCE_EXHAUSTED) a message over "
          "--max_message_bytes while it is received (gRPC 1.51 takes a "
          "message whole before it checks its size); 0 = off");
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
ABSL_FLAG(uint32_t, max_peak_watermarks_per_identity, 1024,
          "memory.peak watermarks (OpenPeakWatermark) one caller identity may "
          "have open at once over all its sessions (>= 1); one more is "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(uint32_t, session_drain_wait_threads, 256,
          "threads on which charges at memory.max wait for sessions' drain "
          "answers (off gRPC's callback threads), 1..4096; that many wait "
          "side by side, more queue");
ABSL_FLAG(uint32_t, large_request_threads, 0,
          "threads that decode and run requests of 16 KiB or more (off "
          "gRPC's callback threads, each caller identity in turn), 0..1024; "
          "0 = one per CPU this process may run on");
ABSL_FLAG(uint32_t, session_drain_timeout_ms, 20,
          "how long a charge at memory.max waits for sessions to return "
          "their stock (drain_all_stock() over the network) before it goes "
          "on without the ones that did not answer, ms; 0 = do not wait");

namespace cgacct {
namespace {

absl::Status Usage(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// The first line of `path`, whitespace trimmed ("" if unreadable).
std::string ReadToken(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  const absl::string_view first_line =
      absl::string_view(*text).substr(0, text->find('\n'));
  return std::string(absl::StripAsciiWhitespace(first_line));
}

// The engine's flags into config->engine.
absl::Status EngineFromFlags(DaemonConfig* config) {
  EngineOptions& engine = config->engine;
  const std::string policy_name = absl::GetFlag(FLAGS_flush_lock_policy);
  int batch_cpus = 8;
  const std::optional<FlushLockPolicy> policy =
      ParseFlushLockPolicy(policy_name, &batch_cpus);
  if (!policy.has_value()) {
    return Usage(absl::StrCat("--flush_lock_policy=\"", policy_name,
                              "\" is not per_cpu, whole, adaptive or batch:N "
                              "(1 <= N <= 4096)"));
  }
  const std::string preempt_name = absl::GetFlag(FLAGS_flush_preempt_model);
  const std::optional<FlushPreemptModel> preempt_model =
      ParseFlushPreemptModel(preempt_name);
  if (!preempt_model.has_value()) {
    return Usage(absl::StrCat("--flush_preempt_model=\"", preempt_name,
                              "\" is not none or full"));
  }
  const int cpus = absl::GetFlag(FLAGS_cpus);
  if (cpus < 0 || cpus > Engine::kMaxCpus) {
    return Usage(absl::StrCat("--cpus=", cpus, " out of range [0, ",
                              Engine::kMaxCpus, "]"));
  }
  engine.nr_cpus = cpus;
  engine.page_size_bytes = absl::GetFlag(FLAGS_page_size);
  engine.flush_lock_policy = *policy;
  engine.flush_batch_cpus = batch_cpus;
  engine.flush_preempt_model = *preempt_model;
  engine.flush_hold_budget = absl::GetFlag(FLAGS_flush_hold_budget);
  if (*policy != FlushLockPolicy::kAdaptive &&
      engine.flush_hold_budget != absl::ZeroDuration()) {
    LogLine(absl::StrCat("--flush_hold_budget applies to the adaptive "
                         "policy only; ignored under ",
                         policy_name));
  }
  engine.periodic_flush_interval = absl::GetFlag(FLAGS_periodic_flush_interval);
  engine.memory_recursiveprot = absl::GetFlag(FLAGS_memory_recursiveprot);
  engine.charge_batch_pages = absl::GetFlag(FLAGS_charge_batch_pages);
  engine.memory_localevents = absl::GetFlag(FLAGS_memory_localevents);
  engine.stock_pool_buckets = absl::GetFlag(FLAGS_stock_pool_buckets);
  engine.stock_victim_sets = absl::GetFlag(FLAGS_stock_victim_sets);
  engine.uncharge_refills_stock = absl::GetFlag(FLAGS_uncharge_refills_stock);
  engine.stock_eviction_seed = absl::GetFlag(FLAGS_stock_eviction_seed);
  return absl::OkStatus();
}

// The server's limits, the service's options and the metrics' into
// `config`.
absl::Status LimitsFromFlags(DaemonConfig* config) {
  const int group_depth = absl::GetFlag(FLAGS_metrics_group_depth);
  if (group_depth < -1) {
    return Usage(absl::StrCat("--metrics_group_depth=", group_depth,
                              " must be >= 0, or -1 (the default)"));
  }
  config->metrics.group_depth = group_depth;
  config->metrics.max_groups = absl::GetFlag(FLAGS_metrics_max_groups);
  const uint32_t max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (max_message_bytes < 4096 || max_message_bytes > INT_MAX) {
    return Usage(absl::StrCat("--max_message_bytes=", max_message_bytes,
                              " out of range [4096, ", INT_MAX, "]"));
  }
  const uint32_t streams_per_connection =
      absl::GetFlag(FLAGS_max_concurrent_streams_per_connection);
  if (streams_per_connection < 1 || streams_per_connection > INT_MAX) {
    return Usage(absl::StrCat(
        "--max_concurrent_streams_per_connection=", streams_per_connection,
        " out of range [1, ", INT_MAX, "]"));
  }
  config->max_message_bytes = max_message_bytes;
  config->streams_per_connection = streams_per_connection;
  const uint64_t grpc_memory_quota = absl::GetFlag(FLAGS_grpc_memory_quota_bytes);
  if (grpc_memory_quota != 0 &&
      (grpc_memory_quota < kMinGrpcMemoryQuotaBytes ||
       grpc_memory_quota > static_cast<uint64_t>(INT64_MAX))) {
    return Usage(absl::StrCat("--grpc_memory_quota_bytes=", grpc_memory_quota,
                              " out of range: 0 (no quota) or [",
                              kMinGrpcMemoryQuotaBytes, ", ", INT64_MAX, "]"));
  }
  config->grpc_memory_quota_bytes = grpc_memory_quota;
  config->receive_guard_interval = absl::GetFlag(FLAGS_receive_guard_interval);
  if (config->receive_guard_interval < absl::ZeroDuration() ||
      (config->receive_guard_interval > absl::ZeroDuration() &&
       config->receive_guard_interval < absl::Milliseconds(1)) ||
      config->receive_guard_interval > absl::Seconds(10)) {
    return Usage(absl::StrCat("--receive_guard_interval=",
                              absl::FormatDuration(
                                  config->receive_guard_interval),
                              " out of range: 0 (off) or 1ms .. 10s"));
  }
  config->trim_interval = absl::GetFlag(FLAGS_memory_trim_interval);
  if (config->trim_interval < absl::ZeroDuration())
    return Usage("--memory_trim_interval must be >= 0");
  AccountingServiceOptions& service = config->service;
  service.max_charge_pages = absl::GetFlag(FLAGS_max_charge_pages);
  service.max_groups_per_identity = absl::GetFlag(FLAGS_max_groups_per_identity);
  service.limits.max_streams_per_identity =
      absl::GetFlag(FLAGS_max_streams_per_identity);
  service.limits.max_in_flight_per_identity =
      absl::GetFlag(FLAGS_max_in_flight_per_identity);
  service.limits.max_in_flight_bytes_per_identity =
      absl::GetFlag(FLAGS_max_in_flight_bytes_per_identity);
  service.transport.max_message_bytes = max_message_bytes;
  // How many messages of `message_cost` bytes an identity's in-flight
  // bytes hold: at least 1; 0 (no bound) without a bytes bound.
  const uint64_t bytes_bound = service.limits.max_in_flight_bytes_per_identity;
  const auto messages_held = [bytes_bound](uint64_t message_cost) {
    if (bytes_bound == 0) return uint32_t{0};
    return static_cast<uint32_t>(std::min<uint64_t>(
        UINT32_MAX, std::max<uint64_t>(1, bytes_bound / message_cost)));
  };
  // Requests of one identity read at once (server/rpc/unary.h): each costs
  // about four times its size while handled.
  service.limits.max_reads_per_identity =
      messages_held(uint64_t{4} * max_message_bytes);
  // Reads that stay pending (a ChargeStream's, a SessionStream's): gRPC
  // 1.51 buffers a whole message of up to --max_message_bytes for each:
  // ChargeStreams open (with access control: set below, in
  // SecurityFromFlags's caller) and SessionStream reads at once.
  const uint32_t stream_reads = messages_held(max_message_bytes);
  service.limits.max_charge_streams_per_identity = stream_reads;
  service.limits.max_session_reads_per_identity = stream_reads;
  service.transport.max_concurrent_streams_per_connection =
      streams_per_connection;
  const uint32_t large_request_threads =
      absl::GetFlag(FLAGS_large_request_threads);
  if (large_request_threads > 1024) {
    return Usage(absl::StrCat("--large_request_threads=",
                              large_request_threads,
                              " out of range [0, 1024]"));
  }
  service.large_request_threads = static_cast<int>(large_request_threads);
  SessionOptions& sessions = service.sessions;
  sessions.default_ttl_ms = absl::GetFlag(FLAGS_session_default_ttl_ms);
  sessions.min_ttl_ms = absl::GetFlag(FLAGS_session_min_ttl_ms);
  sessions.max_ttl_ms = absl::GetFlag(FLAGS_session_max_ttl_ms);
  sessions.max_pages = absl::GetFlag(FLAGS_session_max_pages);
  sessions.max_sessions_per_identity =
      absl::GetFlag(FLAGS_max_sessions_per_identity);
  sessions.max_peak_watermarks_per_identity =
      absl::GetFlag(FLAGS_max_peak_watermarks_per_identity);
  sessions.drain_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_session_drain_timeout_ms));
  sessions.drain_wait_threads = static_cast<int>(std::min<uint32_t>(
      absl::GetFlag(FLAGS_session_drain_wait_threads), 1u << 20));
  if (absl::Status s = sessions.Validate(); !s.ok())
    return Usage(absl::StrCat("--", s.message()));
  return absl::OkStatus();
}

// Transport security and access control into `config`, all checked before
// anything starts.
absl::Status SecurityFromFlags(DaemonConfig* config) {
  config->tls.cert = absl::GetFlag(FLAGS_tls_cert);
  config->tls.key = absl::GetFlag(FLAGS_tls_key);
  config->tls.client_ca = absl::GetFlag(FLAGS_client_ca);
  config->tls.require_client_cert = absl::GetFlag(FLAGS_require_client_cert);
  config->tls.refresh_interval = absl::GetFlag(FLAGS_tls_refresh_interval);
  if (config->tls.cert.empty() != config->tls.key.empty())
    return Usage("--tls_cert and --tls_key go together");
  const bool tls = !config->tls.cert.empty();
  if (!tls && !config->tls.client_ca.empty())
    return Usage("--client_ca needs --tls_cert and --tls_key");
  if (config->tls.require_client_cert && config->tls.client_ca.empty()) {
    return Usage(
        "--require_client_cert needs --tls_cert, --tls_key and --client_ca");
  }
  for (const std::string& proxy : absl::GetFlag(FLAGS_trusted_proxies)) {
    if (!HasIdentityKind(proxy) || absl::StartsWith(proxy, "token:")) {
      return Usage(absl::StrCat(
          "--trusted_proxies: \"", proxy,
          "\" is not a certificate identity (uri:, dns:, email:, ip: or cn: "
          "and a name)"));
    }
    config->trusted_proxies.push_back(proxy);
  }
  if (!config->trusted_proxies.empty() && config->tls.client_ca.empty()) {
    return Usage(
        "--trusted_proxies needs --tls_cert, --tls_key and --client_ca (a "
        "proxy proves itself with its client certificate)");
  }
  absl::StatusOr<AuthFiles> auth_files = LoadAuthFiles();
  if (!auth_files.ok()) return auth_files.status();
  config->auth = *std::move(auth_files);
  config->access_control = !config->tls.client_ca.empty() ||
                           config->auth.tokens.has_value() ||
                           config->auth.policy.has_value();
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (!insecure && !IsLoopbackListenAddress(config->listen) &&
      !(tls && config->access_control)) {
    return Usage(absl::StrCat(
        "--listen=", config->listen,
        " is not a loopback address: it needs TLS (--tls_cert, --tls_key) "
        "and client authentication (--client_ca or --tokens_file), or "
        "--insecure"));
  }
  const std::string metrics_token_file =
      absl::GetFlag(FLAGS_metrics_token_file);
  if (!metrics_token_file.empty()) {
    config->metrics_token = ReadToken(metrics_token_file);
    if (config->metrics_token.size() < TokenTable::kMinTokenBytes) {
      return Usage(absl::StrCat("--metrics_token_file=", metrics_token_file,
                                ": unreadable, or a token under ",
                                TokenTable::kMinTokenBytes, " bytes"));
    }
  }
  // The default depth: per-group series name every tenant's groups, so a
  // server with access control exports them only behind the token (issue
  // 22's attack round: a co-located tenant read every other tenant's paths
  // and usage from the loopback /metrics). An explicit depth is kept.
  const bool open_metrics = config->access_control &&
                            config->metrics_token.empty() &&
                            !config->metrics_listen.empty();
  if (config->metrics.group_depth < 0) {
    config->metrics_group_series_withheld = open_metrics;
    config->metrics.group_series_withheld = open_metrics;
    config->metrics.group_depth =
        open_metrics ? 0 : kDefaultMetricsGroupDepth;
  } else {
    // The operator's choice, said at start.
    config->metrics_group_series_open =
        open_metrics && config->metrics.group_depth > 0;
  }
  if (!insecure && !config->metrics_listen.empty() &&
      config->metrics_token.empty() && (tls || config->access_control) &&
      !IsLoopbackListenAddress(config->metrics_listen)) {
    return Usage(absl::StrCat(
        "--metrics_listen=", config->metrics_listen,
        " is not a loopback address: with TLS or access control on, "
        "/metrics needs --metrics_token_file (or --insecure)"));
  }
  const std::string reflection = absl::GetFlag(FLAGS_reflection);
  if (reflection != "auto" && reflection != "on" && reflection != "off") {
    return Usage(absl::StrCat("--reflection=\"", reflection,
                              "\" is not auto, on or off"));
  }
  config->serve_reflection =
      reflection == "on" || (reflection == "auto" && !config->access_control);
  return absl::OkStatus();
}

// Cluster mode's flags: only with --etcd_endpoints, and then consistent.
absl::Status ClusterFromFlags(DaemonConfig* config) {
  const std::string endpoints = absl::GetFlag(FLAGS_etcd_endpoints);
  config->etcd_ca_file = absl::GetFlag(FLAGS_etcd_ca_file);
  config->etcd_cert_file = absl::GetFlag(FLAGS_etcd_cert_file);
  config->etcd_key_file = absl::GetFlag(FLAGS_etcd_key_file);
  ClusterOptions& cluster = config->cluster;
  cluster.prefix = absl::GetFlag(FLAGS_etcd_prefix);
  cluster.node_name = absl::GetFlag(FLAGS_node_name);
  cluster.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  cluster.lease_ttl = absl::GetFlag(FLAGS_cluster_lease_ttl);
  cluster.shard_depth = absl::GetFlag(FLAGS_shard_depth);
  cluster.takeover_grace = absl::GetFlag(FLAGS_cluster_takeover_grace);
  cluster.require_sessions = absl::GetFlag(FLAGS_cluster_require_sessions);
  if (endpoints.empty()) {
    for (const auto& [set, name] :
         {std::pair<bool, const char*>{!cluster.node_name.empty(), "--node_name"},
          {!cluster.advertise_address.empty(), "--advertise_address"},
          {!config->etcd_ca_file.empty(), "--etcd_ca_file"},
          {!config->etcd_cert_file.empty(), "--etcd_cert_file"},
          {!config->etcd_key_file.empty(), "--etcd_key_file"},
          {cluster.require_sessions, "--cluster_require_sessions"}}) {
      if (set)
        return absl::InvalidArgumentError(absl::StrCat(
            name, " is a cluster-mode flag: it needs --etcd_endpoints"));
    }
    return absl::OkStatus();
  }
  config->cluster_mode = true;
  for (absl::string_view e : absl::StrSplit(endpoints, ',')) {
    if (e.empty() || e.rfind(':') == absl::string_view::npos ||
        e.rfind(':') + 1 == e.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "--etcd_endpoints: \"", e, "\" is not HOST:PORT (a comma list)"));
    cluster.etcd.endpoints.emplace_back(e);
  }
  if (!config->state_dir.empty())
    return absl::InvalidArgumentError(
        "--state_dir and --etcd_endpoints: in cluster mode the group tree is "
        "in etcd and request ids are kept in memory; drop --state_dir");
  if (cluster.prefix.empty() || cluster.prefix[0] != '/' ||
      cluster.prefix.back() == '/')
    return absl::InvalidArgumentError(absl::StrCat(
        "--etcd_prefix=\"", cluster.prefix,
        "\": must start with '/' and not end with one (e.g. /cgacct)"));
  if (cluster.lease_ttl < absl::Seconds(3) ||
      cluster.lease_ttl != absl::Seconds(absl::ToInt64Seconds(cluster.lease_ttl)))
    return absl::InvalidArgumentError(absl::StrCat(
        "--cluster_lease_ttl=", absl::FormatDuration(cluster.lease_ttl),
        ": whole seconds, at least 3s (etcd's leases count seconds)"));
  if (cluster.takeover_grace < absl::ZeroDuration() ||
      cluster.takeover_grace > absl::Minutes(10))
    return absl::InvalidArgumentError(absl::StrCat(
        "--cluster_takeover_grace=",
        absl::FormatDuration(cluster.takeover_grace), ": 0 to 10m"));
  if (cluster.shard_depth < 1 || cluster.shard_depth > 64)
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard_depth=", cluster.shard_depth, ": 1 to 64"));
  if (cluster.advertise_address.empty()) {
    const std::string host = config->listen.substr(0, config->listen.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::" ||
        absl::EndsWith(config->listen, ":0"))
      return absl::InvalidArgumentError(absl::StrCat(
          "--etcd_endpoints needs --advertise_address (HOST:PORT other nodes "
          "and clients dial): --listen=", config->listen,
          " is a wildcard or an ephemeral port"));
    cluster.advertise_address = config->listen;
  }
  if (cluster.node_name.empty()) cluster.node_name = cluster.advertise_address;
  if (cluster.node_name.find('/') != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(
        "--node_name=\"", cluster.node_name, "\": no '/' in a node name"));
  const bool cert = !config->etcd_cert_file.empty();
  if (cert != !config->etcd_key_file.empty())
    return absl::InvalidArgumentError(
        "--etcd_cert_file and --etcd_key_file go together");
  if (cert && config->etcd_ca_file.empty())
    return absl::InvalidArgumentError(
        "--etcd_cert_file needs --etcd_ca_file (TLS to etcd)");
  return absl::OkStatus();
}

}  // namespace

void ParseDaemonFlags(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "userspace memory-cgroup accounting service.\n"
      "  cgacctd [--listen=HOST:PORT] [--metrics_listen=HOST:PORT] [--cpus=N]\n"
      "          [--flush_lock_policy=per_cpu|whole|batch:N|adaptive]\n"
      "          [--flush_preempt_model=none|full]\n"
      "          [--flush_hold_budget=0] [--periodic_flush_interval=2s]\n"
      "          [--page_size=4096]\n"
      "          [--metrics_group_depth=-1] [--metrics_max_groups=10000]\n"
      "          [--memory_recursiveprot] [--memory_localevents]\n"
      "          [--charge_batch_pages=64] [--stock_eviction_seed=0]\n"
      "          [--stock_pool_buckets=0] [--stock_victim_sets=0]\n"
      "          [--uncharge_refills_stock] [--max_charge_pages=1048576]\n"
      "          [--max_streams_per_identity=256]\n"
      "          [--max_groups_per_identity=10000]\n"
      "          [--max_peak_watermarks_per_identity=1024]\n"
      "          [--max_in_flight_per_identity=1024]\n"
      "          [--max_in_flight_bytes_per_identity=67108864]\n"
      "          [--max_message_bytes=4194304]\n"
      "          [--max_concurrent_streams_per_connection=100]\n"
      "          [--grpc_memory_quota_bytes=0] [--receive_guard_interval=20ms]\n"
      "          [--memory_trim_interval=1s]\n"
      "          [--tls_cert=PEM --tls_key=PEM\n"
      "           [--client_ca=PEM [--require_client_cert]\n"
      "            [--trusted_proxies=IDENTITY,...]]]\n"
      "          [--tokens_file=FILE] [--authz_policy=FILE] [--insecure]\n"
      "          [--metrics_token_file=FILE] [--reflection=off|on|auto]\n"
      "          [--state_dir=DIR [--state_recover]]\n"
      "          [--health_listen=HOST:PORT]\n"
      "          [--etcd_endpoints=HOST:PORT,... [--etcd_prefix=/cgacct]\n"
      "           [--node_name=NAME] [--advertise_address=HOST:PORT]\n"
      "           [--cluster_lease_ttl=5s] [--shard_depth=1]\n"
      "           [--cluster_takeover_grace=10s] [--cluster_require_sessions]\n"
      "           [--etcd_ca_file=PEM [--etcd_cert_file=PEM "
      "--etcd_key_file=PEM]]]");
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
    return absl::StrCat("cgacctd ", CgacctVersion(), " (git ", CgacctRevision(),
                        ")\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  // --help exits 0 with the usage and cgacctd's own flags (Abseil's exits 1
  // and names the build's source paths); a flag error exits 2 with one line,
  // as the values that parse but are out of range do (Abseil's parser exits
  // 1, the exit code of a port in use).
  if (cli::PrintHelpIfAsked(argc, argv)) std::exit(0);
  if (std::optional<std::string> error = cli::FlagUsageError(argc, argv)) {
    LogLine(absl::StrCat(*error, " (cgacctd --help lists the flags)"));
    std::exit(kExitUsage);
  }
  absl::ParseCommandLine(argc, argv);
}

absl::StatusOr<AuthFiles> LoadAuthFiles() {
  AuthFiles out;
  const std::string tokens = absl::GetFlag(FLAGS_tokens_file);
  if (!tokens.empty()) {
    absl::StatusOr<TokenTable> t = TokenTable::LoadFile(tokens);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokens_file: ", t.status().message()));
    }
    out.tokens = *std::move(t);
  }
  const std::string policy = absl::GetFlag(FLAGS_authz_policy);
  if (!policy.empty()) {
    absl::StatusOr<AuthzPolicy> p = AuthzPolicy::LoadFile(policy);
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--authz_policy: ", p.status().message()));
    }
    out.policy = *std::move(p);
  }
  return out;
}

absl::StatusOr<DaemonConfig> ConfigFromFlags() {
  DaemonConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  config.health_listen = absl::GetFlag(FLAGS_health_listen);
  config.state_dir = absl::GetFlag(FLAGS_state_dir);
  config.state_recover = absl::GetFlag(FLAGS_state_recover);
  if (config.state_recover && config.state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--state_recover needs --state_dir (the store it recovers)");
  }
  if (absl::Status s = EngineFromFlags(&config); !s.ok()) return s;
  if (absl::Status s = LimitsFromFlags(&config); !s.ok()) return s;
  if (absl::Status s = SecurityFromFlags(&config); !s.ok()) return s;
  if (absl::Status s = ClusterFromFlags(&config); !s.ok()) return s;
  // Without access control every caller is the one anonymous identity (and
  // admin): a bound on its ChargeStreams would bound the whole server's.
  // Likewise its SessionStream reads: one client's streams that never
  // attach (each read waits up to a second for its message) would hold up
  // every other client's keepalives.
  if (!config.access_control) {
    config.service.limits.max_charge_streams_per_identity = 0;
    config.service.limits.max_session_reads_per_identity = 0;
  }
  return config;
}

}  // namespace cgacct
