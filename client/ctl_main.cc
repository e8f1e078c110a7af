// cgacctctl: a minimal operator CLI for cgacctd. Output is "name value"
// lines, like the cgroup v2 interface files.
//
// Exit status: 0 on success; 1 when the server refuses the request or is
// unreachable (one line on stderr, starting with the gRPC code); 2 on a usage
// error.
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/cli_util.h"
#include "client/grpc_util.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "cgacctd gRPC address");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(3),
          "how long to wait for the server to accept the connection");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "deadline of the RPC");
ABSL_FLAG(std::string, max, "",
          "memory.max (create, set): bytes, K/M/G/T or max");
ABSL_FLAG(std::string, high, "", "memory.high (set): bytes, K/M/G/T or max");
ABSL_FLAG(std::string, min, "", "memory.min (set): bytes, K/M/G/T or max");
ABSL_FLAG(std::string, low, "", "memory.low (set): bytes, K/M/G/T or max");
ABSL_FLAG(int32_t, cpu, -1,
          "per-CPU slot for charge/uncharge; -1: the server's");
ABSL_FLAG(bool, r, false, "ls: list the whole subtree");
ABSL_FLAG(std::string, flush, "exact", "stat: exact | threshold | none");

namespace cgacct::client {
namespace {

namespace v1 = ::cgacct::v1;

constexpr char kUsage[] =
    "command-line client for cgacctd.\n"
    "cgacctctl [--target=HOST:PORT] COMMAND\n"
    "  create PATH [--max=BYTES]\n"
    "  delete PATH\n"
    "  ls PATH [-r]\n"
    "  set PATH [--max=B] [--high=B] [--min=B] [--low=B]   (B: bytes, 64M, "
    "1G, max)\n"
    "  charge PATH NR_PAGES anon|file [--cpu=K]\n"
    "  uncharge PATH NR_PAGES anon|file [--cpu=K]\n"
    "  stat PATH [--flush=exact|threshold|none]\n"
    "  info";

int PrintUsageError(absl::string_view message) {
  std::cerr << "cgacctctl: " << message << "\n" << kUsage << "\n";
  return 2;
}

int PrintRpcError(absl::string_view rpc, const grpc::Status& status) {
  std::cerr << "cgacctctl: " << rpc << ": " << FormatStatus(status) << "\n";
  return 1;
}

void Line(absl::string_view name, absl::string_view value) {
  std::cout << name << " " << value << "\n";
}
void Line(absl::string_view name, uint64_t value) {
  std::cout << name << " " << value << "\n";
}

// Reads --max/--high/--min/--low into `limits`; returns how many were set.
absl::StatusOr<int> LimitsFromFlags(v1::Limits* limits, bool only_max) {
  struct Item {
    const char* flag;
    std::string text;
    void (v1::Limits::*set)(uint64_t);
  };
  const Item items[] = {
      {"max", absl::GetFlag(FLAGS_max), &v1::Limits::set_max_bytes},
      {"high", absl::GetFlag(FLAGS_high), &v1::Limits::set_high_bytes},
      {"min", absl::GetFlag(FLAGS_min), &v1::Limits::set_min_bytes},
      {"low", absl::GetFlag(FLAGS_low), &v1::Limits::set_low_bytes},
  };
  int nr_set = 0;
  for (const Item& item : items) {
    if (item.text.empty()) continue;
    if (only_max && absl::string_view(item.flag) != "max") {
      return absl::InvalidArgumentError(
          absl::StrCat("--", item.flag, " is for set, not create"));
    }
    absl::StatusOr<uint64_t> bytes = ParseSizeBytes(item.text);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", item.flag, ": ", bytes.status().message()));
    }
    (limits->*item.set)(*bytes);
    ++nr_set;
  }
  return nr_set;
}

void PrintLimits(const v1::Limits& limits) {
  Line("memory.max", FormatSizeBytes(limits.max_bytes()));
  Line("memory.high", FormatSizeBytes(limits.high_bytes()));
  Line("memory.min", FormatSizeBytes(limits.min_bytes()));
  Line("memory.low", FormatSizeBytes(limits.low_bytes()));
}

void PrintGroup(const v1::Group& group) {
  Line("path", group.path());
  Line("id", group.id());
  PrintLimits(group.limits());
}

void PrintEvents(absl::string_view file, const v1::MemoryEvents& events) {
  const std::string prefix = absl::StrCat(file, ".");
  Line(prefix + "low", events.low());
  Line(prefix + "high", events.high());
  Line(prefix + "max", events.max());
  Line(prefix + "oom", events.oom());
  Line(prefix + "oom_kill", events.oom_kill());
  Line(prefix + "oom_group_kill", events.oom_group_kill());
  Line(prefix + "sock_throttled", events.sock_throttled());
}

// Whether `args` (command first) names a command with the right number of
// positional arguments.
bool IsKnownCommand(const std::vector<std::string>& args) {
  static const std::pair<absl::string_view, size_t> kArity[] = {
      {"info", 0}, {"create", 1}, {"delete", 1}, {"ls", 1},
      {"set", 1},  {"stat", 1},   {"charge", 3}, {"uncharge", 3},
  };
  for (const auto& [name, arity] : kArity) {
    if (args[0] == name) return args.size() == arity + 1;
  }
  return false;
}

std::optional<v1::PageKind> ParsePageKind(absl::string_view text) {
  if (text == "anon") return v1::PAGE_KIND_ANON;
  if (text == "file") return v1::PAGE_KIND_FILE;
  return std::nullopt;
}

class Ctl {
 public:
  explicit Ctl(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Accounting::NewStub(std::move(channel))) {}

  // Runs one command; `args` excludes the program name. Returns the exit
  // status.
  int Run(const std::vector<std::string>& args) {
    const std::string& command = args[0];
    const auto need = [&](size_t n) { return args.size() == n + 1; };
    if (command == "info" && need(0)) return Info();
    if (command == "create" && need(1)) return Create(args[1]);
    if (command == "delete" && need(1)) return Delete(args[1]);
    if (command == "ls" && need(1)) return List(args[1]);
    if (command == "set" && need(1)) return Set(args[1]);
    if (command == "stat" && need(1)) return Stat(args[1]);
    if ((command == "charge" || command == "uncharge") && need(3)) {
      return ChargeOrUncharge(command == "uncharge", args[1], args[2], args[3]);
    }
    return PrintUsageError(
        absl::StrCat("bad command or arguments: \"", command, "\""));
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(DeadlineAfter(absl::GetFlag(FLAGS_timeout)));
    return context;
  }

  int Info() {
    v1::EngineInfo info;
    const grpc::Status status = stub_->GetEngineInfo(
        Context().get(), v1::GetEngineInfoRequest(), &info);
    if (!status.ok()) return PrintRpcError("GetEngineInfo", status);
    Line("nr_cpus", info.nr_cpus());
    Line("page_size_bytes", info.page_size_bytes());
    Line("charge_batch_pages", info.charge_batch_pages());
    Line("flush_lock_policy", info.flush_lock_policy());
    Line("nr_stock_slots", info.nr_stock_slots());
    Line("nr_groups", info.nr_groups());
    Line("flush_lock_hold_max_us", info.flush_lock_hold_max_us());
    Line("max_batch_ops", info.max_batch_ops());
    return 0;
  }

  int Create(const std::string& path) {
    v1::CreateGroupRequest request;
    request.set_path(path);
    absl::StatusOr<int> nr_set =
        LimitsFromFlags(request.mutable_limits(), /*only_max=*/true);
    if (!nr_set.ok()) return PrintUsageError(nr_set.status().message());
    v1::Group group;
    const grpc::Status status =
        stub_->CreateGroup(Context().get(), request, &group);
    if (!status.ok()) return PrintRpcError("CreateGroup", status);
    PrintGroup(group);
    return 0;
  }

  int Delete(const std::string& path) {
    v1::DeleteGroupRequest request;
    request.set_path(path);
    v1::DeleteGroupResponse response;
    const grpc::Status status =
        stub_->DeleteGroup(Context().get(), request, &response);
    if (!status.ok()) return PrintRpcError("DeleteGroup", status);
    Line("reparented_pages", response.reparented_pages());
    return 0;
  }

  int List(const std::string& path) {
    v1::ListGroupsRequest request;
    request.set_path(path);
    request.set_recursive(absl::GetFlag(FLAGS_r));
    // Bounded: at most 10,000 pages of up to 10,000 paths.
    for (int page = 0; page < 10000; ++page) {
      v1::ListGroupsResponse response;
      const grpc::Status status =
          stub_->ListGroups(Context().get(), request, &response);
      if (!status.ok()) return PrintRpcError("ListGroups", status);
      for (const std::string& p : response.paths()) std::cout << p << "\n";
      if (response.next_page_token().empty()) return 0;
      request.set_page_token(response.next_page_token());
    }
    std::cerr << "cgacctctl: ListGroups: too many pages, output truncated\n";
    return 1;
  }

  int Set(const std::string& path) {
    v1::SetLimitsRequest request;
    request.set_path(path);
    absl::StatusOr<int> nr_set =
        LimitsFromFlags(request.mutable_limits(), /*only_max=*/false);
    if (!nr_set.ok()) return PrintUsageError(nr_set.status().message());
    if (*nr_set == 0) {
      return PrintUsageError(
          "set needs at least one of --max/--high/--min/--low");
    }
    v1::Group group;
    const grpc::Status status =
        stub_->SetLimits(Context().get(), request, &group);
    if (!status.ok()) return PrintRpcError("SetLimits", status);
    PrintGroup(group);
    return 0;
  }

  int ChargeOrUncharge(bool uncharge, const std::string& path,
                       const std::string& nr_pages_text,
                       const std::string& kind_text) {
    uint64_t nr_pages = 0;
    if (!absl::SimpleAtoi(nr_pages_text, &nr_pages) || nr_pages == 0) {
      return PrintUsageError(absl::StrCat(
          "NR_PAGES must be a positive number, got \"", nr_pages_text, "\""));
    }
    const std::optional<v1::PageKind> kind = ParsePageKind(kind_text);
    if (!kind.has_value()) {
      return PrintUsageError(
          absl::StrCat("kind must be anon or file, got \"", kind_text, "\""));
    }
    const int32_t cpu = absl::GetFlag(FLAGS_cpu);
    if (cpu < -1) return PrintUsageError("--cpu must be >= 0 (or -1)");
    if (uncharge) {
      v1::UnchargeRequest request;
      request.set_path(path);
      request.set_nr_pages(nr_pages);
      request.set_kind(*kind);
      if (cpu >= 0) request.set_cpu(static_cast<uint32_t>(cpu));
      v1::UnchargeResponse response;
      const grpc::Status status =
          stub_->Uncharge(Context().get(), request, &response);
      if (!status.ok()) return PrintRpcError("Uncharge", status);
      Line("nr_pages", response.nr_pages());
      return 0;
    }
    v1::ChargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(*kind);
    if (cpu >= 0) request.set_cpu(static_cast<uint32_t>(cpu));
    v1::ChargeResponse response;
    const grpc::Status status =
        stub_->Charge(Context().get(), request, &response);
    if (!status.ok()) return PrintRpcError("Charge", status);
    Line("nr_pages", response.nr_pages());
    Line("throttle_us", response.throttle_us());
    return 0;
  }

  int Stat(const std::string& path) {
    v1::GetStatsRequest request;
    request.set_path(path);
    const std::string flush = absl::GetFlag(FLAGS_flush);
    if (flush == "exact") {
      request.set_flush(v1::FLUSH_MODE_EXACT);
    } else if (flush == "threshold") {
      request.set_flush(v1::FLUSH_MODE_THRESHOLD);
    } else if (flush == "none") {
      request.set_flush(v1::FLUSH_MODE_NONE);
    } else {
      return PrintUsageError("--flush must be exact, threshold or none");
    }
    v1::GroupStats stats;
    const grpc::Status status =
        stub_->GetStats(Context().get(), request, &stats);
    if (!status.ok()) return PrintRpcError("GetStats", status);
    Line("memory.current", stats.memory_current_bytes());
    Line("memory.peak", stats.memory_peak_bytes());
    PrintLimits(stats.limits());
    Line("memory.emin", stats.emin_bytes());
    Line("memory.elow", stats.elow_bytes());
    Line("memory.failcnt", stats.failcnt());  // the cgroup v1 file
    PrintEvents("memory.events", stats.events());
    PrintEvents("memory.events.local", stats.events_local());
    Line("flushed", stats.flushed() ? "1" : "0");
    Line("max_staleness_us", stats.max_staleness_us());
    // memory.stat itself, in its order and units, unprefixed.
    for (const v1::StatEntry& entry : stats.stat()) {
      Line(entry.name(), entry.value());
    }
    return 0;
  }

  std::unique_ptr<v1::Accounting::Stub> stub_;
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  cgacct::client::ShowOwnFlagsInHelp();
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) return PrintUsageError("missing command");
  const std::vector<std::string> args(positional.begin() + 1, positional.end());
  // Usage errors are reported without touching the network.
  if (!IsKnownCommand(args)) {
    return PrintUsageError(absl::StrCat("bad command or arguments: \"",
                                        absl::StrJoin(args, " "), "\""));
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  std::shared_ptr<grpc::Channel> channel = MakeChannel(target);
  if (absl::Status s = WaitForConnected(*channel, target,
                                        absl::GetFlag(FLAGS_connect_timeout));
      !s.ok()) {
    std::cerr << "cgacctctl: " << s.message() << "\n";
    return 1;
  }
  return Ctl(channel).Run(args);
}

}  // namespace
}  // namespace cgacct::client

int main(int argc, char** argv) { return cgacct::client::Main(argc, argv); }
