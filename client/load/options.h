// cgacct-load's flags, read once into typed options, one struct per family
// of scenarios (docs/DESIGN.md §6.2): LoadOptions for the run driver's
// scenarios (stat-reader, hog, seed-rstat, reclaim), NetperfOptions for
// netperf, SessionChurnOptions for session-churn. Every flag is defined in
// options.cc; nothing else reads a flag.
//
// The *FromFlags() functions check ranges and combinations before anything
// is sent; an error is INVALID_ARGUMENT with the one line cgacct-load
// prints (exit 1).
//
// Thread safety: the *FromFlags() functions read the flags (thread-safe
// after absl::ParseCommandLine()); the option structs are plain values.
#ifndef CGACCT_CLIENT_LOAD_OPTIONS_H_
#define CGACCT_CLIENT_LOAD_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"

namespace cgacct::load {

// The scenarios of the run driver (driver.h): stat readers, hogs and
// writers, each 0 when the scenario has none.
struct LoadOptions {
  // --target's addresses, in order (several: a cluster's nodes, §4.18: the
  // workers' connections go to them in turn); `target` is the first, which
  // sets up the groups and whose /metrics is scraped.
  std::vector<std::string> targets;
  std::string target;
  std::string metrics_target;  // "" when neither given nor derivable
  std::string scenario;        // stat-reader, hog, seed-rstat or reclaim
  int readers = 0;             // 0 when the scenario has none
  int hogs = 0;                // 0 when the scenario has none
  int writers = 0;             // 0 when the scenario has none (reclaim)
  absl::Duration duration;
  absl::Duration warmup;
  double rate = 0;  // open loop: total GetStats/s; 0 = closed loop
  std::string json_path;
  std::string chart_path;
  uint64_t high_bytes = 0;
  uint64_t write_chunk_pages = 0;
  uint64_t reclaim_bytes = 0;
  absl::Duration reclaim_interval;
  std::string group;
  uint64_t hog_max_bytes = 0;
  uint64_t hog_chunk_pages = 0;
  int hog_cpus = 0;  // 0 = all of the server's CPUs
  std::string flush_name;
  v1::FlushMode flush = v1::FLUSH_MODE_EXACT;
  int channels = 0;
  int io_threads = 1;  // threads driving the stat readers' calls
  absl::Duration connect_timeout;
  absl::Duration rpc_timeout;
};

// --scenario as given.
std::string ScenarioFlag();

// The options of --scenario=stat-reader|hog|seed-rstat|reclaim.
absl::StatusOr<LoadOptions> LoadOptionsFromFlags();

// The `i`th connection's address: `targets` in turn, or `target` when
// `targets` is empty (options built by hand, as tests do).
inline const std::string& TargetFor(const std::vector<std::string>& targets,
                                    const std::string& target, size_t i) {
  return targets.empty() ? target : targets[i % targets.size()];
}
// The targets as the reports show them: comma-separated.
std::string TargetsText(const std::vector<std::string>& targets,
                        const std::string& target);

// How netperf sends its ops (--rpc).
enum class RpcKind { kStream, kBatch, kUnary, kLibrary };

struct NetperfOptions {
  std::vector<std::string> targets;  // as LoadOptions' (streams in turn)
  std::string target;
  std::string group;
  absl::Duration duration;
  std::string json_path;
  std::string chart_path;
  absl::Duration connect_timeout;
  absl::Duration rpc_timeout;
  int streams = 0;
  uint64_t pages = 0;
  int batch = 0;  // ops per message; 2 for unary (one charge, one uncharge)
  RpcKind rpc = RpcKind::kStream;
  std::string rpc_name;
  bool deep = false;
  std::string metrics_target;  // library: where RPCs per charge are scraped
  uint64_t resident_pages = 0;
  uint64_t protection_bytes = 0;  // --protection_bytes as given (0: derived)
};

// The options of --scenario=netperf.
absl::StatusOr<NetperfOptions> NetperfOptionsFromFlags();

struct SessionChurnOptions {
  std::vector<std::string> targets;  // as LoadOptions' (children in turn)
  std::string target;
  std::string metrics_target;  // "" when neither given nor derivable
  std::string group;
  std::string json_path;
  int clients = 0;
  int rounds = 0;
  uint64_t pages = 0;
  uint32_t ttl_ms = 0;
  absl::Duration connect_timeout;
  absl::Duration rpc_timeout;
};

// The options of --scenario=session-churn (and of its child processes).
absl::StatusOr<SessionChurnOptions> SessionChurnOptionsFromFlags();

// Whether this process is a session-churn child (--session_churn_child).
bool IsSessionChurnChild();

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_OPTIONS_H_
