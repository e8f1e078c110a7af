// cgacctd: the cgacct accounting daemon. Serves cgacct.v1.Accounting (plus
// grpc.health.v1 and server reflection) on --listen and Prometheus metrics on
// --metrics_listen, over one in-memory Engine.
//
// Exit codes: 0 after SIGINT/SIGTERM (clean shutdown) and after --help; 1
// when a port cannot be bound; 2 for every flag error: unknown, a value not
// of the flag's type (e.g. --cpus=abc), values out of range or inconsistent
// (a bad TLS, token or policy file included, and a
// plaintext or unauthenticated listener on a non-loopback address without
// --insecure); 3 when the state store (--state_dir) cannot be opened or
// restored (damaged, or its directory in use by another cgacctd). Every
// failure is one line on stderr.
//
// SIGHUP re-reads --tokens_file and --authz_policy (a bad file is reported
// on stderr and the previous one stays); certificates are re-read by gRPC
// every --tls_refresh_interval.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/common/log_line.h"
#include "server/daemon/daemon.h"
#include "server/daemon/flags.h"
#include "server/daemon/grpc_log.h"

int main(int argc, char** argv) {
  cgacct::ParseDaemonFlags(argc, argv);
  // Debian's Abseil keeps absl::Mutex's lock-order graph on; it costs about
  // 6x on every nested lock (measured here: 105 vs 18 ns for a lock pair).
  // The tests keep it on to catch lock-order inversions; the server does not
  // pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // SIGINT/SIGTERM/SIGHUP are taken by sigwait() (Daemon::Run): block them
  // before any thread exists (engine, gRPC, civetweb) so every thread
  // inherits the mask. The first gRPC object starts gRPC's threads, so this
  // comes before it.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // gRPC logs some lines once per connection attempt (a handshake without
  // the required certificate): at most a few a second per call site.
  cgacct::InstallGrpcLogLimiter();

  absl::StatusOr<cgacct::DaemonConfig> config = cgacct::ConfigFromFlags();
  if (!config.ok()) {
    cgacct::LogLine(config.status().message());
    return cgacct::kExitUsage;
  }
  cgacct::Daemon daemon(*std::move(config));
  if (const int rc = daemon.Start(); rc != 0) return rc;
  daemon.Run(signals);
  cgacct::FlushGrpcLogHeldBack();
  return 0;
}
