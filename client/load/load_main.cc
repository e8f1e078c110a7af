// cgacct-load: the load generator (docs/DESIGN.md §6.2). Reads the flags
// (options.h) and runs one scenario:
//   stat-reader, hog, seed-rstat, reclaim   the run driver (driver.h) with
//                                           stat readers (stat_reader.h),
//                                           hogs (hog.h), writers and a
//                                           reclaimer (reclaim.h);
//   netperf                                 netperf.h;
//   session-churn                           session_churn.h.
// Closed loop (the default): each worker sends its next call when the last
// one returns, and latency runs from send to answer. Open loop (--rate=N,
// stat readers): N GetStats calls per second in total on a fixed schedule
// (open_loop.h), latency from each call's intended send time. Either way
// the first --warmup (1 s) is run but excluded from every figure; the
// report carries a per-second series (p50/p90/p99/max), --json writes it
// all and --chart=FILE.png plots it with gnuplot (load_chart.h).
//
// Exit status: 0 after a clean run; 1 when the server is unreachable or the
// set-up fails (one line on stderr); 3 when the run finished but some RPCs
// failed unexpectedly; 130 when interrupted (the report is still printed).
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/cli/cli_util.h"
#include "client/load/driver.h"
#include "client/load/netperf.h"
#include "client/load/options.h"
#include "client/load/run_control.h"
#include "client/load/session_churn.h"

namespace cgacct::load {
namespace {

constexpr char kUsage[] =
    "load generator for cgacctd.\n"
    "cgacct-load --scenario=stat-reader|hog|seed-rstat|reclaim "
    "[--threads=N] [--hogs=N] [--writers=N] [--rate=N] [--warmup=1s] "
    "[--duration=10s] [--json=FILE] [--chart=FILE.png]\n"
    "cgacct-load --scenario=netperf [--streams=N] [--pages=3] [--batch=64] "
    "[--rpc=stream|batch|unary|library] [--hierarchy=root|deep]\n"
    "cgacct-load --scenario=session-churn [--churn_clients=4] "
    "[--churn_rounds=3] [--churn_pages=300] [--session_ttl_ms=1000]\n"
    "Closed-loop (or, with --rate, open-loop) load against cgacctd "
    "(docs/DESIGN.md §6.2); the report goes "
    "to stdout, progress to stderr.";

// Runs the scenario --scenario names; the exit status.
int RunScenario(const char* argv0) {
  const std::string scenario = ScenarioFlag();
  if (IsSessionChurnChild() || scenario == "session-churn") {
    absl::StatusOr<SessionChurnOptions> o = SessionChurnOptionsFromFlags();
    if (!o.ok()) return Fail(o.status().message());
    return IsSessionChurnChild() ? RunSessionChurnChild(*o)
                                 : RunSessionChurn(*o, argv0);
  }
  if (scenario == "netperf") {
    absl::StatusOr<NetperfOptions> o = NetperfOptionsFromFlags();
    if (!o.ok()) return Fail(o.status().message());
    return RunNetperf(*o);
  }
  absl::StatusOr<LoadOptions> o = LoadOptionsFromFlags();
  if (!o.ok()) return Fail(o.status().message());
  return RunLoad(*o);
}

}  // namespace
}  // namespace cgacct::load

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(cgacct::load::kUsage);
  cgacct::cli::ShowOwnFlagsInHelp();
  if (cgacct::cli::PrintHelpIfAsked(argc, argv)) return 0;
  // Debian's Abseil keeps absl::Mutex's lock-order graph on (as cgacctd
  // notes); gRPC's locks paid for it on every call here (GraphCycles
  // ~3% of the client's CPU under perf).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::cerr << "cgacct-load: unexpected argument \"" << positional[1]
              << "\"\n";
    return 1;
  }
  return cgacct::load::RunScenario(argv[0]);
}
