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

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"

namespace cgacct::load {

// The scenarios of the run driver (driver.h): stat readers, hogs and
// writers, each 0 when the scenario has none.
struct LoadOptions {
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

// How netperf sends its ops (--rpc).
enum class RpcKind { kStream, kBatch, kUnary, kLibrary };

struct NetperfOptions {
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
