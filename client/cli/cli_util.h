// Small parsers shared by cgacct-load and cgacctctl: HOST:PORT targets and
// byte sizes written the way memory.max accepts them ("max", "64M").
//
// Thread safety: all functions are thread-safe (no shared state).
#ifndef CGACCT_CLIENT_CLI_CLI_UTIL_H_
#define CGACCT_CLIENT_CLI_CLI_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cgacct::cli {

// The Prometheus port cgacctd serves /metrics on by default.
inline constexpr uint16_t kDefaultMetricsPort = 9464;

struct HostPort {
  std::string host;  // without IPv6 brackets
  uint16_t port = 0;
};

// Splits "HOST:PORT" or "[IPV6]:PORT". Errors: INVALID_ARGUMENT when the port
// is missing, not a number or not in 1..65535, or the host is empty.
absl::StatusOr<HostPort> SplitHostPort(absl::string_view host_port);

// The inverse of SplitHostPort: brackets hosts that contain ':'.
std::string JoinHostPort(absl::string_view host, uint16_t port);

// The metrics endpoint next to a gRPC target: the target's host with `port`.
// Errors: INVALID_ARGUMENT when `grpc_target` is not a plain HOST:PORT (for
// example a "unix:" or "dns:///" URI); pass --metrics_target then.
absl::StatusOr<std::string> MetricsTargetFor(
    absl::string_view grpc_target, uint16_t port = kDefaultMetricsPort);

// Parses a size in bytes exactly as the kernel parses a write to a memcg
// limit file: page_counter_memparse() (mm/page_counter.c) over memparse()
// (lib/cmdline.c). Surrounding whitespace is stripped (strstrip()); "max"
// (case-sensitive, as strcmp() compares it) returns UINT64_MAX, the wire's
// "max"; otherwise simple_strtoull() with base 0 -- "0x1000" is hex, "0755"
// octal, "4096" decimal -- followed by at most one suffix K, M, G, T, P or E
// (either case, binary: K = 2^10 ... E = 2^60), and nothing after it: "50M"
// and "1P" are accepted, "50MiB", "50MB", "1.5G", "-1" and "0x" are not
// (EINVAL in the kernel). Two deliberate differences, both refusals of input
// the kernel takes silently: "" (the kernel reads 0) and values past 2^64 - 1
// (the kernel wraps them). Errors: INVALID_ARGUMENT naming the text.
absl::StatusOr<uint64_t> ParseSizeBytes(absl::string_view text);

// memparse() alone, as memory.reclaim parses its write: the same number and
// suffix rules as ParseSizeBytes, but "max" is not a size (EINVAL).
absl::StatusOr<uint64_t> ParseMemparseBytes(absl::string_view text);

// "max" for UINT64_MAX, the decimal byte count otherwise.
std::string FormatSizeBytes(uint64_t bytes);

// Makes --help and --helpshort list this program's own flags (Abseil's
// default lists only flags defined in a file named after the program, which
// none of ours is) and leaves Abseil's built-in flags to --helpfull; makes
// --version print "PROGRAM VERSION (git REVISION)" (the CMake project version
// and the git revision configured at build time, "unknown" outside git)
// instead of Abseil's default. Call before absl::ParseCommandLine().
void ShowOwnFlagsInHelp();

// The program's own flags (those not defined by Abseil's sources), sorted by
// name: what --help, cgacctctl's man page and its completion list. Reads
// the flag registry (thread-safe after absl::ParseCommandLine()).
std::vector<const absl::CommandLineFlag*> OwnFlags();

// --help, -h, -help, --helpshort or --helpfull among argv's flags (before a
// "--"): prints the program's usage message (absl::ProgramUsageMessage())
// and its own flags (not Abseil's), each as "--NAME=DEFAULT  HELP", sorted,
// with no source file names (Abseil's --help names the build's paths), on
// stdout, and returns true: the caller exits 0 (Abseil's --help exits 1).
// Call after absl::SetProgramUsageMessage(), before ParseCommandLine().
bool PrintHelpIfAsked(int argc, char** argv);

// The flags on the command line, checked before absl::ParseCommandLine(),
// which exits 1 on an unknown flag or a bad value where the exit status
// tables of cgacctctl and cgacctd say 2 for every usage error: the first
// problem ("unknown flag --x", "bad value for --cpus: ..."), or nullopt. A
// word like "-5" is not a flag (Abseil would say "Unknown command line flag
// '5'"): counts and sizes are never negative. Call after every flag is
// defined (they are static), before ParseCommandLine().
std::optional<std::string> FlagUsageError(int argc, char** argv);

// "PROGRAM VERSION (git REVISION)\n", what --version prints.
std::string VersionText(absl::string_view program);

// A byte-size flag value: `ABSL_FLAG(ByteSize, hog_max_bytes, ...)` accepts
// everything ParseSizeBytes does.
struct ByteSize {
  uint64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteSize* out, std::string* error);
std::string AbslUnparseFlag(ByteSize size);

}  // namespace cgacct::cli

#endif  // CGACCT_CLIENT_CLI_CLI_UTIL_H_
