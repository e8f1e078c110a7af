// Reading the server's Prometheus /metrics endpoint: a blocking HTTP GET
// through libcurl (Debian's libcurl4-openssl-dev), and a parser for the
// Prometheus text exposition format (version 0.0.4).
//
// Thread safety: all functions are thread-safe (no shared state).
#ifndef CGACCT_CLIENT_LOAD_METRICS_SCRAPE_H_
#define CGACCT_CLIENT_LOAD_METRICS_SCRAPE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cgacct::load {

// Fetches http://host_port/path and returns the response body. `host_port` is
// "HOST:PORT" or "[V6]:PORT" and must name the loopback interface
// ("localhost", 127.0.0.0/8 or ::1): the load client never sends requests off
// the machine (no DNS, no proxy). HTTP/1.1 through libcurl, which handles
// Content-Length, chunked and close-delimited bodies; no Accept-Encoding, so
// the body is plain text. Blocks for at most `timeout` in total.
// Errors: INVALID_ARGUMENT (malformed or non-loopback target), UNAVAILABLE
// (connect/read failed, connection reset, or timed out), RESOURCE_EXHAUSTED
// (body over `max_body_bytes`), DATA_LOSS (body shorter than its
// Content-Length, malformed HTTP), FAILED_PRECONDITION (HTTP status other
// than 200). Messages carry libcurl's error text.
absl::StatusOr<std::string> HttpGet(absl::string_view host_port,
                                    absl::string_view path,
                                    absl::Duration timeout,
                                    size_t max_body_bytes = 64 << 20);

// One sample line of the text format: `name{labels} value [timestamp]`.
struct MetricSample {
  std::string name;
  // Label pairs in the order written, values unescaped.
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;  // may be NaN or +/-Inf
};

// Parses every sample line of a Prometheus text exposition; comments (# HELP,
// # TYPE) and blank lines are skipped. Errors: INVALID_ARGUMENT naming the
// first malformed line (1-based).
absl::StatusOr<std::vector<MetricSample>> ParseMetricsText(
    absl::string_view text);

// The largest value among the samples called `name` (any labels), or nullopt
// when there is none. Meant for gauges such as
// cgacct_rstat_flush_lock_hold_max_seconds that may be split by a label.
std::optional<double> MaxSampleValue(const std::vector<MetricSample>& samples,
                                     absl::string_view name);

// The sum of the values of the samples called `name` (any labels), or nullopt
// when there is none. Meant for counters split by a label.
std::optional<double> SumSampleValues(const std::vector<MetricSample>& samples,
                                      absl::string_view name);

// HttpGet(host_port, "/metrics", timeout) parsed by ParseMetricsText():
// every sample cgacctd's /metrics serves. Errors: HttpGet's and
// ParseMetricsText's.
absl::StatusOr<std::vector<MetricSample>> ScrapeMetrics(
    absl::string_view host_port, absl::Duration timeout);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_METRICS_SCRAPE_H_
