// MetricsExposer: /metrics over HTTP (prometheus-cpp's pull Exposer on
// civetweb), with optional basic auth (docs/DESIGN.md §5, §4.11).
#ifndef CGACCT_SERVER_METRICS_PROMETHEUS_EXPOSER_H_
#define CGACCT_SERVER_METRICS_PROMETHEUS_EXPOSER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace cgacct {

// civetweb worker threads of the /metrics server, and how long one waits for
// a client's whole request (and, answering, for a stalled socket to take
// more bytes) before dropping the connection. A connection that sends no
// whole request holds a worker that long; civetweb queues 20 more and the
// kernel 200 (its listen backlog; further connections wait for a SYN
// retry), so a scrape waits at most ~(128 + 220) / 128 x 1 s behind any
// number of slow connections (docs/DESIGN.md §5).
inline constexpr int kMetricsHttpThreads = 128;
inline constexpr int kMetricsHttpRequestTimeoutMs = 1000;

struct MetricsExposerOptions {
  // Served on /metrics after the main collectable (e.g. the auth and
  // session families).
  std::vector<std::shared_ptr<prometheus::Collectable>> extra_collectables;
  // Non-empty: /metrics requires HTTP basic auth with this password (any
  // user name; compared in constant time); 401 otherwise.
  std::string basic_auth_password;
};

// Serves a collectable on http://HOST:PORT/metrics (prometheus-cpp pull
// Exposer, kMetricsHttpThreads civetweb threads, each connection dropped
// after kMetricsHttpRequestTimeoutMs without a complete request).
//
// Thread safety: thread-safe after Start(); the destructor stops serving.
class MetricsExposer {
 public:
  // Binds `listen` ("HOST:PORT"; port 0 picks a free one) and registers
  // `collectable` on /metrics. Errors: UNAVAILABLE naming the address when
  // it cannot be bound and why ("address already in use"), in one line
  // (prometheus::Exposer throws; this catches it).
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(
      const std::string& listen,
      std::shared_ptr<prometheus::Collectable> collectable,
      MetricsExposerOptions options = {});

  ~MetricsExposer();
  MetricsExposer(const MetricsExposer&) = delete;
  MetricsExposer& operator=(const MetricsExposer&) = delete;

  // The bound TCP port (the real one when 0 was asked for).
  int port() const { return port_; }

 private:
  MetricsExposer(
      std::unique_ptr<prometheus::Exposer> exposer,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
      int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  // The Exposer keeps only weak_ptrs; this keeps the collectables alive.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  int port_ = 0;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_PROMETHEUS_EXPOSER_H_
