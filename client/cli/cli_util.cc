#include "client/cli/cli_util.h"

#include <errno.h>  // program_invocation_short_name

#include <algorithm>
#include <iterator>
#include <optional>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "cgacct_build_info.h"

namespace cgacct::cli {

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

namespace {

// memparse(): simple_strtoull(text, &end, 0), then one optional suffix.
// Returns the bytes, or an error naming `original`.
absl::StatusOr<uint64_t> Memparse(absl::string_view text,
                                  absl::string_view original) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size \"", original, "\": ", why,
        " (the kernel's memparse() takes a number, decimal, 0x hex or 0 "
        "octal, with one optional K/M/G/T/P/E suffix)"));
  };
  if (text.empty()) return invalid("empty");
  // _parse_integer_fixup_radix(): "0x" followed by a hex digit is base 16,
  // a leading "0" base 8, anything else base 10.
  int base = 10;
  size_t i = 0;
  if (text[0] == '0') {
    if (text.size() > 2 && (text[1] == 'x' || text[1] == 'X') &&
        absl::ascii_isxdigit(text[2])) {
      base = 16;
      i = 2;
    } else {
      base = 8;
    }
  }
  const size_t digits_start = i;
  uint64_t value = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    int digit = 0;
    if (absl::ascii_isdigit(c)) {
      digit = c - '0';
    } else if (absl::ascii_isalpha(c)) {
      digit = absl::ascii_tolower(c) - 'a' + 10;
    } else {
      break;
    }
    if (digit >= base) break;
    if (value > (UINT64_MAX - static_cast<uint64_t>(digit)) /
                    static_cast<uint64_t>(base)) {
      return invalid("does not fit in 64 bits");
    }
    value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(digit);
  }
  if (i == digits_start) return invalid("no digits");
  int shift = 0;
  if (i < text.size()) {
    switch (absl::ascii_tolower(text[i])) {
      case 'e':
        shift = 60;
        break;
      case 'p':
        shift = 50;
        break;
      case 't':
        shift = 40;
        break;
      case 'g':
        shift = 30;
        break;
      case 'm':
        shift = 20;
        break;
      case 'k':
        shift = 10;
        break;
      default:
        break;
    }
    if (shift > 0) ++i;
  }
  if (i != text.size()) {
    return invalid(absl::StrCat("trailing \"", text.substr(i), "\""));
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) {
    return invalid("does not fit in 64 bits");
  }
  return value << shift;
}

}  // namespace

absl::StatusOr<uint64_t> ParseSizeBytes(absl::string_view text) {
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  if (stripped == "max") return UINT64_MAX;
  return Memparse(stripped, text);
}

absl::StatusOr<uint64_t> ParseMemparseBytes(absl::string_view text) {
  return Memparse(absl::StripAsciiWhitespace(text), text);
}

std::string FormatSizeBytes(uint64_t bytes) {
  return bytes == UINT64_MAX ? std::string("max") : absl::StrCat(bytes);
}

std::string VersionText(absl::string_view program) {
  return absl::StrCat(program, " ", kCgacctVersion, " (git ",
                      kCgacctGitRevision, ")\n");
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
  config.version_string = [] {
    return VersionText(program_invocation_short_name);
  };
  absl::SetFlagsUsageConfig(config);
}

std::vector<const absl::CommandLineFlag*> OwnFlags() {
  std::vector<const absl::CommandLineFlag*> own;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::StrContains(flag->Filename(), "absl/")) own.push_back(flag);
  }
  std::sort(own.begin(), own.end(), [](const auto* a, const auto* b) {
    return a->Name() < b->Name();
  });
  return own;
}

bool PrintHelpIfAsked(int argc, char** argv) {
  bool asked = false;
  for (int i = 1; i < argc && !asked; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    for (const char* help :
         {"-h", "-help", "--help", "--helpshort", "--helpfull"}) {
      asked = asked || arg == help;
    }
  }
  if (!asked) return false;
  std::string text = absl::StrCat(absl::ProgramUsageMessage(), "\n\nflags:\n");
  for (const absl::CommandLineFlag* flag : OwnFlags()) {
    const std::string def = flag->DefaultValue();
    absl::StrAppend(&text, "  --", flag->Name(),
                    def.empty() ? "" : absl::StrCat("=", def), "\n      ",
                    flag->Help(), "\n");
  }
  absl::StrAppend(&text, "  --version\n      print the version and exit\n");
  std::cout << text << std::flush;
  return true;
}

std::optional<std::string> FlagUsageError(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    if (absl::ascii_isdigit(static_cast<unsigned char>(arg[1]))) {
      return absl::StrCat("\"", arg,
                          "\" is not a flag, and counts and sizes cannot be "
                          "negative");
    }
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    absl::string_view name = body.substr(0, eq);
    // Abseil's own (--help, --version, --flagfile ...): not in the registry
    // FindCommandLineFlag() searches; ParseCommandLine() handles them.
    static constexpr absl::string_view kAbseilFlags[] = {
        "help",     "helpfull",  "helpshort",  "helppackage",
        "helpon",   "helpmatch", "version",    "only_check_args",
        "flagfile", "fromenv",   "tryfromenv", "undefok"};
    if (std::find(std::begin(kAbseilFlags), std::end(kAbseilFlags), name) !=
        std::end(kAbseilFlags)) {
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && eq == absl::string_view::npos &&
        absl::ConsumePrefix(&name, "no")) {
      flag = absl::FindCommandLineFlag(name);  // --nojson
      if (flag != nullptr && !flag->IsOfType<bool>()) flag = nullptr;
      if (flag != nullptr) continue;
    }
    if (flag == nullptr) return absl::StrCat("unknown flag ", arg);
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(body.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];  // --flag VALUE
    } else {
      return absl::StrCat("flag ", arg, " needs a value");
    }
    // Parses into the flag (ParseCommandLine() sets the same value again).
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::StrCat("bad value for --", name, ": ", error);
    }
  }
  return std::nullopt;
}

}  // namespace cgacct::cli
