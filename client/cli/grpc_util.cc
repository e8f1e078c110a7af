#include "client/cli/grpc_util.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle to verify cgacctd's certificate; set = TLS");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for mTLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to check cgacctd's certificate against (default: the "
          "target's host)");
ABSL_FLAG(std::string, token_file, "",
          "file holding a bearer token sent with every call (over TLS, or "
          "in plaintext to a loopback target)");

namespace cgacct::cli {

namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

std::vector<std::string> ChannelFlags() {
  std::vector<std::string> flags;
  for (const auto& [name, value] :
       {std::pair<const char*, std::string>{"tls_ca",
                                            absl::GetFlag(FLAGS_tls_ca)},
        {"tls_cert", absl::GetFlag(FLAGS_tls_cert)},
        {"tls_key", absl::GetFlag(FLAGS_tls_key)},
        {"tls_server_name", absl::GetFlag(FLAGS_tls_server_name)},
        {"token_file", absl::GetFlag(FLAGS_token_file)}}) {
    if (!value.empty()) flags.push_back(absl::StrCat("--", name, "=", value));
  }
  return flags;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           bool own_connection) {
  grpc::ChannelArguments args;
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const std::string ca = absl::GetFlag(FLAGS_tls_ca);
  const std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (ca.empty() && token_file.empty()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                     args);
  }
  if (ca.empty()) {
    // A token without TLS: gRPC sends call credentials in plaintext only
    // over a local connection (LOCAL_TCP: a loopback target), which is
    // where cgacctd accepts plaintext with --tokens_file.
    const std::string token(
        absl::StripAsciiWhitespace(ReadFileOrEmpty(token_file)));
    return grpc::CreateCustomChannel(
        target,
        grpc::CompositeChannelCredentials(
            grpc::experimental::LocalCredentials(LOCAL_TCP),
            grpc::AccessTokenCredentials(token)),
        args);
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFileOrEmpty(ca);
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  if (!cert.empty()) {
    ssl.pem_cert_chain = ReadFileOrEmpty(cert);
    ssl.pem_private_key = ReadFileOrEmpty(absl::GetFlag(FLAGS_tls_key));
  }
  const std::string name = absl::GetFlag(FLAGS_tls_server_name);
  if (!name.empty()) args.SetSslTargetNameOverride(name);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(ssl);
  if (!token_file.empty()) {
    const std::string token(
        absl::StripAsciiWhitespace(ReadFileOrEmpty(token_file)));
    creds = grpc::CompositeChannelCredentials(
        creds, grpc::AccessTokenCredentials(token));
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

absl::Status WaitForConnected(grpc::Channel& channel, absl::string_view target,
                              absl::Duration timeout, bool fail_fast) {
  if (!fail_fast) {
    if (channel.WaitForConnected(DeadlineAfter(timeout))) {
      return absl::OkStatus();
    }
  } else {
    const auto deadline = DeadlineAfter(timeout);
    grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
    while (state != GRPC_CHANNEL_READY) {
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE ||
          state == GRPC_CHANNEL_SHUTDOWN) {
        return absl::UnavailableError(absl::StrCat(
            "cannot connect to cgacctd at ", target,
            ": the connection failed (is the server running, and with the "
            "TLS settings given?)"));
      }
      if (!channel.WaitForStateChange(state, deadline)) break;
      state = channel.GetState(/*try_to_connect=*/true);
    }
    if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat("cannot connect to cgacctd at ", target, " within ",
                   absl::FormatDuration(timeout), " (is the server running?)"));
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

std::string StatusCodeName(grpc::StatusCode code) {
  // grpc::StatusCode and absl::StatusCode are both google.rpc.Code.
  std::string name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrCat("CODE_", static_cast<int>(code)) : name;
}

std::string FormatStatus(const grpc::Status& status) {
  if (status.error_message().empty() ||
      status.error_message() == StatusCodeName(status.error_code())) {
    return StatusCodeName(status.error_code());
  }
  return absl::StrCat(StatusCodeName(status.error_code()), ": ",
                      status.error_message());
}

}  // namespace cgacct::cli
