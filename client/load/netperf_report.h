// What one cgacct-load netperf run measured (NetperfReport), and its two
// renderings: the table on stdout and the --json document.
//
// Thread safety: NetperfReport is a plain value (thread-compatible); the
// formatting functions are thread-safe.
#ifndef CGACCT_CLIENT_LOAD_NETPERF_REPORT_H_
#define CGACCT_CLIENT_LOAD_NETPERF_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cgacct/client.h"
#include "client/load/histogram.h"
#include "client/load/load_report.h"
#include "client/load/options.h"

namespace cgacct::load {

struct NetperfReport {
  double elapsed_s = 0;
  uint64_t ops = 0;
  uint64_t messages = 0;
  uint64_t op_errors = 0;
  uint64_t rpc_errors = 0;
  LatencyHistogram latency;
  std::vector<IntervalStats> series;  // per progress interval (~1 s)
  std::string first_error;
  std::optional<uint64_t> anon_left;
  uint32_t nr_cpus = 0;
  uint32_t charge_batch_pages = 0;
  uint64_t protection_bytes = 0;
  // --rpc=library
  client::ClientStats library;
  std::optional<double> server_rpcs;  // Charge + Uncharge handled, delta
};

// The group the streams charge: GROUP, or GROUP/mid/leaf with
// --hierarchy=deep.
std::string NetperfLeafPath(const NetperfOptions& o);

// The ops one message carries: 1 for --rpc=unary, --batch otherwise.
int OpsPerMessage(const NetperfOptions& o);

// The table cgacct-load prints, ending in '\n'.
std::string FormatNetperfTable(const NetperfOptions& o, const NetperfReport& r);

// The --json document (pretty-printed, ending in '\n').
std::string NetperfJson(const NetperfOptions& o, const NetperfReport& r);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_NETPERF_REPORT_H_
