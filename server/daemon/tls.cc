// TLS credentials (server/tls.h).
#include "server/daemon/tls.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cgacct {
namespace {

// Checks that `path` (the value of --`flag`) is readable and holds a PEM
// block whose label ends with `label` ("CERTIFICATE", "PRIVATE KEY").
absl::Status CheckPemFile(absl::string_view flag, const std::string& path,
                          absl::string_view label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ") ||
      !absl::StrContains(text.str(), absl::StrCat(label, "-----"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": no PEM ", label, " block in the file"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
MakeTlsServerCredentials(const TlsFiles& files) {
  if (files.require_client_cert && files.client_ca.empty()) {
    return absl::InvalidArgumentError(
        "--require_client_cert needs --client_ca (the CA that client "
        "certificates must chain to)");
  }
  if (files.refresh_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_refresh_interval=", absl::FormatDuration(files.refresh_interval),
        " must be >= 1s"));
  }
  if (absl::Status s = CheckPemFile("tls_cert", files.cert, "CERTIFICATE");
      !s.ok())
    return s;
  if (absl::Status s = CheckPemFile("tls_key", files.key, "PRIVATE KEY");
      !s.ok())
    return s;
  if (!files.client_ca.empty()) {
    if (absl::Status s =
            CheckPemFile("client_ca", files.client_ca, "CERTIFICATE");
        !s.ok())
      return s;
  }
  const auto seconds =
      static_cast<unsigned int>(absl::ToInt64Seconds(files.refresh_interval));
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (files.client_ca.empty()) {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            files.key, files.cert, seconds);
  } else {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            files.key, files.cert, files.client_ca, seconds);
  }
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!files.client_ca.empty()) {
    options.watch_root_certs();
    // Verified when presented. By default a client without a certificate
    // is left to access control (a bearer token, or UNAUTHENTICATED with a
    // message and a metric, rather than a handshake failure the client
    // cannot read). Required, it fails the handshake: its bytes never reach
    // HTTP/2, so neither its large requests (held before authentication)
    // nor its reset streams (which never reach authentication) cost memory.
    options.set_cert_request_type(
        files.require_client_cert
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

bool IsLoopbackListenAddress(absl::string_view listen) {
  if (absl::StartsWith(listen, "unix:") ||
      absl::StartsWith(listen, "unix-abstract:"))
    return true;
  const size_t colon = listen.rfind(':');
  absl::string_view host =
      colon == absl::string_view::npos ? listen : listen.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[")) {
    if (!absl::ConsumeSuffix(&host, "]")) return false;
    return host == "::1";
  }
  if (host == "localhost") return true;
  // 127.0.0.0/8: four decimal octets, the first 127.
  std::vector<absl::string_view> octets = absl::StrSplit(host, '.');
  if (octets.size() != 4 || octets[0] != "127") return false;
  for (absl::string_view o : octets) {
    int v;
    if (o.empty() || o.size() > 3 || !absl::SimpleAtoi(o, &v) || v < 0 ||
        v > 255)
      return false;
  }
  return true;
}

}  // namespace cgacct
