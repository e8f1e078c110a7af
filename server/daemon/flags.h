// cgacctd's flags (docs/DESIGN.md §6.1) and the configuration they make,
// checked whole before anything starts: a value that parses but is out of
// range or inconsistent is one line on stderr and exit 2.
//
// Thread safety: call from main() before any thread exists (Abseil's flags
// are read once).
#ifndef CGACCT_SERVER_DAEMON_FLAGS_H_
#define CGACCT_SERVER_DAEMON_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/options.h"
#include "server/auth/policy.h"
#include "server/auth/tokens.h"
#include "server/cluster/cluster_node.h"
#include "server/daemon/tls.h"
#include "server/metrics/prometheus/collector.h"
#include "server/rpc/accounting_service.h"

namespace cgacct {

// Exit codes of cgacctd (docs/DESIGN.md §6.1): 0 after SIGINT/SIGTERM;
// kExitBind when a port cannot be bound; kExitUsage for every flag error
// (unknown, not of its type, out of range or inconsistent); kExitStore when the
// state store cannot be opened or restored (unreadable, damaged, another
// page size, or its directory in use by another cgacctd), or, in cluster
// mode, etcd does not answer at start or refuses the node (another live node
// of its name, another page size or shard depth).
inline constexpr int kExitBind = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitStore = 3;

// Smallest --grpc_memory_quota_bytes: below it gRPC cancels ordinary 4 MB
// requests (at 32 MiB, one tenant's 4 connections x 100 concurrent 4 MB
// ChargeBatches got 7,221 RST_STREAMs of 8,007 calls).
inline constexpr uint64_t kMinGrpcMemoryQuotaBytes = uint64_t{16} << 20;

// --tokens_file and --authz_policy (each absent when its flag is empty).
struct AuthFiles {
  std::optional<TokenTable> tokens;
  std::optional<AuthzPolicy> policy;
};

// Everything the flags say, checked.
struct DaemonConfig {
  EngineOptions engine;  // all but `observer`, which the daemon sets
  std::string listen;
  std::string metrics_listen;  // empty: no /metrics
  std::string health_listen;   // empty: no health-only port
  TlsFiles tls;                // tls.cert empty: plaintext
  AuthFiles auth;
  // --trusted_proxies: certificate identities of front proxies whose
  // x-cgacct-client-cert metadata names the caller (AuthConfig).
  std::vector<std::string> trusted_proxies;
  // A client CA, a token table or a policy: every call authenticates.
  bool access_control = false;
  std::string metrics_token;  // empty: /metrics without basic auth
  // --metrics_group_depth left at its default on a server with access
  // control and no metrics token: no per-group series (said at start).
  bool metrics_group_series_withheld = false;
  // An explicit --metrics_group_depth on such a server: said at start.
  bool metrics_group_series_open = false;
  bool serve_reflection = true;
  MetricsOptions metrics;
  // Everything but the pointers (store, authorizer, hub, clock), which the
  // daemon sets.
  AccountingServiceOptions service;
  uint32_t max_message_bytes = 0;
  uint32_t streams_per_connection = 0;
  // grpc::ResourceQuota of the main server's transports; 0 = none.
  uint64_t grpc_memory_quota_bytes = 0;
  // The receive guard's sampling interval (server/rpc/receive_guard.h);
  // zero: off. Used only with access control.
  absl::Duration receive_guard_interval;
  absl::Duration trim_interval;
  std::string state_dir;  // empty: nothing persisted
  // --state_recover: start from a damaged store (SqliteStateStore::Options).
  bool state_recover = false;
  // Cluster mode (--etcd_endpoints given): everything but the etcd
  // credentials (built by the daemon from the three files below), the page
  // size (the engine's) and the clock.
  bool cluster_mode = false;
  ClusterOptions cluster;
  std::string etcd_ca_file;    // empty: plaintext to etcd
  std::string etcd_cert_file;  // client certificate for etcd (with key)
  std::string etcd_key_file;
};

// Sets --help (cgacctd's flags; Abseil's under --helpfull) and --version,
// then parses argv (Abseil exits 1 on a value of the wrong type).
void ParseDaemonFlags(int argc, char** argv);

// The configuration of the parsed flags. Errors: INVALID_ARGUMENT, one line
// naming the flag (exit kExitUsage). A --flush_hold_budget given to another
// policy than adaptive is said on stderr and ignored.
absl::StatusOr<DaemonConfig> ConfigFromFlags();

// --tokens_file and --authz_policy read now (at start, and on SIGHUP).
// Errors: INVALID_ARGUMENT naming the flag, the file and what is wrong.
absl::StatusOr<AuthFiles> LoadAuthFiles();

}  // namespace cgacct

#endif  // CGACCT_SERVER_DAEMON_FLAGS_H_
