// cgacct::client::MakeChannel (include/cgacct/channel.h).
#include "cgacct/channel.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace cgacct::client {
namespace {

Status Invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

// The contents of `path`, named `field` in errors (unreadable or empty).
Result<std::string> ReadField(const char* field, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Invalid(absl::StrCat(field, ": cannot read ", path, ": ",
                                std::strerror(errno)));
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (out.str().empty()) {
    return Invalid(absl::StrCat(field, ": ", path, " is empty"));
  }
  return out.str();
}

}  // namespace

Result<ChannelFactory> MakeChannelFactory(const ConnectOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Invalid(options.tls_cert_file.empty()
                       ? "tls_cert_file: required with tls_key_file"
                       : "tls_key_file: required with tls_cert_file");
  }
  if (!options.tls_cert_file.empty() && options.tls_ca_file.empty()) {
    return Invalid("tls_ca_file: required with tls_cert_file (mTLS is TLS)");
  }
  if (!options.tls_server_name.empty() && options.tls_ca_file.empty()) {
    return Invalid("tls_server_name: needs tls_ca_file (TLS)");
  }
  if (!options.token.empty() && !options.token_file.empty()) {
    return Invalid("token, token_file: set one of them, not both");
  }
  std::string token = options.token;
  if (!options.token_file.empty()) {
    Result<std::string> read = ReadField("token_file", options.token_file);
    if (!read.ok()) return read.status();
    token = std::string(absl::StripAsciiWhitespace(*read));
    if (token.empty()) {
      return Invalid(absl::StrCat("token_file: ", options.token_file,
                                  " holds only whitespace"));
    }
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  std::string server_name;
  if (options.tls_ca_file.empty()) {
    // A token without TLS: gRPC sends call credentials in plaintext only
    // over a local connection (LOCAL_TCP: a loopback target).
    creds = token.empty() ? grpc::InsecureChannelCredentials()
                          : grpc::experimental::LocalCredentials(LOCAL_TCP);
  } else {
    grpc::SslCredentialsOptions ssl;
    Result<std::string> ca = ReadField("tls_ca_file", options.tls_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    if (!options.tls_cert_file.empty()) {
      Result<std::string> cert =
          ReadField("tls_cert_file", options.tls_cert_file);
      if (!cert.ok()) return cert.status();
      Result<std::string> key = ReadField("tls_key_file", options.tls_key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
    server_name = options.tls_server_name;
  }
  if (!token.empty()) {
    creds = grpc::CompositeChannelCredentials(
        creds, grpc::AccessTokenCredentials(token));
  }
  const bool own_connection = options.own_connection;
  return ChannelFactory([creds, server_name, own_connection](
                            const std::string& target) {
    grpc::ChannelArguments args;
    // As the Python client's channels (client/python/cgacct/client.py):
    // back within a session lease after an outage. The reconnect backoff
    // starts at 100 ms and grows to 1 s (gRPC's default: 120 s); the
    // minimum backoff is also the least time a connection attempt gets
    // (20 s by default): 1 s, so that a TLS handshake on a loaded machine
    // still completes; the target is re-resolved at most every 0.5 s (after
    // a failed connection gRPC 1.51 waits for a new resolution, which its
    // DNS resolver otherwise allows only every 30 s).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 500);
    if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    return grpc::CreateCustomChannel(target, creds, args);
  });
}

Result<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const ConnectOptions& options) {
  if (target.empty()) return Invalid("target: empty");
  Result<ChannelFactory> factory = MakeChannelFactory(options);
  if (!factory.ok()) return factory.status();
  return (*factory)(target);
}

}  // namespace cgacct::client
