// gRPC's own log lines, rate-limited per call site (docs/DESIGN.md §4.10).
//
// gRPC 1.51 writes some lines once per connection attempt: with
// --require_client_cert every TLS handshake without a certificate logs
// "peer did not return a certificate" (an attack round: 6,800-8,800 lines
// in 15 s from one unauthenticated client), so anyone who can connect can
// fill the daemon's log. InstallGrpcLogLimiter() replaces gRPC's log
// function (gpr_set_log_function) with one that passes at most kBurst lines
// of one call site (file:line) at once and kPerSecond a second after, in
// gRPC's own format on stderr, and says how many it held back the next time
// that site gets a line through: "cgacctd: gRPC: N lines like the next one
// from FILE:LINE suppressed in the last S", or within a second if it does
// not, and at exit. gRPC's verbosity
// (GRPC_VERBOSITY) still chooses which lines are written at all.
//
// Thread safety: the log function is called from any gRPC thread; its
// state is under a mutex.
#ifndef CGACCT_SERVER_DAEMON_GRPC_LOG_H_
#define CGACCT_SERVER_DAEMON_GRPC_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace cgacct {

// The per-call-site token buckets (kBurst lines, kPerSecond lines a
// second), separate from gRPC for tests. Not thread-safe: the log function
// holds its mutex around every call. No errors.
class LogSiteLimiter {
 public:
  static constexpr double kBurst = 10;
  static constexpr double kPerSecond = 2;

  // Whether a line of `site` at `now` is written. When it is and lines of
  // that site were held back since the last written one, *suppressed gets
  // their count and *since the time since the first of them; else both
  // are 0.
  bool Admit(const std::string& site, absl::Time now, uint64_t* suppressed,
             absl::Duration* since);

  // Sites whose first held-back line is at least `older_than` before
  // `now`: their counts, which restart at 0.
  struct HeldBack {
    std::string site;
    uint64_t count = 0;
    absl::Duration since;
  };
  std::vector<HeldBack> TakeHeldBack(absl::Time now, absl::Duration older_than);

 private:
  struct Site {
    double tokens = kBurst;
    absl::Time refilled;
    uint64_t suppressed = 0;
    absl::Time first_suppressed;
  };
  absl::flat_hash_map<std::string, Site> sites_;
};

// Installs the rate-limited log function (once, before the first gRPC
// object; later calls do nothing), and a thread that says every second how
// many lines each quiet site held back (a site that goes quiet after a
// burst has no next line to say it with).
void InstallGrpcLogLimiter();

// Says now how many lines every site held back (at exit).
void FlushGrpcLogHeldBack();

}  // namespace cgacct

#endif  // CGACCT_SERVER_DAEMON_GRPC_LOG_H_
