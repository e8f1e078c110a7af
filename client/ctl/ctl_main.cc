// cgacctctl: the operator CLI for cgacctd, as fluent as cgroupfs. Reads print
// what the cgroup v2 file would (`cat PATH memory.current`, `stat PATH` is
// memory.stat, `events PATH` is memory.events), writes take the kernel's
// memparse() syntax (`set PATH memory.max=50M`, `reclaim PATH 10M`), and
// `tree`/`top` are systemd-cgls/systemd-cgtop for cgacct groups. `--json`
// turns every read into JSON (protobuf's JSON printer for RPC responses).
//
// Exit status (kExitStatusTable below; README "cgacctctl"): 0 ok, 2 usage,
// 3 not found, 4 refused, 5 unavailable, 1 anything else. Errors are one line
// on stderr.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/cli/cli_util.h"
#include "client/cli/grpc_util.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "cgacctd gRPC address");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(3),
          "how long to wait for the server to accept the connection");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10),
          "deadline of each RPC (not of events --watch)");
ABSL_FLAG(bool, json, false,
          "read commands print JSON: protobuf's JSON mapping of the RPC "
          "response (64-bit integers as strings), or for cat/ls/tree/top an "
          "object keyed by the cgroup file names");
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
          "top: refreshes, events --watch: updates, before exiting; 0: until "
          "interrupted");
ABSL_FLAG(int32_t, n, 0, "same as --iterations");
ABSL_FLAG(absl::Duration, delay, absl::Seconds(1),
          "top: time between refreshes");

namespace cgacct::ctl {
namespace {

namespace v1 = ::cgacct::v1;
using Json = nlohmann::ordered_json;

// Exit statuses, one per class of failure.
enum ExitStatus : int {
  kExitOk = 0,
  kExitOther = 1,        // any other failure (INTERNAL, UNIMPLEMENTED, ...)
  kExitUsage = 2,        // bad command line; nothing was sent
  kExitNotFound = 3,     // NOT_FOUND: no such group
  kExitRefused = 4,      // the server refused the request
  kExitUnavailable = 5,  // could not reach/complete: try again later
};

constexpr char kUsage[] =
    "operator CLI for cgacctd, as fluent as cgroupfs.\n"
    "cgacctctl [--target=HOST:PORT] [--json] COMMAND\n"
    "reads (--json on each; --flush=exact|threshold|none):\n"
    "  cat PATH FILE...      print cgroup files as the kernel would: "
    "memory.current,\n"
    "                        memory.max, memory.high, memory.min, memory.low,\n"
    "                        memory.peak, memory.stat, memory.events,\n"
    "                        memory.events.local\n"
    "  stat PATH             memory.stat (flush metadata: --json only)\n"
    "  events PATH [--local] [--watch [-n N]]   memory.events(.local); "
    "--watch\n"
    "                        prints every change until the group is deleted\n"
    "  ls PATH [-r]          child groups (-r: the whole subtree)\n"
    "  tree [PATH]           the subtree with memory.current/memory.max, like "
    "systemd-cgls\n"
    "  top [PATH] [-n N] [--delay=1s]   groups by memory.current, refreshing,\n"
    "                        like systemd-cgtop\n"
    "  info                  the engine's configuration\n"
    "writes (sizes as the kernel's memparse(): 4096, 0x1000, 0755, 50M, 1G, "
    "1P,\n"
    "        max for the limit files; 50MiB is refused as by the kernel):\n"
    "  create PATH [--max=SIZE]\n"
    "  delete PATH\n"
    "  set PATH memory.max=SIZE [memory.high=SIZE] [memory.min=SIZE] "
    "[memory.low=SIZE]\n"
    "  reclaim PATH SIZE     memory.reclaim: exit 5 when not all was "
    "reclaimed (EAGAIN)\n"
    "  charge PATH NR_PAGES anon|file [--cpu=K]\n"
    "  uncharge PATH NR_PAGES anon|file [--cpu=K]\n"
    "exit status: 0 ok; 2 usage (nothing sent); 3 not found (NOT_FOUND);\n"
    "  4 refused (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED,\n"
    "  FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ALREADY_EXISTS, "
    "OUT_OF_RANGE);\n"
    "  5 unavailable (UNAVAILABLE, DEADLINE_EXCEEDED, cannot connect; "
    "reclaim:\n"
    "  not all reclaimed); 1 anything else. --help itself exits 1 (Abseil).";

// The class of a failed RPC.
int ExitStatusFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::OUT_OF_RANGE:
      return kExitRefused;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return kExitUnavailable;
    default:
      return kExitOther;
  }
}

// Error messages stay on one line whatever the server wrote.
std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
}

int PrintUsageError(absl::string_view message) {
  std::cerr << "cgacctctl: " << OneLine(message) << "\ntry cgacctctl --help\n";
  return kExitUsage;
}

int PrintRpcError(absl::string_view what, const grpc::Status& status) {
  std::cerr << "cgacctctl: " << OneLine(what) << ": "
            << OneLine(cli::FormatStatus(status)) << "\n";
  return ExitStatusFor(status.error_code());
}

// Protobuf's JSON mapping of `message`: field names as in the proto, every
// field printed (zeros included), 64-bit integers as strings.
std::string ProtoJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok())
    return absl::StrCat("{\"error\": \"", status.ToString(), "\"}\n");
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  return out;
}

void PrintProtoJson(const google::protobuf::Message& message) {
  std::cout << ProtoJson(message, /*pretty=*/true);
}

void PrintJson(const Json& json, bool pretty = true) {
  std::cout << json.dump(pretty ? 2 : -1) << "\n";
}

void Line(absl::string_view name, absl::string_view value) {
  std::cout << name << " " << value << "\n";
}
void Line(absl::string_view name, uint64_t value) {
  std::cout << name << " " << value << "\n";
}

// A limit as its file prints it ("max" or bytes), and as JSON.
Json LimitJson(uint64_t bytes) {
  return bytes == UINT64_MAX ? Json("max") : Json(bytes);
}

// memory.events / memory.events.local, in __memory_events_show()'s order.
std::vector<std::pair<const char*, uint64_t>> EventLines(
    const v1::MemoryEvents& e) {
  return {{"low", e.low()},
          {"high", e.high()},
          {"max", e.max()},
          {"oom", e.oom()},
          {"oom_kill", e.oom_kill()},
          {"oom_group_kill", e.oom_group_kill()},
          {"sock_throttled", e.sock_throttled()}};
}

void PrintEventsFile(const v1::MemoryEvents& events) {
  for (const auto& [name, value] : EventLines(events)) Line(name, value);
}

Json EventsJson(const v1::MemoryEvents& events) {
  Json json = Json::object();
  for (const auto& [name, value] : EventLines(events)) json[name] = value;
  return json;
}

// The cgroup v2 files `cat` knows, in the order `cgacctctl --help` lists.
constexpr const char* kCatFiles[] = {
    "memory.current", "memory.max",    "memory.high",
    "memory.min",     "memory.low",    "memory.peak",
    "memory.stat",    "memory.events", "memory.events.local"};

bool IsCatFile(absl::string_view file) {
  return std::any_of(std::begin(kCatFiles), std::end(kCatFiles),
                     [&](const char* f) { return file == f; });
}

// What `file` holds in `stats`, as the kernel prints the file (lines ending
// in '\n').
std::string CatText(const v1::GroupStats& stats, absl::string_view file) {
  const v1::Limits& limits = stats.limits();
  if (file == "memory.current") {
    return absl::StrCat(stats.memory_current_bytes(), "\n");
  }
  if (file == "memory.peak")
    return absl::StrCat(stats.memory_peak_bytes(), "\n");
  if (file == "memory.max") return cli::FormatSizeBytes(limits.max_bytes()) + "\n";
  if (file == "memory.high") return cli::FormatSizeBytes(limits.high_bytes()) + "\n";
  if (file == "memory.min") return cli::FormatSizeBytes(limits.min_bytes()) + "\n";
  if (file == "memory.low") return cli::FormatSizeBytes(limits.low_bytes()) + "\n";
  std::string out;
  if (file == "memory.stat") {
    for (const v1::StatEntry& e : stats.stat()) {
      absl::StrAppend(&out, e.name(), " ", e.value(), "\n");
    }
    return out;
  }
  const v1::MemoryEvents& events =
      file == "memory.events" ? stats.events() : stats.events_local();
  for (const auto& [name, value] : EventLines(events)) {
    absl::StrAppend(&out, name, " ", value, "\n");
  }
  return out;
}

Json CatJson(const v1::GroupStats& stats, absl::string_view file) {
  const v1::Limits& limits = stats.limits();
  if (file == "memory.current") return stats.memory_current_bytes();
  if (file == "memory.peak") return stats.memory_peak_bytes();
  if (file == "memory.max") return LimitJson(limits.max_bytes());
  if (file == "memory.high") return LimitJson(limits.high_bytes());
  if (file == "memory.min") return LimitJson(limits.min_bytes());
  if (file == "memory.low") return LimitJson(limits.low_bytes());
  if (file == "memory.stat") {
    Json json = Json::object();
    for (const v1::StatEntry& e : stats.stat()) json[e.name()] = e.value();
    return json;
  }
  return EventsJson(file == "memory.events" ? stats.events()
                                            : stats.events_local());
}

std::optional<v1::PageKind> ParsePageKind(absl::string_view text) {
  if (text == "anon") return v1::PAGE_KIND_ANON;
  if (text == "file") return v1::PAGE_KIND_FILE;
  return std::nullopt;
}

// systemd's format_bytes(): "512B", "4.0K", "1.5G"; "max" stays "max".
std::string HumanBytes(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "max";
  static const char kUnits[] = "KMGTPE";
  if (bytes < 1024) return absl::StrCat(bytes, "B");
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f%c", value, kUnits[unit]);
}

// Everything the command line says, checked before anything is sent.
struct Invocation {
  std::string command;
  std::string path;
  std::vector<std::string> files;  // cat
  v1::Limits limits;               // create, set
  uint64_t nr_bytes = 0;           // reclaim
  uint64_t nr_pages = 0;           // charge, uncharge
  v1::PageKind kind = v1::PAGE_KIND_UNSPECIFIED;
  v1::FlushMode flush = v1::FLUSH_MODE_EXACT;
  int iterations = 0;  // top, events --watch; 0 = forever
};

// Applies `name`=`text` ("memory.max", "50M") to `limits`. Errors:
// INVALID_ARGUMENT naming the file.
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
      "memory.low)"));
}

// Parses the command line after the flags. Errors: INVALID_ARGUMENT, a usage
// error (exit 2).
absl::StatusOr<Invocation> ParseInvocation(
    const std::vector<std::string>& args) {
  if (args.empty()) {
    return absl::InvalidArgumentError("missing command");
  }
  Invocation inv;
  inv.command = args[0];
  const std::string& c = inv.command;
  const size_t nr_args = args.size() - 1;
  const auto arity = [&](size_t lo, size_t hi) -> absl::Status {
    if (nr_args >= lo && nr_args <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(c, ": wrong number of arguments (", nr_args, ")"));
  };
  absl::Status s;
  if (c == "info") {
    s = arity(0, 0);
  } else if (c == "create" || c == "delete" || c == "ls" || c == "stat" ||
             c == "events") {
    s = arity(1, 1);
  } else if (c == "tree" || c == "top") {
    s = arity(0, 1);
  } else if (c == "set") {
    s = arity(1, 5);  // PATH and up to the four limit files
  } else if (c == "cat") {
    s = arity(2, std::size(kCatFiles));
  } else if (c == "reclaim") {
    s = arity(2, 2);
  } else if (c == "charge" || c == "uncharge") {
    s = arity(3, 3);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command \"", c, "\""));
  }
  if (!s.ok()) return s;
  inv.path = nr_args >= 1 ? args[1] : "/";

  const std::string flush = absl::GetFlag(FLAGS_flush);
  if (flush == "exact") {
    inv.flush = v1::FLUSH_MODE_EXACT;
  } else if (flush == "threshold") {
    inv.flush = v1::FLUSH_MODE_THRESHOLD;
  } else if (flush == "none") {
    inv.flush = v1::FLUSH_MODE_NONE;
  } else {
    return absl::InvalidArgumentError(
        "--flush must be exact, threshold or none");
  }
  const int32_t n = absl::GetFlag(FLAGS_n);
  const int32_t iterations = absl::GetFlag(FLAGS_iterations);
  if (n < 0 || iterations < 0) {
    return absl::InvalidArgumentError("-n/--iterations must be >= 0");
  }
  inv.iterations = n > 0 ? n : iterations;
  if (absl::GetFlag(FLAGS_delay) <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--delay must be positive");
  }
  if (absl::GetFlag(FLAGS_watch) && c != "events") {
    return absl::InvalidArgumentError("--watch is for events");
  }

  // The legacy limit flags: --max for create and set, the others for set.
  const std::pair<const char*, std::string> flag_limits[] = {
      {"memory.max", absl::GetFlag(FLAGS_max)},
      {"memory.high", absl::GetFlag(FLAGS_high)},
      {"memory.min", absl::GetFlag(FLAGS_min)},
      {"memory.low", absl::GetFlag(FLAGS_low)},
  };
  for (const auto& [name, text] : flag_limits) {
    if (text.empty()) continue;
    if (c != "set" &&
        !(c == "create" && absl::string_view(name) == "memory.max")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", absl::string_view(name).substr(7), " is not for ", c));
    }
    if (absl::Status st = SetLimit(name, text, &inv.limits); !st.ok()) {
      return st;
    }
  }

  if (c == "set") {
    for (size_t i = 2; i < args.size(); ++i) {
      const size_t eq = args[i].find('=');
      if (eq == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("set: expected FILE=VALUE (memory.max=50M), got \"",
                         args[i], "\""));
      }
      if (absl::Status st =
              SetLimit(absl::string_view(args[i]).substr(0, eq),
                       absl::string_view(args[i]).substr(eq + 1), &inv.limits);
          !st.ok()) {
        return st;
      }
    }
    const v1::Limits& l = inv.limits;
    if (!l.has_max_bytes() && !l.has_high_bytes() && !l.has_min_bytes() &&
        !l.has_low_bytes()) {
      return absl::InvalidArgumentError(
          "set needs at least one FILE=VALUE (memory.max=50M)");
    }
  } else if (c == "cat") {
    for (size_t i = 2; i < args.size(); ++i) {
      if (!IsCatFile(args[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("cat: no file \"", args[i],
                         "\" (known: ", absl::StrJoin(kCatFiles, ", "), ")"));
      }
      inv.files.push_back(args[i]);
    }
  } else if (c == "reclaim") {
    absl::StatusOr<uint64_t> bytes = cli::ParseMemparseBytes(args[2]);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reclaim: ", bytes.status().message()));
    }
    if (*bytes == 0) {
      return absl::InvalidArgumentError("reclaim: the size must be > 0");
    }
    inv.nr_bytes = *bytes;
  } else if (c == "charge" || c == "uncharge") {
    if (!absl::SimpleAtoi(args[2], &inv.nr_pages) || inv.nr_pages == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NR_PAGES must be a positive number, got \"", args[2], "\""));
    }
    const std::optional<v1::PageKind> kind = ParsePageKind(args[3]);
    if (!kind.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kind must be anon or file, got \"", args[3], "\""));
    }
    inv.kind = *kind;
    if (absl::GetFlag(FLAGS_cpu) < -1) {
      return absl::InvalidArgumentError("--cpu must be >= 0 (or -1)");
    }
  }
  return inv;
}

// One group of a tree or top view.
struct GroupRow {
  std::string path;
  v1::GroupStats stats;
};

class Ctl {
 public:
  Ctl(std::shared_ptr<grpc::Channel> channel, bool json)
      : stub_(v1::Accounting::NewStub(std::move(channel))), json_(json) {}

  // Runs a parsed invocation; returns the exit status.
  int Run(const Invocation& inv) {
    const std::string& c = inv.command;
    if (c == "info") return Info();
    if (c == "create") return Create(inv);
    if (c == "delete") return Delete(inv.path);
    if (c == "ls") return List(inv.path);
    if (c == "set") return Set(inv);
    if (c == "stat") return Stat(inv);
    if (c == "cat") return Cat(inv);
    if (c == "events") return Events(inv);
    if (c == "reclaim") return Reclaim(inv);
    if (c == "tree") return Tree(inv);
    if (c == "top") return Top(inv);
    return ChargeOrUncharge(inv);
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(cli::DeadlineAfter(absl::GetFlag(FLAGS_timeout)));
    return context;
  }

  grpc::Status GetStats(const std::string& path, v1::FlushMode flush,
                        v1::GroupStats* stats) {
    v1::GetStatsRequest request;
    request.set_path(path);
    request.set_flush(flush);
    return stub_->GetStats(Context().get(), request, stats);
  }

  // Every path below `path` (sorted), all pages.
  grpc::Status ListAll(const std::string& path, bool recursive,
                       std::vector<std::string>* paths) {
    v1::ListGroupsRequest request;
    request.set_path(path);
    request.set_recursive(recursive);
    while (true) {
      v1::ListGroupsResponse response;
      const grpc::Status status =
          stub_->ListGroups(Context().get(), request, &response);
      if (!status.ok()) return status;
      paths->insert(paths->end(), response.paths().begin(),
                    response.paths().end());
      if (response.next_page_token().empty()) return grpc::Status::OK;
      request.set_page_token(response.next_page_token());
    }
  }

  // `path` and its whole subtree with their stats; groups deleted between
  // the listing and their read are left out. `path` itself is rows[0].
  grpc::Status ReadSubtree(const std::string& path, v1::FlushMode flush,
                           std::vector<GroupRow>* rows) {
    GroupRow root{path, {}};
    grpc::Status status = GetStats(path, flush, &root.stats);
    if (!status.ok()) return status;
    rows->push_back(std::move(root));
    std::vector<std::string> paths;
    status = ListAll(path, /*recursive=*/true, &paths);
    if (!status.ok()) return status;
    for (const std::string& p : paths) {
      GroupRow row{p, {}};
      status = GetStats(p, flush, &row.stats);
      if (status.error_code() == grpc::StatusCode::NOT_FOUND) continue;
      if (!status.ok()) return status;
      rows->push_back(std::move(row));
    }
    return grpc::Status::OK;
  }

  int Info() {
    v1::EngineInfo info;
    const grpc::Status status = stub_->GetEngineInfo(
        Context().get(), v1::GetEngineInfoRequest(), &info);
    if (!status.ok()) return PrintRpcError("GetEngineInfo", status);
    if (json_) {
      PrintProtoJson(info);
      return kExitOk;
    }
    Line("nr_cpus", info.nr_cpus());
    Line("page_size_bytes", info.page_size_bytes());
    Line("charge_batch_pages", info.charge_batch_pages());
    Line("flush_lock_policy", info.flush_lock_policy());
    Line("flush_preempt_model", info.flush_preempt_model());
    if (info.flush_lock_policy() == "adaptive")
      Line("flush_hold_budget_us", info.flush_hold_budget_us());
    Line("nr_stock_slots", info.nr_stock_slots());
    Line("nr_groups", info.nr_groups());
    Line("flush_lock_hold_max_us", info.flush_lock_hold_max_us());
    Line("flush_lock_hold_max_cpus_walked",
         info.flush_lock_hold_max_cpus_walked());
    Line("flush_lock_hold_max_groups_folded",
         info.flush_lock_hold_max_groups_folded());
    Line("max_batch_ops", info.max_batch_ops());
    return kExitOk;
  }

  void PrintGroup(const v1::Group& group) {
    if (json_) {
      PrintProtoJson(group);
      return;
    }
    Line("path", group.path());
    Line("id", group.id());
    Line("memory.max", cli::FormatSizeBytes(group.limits().max_bytes()));
    Line("memory.high", cli::FormatSizeBytes(group.limits().high_bytes()));
    Line("memory.min", cli::FormatSizeBytes(group.limits().min_bytes()));
    Line("memory.low", cli::FormatSizeBytes(group.limits().low_bytes()));
  }

  int Create(const Invocation& inv) {
    v1::CreateGroupRequest request;
    request.set_path(inv.path);
    if (inv.limits.has_max_bytes()) *request.mutable_limits() = inv.limits;
    v1::Group group;
    const grpc::Status status =
        stub_->CreateGroup(Context().get(), request, &group);
    if (!status.ok()) {
      return PrintRpcError(absl::StrCat("create ", inv.path), status);
    }
    PrintGroup(group);
    return kExitOk;
  }

  int Delete(const std::string& path) {
    v1::DeleteGroupRequest request;
    request.set_path(path);
    v1::DeleteGroupResponse response;
    const grpc::Status status =
        stub_->DeleteGroup(Context().get(), request, &response);
    if (!status.ok())
      return PrintRpcError(absl::StrCat("delete ", path), status);
    if (json_) {
      PrintProtoJson(response);
    } else {
      Line("reparented_pages", response.reparented_pages());
    }
    return kExitOk;
  }

  int List(const std::string& path) {
    std::vector<std::string> paths;
    const grpc::Status status = ListAll(path, absl::GetFlag(FLAGS_r), &paths);
    if (!status.ok()) return PrintRpcError(absl::StrCat("ls ", path), status);
    if (json_) {
      PrintJson(Json(paths));
      return kExitOk;
    }
    for (const std::string& p : paths) std::cout << p << "\n";
    return kExitOk;
  }

  int Set(const Invocation& inv) {
    v1::SetLimitsRequest request;
    request.set_path(inv.path);
    *request.mutable_limits() = inv.limits;
    v1::Group group;
    const grpc::Status status =
        stub_->SetLimits(Context().get(), request, &group);
    if (!status.ok())
      return PrintRpcError(absl::StrCat("set ", inv.path), status);
    PrintGroup(group);
    return kExitOk;
  }

  int ChargeOrUncharge(const Invocation& inv) {
    const int32_t cpu = absl::GetFlag(FLAGS_cpu);
    const std::string what = absl::StrCat(inv.command, " ", inv.path);
    if (inv.command == "uncharge") {
      v1::UnchargeRequest request;
      request.set_path(inv.path);
      request.set_nr_pages(inv.nr_pages);
      request.set_kind(inv.kind);
      if (cpu >= 0) request.set_cpu(static_cast<uint32_t>(cpu));
      v1::UnchargeResponse response;
      const grpc::Status status =
          stub_->Uncharge(Context().get(), request, &response);
      if (!status.ok()) return PrintRpcError(what, status);
      if (json_) {
        PrintProtoJson(response);
      } else {
        Line("nr_pages", response.nr_pages());
      }
      return kExitOk;
    }
    v1::ChargeRequest request;
    request.set_path(inv.path);
    request.set_nr_pages(inv.nr_pages);
    request.set_kind(inv.kind);
    if (cpu >= 0) request.set_cpu(static_cast<uint32_t>(cpu));
    v1::ChargeResponse response;
    const grpc::Status status =
        stub_->Charge(Context().get(), request, &response);
    if (!status.ok()) return PrintRpcError(what, status);
    if (json_) {
      PrintProtoJson(response);
    } else {
      Line("nr_pages", response.nr_pages());
      Line("throttle_us", response.throttle_us());
    }
    return kExitOk;
  }

  // memory.stat exactly as the file prints it; --json adds everything
  // GetStats answers (flush metadata included).
  int Stat(const Invocation& inv) {
    v1::GroupStats stats;
    const grpc::Status status = GetStats(inv.path, inv.flush, &stats);
    if (!status.ok())
      return PrintRpcError(absl::StrCat("stat ", inv.path), status);
    if (json_) {
      PrintProtoJson(stats);
    } else {
      std::cout << CatText(stats, "memory.stat");
    }
    return kExitOk;
  }

  int Cat(const Invocation& inv) {
    v1::GroupStats stats;
    const grpc::Status status = GetStats(inv.path, inv.flush, &stats);
    if (!status.ok())
      return PrintRpcError(absl::StrCat("cat ", inv.path), status);
    if (json_) {
      Json json = Json::object();
      for (const std::string& file : inv.files) {
        json[file] = CatJson(stats, file);
      }
      PrintJson(json);
      return kExitOk;
    }
    for (const std::string& file : inv.files) std::cout << CatText(stats, file);
    return kExitOk;
  }

  void PrintEventsUpdate(const v1::EventsUpdate& update, bool local,
                         bool pretty) {
    if (json_) {
      std::cout << ProtoJson(update, pretty);
    } else {
      PrintEventsFile(local ? update.events_local() : update.events());
    }
    std::cout.flush();
  }

  int Events(const Invocation& inv) {
    const bool local = absl::GetFlag(FLAGS_local);
    if (!absl::GetFlag(FLAGS_watch)) {
      v1::GroupStats stats;
      const grpc::Status status = GetStats(inv.path, inv.flush, &stats);
      if (!status.ok()) {
        return PrintRpcError(absl::StrCat("events ", inv.path), status);
      }
      v1::EventsUpdate update;
      update.set_path(stats.path());
      *update.mutable_events() = stats.events();
      *update.mutable_events_local() = stats.events_local();
      PrintEventsUpdate(update, local, /*pretty=*/true);
      return kExitOk;
    }
    // WatchEvents: the counts on subscribe, then the latest after every
    // change. Text: one file's worth of lines per update, a blank line
    // between updates; JSON: one object per line (JSON Lines).
    grpc::ClientContext context;  // no deadline: runs until told to stop
    v1::WatchEventsRequest request;
    request.set_path(inv.path);
    std::unique_ptr<grpc::ClientReader<v1::EventsUpdate>> reader =
        stub_->WatchEvents(&context, request);
    v1::EventsUpdate update;
    int printed = 0;
    while (reader->Read(&update)) {
      if (printed > 0 && !json_) std::cout << "\n";
      PrintEventsUpdate(update, local, /*pretty=*/false);
      ++printed;
      if (inv.iterations > 0 && printed >= inv.iterations) {
        context.TryCancel();
        break;
      }
    }
    const grpc::Status status = reader->Finish();
    if (inv.iterations > 0 && printed >= inv.iterations) return kExitOk;
    if (status.error_code() == grpc::StatusCode::NOT_FOUND && printed > 0) {
      std::cerr << "cgacctctl: events " << inv.path
                << ": the group was deleted\n";
      return kExitNotFound;
    }
    if (!status.ok()) {
      return PrintRpcError(absl::StrCat("events --watch ", inv.path), status);
    }
    return kExitOk;
  }

  // memory.reclaim: all of it or EAGAIN (exit 5).
  int Reclaim(const Invocation& inv) {
    v1::ReclaimRequest request;
    request.set_path(inv.path);
    request.set_nr_bytes(inv.nr_bytes);
    v1::ReclaimResponse response;
    const grpc::Status status =
        stub_->Reclaim(Context().get(), request, &response);
    // The engine's EAGAIN: "memory.reclaim of PATH: reclaimed N of M pages".
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        absl::StrContains(status.error_message(), "memory.reclaim of")) {
      std::cerr << "cgacctctl: reclaim " << inv.path << ": not all of "
                << inv.nr_bytes
                << " bytes could be reclaimed (memory.reclaim's EAGAIN): "
                << OneLine(cli::FormatStatus(status)) << "\n";
      return kExitUnavailable;
    }
    if (!status.ok()) {
      return PrintRpcError(absl::StrCat("reclaim ", inv.path), status);
    }
    if (json_) PrintProtoJson(response);
    return kExitOk;
  }

  // systemd-cgls for groups: the tree below PATH, each with memory.current
  // and memory.max.
  int Tree(const Invocation& inv) {
    std::vector<GroupRow> rows;
    const grpc::Status status = ReadSubtree(inv.path, inv.flush, &rows);
    if (!status.ok())
      return PrintRpcError(absl::StrCat("tree ", inv.path), status);
    // Children by parent path, in ListGroups' sorted order per parent.
    std::map<std::string, std::vector<size_t>> children;
    for (size_t i = 1; i < rows.size(); ++i) {
      const std::string& p = rows[i].path;
      const size_t slash = p.rfind('/');
      children[slash == 0 ? "/" : p.substr(0, slash)].push_back(i);
    }
    if (json_) {
      PrintJson(TreeJson(rows, children, 0));
      return kExitOk;
    }
    std::cout << rows[0].path << "  " << TreeValues(rows[0].stats) << "\n";
    PrintTreeChildren(rows, children, rows[0].path, "");
    return kExitOk;
  }

  static std::string TreeValues(const v1::GroupStats& stats) {
    return absl::StrCat("current=", stats.memory_current_bytes(),
                        " max=", cli::FormatSizeBytes(stats.limits().max_bytes()));
  }

  static std::string BaseName(const std::string& path) {
    return path.substr(path.rfind('/') + 1);
  }

  void PrintTreeChildren(
      const std::vector<GroupRow>& rows,
      const std::map<std::string, std::vector<size_t>>& children,
      const std::string& parent, const std::string& prefix) {
    const auto it = children.find(parent);
    if (it == children.end()) return;
    const std::vector<size_t>& kids = it->second;
    for (size_t k = 0; k < kids.size(); ++k) {
      const bool last = k + 1 == kids.size();
      const GroupRow& row = rows[kids[k]];
      std::cout << prefix << (last ? "\u2514\u2500" : "\u251c\u2500")
                << BaseName(row.path) << "  " << TreeValues(row.stats) << "\n";
      PrintTreeChildren(rows, children, row.path,
                        prefix + (last ? "  " : "\u2502 "));
    }
  }

  Json TreeJson(const std::vector<GroupRow>& rows,
                const std::map<std::string, std::vector<size_t>>& children,
                size_t index) {
    const GroupRow& row = rows[index];
    Json json = Json::object();
    json["path"] = row.path;
    json["memory.current"] = row.stats.memory_current_bytes();
    json["memory.max"] = LimitJson(row.stats.limits().max_bytes());
    Json kids = Json::array();
    if (const auto it = children.find(row.path); it != children.end()) {
      for (size_t k : it->second) kids.push_back(TreeJson(rows, children, k));
    }
    json["children"] = std::move(kids);
    return json;
  }

  // systemd-cgtop for groups: every group below PATH (and PATH itself) by
  // memory.current, largest first, refreshed every --delay. On a terminal
  // each refresh clears the screen; otherwise refreshes follow each other,
  // separated by a blank line (--json: one JSON object per line).
  int Top(const Invocation& inv) {
    const bool tty = isatty(STDOUT_FILENO) == 1 && !json_;
    const absl::Duration delay = absl::GetFlag(FLAGS_delay);
    for (int i = 0; inv.iterations == 0 || i < inv.iterations; ++i) {
      if (i > 0) absl::SleepFor(delay);
      std::vector<GroupRow> rows;
      const grpc::Status status = ReadSubtree(inv.path, inv.flush, &rows);
      if (!status.ok())
        return PrintRpcError(absl::StrCat("top ", inv.path), status);
      std::stable_sort(rows.begin(), rows.end(),
                       [](const GroupRow& a, const GroupRow& b) {
                         return a.stats.memory_current_bytes() >
                                b.stats.memory_current_bytes();
                       });
      if (json_) {
        Json groups = Json::array();
        for (const GroupRow& row : rows) {
          const v1::Limits& l = row.stats.limits();
          groups.push_back(
              {{"path", row.path},
               {"memory.current", row.stats.memory_current_bytes()},
               {"memory.max", LimitJson(l.max_bytes())},
               {"memory.high", LimitJson(l.high_bytes())},
               {"memory.peak", row.stats.memory_peak_bytes()},
               {"memory.events", EventsJson(row.stats.events())}});
        }
        PrintJson(Json{{"groups", std::move(groups)}}, /*pretty=*/false);
        std::cout.flush();
        continue;
      }
      std::string frame;
      if (tty) {
        frame += "\x1b[H\x1b[2J";
      } else if (i > 0) {
        frame += "\n";
      }
      absl::StrAppendFormat(&frame, "%-40s %10s %10s %10s %10s %8s %8s\n",
                            "Control Group", "Memory", "Max", "High", "Peak",
                            "max", "oom");
      for (const GroupRow& row : rows) {
        const v1::Limits& l = row.stats.limits();
        absl::StrAppendFormat(
            &frame, "%-40s %10s %10s %10s %10s %8d %8d\n", row.path,
            HumanBytes(row.stats.memory_current_bytes()),
            HumanBytes(l.max_bytes()), HumanBytes(l.high_bytes()),
            HumanBytes(row.stats.memory_peak_bytes()), row.stats.events().max(),
            row.stats.events().oom());
      }
      std::cout << frame << std::flush;
    }
    return kExitOk;
  }

  std::unique_ptr<v1::Accounting::Stub> stub_;
  const bool json_;
};

// The flags on the command line, checked before absl::ParseCommandLine(),
// which exits 1 on an unknown flag or a bad value where the exit status
// table says 2 for every usage error: the first problem, or nullopt. A
// word like "-5" is not a flag to cgacctctl (Abseil would say "Unknown
// command line flag '5'"): counts and sizes are never negative.
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
        "help",   "helpfull", "helpshort",  "helppackage", "helpon",
        "helpmatch", "version", "only_check_args", "flagfile", "fromenv",
        "tryfromenv", "undefok"};
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

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  cli::ShowOwnFlagsInHelp();
  if (std::optional<std::string> error = FlagUsageError(argc, argv)) {
    return PrintUsageError(*error);
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> args(positional.begin() + 1, positional.end());
  // Usage errors are reported without touching the network.
  absl::StatusOr<Invocation> inv = ParseInvocation(args);
  if (!inv.ok()) return PrintUsageError(inv.status().message());
  const std::string target = absl::GetFlag(FLAGS_target);
  std::shared_ptr<grpc::Channel> channel = cli::MakeChannel(target);
  if (absl::Status s = cli::WaitForConnected(*channel, target,
                                        absl::GetFlag(FLAGS_connect_timeout));
      !s.ok()) {
    std::cerr << "cgacctctl: " << s.message() << "\n";
    return kExitUnavailable;
  }
  return Ctl(channel, absl::GetFlag(FLAGS_json)).Run(*inv);
}

}  // namespace
}  // namespace cgacct::ctl

int main(int argc, char** argv) { return cgacct::ctl::Main(argc, argv); }
