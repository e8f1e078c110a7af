// Transport security of cgacctd (docs/DESIGN.md §4.11): gRPC's own TLS
// server credentials over files that are watched and reloaded.
#ifndef CGACCT_SERVER_DAEMON_TLS_H_
#define CGACCT_SERVER_DAEMON_TLS_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cgacct {

struct TlsFiles {
  std::string cert;       // PEM certificate chain of the server (--tls_cert)
  std::string key;        // PEM private key (--tls_key)
  std::string client_ca;  // PEM CA bundle clients' certificates must chain
                          // to (--client_ca); empty = no client certificates
  // --require_client_cert (needs client_ca): the handshake refuses a client
  // without a certificate, so it never reaches HTTP/2 (nor gRPC's buffers
  // and handlers); false: it connects and may present a bearer token.
  bool require_client_cert = false;
  // How often gRPC re-reads the three files (FileWatcherCertificateProvider):
  // a changed certificate, key or CA bundle applies to new connections
  // within this time, without a restart. Whole seconds, >= 1 s.
  absl::Duration refresh_interval = absl::Seconds(10);
};

// TLS server credentials (grpc::experimental::TlsServerCredentials with a
// FileWatcherCertificateProvider). With a client CA, clients are asked for a
// certificate and a presented one must chain to the CA (the handshake fails
// otherwise); a client without one still connects, and access control
// (server/auth/) answers its calls UNAUTHENTICATED unless it sends a valid
// bearer token; with require_client_cert too, a client without one fails
// the handshake (gRPC's
// GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY). Errors:
// INVALID_ARGUMENT naming the flag and file when a file cannot be read or
// holds no PEM block of the expected kind (checked once here; a later bad
// rewrite is logged by gRPC and the previous files stay in use), when
// refresh_interval is under 1 s, or when require_client_cert has no
// client_ca.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
MakeTlsServerCredentials(const TlsFiles& files);

// True for listen addresses only this machine can reach: 127.0.0.0/8,
// [::1], localhost, and unix: / unix-abstract: sockets. "0.0.0.0", "[::]"
// and every other address are false. Pure function.
bool IsLoopbackListenAddress(absl::string_view listen);

}  // namespace cgacct

#endif  // CGACCT_SERVER_DAEMON_TLS_H_
