// MetricsExposer (server/metrics/prometheus/exposer.h).
#include "server/metrics/prometheus/exposer.h"

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"
#include "server/common/bind_probe.h"

namespace cgacct {
namespace {

// Why `listen` cannot be bound: ProbeBind()'s answer, or, when a probe
// binds it (civetweb refused it for its own reasons), saying so.
std::string WhyCannotBind(const std::string& listen) {
  const absl::Status probe = ProbeBind(listen);
  return probe.ok() ? "cannot bind (civetweb refused it)"
                    : std::string(probe.message());
}

}  // namespace

MetricsExposer::MetricsExposer(
    std::unique_ptr<prometheus::Exposer> exposer,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    int port)
    : exposer_(std::move(exposer)),
      collectables_(std::move(collectables)),
      port_(port) {}

MetricsExposer::~MetricsExposer() = default;

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& listen,
    std::shared_ptr<prometheus::Collectable> collectable,
    MetricsExposerOptions options) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // civetweb serves one connection per worker thread, and a worker waits
    // up to request_timeout_ms for a slow client's request: with 8 workers
    // and 5 s, 16 half-open connections held a scrape for ~10 s; with 32
    // and 2 s, 256 held it 13-17 s (they fill civetweb's queue of 20 and
    // the listen backlog of 200 ahead of it: 252 / 32 x 2 s). 128 workers
    // and 1 s: behind 256 (or 1,024) of them a scrape answered in 1.8 s,
    // and the bound is ~(128 + 220) / 128 x 1 s = 2.7 s, well inside
    // Prometheus' 10 s scrape timeout. Cost: ~2 MB more RSS at idle (the
    // threads' stacks and buffers: 22.0 MB against 20.1 MB), and a scrape
    // whose reader stalls for 1 s (a write making no progress) is dropped,
    // which a Prometheus on a working network never does.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", listen, "num_threads",
        std::to_string(kMetricsHttpThreads), "request_timeout_ms",
        std::to_string(kMetricsHttpRequestTimeoutMs)});
    // No linger_timeout_ms: civetweb's default closes gracefully. With 0
    // (SO_LINGER 0) the close reset the connection while a large body was
    // still in flight: clients that do not ask for gzip lost scrapes above
    // ~2,000 groups ("Connection reset by peer").
  } catch (const std::exception& e) {
    // civetweb reports a taken port or a bad address by throwing, with a
    // message about its own internals ("null context when constructing
    // CivetServer"); say what the operator can act on instead.
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": ",
                     WhyCannotBind(listen), " (--metrics_listen)"));
  }
  if (!options.basic_auth_password.empty()) {
    // Registered before any collectable, so /metrics never answers without
    // it. Every byte compared: the time does not tell how much matched.
    exposer->RegisterAuth(
        [password = options.basic_auth_password](const std::string&,
                                                 const std::string& given) {
          unsigned char diff = given.size() == password.size() ? 0 : 1;
          for (size_t i = 0; i < password.size(); ++i) {
            diff |= static_cast<unsigned char>(
                password[i] ^ (given.empty() ? 0 : given[i % given.size()]));
          }
          return diff == 0;
        },
        "cgacct");
  }
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  collectables.push_back(std::move(collectable));
  for (auto& extra : options.extra_collectables)
    collectables.push_back(std::move(extra));
  for (const auto& c : collectables) exposer->RegisterCollectable(c);
  const std::vector<int> ports = exposer->GetListeningPorts();
  const int port = ports.empty() ? 0 : ports.front();
  return std::unique_ptr<MetricsExposer>(
      new MetricsExposer(std::move(exposer), std::move(collectables), port));
}

}  // namespace cgacct
