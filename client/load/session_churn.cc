#include "client/load/session_churn.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cgacct/client.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/cli/grpc_util.h"
#include "client/load/json_writer.h"
#include "client/load/load_report.h"
#include "client/load/metrics_scrape.h"
#include "client/load/run_control.h"
#include "client/load/server_calls.h"

extern char** environ;

namespace cgacct::load {
namespace {

// Pages each child charges at a time (a 10K send, as netperf's default).
constexpr uint64_t kChildChargePages = 3;

struct Child {
  pid_t pid = -1;
  int out = -1;
};

// Spawns argv0 as a churn child; its stdout on a pipe.
Child Spawn(const char* argv0, const std::vector<std::string>& flags) {
  Child c;
  int out[2];
  if (pipe(out) != 0) return c;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::vector<std::string> args = {argv0};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawn(&c.pid, "/proc/self/exe", &actions, nullptr, argv.data(),
                  environ) != 0) {
    c.pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  c.out = out[0];
  return c;
}

// The child's first stdout line, "" after `timeout`.
std::string ReadLine(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 50) <= 0) continue;
    char ch;
    if (read(fd, &ch, 1) != 1) break;
    if (ch == '\n') return line;
    line.push_back(ch);
  }
  return line;
}

// GROUP's memory.current in pages (exact); nullopt when GetStats failed.
std::optional<uint64_t> CurrentPages(v1::Accounting::Stub& stub,
                                     const std::string& group,
                                     uint64_t page_size,
                                     absl::Duration timeout) {
  absl::StatusOr<v1::GroupStats> stats = ReadExactStats(stub, group, timeout);
  if (!stats.ok()) return std::nullopt;
  return stats->memory_current_bytes() / page_size;
}

std::optional<SessionCounters> ScrapeSessions(const std::string& target) {
  if (target.empty()) return std::nullopt;
  absl::StatusOr<std::vector<MetricSample>> samples =
      ScrapeMetrics(target, absl::Seconds(2));
  if (!samples.ok()) return std::nullopt;
  SessionCounters c;
  for (const MetricSample& m : *samples) {
    if (m.name == "cgacct_sessions_expired_total") c.expired += m.value;
    if (m.name != "cgacct_session_returned_pages_total") continue;
    for (const auto& [k, v] : m.labels) {
      if (k == "reason" && v == "expire") c.returned_expire += m.value;
    }
  }
  return c;
}

// The parent's side of the run: its control stub and the group's
// memory.current before the first round. One thread (main).
class ChurnParent {
 public:
  ChurnParent(const SessionChurnOptions& o, const char* argv0)
      : o_(o), argv0_(argv0) {}

  // Connects, reads the page size, creates GROUP and reads its base.
  absl::Status SetUp();

  // One round: `o_.clients` children charge and die, then the wait for
  // memory.current to come back. Sets *child_failed when a child did not
  // get ready.
  ChurnRound RunRound(int round, bool* child_failed);

 private:
  // Starts the children; each reports "ready" once it holds its pages.
  std::vector<Child> SpawnChildren();
  // Polls memory.current every 10 ms from `died` until it is back at the
  // base, for up to ttl + 5 s; the time it took in ms, -1 if it never was.
  double WaitForBase(Clock::time_point died);

  const SessionChurnOptions& o_;
  const char* const argv0_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
  uint64_t page_size_ = 4096;
  uint64_t base_ = 0;
};

absl::Status ChurnParent::SetUp() {
  absl::StatusOr<ControlConnection> control =
      ConnectControl(o_.target, o_.connect_timeout, o_.rpc_timeout);
  if (!control.ok()) return control.status();
  stub_ = std::move(control->stub);
  if (control->info.page_size_bytes() != 0) {
    page_size_ = control->info.page_size_bytes();
  }
  if (absl::Status s = CreateGroupIfMissing(*stub_, o_.group, o_.rpc_timeout);
      !s.ok()) {
    return s;
  }
  std::optional<uint64_t> base =
      CurrentPages(*stub_, o_.group, page_size_, o_.rpc_timeout);
  if (!base.has_value()) {
    return absl::UnavailableError(absl::StrCat("GetStats ", o_.group));
  }
  base_ = *base;
  return absl::OkStatus();
}

std::vector<Child> ChurnParent::SpawnChildren() {
  std::vector<Child> children;
  for (int i = 0; i < o_.clients; ++i) {
    std::vector<std::string> flags = {
        "--session_churn_child",
        absl::StrCat("--target=", TargetFor(o_.targets, o_.target, i)),
        absl::StrCat("--group=", o_.group),
        absl::StrCat("--churn_pages=", o_.pages),
        absl::StrCat("--session_ttl_ms=", o_.ttl_ms),
        absl::StrCat("--rpc_timeout=", absl::FormatDuration(o_.rpc_timeout))};
    // The parent's TLS and token flags: without them a child of a run
    // against access control was refused UNAUTHENTICATED.
    for (std::string& flag : cli::ChannelFlags())
      flags.push_back(std::move(flag));
    children.push_back(Spawn(argv0_, flags));
  }
  return children;
}

double ChurnParent::WaitForBase(Clock::time_point died) {
  const Clock::time_point give_up =
      died + std::chrono::milliseconds(o_.ttl_ms) + std::chrono::seconds(5);
  while (Clock::now() < give_up) {
    const std::optional<uint64_t> now =
        CurrentPages(*stub_, o_.group, page_size_, o_.rpc_timeout);
    if (now.has_value() && *now == base_) {
      return std::chrono::duration<double, std::milli>(Clock::now() - died)
          .count();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

ChurnRound ChurnParent::RunRound(int round, bool* child_failed) {
  const std::optional<SessionCounters> before =
      ScrapeSessions(o_.metrics_target);
  std::vector<Child> children = SpawnChildren();
  for (Child& c : children) {
    const std::string line =
        c.pid > 0 ? ReadLine(c.out, std::chrono::seconds(20)) : "";
    if (line.rfind("ready ", 0) != 0) *child_failed = true;
  }
  ChurnRound r;
  r.held_pages =
      CurrentPages(*stub_, o_.group, page_size_, o_.rpc_timeout).value_or(0) -
      base_;
  // Half are SIGKILLed, half end on SIGTERM's default action: neither
  // runs a destructor, neither closes its session.
  for (size_t i = 0; i < children.size(); ++i) {
    if (children[i].pid > 0) {
      kill(children[i].pid, i % 2 ? SIGTERM : SIGKILL);
    }
  }
  const Clock::time_point died = Clock::now();
  for (Child& c : children) {
    if (c.pid > 0) waitpid(c.pid, nullptr, 0);
    close(c.out);
  }
  r.to_zero_ms = WaitForBase(died);
  r.within_bound = r.to_zero_ms >= 0 && r.to_zero_ms <= o_.ttl_ms + 1000.0;
  const std::optional<SessionCounters> after =
      ScrapeSessions(o_.metrics_target);
  if (before.has_value() && after.has_value()) {
    r.delta = SessionCounters{after->expired - before->expired,
                              after->returned_expire - before->returned_expire};
  }
  std::cerr << absl::StrFormat(
      "cgacct-load: session-churn round %d: %d clients held %d pages; "
      "memory.current back to its start after %.0f ms\n",
      round + 1, o_.clients, r.held_pages, r.to_zero_ms);
  return r;
}

}  // namespace

int RunSessionChurnChild(const SessionChurnOptions& o) {
  client::Options options;
  options.session_ttl = std::chrono::milliseconds(o.ttl_ms);
  options.client_name = absl::StrCat("cgacct-load session-churn:", getpid());
  options.call_timeout = absl::ToChronoMilliseconds(o.rpc_timeout);
  std::unique_ptr<client::Client> client;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      cli::MakeChannel(o.target);
  if (!channel.ok()) return Fail(channel.status().message());
  const client::Status s =
      client::Client::Open(*std::move(channel), options, &client);
  if (!s.ok()) return Fail(absl::StrCat("Open: ", cli::FormatStatus(s)));
  uint64_t held = 0;
  while (held < o.pages) {
    const client::ChargeResult r = client->Charge(o.group, kChildChargePages);
    if (!r.ok()) {
      return Fail(absl::StrCat("Charge: ", cli::FormatStatus(r.status)));
    }
    held += kChildChargePages;
  }
  std::printf("ready %s %llu\n", client->session_id().c_str(),
              static_cast<unsigned long long>(held));
  std::fflush(stdout);
  // Wait to be killed, or (half of the children) be told to exit: a line
  // on stdin is not used; the parent sends SIGTERM, whose default action
  // ends the process without running anything: no CloseSession.
  for (;;) pause();
}

int RunSessionChurn(const SessionChurnOptions& o, const char* argv0) {
  ChurnParent parent(o, argv0);
  if (absl::Status s = parent.SetUp(); !s.ok()) return Fail(s.message());
  std::vector<ChurnRound> rounds;
  bool failed = false;
  std::string first_error;
  for (int round = 0; round < o.rounds; ++round) {
    bool child_failed = false;
    rounds.push_back(parent.RunRound(round, &child_failed));
    if (child_failed && first_error.empty()) {
      first_error =
          absl::StrCat("round ", round + 1, ": a client did not get ready");
    }
    failed = failed || child_failed || !rounds.back().within_bound;
  }
  std::cout << FormatSessionChurnTable(o, rounds, first_error) << std::flush;
  if (!o.json_path.empty()) {
    if (absl::Status s = WriteFileAtomically(
            o.json_path, SessionChurnJson(o, rounds, first_error));
        !s.ok()) {
      return Fail(s.message());
    }
  }
  return failed ? 3 : 0;
}

std::string FormatSessionChurnTable(const SessionChurnOptions& o,
                                    const std::vector<ChurnRound>& rounds,
                                    const std::string& first_error) {
  constexpr int kWidth = 26;
  std::string out = "cgacct-load session-churn\n";
  AppendRow(&out, "target", TargetsText(o.targets, o.target), kWidth);
  AppendRow(&out, "group", o.group, kWidth);
  AppendRow(&out, "clients x rounds",
            absl::StrCat(o.clients, " x ", o.rounds,
                         " (half SIGKILL, half SIGTERM; none closes)"),
            kWidth);
  AppendRow(&out, "session ttl",
            absl::StrCat(o.ttl_ms, " ms (bound: ttl + 1000 ms)"), kWidth);
  for (size_t i = 0; i < rounds.size(); ++i) {
    const ChurnRound& r = rounds[i];
    AppendRow(&out, absl::StrCat("round ", i + 1),
              absl::StrFormat(
                  "held %d pages; back to 0 after %s%s; expired %s sessions, "
                  "returned %s pages",
                  r.held_pages,
                  r.to_zero_ms < 0 ? std::string("(never)")
                                   : absl::StrFormat("%.0f ms", r.to_zero_ms),
                  r.within_bound ? "" : " (OVER THE BOUND)",
                  r.delta ? absl::StrFormat("%.0f", r.delta->expired) : "n/a",
                  r.delta ? absl::StrFormat("%.0f", r.delta->returned_expire)
                          : "n/a"),
              kWidth);
  }
  if (!first_error.empty()) AppendRow(&out, "first error", first_error, kWidth);
  return out;
}

std::string SessionChurnJson(const SessionChurnOptions& o,
                             const std::vector<ChurnRound>& rounds,
                             const std::string& first_error) {
  JsonWriter w;
  w.BeginObject();
  w.Key("scenario").String("session-churn");
  w.Key("target").String(TargetsText(o.targets, o.target));
  w.Key("group").String(o.group);
  w.Key("clients").Int(o.clients);
  w.Key("session_ttl_ms").Uint(o.ttl_ms);
  w.Key("rounds").BeginArray();
  for (const ChurnRound& r : rounds) {
    w.BeginObject();
    w.Key("held_pages").Uint(r.held_pages);
    w.Key("to_zero_ms").Double(r.to_zero_ms);
    w.Key("within_bound").Bool(r.within_bound);
    w.Key("sessions_expired")
        .OptionalDouble(r.delta ? std::optional<double>(r.delta->expired)
                                : std::nullopt);
    w.Key("returned_pages_expire")
        .OptionalDouble(r.delta
                            ? std::optional<double>(r.delta->returned_expire)
                            : std::nullopt);
    w.EndObject();
  }
  w.EndArray();
  w.Key("first_error").String(first_error);
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace cgacct::load
