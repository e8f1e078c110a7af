#include "client/session_churn.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cgacct/client.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/grpc_util.h"
#include "client/cli_util.h"
#include "client/json_writer.h"
#include "client/metrics_scrape.h"

extern char** environ;

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, metrics_target);
ABSL_DECLARE_FLAG(std::string, group);
ABSL_DECLARE_FLAG(std::string, json);
ABSL_DECLARE_FLAG(absl::Duration, connect_timeout);
ABSL_DECLARE_FLAG(absl::Duration, rpc_timeout);

ABSL_FLAG(int32_t, churn_clients, 4,
          "session-churn: client processes per round (half SIGKILLed, half "
          "exiting without CloseSession)");
ABSL_FLAG(int32_t, churn_rounds, 3, "session-churn: rounds");
ABSL_FLAG(uint64_t, churn_pages, 300,
          "session-churn: pages each client holds when it dies");
ABSL_FLAG(uint32_t, session_ttl_ms, 1000,
          "session-churn: each client's session lease (OpenSession ttl_ms)");
ABSL_FLAG(bool, session_churn_child, false,
          "internal: run as a session-churn client process");

namespace cgacct::client {
namespace {

namespace v1 = ::cgacct::v1;
using Clock = std::chrono::steady_clock;

int Fail(const std::string& message) {
  std::cerr << "cgacct-load: " << message << "\n";
  return 1;
}

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
                  environ) != 0)
    c.pid = -1;
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

std::optional<uint64_t> CurrentPages(v1::Accounting::Stub& stub,
                                     const std::string& group,
                                     uint64_t page_size,
                                     absl::Duration timeout) {
  v1::GetStatsRequest request;
  request.set_path(group);
  request.set_flush(v1::FLUSH_MODE_EXACT);
  v1::GroupStats stats;
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  if (!stub.GetStats(&context, request, &stats).ok()) return std::nullopt;
  return stats.memory_current_bytes() / page_size;
}

struct SessionCounters {
  double expired = 0;
  double returned_expire = 0;
};

std::optional<SessionCounters> ScrapeSessions(const std::string& target) {
  if (target.empty()) return std::nullopt;
  absl::StatusOr<std::string> text =
      HttpGet(target, "/metrics", absl::Seconds(2));
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<std::vector<MetricSample>> samples = ParseMetricsText(*text);
  if (!samples.ok()) return std::nullopt;
  SessionCounters c;
  for (const MetricSample& m : *samples) {
    if (m.name == "cgacct_sessions_expired_total") c.expired += m.value;
    if (m.name != "cgacct_session_returned_pages_total") continue;
    for (const auto& [k, v] : m.labels)
      if (k == "reason" && v == "expire") c.returned_expire += m.value;
  }
  return c;
}

struct Round {
  uint64_t held_pages = 0;    // memory.current when the clients died
  double to_zero_ms = -1;     // -1: not back to 0 within the wait
  bool within_bound = false;  // to_zero_ms <= ttl + 1000
  std::optional<SessionCounters> delta;
};

}  // namespace

bool IsSessionChurnChild() { return absl::GetFlag(FLAGS_session_churn_child); }

int RunSessionChurnChild() {
  const std::string group = absl::GetFlag(FLAGS_group);
  const uint64_t pages = absl::GetFlag(FLAGS_churn_pages);
  cgacct::client::Options options;
  options.session_ttl =
      std::chrono::milliseconds(absl::GetFlag(FLAGS_session_ttl_ms));
  options.client_name = absl::StrCat("cgacct-load session-churn:", getpid());
  options.call_timeout =
      absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_rpc_timeout));
  std::unique_ptr<Client> client;
  const grpc::Status s =
      Client::Open(MakeChannel(absl::GetFlag(FLAGS_target)), options, &client);
  if (!s.ok()) return Fail(absl::StrCat("Open: ", FormatStatus(s)));
  uint64_t held = 0;
  while (held < pages) {
    const ChargeResult r = client->Charge(group, 3);
    if (!r.ok()) return Fail(absl::StrCat("Charge: ", FormatStatus(r.status)));
    held += 3;
  }
  std::printf("ready %s %llu\n", client->session_id().c_str(),
              static_cast<unsigned long long>(held));
  std::fflush(stdout);
  // Wait to be killed, or (half of the children) be told to exit: a line
  // on stdin is not used; the parent sends SIGTERM, whose default action
  // ends the process without running anything: no CloseSession.
  for (;;) pause();
}

int RunSessionChurn(const char* argv0) {
  const std::string target = absl::GetFlag(FLAGS_target);
  const std::string group = absl::GetFlag(FLAGS_group);
  const int clients = absl::GetFlag(FLAGS_churn_clients);
  const int rounds = absl::GetFlag(FLAGS_churn_rounds);
  const uint64_t pages = absl::GetFlag(FLAGS_churn_pages);
  const uint32_t ttl_ms = absl::GetFlag(FLAGS_session_ttl_ms);
  const absl::Duration rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  std::string metrics = absl::GetFlag(FLAGS_metrics_target);
  if (metrics.empty()) {
    absl::StatusOr<std::string> derived = MetricsTargetFor(target);
    metrics = derived.ok() ? *derived : "";
  }
  if (group.empty() || group.front() != '/' || group == "/")
    return Fail("--group must be an absolute path below /");
  if (clients < 1 || clients > 256)
    return Fail("--churn_clients must be in 1..256");
  if (rounds < 1 || rounds > 1000) return Fail("--churn_rounds must be in 1..1000");
  if (pages < 1 || pages > (uint64_t{1} << 24))
    return Fail("--churn_pages must be in 1..2^24");

  std::shared_ptr<grpc::Channel> channel = MakeChannel(target);
  if (absl::Status s = WaitForConnected(*channel, target,
                                        absl::GetFlag(FLAGS_connect_timeout));
      !s.ok())
    return Fail(std::string(s.message()));
  auto stub = v1::Accounting::NewStub(channel);
  v1::EngineInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(rpc_timeout));
    const grpc::Status s =
        stub->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info);
    if (!s.ok()) return Fail(absl::StrCat("GetEngineInfo: ", FormatStatus(s)));
  }
  const uint64_t page_size = info.page_size_bytes() ? info.page_size_bytes() : 4096;
  {
    v1::CreateGroupRequest request;
    request.set_path(group);
    v1::Group g;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(rpc_timeout));
    const grpc::Status s = stub->CreateGroup(&context, request, &g);
    if (!s.ok() && s.error_code() != grpc::StatusCode::ALREADY_EXISTS)
      return Fail(absl::StrCat("CreateGroup ", group, ": ", FormatStatus(s)));
  }
  std::optional<uint64_t> base = CurrentPages(*stub, group, page_size, rpc_timeout);
  if (!base.has_value()) return Fail(absl::StrCat("GetStats ", group));

  std::vector<Round> report;
  bool failed = false;
  std::string first_error;
  for (int round = 0; round < rounds; ++round) {
    const std::optional<SessionCounters> before = ScrapeSessions(metrics);
    std::vector<Child> children;
    for (int i = 0; i < clients; ++i) {
      children.push_back(Spawn(
          argv0, {"--session_churn_child", absl::StrCat("--target=", target),
                  absl::StrCat("--group=", group),
                  absl::StrCat("--churn_pages=", pages),
                  absl::StrCat("--session_ttl_ms=", ttl_ms),
                  absl::StrCat("--rpc_timeout=", absl::FormatDuration(rpc_timeout))}));
    }
    for (Child& c : children) {
      const std::string line =
          c.pid > 0 ? ReadLine(c.out, std::chrono::seconds(20)) : "";
      if (line.rfind("ready ", 0) != 0) {
        failed = true;
        if (first_error.empty())
          first_error = absl::StrCat("round ", round + 1, ": a client did not get ready");
      }
    }
    Round r;
    r.held_pages =
        CurrentPages(*stub, group, page_size, rpc_timeout).value_or(0) - *base;
    // Half are SIGKILLed, half end on SIGTERM's default action: neither
    // runs a destructor, neither closes its session.
    for (size_t i = 0; i < children.size(); ++i)
      if (children[i].pid > 0) kill(children[i].pid, i % 2 ? SIGTERM : SIGKILL);
    const Clock::time_point died = Clock::now();
    for (Child& c : children) {
      if (c.pid > 0) waitpid(c.pid, nullptr, 0);
      close(c.out);
    }
    const Clock::time_point give_up =
        died + std::chrono::milliseconds(ttl_ms) + std::chrono::seconds(5);
    while (Clock::now() < give_up) {
      const std::optional<uint64_t> now =
          CurrentPages(*stub, group, page_size, rpc_timeout);
      if (now.has_value() && *now == *base) {
        r.to_zero_ms =
            std::chrono::duration<double, std::milli>(Clock::now() - died).count();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    r.within_bound = r.to_zero_ms >= 0 && r.to_zero_ms <= ttl_ms + 1000.0;
    if (!r.within_bound) failed = true;
    const std::optional<SessionCounters> after = ScrapeSessions(metrics);
    if (before.has_value() && after.has_value())
      r.delta = SessionCounters{after->expired - before->expired,
                                after->returned_expire - before->returned_expire};
    std::cerr << absl::StrFormat(
        "cgacct-load: session-churn round %d: %d clients held %d pages; "
        "memory.current back to its start after %.0f ms\n",
        round + 1, clients, r.held_pages, r.to_zero_ms);
    report.push_back(r);
  }

  std::string out = "cgacct-load session-churn\n";
  auto row = [&](const std::string& name, const std::string& value) {
    absl::StrAppendFormat(&out, "  %-26s %s\n", name, value);
  };
  row("target", target);
  row("group", group);
  row("clients x rounds", absl::StrCat(clients, " x ", rounds,
                                       " (half SIGKILL, half SIGTERM; none closes)"));
  row("session ttl", absl::StrCat(ttl_ms, " ms (bound: ttl + 1000 ms)"));
  for (size_t i = 0; i < report.size(); ++i) {
    const Round& r = report[i];
    row(absl::StrCat("round ", i + 1),
        absl::StrFormat(
            "held %d pages; back to 0 after %s%s; expired %s sessions, "
            "returned %s pages",
            r.held_pages,
            r.to_zero_ms < 0 ? std::string("(never)")
                             : absl::StrFormat("%.0f ms", r.to_zero_ms),
            r.within_bound ? "" : " (OVER THE BOUND)",
            r.delta ? absl::StrFormat("%.0f", r.delta->expired) : "n/a",
            r.delta ? absl::StrFormat("%.0f", r.delta->returned_expire) : "n/a"));
  }
  if (!first_error.empty()) row("first error", first_error);
  std::cout << out << std::flush;
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    JsonWriter w;
    w.BeginObject();
    w.Key("scenario").String("session-churn");
    w.Key("target").String(target);
    w.Key("group").String(group);
    w.Key("clients").Int(clients);
    w.Key("session_ttl_ms").Uint(ttl_ms);
    w.Key("rounds").BeginArray();
    for (const Round& r : report) {
      w.BeginObject();
      w.Key("held_pages").Uint(r.held_pages);
      w.Key("to_zero_ms").Double(r.to_zero_ms);
      w.Key("within_bound").Bool(r.within_bound);
      w.Key("sessions_expired");
      if (r.delta) w.Double(r.delta->expired); else w.Null();
      w.Key("returned_pages_expire");
      if (r.delta) w.Double(r.delta->returned_expire); else w.Null();
      w.EndObject();
    }
    w.EndArray();
    w.Key("first_error").String(first_error);
    w.EndObject();
    std::ofstream f(path, std::ios::trunc);
    f << w.str() << "\n";
    if (!f) return Fail(absl::StrCat("cannot write ", path));
  }
  return failed ? 3 : 0;
}

}  // namespace cgacct::client
