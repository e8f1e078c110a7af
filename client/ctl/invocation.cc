#include "client/ctl/invocation.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "client/cli/cli_util.h"
#include "client/cli/wire_names.h"
#include "client/ctl/cgroup_files.h"

ABSL_FLAG(std::string, target, "",
          "cgacctd gRPC address HOST:PORT (default: $CGACCT_TARGET, else "
          "127.0.0.1:50051)");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(3),
          "how long to wait for the server to accept the connection");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10),
          "deadline of each RPC (not of events --watch)");
ABSL_FLAG(bool, json, false,
          "every command prints JSON, in one shape: what a cgroup file "
          "holds under the file's name, numbers as numbers, \"max\" for an "
          "unlimited limit, other values under the API's field names (ls: "
          "an array of paths)");
ABSL_FLAG(std::string, max, "",
          "memory.max (create, set): as in set's memory.max=VALUE");
ABSL_FLAG(std::string, high, "", "memory.high (set)");
ABSL_FLAG(std::string, min, "", "memory.min (set)");
ABSL_FLAG(std::string, low, "", "memory.low (set)");
ABSL_FLAG(int32_t, cpu, -1,
          "per-CPU slot for charge/uncharge; -1: the server's");
ABSL_FLAG(bool, r, false, "ls: list the whole subtree");
ABSL_FLAG(std::string, flush, "exact",
          "reads: exact | threshold | none (rstat flush before reading)");
ABSL_FLAG(bool, watch, false,
          "events: stream every change (WatchEvents) until the group is "
          "deleted or -n updates were printed");
ABSL_FLAG(bool, local, false, "events: memory.events.local");
ABSL_FLAG(int32_t, iterations, 0,
          "top: refreshes, events --watch: updates, peak: reads, before "
          "exiting; 0: until interrupted");
ABSL_FLAG(int32_t, n, 0, "same as --iterations");
ABSL_FLAG(absl::Duration, delay, absl::Seconds(1),
          "top: time between refreshes; peak: between reads");

namespace cgacct::ctl {
namespace {

// Checks the number of arguments of `c` (`nr_args`, after the command).
absl::Status CheckArity(const std::string& c, size_t nr_args) {
  size_t lo = 0, hi = 0;
  if (c == "info" || c == "cluster") {
    lo = hi = 0;
  } else if (c == "create" || c == "delete" || c == "ls" || c == "stat" ||
             c == "events" || c == "peak") {
    lo = hi = 1;
  } else if (c == "tree" || c == "top" || c == "health") {
    lo = 0;
    hi = 1;
  } else if (c == "set") {
    lo = 1;
    hi = 6;  // PATH and up to the four limit files and memory.oom.group
  } else if (c == "cat") {
    lo = 2;
    hi = 1 + kNrCatFiles;  // PATH and every file once
  } else if (c == "reclaim") {
    lo = hi = 2;
  } else if (c == "charge" || c == "uncharge") {
    lo = hi = 3;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command \"", c, "\""));
  }
  if (nr_args >= lo && nr_args <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(c, ": wrong number of arguments (", nr_args, ")"));
}

// The flags every command shares: --flush, -n/--iterations, --delay,
// --watch, and those the commands read.
absl::Status ReadCommonFlags(Invocation* inv) {
  const std::optional<v1::FlushMode> flush =
      cli::ParseFlushMode(absl::GetFlag(FLAGS_flush));
  if (!flush.has_value()) {
    return absl::InvalidArgumentError(
        "--flush must be exact, threshold or none");
  }
  inv->flush = *flush;
  const int32_t n = absl::GetFlag(FLAGS_n);
  const int32_t iterations = absl::GetFlag(FLAGS_iterations);
  if (n < 0 || iterations < 0) {
    return absl::InvalidArgumentError("-n/--iterations must be >= 0");
  }
  inv->iterations = n > 0 ? n : iterations;
  inv->delay = absl::GetFlag(FLAGS_delay);
  if (inv->delay <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--delay must be positive");
  }
  inv->watch = absl::GetFlag(FLAGS_watch);
  if (inv->watch && inv->command != "events") {
    return absl::InvalidArgumentError("--watch is for events");
  }
  inv->target = absl::GetFlag(FLAGS_target);
  if (inv->target.empty()) {
    const char* env = std::getenv("CGACCT_TARGET");
    inv->target = env != nullptr && *env != '\0' ? env : "127.0.0.1:50051";
  }
  inv->connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  inv->timeout = absl::GetFlag(FLAGS_timeout);
  inv->json = absl::GetFlag(FLAGS_json);
  inv->recursive = absl::GetFlag(FLAGS_r);
  inv->local = absl::GetFlag(FLAGS_local);
  return absl::OkStatus();
}

// The legacy limit flags: --max for create and set, the others for set.
absl::Status ReadLimitFlags(Invocation* inv) {
  const std::pair<const char*, std::string> flag_limits[] = {
      {"memory.max", absl::GetFlag(FLAGS_max)},
      {"memory.high", absl::GetFlag(FLAGS_high)},
      {"memory.min", absl::GetFlag(FLAGS_min)},
      {"memory.low", absl::GetFlag(FLAGS_low)},
  };
  const std::string& c = inv->command;
  for (const auto& [name, text] : flag_limits) {
    if (text.empty()) continue;
    if (c != "set" &&
        !(c == "create" && absl::string_view(name) == "memory.max")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", absl::string_view(name).substr(7), " is not for ", c));
    }
    if (absl::Status st = SetLimit(name, text, &inv->limits); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// set PATH FILE=VALUE...
absl::Status ParseSetArgs(const std::vector<std::string>& args,
                          Invocation* inv) {
  for (size_t i = 2; i < args.size(); ++i) {
    const size_t eq = args[i].find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "set: expected FILE=VALUE (memory.max=50M), got \"", args[i], "\""));
    }
    if (absl::Status st =
            SetLimit(absl::string_view(args[i]).substr(0, eq),
                     absl::string_view(args[i]).substr(eq + 1), &inv->limits);
        !st.ok()) {
      return st;
    }
  }
  const v1::Limits& l = inv->limits;
  if (!l.has_max_bytes() && !l.has_high_bytes() && !l.has_min_bytes() &&
      !l.has_low_bytes() && !l.has_oom_group()) {
    return absl::InvalidArgumentError(
        "set needs at least one FILE=VALUE (memory.max=50M)");
  }
  return absl::OkStatus();
}

// cat PATH FILE...
absl::Status ParseCatArgs(const std::vector<std::string>& args,
                          Invocation* inv) {
  for (size_t i = 2; i < args.size(); ++i) {
    if (!IsCatFile(args[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("cat: no file \"", args[i],
                       "\" (known: ", absl::StrJoin(kCatFiles, ", "), ")"));
    }
    inv->files.push_back(args[i]);
  }
  return absl::OkStatus();
}

// reclaim PATH SIZE
absl::Status ParseReclaimArgs(const std::vector<std::string>& args,
                              Invocation* inv) {
  absl::StatusOr<uint64_t> bytes = cli::ParseMemparseBytes(args[2]);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reclaim: ", bytes.status().message()));
  }
  inv->nr_bytes = *bytes;
  return absl::OkStatus();
}

// charge|uncharge PATH NR_PAGES|SIZE anon|file [--cpu=K]: a bare number
// is pages (the engine's unit); one with memparse()'s suffix (K, M, G, T, P,
// E: 8M, 0x10K) is bytes, as set and reclaim take them, rounded up to whole
// pages once the server's page size is known (inv->nr_bytes).
absl::Status ParseChargeArgs(const std::vector<std::string>& args,
                             Invocation* inv) {
  const std::string& amount = args[2];
  if (!amount.empty() &&
      absl::ascii_isalpha(static_cast<unsigned char>(amount.back())) &&
      !absl::StartsWithIgnoreCase(amount, "0x")) {
    absl::StatusOr<uint64_t> bytes = cli::ParseMemparseBytes(amount);
    if (!bytes.ok() || *bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SIZE must be a positive size such as 8M, got \"", amount, "\"",
          bytes.ok() ? "" : absl::StrCat(": ", bytes.status().message())));
    }
    inv->nr_bytes = *bytes;
  } else if (!absl::SimpleAtoi(amount, &inv->nr_pages) ||
             inv->nr_pages == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NR_PAGES must be a positive number (or a size with a unit, 8M), "
        "got \"",
        amount, "\""));
  }
  const std::optional<v1::PageKind> kind = cli::ParsePageKind(args[3]);
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind must be anon or file, got \"", args[3], "\""));
  }
  inv->kind = *kind;
  const int32_t cpu = absl::GetFlag(FLAGS_cpu);
  if (cpu < -1) {
    return absl::InvalidArgumentError("--cpu must be >= 0 (or -1)");
  }
  if (cpu >= 0) inv->cpu = static_cast<uint32_t>(cpu);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Invocation> ParseInvocation(
    const std::vector<std::string>& args) {
  if (args.empty()) {
    return absl::InvalidArgumentError("missing command");
  }
  Invocation inv;
  inv.command = args[0];
  const size_t nr_args = args.size() - 1;
  if (absl::Status s = CheckArity(inv.command, nr_args); !s.ok()) return s;
  // health's argument is a service name ("" the whole server), not a path.
  inv.path = nr_args >= 1 ? args[1] : (inv.command == "health" ? "" : "/");
  if (absl::Status s = ReadCommonFlags(&inv); !s.ok()) return s;
  if (absl::Status s = ReadLimitFlags(&inv); !s.ok()) return s;
  const std::string& c = inv.command;
  absl::Status s;
  if (c == "set") {
    s = ParseSetArgs(args, &inv);
  } else if (c == "cat") {
    s = ParseCatArgs(args, &inv);
  } else if (c == "reclaim") {
    s = ParseReclaimArgs(args, &inv);
  } else if (c == "charge" || c == "uncharge") {
    s = ParseChargeArgs(args, &inv);
  }
  if (!s.ok()) return s;
  return inv;
}

absl::Status SetLimit(absl::string_view name, absl::string_view text,
                      v1::Limits* limits) {
  struct File {
    const char* name;
    bool (v1::Limits::*has)() const;
    void (v1::Limits::*set)(uint64_t);
  };
  static const File kFiles[] = {
      {"memory.max", &v1::Limits::has_max_bytes, &v1::Limits::set_max_bytes},
      {"memory.high", &v1::Limits::has_high_bytes, &v1::Limits::set_high_bytes},
      {"memory.min", &v1::Limits::has_min_bytes, &v1::Limits::set_min_bytes},
      {"memory.low", &v1::Limits::has_low_bytes, &v1::Limits::set_low_bytes},
  };
  if (name == "memory.oom.group") {
    // memory_oom_group_write(): 0 or 1, anything else is -EINVAL.
    if (limits->has_oom_group()) {
      return absl::InvalidArgumentError(
          "memory.oom.group is given more than once");
    }
    const absl::string_view value = absl::StripAsciiWhitespace(text);
    if (value != "0" && value != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory.oom.group must be 0 or 1, got \"", text, "\""));
    }
    limits->set_oom_group(value == "1");
    return absl::OkStatus();
  }
  for (const File& f : kFiles) {
    if (name != f.name) continue;
    if ((limits->*f.has)()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is given more than once"));
    }
    absl::StatusOr<uint64_t> bytes = cli::ParseSizeBytes(text);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", bytes.status().message()));
    }
    (limits->*f.set)(*bytes);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", name,
      "\" is not a writable limit file (memory.max, memory.high, memory.min, "
      "memory.low, memory.oom.group)"));
}

}  // namespace cgacct::ctl
