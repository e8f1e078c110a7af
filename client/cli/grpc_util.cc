#include "client/cli/grpc_util.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "cgacct/channel.h"

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

bool WordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         c == '/' || c == '.' || c == '-';
}

// `message` with ConnectOptions' field names, as whole words (not inside a
// path), spelled as the flags that set them.
std::string FieldsAsFlags(const std::string& message) {
  static constexpr std::pair<absl::string_view, absl::string_view> kFlags[] = {
      {"tls_ca_file", "--tls_ca"},       {"tls_cert_file", "--tls_cert"},
      {"tls_key_file", "--tls_key"},     {"tls_server_name", "--tls_server_name"},
      {"token_file", "--token_file"},    {"target", "--target"}};
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    bool replaced = false;
    if (i == 0 || !WordChar(message[i - 1])) {
      for (const auto& [field, flag] : kFlags) {
        const size_t end = i + field.size();
        if (absl::string_view(message).substr(i, field.size()) == field &&
            (end == message.size() || !WordChar(message[end]))) {
          absl::StrAppend(&out, flag);
          i = end;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out.push_back(message[i++]);
  }
  return out;
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

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, bool own_connection) {
  client::ConnectOptions connect;
  connect.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  connect.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  connect.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  connect.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  connect.token_file = absl::GetFlag(FLAGS_token_file);
  connect.own_connection = own_connection;
  client::Result<std::shared_ptr<grpc::Channel>> channel =
      client::MakeChannel(target, connect);
  if (channel.ok()) return std::move(*channel);
  // The library names its fields (tls_ca_file: ...); the user gave flags.
  return absl::Status(static_cast<absl::StatusCode>(channel.status().code()),
                      FieldsAsFlags(channel.status().message()));
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

std::string FormatStatus(const client::Status& status) {
  return FormatStatus(grpc::Status(
      static_cast<grpc::StatusCode>(status.code()), status.message()));
}

}  // namespace cgacct::cli
