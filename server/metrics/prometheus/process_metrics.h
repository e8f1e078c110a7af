// process_* metrics (the Prometheus client libraries' process collector,
// which Debian's prometheus-cpp 1.0 does not have) and cgacct_build_info,
// docs/DESIGN.md §5.
#ifndef CGACCT_SERVER_METRICS_PROMETHEUS_PROCESS_METRICS_H_
#define CGACCT_SERVER_METRICS_PROMETHEUS_PROCESS_METRICS_H_

#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace cgacct {

// Reads /proc/self at scrape time, as client_golang's process collector
// does:
//   process_cpu_seconds_total      counter  user + system CPU (getrusage)
//   process_resident_memory_bytes  gauge    RSS (/proc/self/statm)
//   process_virtual_memory_bytes   gauge    VSZ (/proc/self/statm)
//   process_open_fds               gauge    entries of /proc/self/fd
//   process_max_fds                gauge    RLIMIT_NOFILE soft limit
//   process_start_time_seconds     gauge    start, seconds since the epoch
//                                           (/proc/self/stat starttime +
//                                           /proc/stat btime)
// A value that cannot be read leaves its family out of that scrape.
//
// Thread safety: thread-safe (no state; reads the kernel on each Collect()).
class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

// cgacct_build_info{version,revision} 1: the version of the project
// (CMake's PROJECT_VERSION) and the git revision it was built from
// (CgacctRevision()).
//
// Thread safety: thread-safe (constant).
class BuildInfoCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

// The project version, and the git revision of the source tree when CMake
// last configured it ("1a2b3c4d5e6f", 12 hex digits; CMake re-configures
// when git's HEAD moves; "unknown" outside a git checkout). Constant
// strings, from cgacct_build_info.h.
const char* CgacctVersion();
const char* CgacctRevision();

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_PROMETHEUS_PROCESS_METRICS_H_
