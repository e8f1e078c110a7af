#include "client/cli_util.h"

#include <algorithm>

#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cgacct::client {

absl::StatusOr<HostPort> SplitHostPort(absl::string_view host_port) {
  absl::string_view host;
  absl::string_view port;
  if (!host_port.empty() && host_port.front() == '[') {
    const size_t close = host_port.find(']');
    if (close == absl::string_view::npos || close + 1 >= host_port.size() ||
        host_port[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("expected [IPV6]:PORT, got \"", host_port, "\""));
    }
    host = host_port.substr(1, close - 1);
    port = host_port.substr(close + 2);
  } else {
    const size_t colon = host_port.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected HOST:PORT, got \"", host_port, "\""));
    }
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "IPv6 hosts need brackets ([::1]:PORT), got \"", host_port, "\""));
    }
  }
  uint32_t port_number = 0;
  if (host.empty() || port.empty() ||
      !std::all_of(port.begin(), port.end(),
                   [](char c) { return absl::ascii_isdigit(c); }) ||
      !absl::SimpleAtoi(port, &port_number) || port_number == 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected HOST:PORT with a port in 1..65535, got \"", host_port, "\""));
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port_number)};
}

std::string JoinHostPort(absl::string_view host, uint16_t port) {
  if (host.find(':') != absl::string_view::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> MetricsTargetFor(absl::string_view grpc_target,
                                             uint16_t port) {
  absl::StatusOr<HostPort> hp = SplitHostPort(grpc_target);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot derive the metrics target from --target: ",
                     hp.status().message(), "; set --metrics_target"));
  }
  return JoinHostPort(hp->host, port);
}

absl::StatusOr<uint64_t> ParseSizeBytes(absl::string_view text) {
  const absl::string_view original = text;
  text = absl::StripAsciiWhitespace(text);
  if (absl::AsciiStrToLower(text) == "max") return UINT64_MAX;
  auto invalid = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size \"", original,
        "\": expected \"max\" or a byte count with an optional K/M/G/T "
        "suffix"));
  };
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(text[digits])) ++digits;
  if (digits == 0) return invalid();
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text.substr(0, digits), &value)) return invalid();
  std::string suffix = absl::AsciiStrToLower(text.substr(digits));
  // Accept "K", "KB", "Ki", "KiB" (all binary, like the kernel's memparse).
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();
  if (suffix.size() == 2 && suffix.back() == 'i') suffix.pop_back();
  int shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "k") {
    shift = 10;
  } else if (suffix == "m") {
    shift = 20;
  } else if (suffix == "g") {
    shift = 30;
  } else if (suffix == "t") {
    shift = 40;
  } else {
    return invalid();
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat("size \"", original, "\" does not fit in 64 bits"));
  }
  return value << shift;
}

std::string FormatSizeBytes(uint64_t bytes) {
  return bytes == UINT64_MAX ? std::string("max") : absl::StrCat(bytes);
}

bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error) {
  absl::StatusOr<uint64_t> bytes = ParseSizeBytes(text);
  if (!bytes.ok()) {
    *error = std::string(bytes.status().message());
    return false;
  }
  out->bytes = *bytes;
  return true;
}

std::string AbslUnparseFlag(ByteSize size) {
  return FormatSizeBytes(size.bytes);
}

void ShowOwnFlagsInHelp() {
  absl::FlagsUsageConfig config;
  const auto own = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  config.contains_help_flags = own;
  config.contains_helpshort_flags = own;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace cgacct::client
