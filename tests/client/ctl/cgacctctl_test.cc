// cgacctctl end to end: the real binary (CGACCTCTL_PATH) against a real
// cgacctd (CGACCTD_PATH) on 127.0.0.1, checking stdout byte for byte as the
// cgroup v2 files would print it, stderr's one-line errors and every exit
// status class.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/server/daemon.h"

namespace cgacct {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Json = nlohmann::json;

constexpr std::chrono::seconds kTimeout(20);

// A running cgacctctl with stdout and stderr on pipes.
class Ctl : public test_util::Process {
 public:
  explicit Ctl(const std::vector<std::string>& args)
      : Process(CGACCTCTL_PATH, args) {}

  // Reads both pipes to their end and waits for the exit status (-1 on a
  // signal or after kTimeout).
  int Wait() { return WaitCollect(kTimeout, &out, &err); }

  std::string out;  // what Wait() read
  std::string err;
};

struct Result {
  int exit = -1;
  std::string out;
  std::string err;
};

class CgacctctlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new test_util::Daemon(
        {"--listen=127.0.0.1:0", "--metrics_listen=", "--cpus=2"});
    const std::string line = daemon_->ReadStdoutLine(kTimeout);
    static const std::regex kPort(R"(listening on 127\.0\.0\.1:(\d+))");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, kPort)) << line;
    target_ = new std::string(absl::StrCat("--target=127.0.0.1:", m[1].str()));
  }
  static void TearDownTestSuite() {
    daemon_->Signal(SIGTERM);
    EXPECT_EQ(daemon_->WaitExit(kTimeout), 0);
    delete daemon_;
    delete target_;
  }

  // Runs cgacctctl against the daemon and collects everything.
  static Result Run(std::vector<std::string> args) {
    args.insert(args.begin(), *target_);
    Ctl ctl(args);
    Result r;
    r.exit = ctl.Wait();
    r.out = ctl.out;
    r.err = ctl.err;
    return r;
  }
  // Runs and expects success.
  static std::string Ok(const std::vector<std::string>& args) {
    Result r = Run(args);
    EXPECT_EQ(r.exit, 0) << absl::StrJoin(args, " ") << ": " << r.err;
    EXPECT_EQ(r.err, "") << absl::StrJoin(args, " ");
    return r.out;
  }
  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
  }

  static test_util::Daemon* daemon_;
  static std::string* target_;
};

test_util::Daemon* CgacctctlTest::daemon_ = nullptr;
std::string* CgacctctlTest::target_ = nullptr;

// One line of error, then the pointer to --help.
void ExpectUsageError(const Result& r, const std::string& mention) {
  EXPECT_EQ(r.exit, 2) << r.err;
  EXPECT_EQ(r.out, "");
  const std::vector<std::string> lines = absl::StrSplit(r.err, '\n');
  ASSERT_EQ(lines.size(), 3u) << r.err;  // two lines and the final '\n'
  EXPECT_THAT(lines[0], StartsWith("cgacctctl: "));
  EXPECT_THAT(lines[0], HasSubstr(mention));
  EXPECT_EQ(lines[1], "try cgacctctl --help");
}

// One line on stderr, nothing on stdout.
void ExpectOneLineError(const Result& r, int exit, const std::string& mention) {
  EXPECT_EQ(r.exit, exit) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("cgacctctl: "));
  EXPECT_THAT(r.err, HasSubstr(mention));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(CgacctctlTest, VersionIsTheProjectsNotAbseilsDefault) {
  Ctl ctl({"--version"});
  EXPECT_EQ(ctl.Wait(), 0);
  EXPECT_TRUE(std::regex_match(
      ctl.out,
      std::regex(
          R"(cgacctctl \d+\.\d+\.\d+ \(git ([0-9a-f]{12}|unknown)\)\n)")))
      << ctl.out;
  EXPECT_THAT(ctl.out, Not(HasSubstr("Debug build")));
}

// --help lists the commands, the exit status table and the flags with
// their defaults, names no source file or build path (Abseil's handler did),
// and exits 0 (Abseil's exits 1); -h and --helpfull likewise.
TEST_F(CgacctctlTest, HelpHasTheCommandsAndTheExitStatusTable) {
  for (const char* flag : {"--help", "-h", "--helpfull"}) {
    Ctl ctl({flag});
    EXPECT_EQ(ctl.Wait(), 0) << flag;
    for (const char* text :
         {"cat PATH FILE", "set PATH FILE=VALUE", "memory.max=SIZE",
          "reclaim PATH SIZE",
          "events PATH", "tree [PATH]", "top [PATH]", "peak PATH",
          "memory.oom.group", "exit status:\n  0 ok",
          "2 usage", "3 not found", "4 refused", "5 unavailable",
          "1 anything else", "--json", "--iterations", "--delay",
          "--connect_timeout=3s", "CGACCT_TARGET", "--man",
          "--completion"}) {
      EXPECT_THAT(ctl.out, HasSubstr(text)) << flag;
    }
    EXPECT_THAT(ctl.out, Not(HasSubstr(".cc"))) << flag;
    EXPECT_THAT(ctl.out, Not(HasSubstr("absl"))) << flag;
    EXPECT_EQ(ctl.err, "") << flag;
  }
}

// The target from the environment (as ETCDCTL_ENDPOINTS), --target first.
TEST_F(CgacctctlTest, TargetFromTheEnvironment) {
  const std::string target = target_->substr(std::string("--target=").size());
  ASSERT_EQ(setenv("CGACCT_TARGET", target.c_str(), 1), 0);
  {
    Ctl ctl({"cat", "/", "memory.max"});
    EXPECT_EQ(ctl.Wait(), 0) << ctl.err;
    EXPECT_EQ(ctl.out, "max\n");
  }
  {
    Ctl ctl({"--target=127.0.0.1:1", "cat", "/", "memory.max"});
    EXPECT_EQ(ctl.Wait(), 5) << "--target did not win over CGACCT_TARGET";
  }
  ASSERT_EQ(setenv("CGACCT_TARGET", "127.0.0.1:1", 1), 0);
  {
    Ctl ctl({"cat", "/", "memory.max"});
    EXPECT_EQ(ctl.Wait(), 5);
    EXPECT_THAT(ctl.err, HasSubstr("127.0.0.1:1"));
  }
  unsetenv("CGACCT_TARGET");
}

TEST_F(CgacctctlTest, UsageErrorsExit2WithOneLineAndSendNothing) {
  ExpectUsageError(Run({}), "missing command");
  ExpectUsageError(Run({"frobnicate", "/a"}), "unknown command \"frobnicate\"");
  // Flags are usage errors too (Abseil alone exits 1 for them).
  ExpectUsageError(Run({"--bogusflag", "stat", "/a"}),
                   "unknown flag --bogusflag");
  ExpectUsageError(Run({"--timeout=soon", "stat", "/a"}), "--timeout");
  ExpectUsageError(Run({"charge", "/a", "-5", "anon"}), "\"-5\" is not a flag");
  ExpectUsageError(Run({"cat", "/a"}), "wrong number of arguments");
  ExpectUsageError(Run({"cat", "/a", "memory.failcnt"}), "memory.failcnt");
  ExpectUsageError(Run({"set", "/a", "memory.max=50MiB"}), "50MiB");
  ExpectUsageError(Run({"set", "/a", "memory.max=64MB"}), "64MB");
  ExpectUsageError(Run({"set", "/a", "memory.max=-1"}), "-1");
  ExpectUsageError(Run({"set", "/a", "memory.max=MAX"}), "MAX");
  ExpectUsageError(Run({"set", "/a", "memory.swap.max=1G"}), "memory.swap.max");
  ExpectUsageError(Run({"set", "/a"}), "at least one");
  ExpectUsageError(Run({"set", "/a", "memory.max=1G", "memory.max=2G"}),
                   "more than once");
  ExpectUsageError(Run({"reclaim", "/a", "max"}), "max");
  ExpectUsageError(Run({"reclaim", "/a", "10MiB"}), "10MiB");
  ExpectUsageError(Run({"charge", "/a", "0", "anon"}), "NR_PAGES");
  ExpectUsageError(Run({"stat", "/a", "--flush=sometimes"}), "--flush");
  ExpectUsageError(Run({"stat", "/a", "--watch"}), "--watch");
  // The TLS and token flags are cgacct::client's ConnectOptions: refused
  // before any call, naming the flag (a file that cannot be read used to
  // fail every call UNAVAILABLE).
  ExpectUsageError(Run({"--tls_ca=/nonexistent/ca.pem", "stat", "/a"}),
                   "--tls_ca: cannot read /nonexistent/ca.pem");
  ExpectUsageError(Run({"--tls_cert=/tmp/c.pem", "stat", "/a"}),
                   "--tls_key: required with --tls_cert");
  ExpectUsageError(Run({"--token_file=/nonexistent/token_file", "stat", "/a"}),
                   "--token_file: cannot read /nonexistent/token_file");
  // A usage error never needs the server.
  Ctl ctl({"--target=127.0.0.1:1", "set", "/a", "memory.max=50MiB"});
  EXPECT_EQ(ctl.Wait(), 2);
}

TEST_F(CgacctctlTest, SetTakesMemparseAndCatPrintsWhatTheFileWould) {
  Ok({"create", "/memparse"});
  // 50M, hex, octal (0755 would be 493 bytes: under a page, so 0), max.
  Ok({"set", "/memparse", "memory.max=50M", "memory.high=0x1000000",
      "memory.min=01000000", "memory.low=max"});
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.max"}), "52428800\n");
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.high"}), "16777216\n");
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.min"}), "262144\n");
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.low"}), "max\n");
  Ok({"set", "/memparse", "memory.max=1P", "memory.low=0"});
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.max", "memory.low"}),
            "1125899906842624\n0\n");
  // The legacy flags still work.
  Ok({"set", "/memparse", "--max=1G"});
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.max"}), "1073741824\n");
  Ok({"set", "/memparse", "memory.max=max"});
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.max"}), "max\n");

  Ok({"charge", "/memparse", "256", "anon"});
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.current"}), "1048576\n");
  EXPECT_EQ(Ok({"cat", "/memparse", "memory.peak"}), "1048576\n");
  // --json: the files by name, numbers as numbers, "max" as a string.
  const Json json =
      Json::parse(Ok({"--json", "cat", "/memparse", "memory.current",
                      "memory.max", "memory.events"}));
  EXPECT_EQ(json["memory.current"], 1048576);
  EXPECT_EQ(json["memory.max"], "max");
  EXPECT_EQ(json["memory.events"]["oom"], 0);
}

TEST_F(CgacctctlTest, StatIsMemoryStatAndNothingElse) {
  Ok({"create", "/stat"});
  Ok({"charge", "/stat", "16", "file"});
  const std::string stat = Ok({"stat", "/stat"});
  EXPECT_EQ(stat, Ok({"cat", "/stat", "memory.stat"}));
  const std::vector<std::string> lines = Lines(stat);
  ASSERT_GE(lines.size(), 7u) << stat;
  // memcg_stat_format()'s order starts anon, file.
  EXPECT_EQ(lines[0], "anon 0");
  EXPECT_EQ(lines[1], "file 65536");
  for (const std::string& line : lines) {
    EXPECT_TRUE(std::regex_match(line, std::regex(R"([a-z_]+ \d+)"))) << line;
    EXPECT_THAT(line, Not(StartsWith("memory.")));  // no prefixed names
    EXPECT_THAT(line, Not(StartsWith("pgpg")));     // no v1 names
    EXPECT_THAT(line, Not(StartsWith("flushed")));  // no flush metadata
    EXPECT_THAT(line, Not(StartsWith("max_staleness")));
  }
  // --json has everything GetStats answers, the flush metadata included,
  // in cgroup file names with numbers as numbers (GroupStatsJson).
  const Json json = Json::parse(Ok({"--json", "stat", "/stat"}));
  EXPECT_EQ(json["path"], "/stat");
  EXPECT_EQ(json["flushed"], true);
  EXPECT_EQ(json["max_staleness_us"], 0);
  // memory.current also counts the pages parked in the per-CPU stock (a
  // 16-page charge takes a 64-page batch); memory.stat's file does not.
  EXPECT_EQ(json["memory.current"], 262144);
  EXPECT_EQ(json["memory.stat"]["file"], 65536);
  // In the file's order (memcg_stat_format() starts anon, file).
  EXPECT_EQ(nlohmann::ordered_json::parse(Ok({"--json", "stat", "/stat"}))
                ["memory.stat"].begin().key(),
            "anon");
}

TEST_F(CgacctctlTest, EventsRefusalsAndNotFound) {
  Ok({"create", "/small", "--max=64K"});
  // 64 pages into a 16-page group: RESOURCE_EXHAUSTED, "refused" (4).
  ExpectOneLineError(Run({"charge", "/small", "64", "anon"}), 4,
                     "RESOURCE_EXHAUSTED");
  const std::string events = Ok({"events", "/small"});
  const std::vector<std::string> lines = Lines(events);
  ASSERT_EQ(lines.size(), 7u) << events;
  const char* const kNames[] = {"low",           "high",     "max",
                                "oom",           "oom_kill", "oom_group_kill",
                                "sock_throttled"};
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_THAT(lines[i], StartsWith(absl::StrCat(kNames[i], " "))) << events;
  }
  EXPECT_NE(lines[2], "max 0") << events;
  EXPECT_EQ(events, Ok({"cat", "/small", "memory.events"}));
  EXPECT_EQ(Ok({"events", "/small", "--local"}),
            Ok({"cat", "/small", "memory.events.local"}));
  // ALREADY_EXISTS is refused too; NOT_FOUND is 3.
  ExpectOneLineError(Run({"create", "/small"}), 4, "ALREADY_EXISTS");
  ExpectOneLineError(Run({"cat", "/nope", "memory.current"}), 3, "NOT_FOUND");
  ExpectOneLineError(Run({"events", "/nope"}), 3, "NOT_FOUND");
  ExpectOneLineError(Run({"tree", "/nope"}), 3, "NOT_FOUND");
  // A bad path is the server's INVALID_ARGUMENT: refused.
  ExpectOneLineError(Run({"create", "no-slash"}), 4, "INVALID_ARGUMENT");
}

// A plaintext loopback server with --tokens_file (as the README's tour
// allows): --token_file without --tls_ca is sent over a local connection.
// Before, it was read only with TLS, and the call failed UNAUTHENTICATED.
TEST(CgacctctlTokenTest, ATokenReachesAPlaintextLoopbackServer) {
  char dir_template[] = "/tmp/cgacctctl_token_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string tokens = dir + "/tokens";
  const std::string token = dir + "/ops.token";
  {
    std::ofstream(tokens) << "ops 0123456789abcdef0123456789abcdef\n";
    std::ofstream(token) << "0123456789abcdef0123456789abcdef\n";
  }
  test_util::Daemon daemon({"--listen=127.0.0.1:0", "--metrics_listen=",
                            "--cpus=2", "--tokens_file=" + tokens});
  const std::string line = daemon.ReadStdoutLine(kTimeout);
  static const std::regex kPort(R"(listening on 127\.0\.0\.1:(\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, kPort)) << line;
  const std::string target = absl::StrCat("--target=127.0.0.1:", m[1].str());
  {
    Ctl ctl({target, "--token_file=" + token, "create", "/with-token"});
    EXPECT_EQ(ctl.Wait(), 0) << ctl.err;
    EXPECT_THAT(ctl.out, HasSubstr("path /with-token"));
  }
  {
    Ctl ctl({target, "create", "/without"});
    EXPECT_EQ(ctl.Wait(), 4) << ctl.err;
    EXPECT_THAT(ctl.err, HasSubstr("UNAUTHENTICATED"));
  }
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.WaitExit(kTimeout), 0);
  std::remove(tokens.c_str());
  std::remove(token.c_str());
  rmdir(dir.c_str());
}

// A refused connection fails at once, not after --connect_timeout (it
// took the whole 3 s: gRPC retries through its reconnect backoff).
TEST_F(CgacctctlTest, UnreachableServerIsUnavailable) {
  const auto start = std::chrono::steady_clock::now();
  Ctl ctl({"--target=127.0.0.1:1", "--connect_timeout=10s", "cat", "/",
           "memory.current"});
  EXPECT_EQ(ctl.Wait(), 5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_THAT(ctl.err, StartsWith("cgacctctl: cannot connect"));
  EXPECT_EQ(std::count(ctl.err.begin(), ctl.err.end(), '\n'), 1);
}

TEST_F(CgacctctlTest, ReclaimAllOrEagain) {
  Ok({"create", "/reclaim"});
  Ok({"charge", "/reclaim", "1024", "file", "--cpu=0"});  // 4 MiB of cache
  EXPECT_EQ(Ok({"reclaim", "/reclaim", "1M"}), "");  // silent, as the write
  const uint64_t left = std::stoull(Ok({"cat", "/reclaim", "memory.current"}));
  EXPECT_LE(left, 3u << 20);
  // ANON is never reclaimed (no swap): the kernel's write returns EAGAIN.
  Ok({"create", "/reclaim-anon"});
  Ok({"charge", "/reclaim-anon", "1024", "anon"});
  ExpectOneLineError(Run({"reclaim", "/reclaim-anon", "1M"}), 5, "EAGAIN");
  const Json json =
      Json::parse(Ok({"--json", "reclaim", "/reclaim", "0x1000"}));
  EXPECT_EQ(json["path"], "/reclaim");
  EXPECT_TRUE(json["reclaimed_bytes"].is_number_unsigned()) << json;
}

TEST_F(CgacctctlTest, TreeLikeSystemdCgls) {
  for (const char* p : {"/t", "/t/b", "/t/a", "/t/a/x", "/t/a-c"}) {
    Ok({"create", p});
  }
  Ok({"set", "/t/a", "memory.max=1M"});
  EXPECT_EQ(Ok({"tree", "/t"}),
            "/t  current=0 max=max\n"
            "\u251c\u2500a  current=0 max=1048576\n"
            "\u2502 \u2514\u2500x  current=0 max=max\n"
            "\u251c\u2500a-c  current=0 max=max\n"
            "\u2514\u2500b  current=0 max=max\n");
  const Json json = Json::parse(Ok({"--json", "tree", "/t"}));
  EXPECT_EQ(json["path"], "/t");
  ASSERT_EQ(json["children"].size(), 3u);
  EXPECT_EQ(json["children"][0]["path"], "/t/a");
  EXPECT_EQ(json["children"][0]["memory.max"], 1048576);
  EXPECT_EQ(json["children"][0]["children"][0]["path"], "/t/a/x");
}

TEST_F(CgacctctlTest, TopSortsByCurrentAndRefreshes) {
  for (const char* p : {"/top", "/top/small", "/top/big", "/top/none"}) {
    Ok({"create", p});
  }
  Ok({"charge", "/top/big", "1000", "anon"});
  Ok({"charge", "/top/small", "100", "anon"});
  const Result r = Run({"top", "/top", "-n", "2", "--delay=100ms"});
  ASSERT_EQ(r.exit, 0) << r.err;
  const std::vector<std::string> frames =
      absl::StrSplit(r.out, "\n\n");  // not a terminal: frames in sequence
  ASSERT_EQ(frames.size(), 2u) << r.out;
  for (const std::string& frame : frames) {
    const std::vector<std::string> lines = Lines(frame);
    ASSERT_EQ(lines.size(), 5u) << frame;
    EXPECT_THAT(lines[0], StartsWith("Control Group"));
    EXPECT_THAT(lines[1], StartsWith("/top "));
    EXPECT_THAT(lines[2], StartsWith("/top/big "));
    EXPECT_THAT(lines[3], StartsWith("/top/small "));
    EXPECT_THAT(lines[4], StartsWith("/top/none "));
  }
  const Result json = Run({"--json", "top", "/top", "--iterations=1"});
  ASSERT_EQ(json.exit, 0) << json.err;
  const Json parsed = Json::parse(json.out);
  EXPECT_EQ(parsed["groups"][1]["path"], "/top/big");
  EXPECT_GE(parsed["groups"][1]["memory.current"].get<uint64_t>(),
            1000u * 4096);
}

// top at a terminal ends on q, and gives the terminal its settings back
// (issue 26, item 7: top ignored q, as systemd-cgtop does not).
TEST_F(CgacctctlTest, TopAtATerminalQuitsOnQ) {
  Ok({"create", "/topq"});
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string slave_name = ptsname(master);
  const int slave = open(slave_name.c_str(), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  termios before{};
  ASSERT_EQ(tcgetattr(slave, &before), 0);
  ASSERT_TRUE(before.c_lflag & ICANON);
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(slave, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    execl(CGACCTCTL_PATH, CGACCTCTL_PATH, target_->c_str(), "top", "/topq",
          "--delay=30s", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  // The first frame, then q while it waits its 30 s.
  std::string frame;
  char buf[4096];
  while (frame.find("/topq") == std::string::npos) {
    pollfd p{out[0], POLLIN, 0};
    ASSERT_GT(poll(&p, 1, 10000), 0) << "no first frame: " << frame;
    const ssize_t n = read(out[0], buf, sizeof(buf));
    ASSERT_GT(n, 0) << frame;
    frame.append(buf, static_cast<size_t>(n));
  }
  termios during{};
  ASSERT_EQ(tcgetattr(slave, &during), 0);
  EXPECT_FALSE(during.c_lflag & ICANON) << "keys are read one at a time";
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(write(master, "q", 1), 1);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ADD_FAILURE() << "top did not end on q";
  } else {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  termios after{};
  ASSERT_EQ(tcgetattr(slave, &after), 0);
  EXPECT_TRUE(after.c_lflag & ICANON) << "the terminal's settings came back";
  EXPECT_TRUE(after.c_lflag & ECHO);
  close(out[0]);
  close(slave);
  close(master);
}

TEST_F(CgacctctlTest, EventsWatchPrintsEachUpdateAndEndsOnDelete) {
  Ok({"create", "/watch", "--max=64K"});
  Ctl watch({*target_, "--json", "events", "/watch", "--watch", "-n", "2"});
  // The counts on subscribe first.
  const Json first = Json::parse(watch.ReadStdoutLine(kTimeout));
  EXPECT_EQ(first["path"], "/watch");
  EXPECT_EQ(first["memory.events"]["max"], 0);
  // A refused charge raises memory.events max: the second update.
  ExpectOneLineError(Run({"charge", "/watch", "64", "anon"}), 4,
                     "RESOURCE_EXHAUSTED");
  EXPECT_EQ(watch.Wait(), 0) << watch.err;
  const Json second = Json::parse(Lines(watch.out).at(0));
  EXPECT_GT(second["memory.events"]["max"].get<uint64_t>(), 0u);

  // Text: the file per update; deleting the group ends the watch (3).
  Ctl text({*target_, "events", "/watch", "--watch"});
  const std::string low = text.ReadStdoutLine(kTimeout);
  EXPECT_EQ(low, "low 0");
  Ok({"delete", "/watch"});
  EXPECT_EQ(text.Wait(), 3) << text.err;
  EXPECT_THAT(text.err, HasSubstr("deleted"));
}

// memory.peak through an open file (issue 25): `peak PATH` writes
// memory.peak (its own watermark, starting at the current usage) and reads
// it back every --delay; the group-wide memory.peak stays what it was.
TEST_F(CgacctctlTest, PeakWritesMemoryPeakThenReadsItBack) {
  Ok({"create", "/peak"});
  Ok({"charge", "/peak", "256", "anon"});  // one batch of exactly 256
  Ok({"uncharge", "/peak", "200", "anon"});
  EXPECT_EQ(Ok({"cat", "/peak", "memory.peak"}), "1048576\n");  // 256 pages
  // Usage is 56 pages: the new watermark starts there, and nothing charged
  // since, so each read says 56 pages.
  EXPECT_EQ(Ok({"peak", "/peak", "-n", "2", "--delay=20ms"}),
            "229376\n229376\n");
  EXPECT_EQ(Ok({"cat", "/peak", "memory.peak"}), "1048576\n");
  // --json: one object per line, the file's name for the value.
  const std::vector<std::string> lines =
      Lines(Ok({"--json", "peak", "/peak", "-n", "1", "--delay=10ms"}));
  ASSERT_EQ(lines.size(), 1u);
  const Json json = Json::parse(lines[0]);
  EXPECT_EQ(json["path"], "/peak");
  EXPECT_EQ(json["memory.peak"], 229376);
  EXPECT_GT(json["watermark_id"].get<uint64_t>(), 0u);
  // A missing group is NOT_FOUND (3); PATH is required.
  ExpectOneLineError(Run({"peak", "/peak/nope", "-n", "1", "--delay=1ms"}), 3,
                     "NOT_FOUND");
  ExpectUsageError(Run({"peak"}), "wrong number of arguments");
}

// memory.oom.group is written as the kernel's file is (0 or 1) and read
// back by cat (and stat --json, with the limits).
TEST_F(CgacctctlTest, OomGroupIsSetAndCat) {
  Ok({"create", "/oomg"});
  EXPECT_EQ(Ok({"cat", "/oomg", "memory.oom.group"}), "0\n");
  const std::string set = Ok({"set", "/oomg", "memory.oom.group=1"});
  EXPECT_THAT(set, HasSubstr("memory.oom.group 1\n"));
  EXPECT_EQ(Ok({"cat", "/oomg", "memory.oom.group", "memory.max"}),
            "1\nmax\n");
  EXPECT_EQ(Json::parse(Ok({"--json", "cat", "/oomg", "memory.oom.group"}))
                ["memory.oom.group"],
            1);
  EXPECT_EQ(Json::parse(Ok({"--json", "stat", "/oomg"}))["memory.oom.group"], 1);
  Ok({"set", "/oomg", "memory.max=1M"});  // other limits leave it alone
  EXPECT_EQ(Ok({"cat", "/oomg", "memory.oom.group"}), "1\n");
  Ok({"set", "/oomg", "memory.oom.group=0"});
  EXPECT_EQ(Ok({"cat", "/oomg", "memory.oom.group"}), "0\n");
  ExpectUsageError(Run({"set", "/oomg", "memory.oom.group=2"}),
                   "memory.oom.group must be 0 or 1");
  ExpectOneLineError(Run({"set", "/", "memory.oom.group=1"}), 4,
                     "INVALID_ARGUMENT");
}

// info shows the engine's opt-in additions (off: the kernel's defaults),
// the eviction seed in use, memory_localevents and the dying groups.
// health: the standard grpc.health.v1 Check, for a container HEALTHCHECK
// or a script waiting for the daemon (issue 26, item 11: the image had no
// health check, and nothing in it could make one).
TEST_F(CgacctctlTest, HealthIsTheStandardCheckExit0WhenServing) {
  EXPECT_EQ(Ok({"health"}), "SERVING\n");
  EXPECT_EQ(Ok({"health", "cgacct.v1.Accounting"}), "SERVING\n");
  const Json json = Json::parse(Ok({"--json", "health"}));
  EXPECT_EQ(json["status"], "SERVING");
  EXPECT_EQ(json["service"], "");
  // A service the server does not serve: NOT_FOUND, exit 3.
  ExpectOneLineError(Run({"health", "no.such.Service"}), 3, "NOT_FOUND");
  ExpectUsageError(Run({"health", "a", "b"}), "health");
}

// charge and uncharge take a size with a unit as bytes, as set and reclaim
// do, rounded up to whole pages; a refusal at memory.max says the bytes
// too (issue 26, item 7: pages here, bytes there, and a refusal in pages).
TEST_F(CgacctctlTest, ChargeTakesASizeAndARefusalSaysBytes) {
  Ok({"create", "/sized", "--max=64K"});
  EXPECT_EQ(Ok({"charge", "/sized", "8K", "anon"}),
            "nr_pages 2\nthrottle_us 0\n");
  EXPECT_EQ(Ok({"charge", "/sized", "10K", "file"}),
            "nr_pages 3\nthrottle_us 0\n");  // rounded up
  EXPECT_EQ(Ok({"cat", "/sized", "memory.current"}), "20480\n");
  EXPECT_EQ(Ok({"uncharge", "/sized", "12K", "file"}), "nr_pages 3\n");
  const Result refused = Run({"charge", "/sized", "1M", "anon"});
  ExpectOneLineError(refused, 4, "RESOURCE_EXHAUSTED");
  EXPECT_THAT(refused.err, HasSubstr("cannot charge 256 pages (1048576 bytes)"));
  EXPECT_THAT(refused.err, HasSubstr("memory.current 8192 of memory.max 65536 bytes"));
  ExpectUsageError(Run({"charge", "/sized", "8MiB", "anon"}), "SIZE must be");
}

TEST_F(CgacctctlTest, InfoShowsTheAdditionsAndDyingGroups) {
  const std::string info = Ok({"info"});
  for (const char* line :
       {"\nstock_pool_buckets 0\n", "\nstock_victim_sets 0\n",
        "\nuncharge_refills_stock 0\n", "\nmemory_localevents 0\n",
        "\nnr_dying_groups "}) {
    EXPECT_THAT(info, HasSubstr(line));
  }
  EXPECT_TRUE(std::regex_search(info, std::regex("\nstock_eviction_seed [1-9]")))
      << info;
  const Json json = Json::parse(Ok({"--json", "info"}));
  EXPECT_GT(json["stock_eviction_seed"].get<uint64_t>(), 0u);
}

TEST_F(CgacctctlTest, JsonOnInfoAndLs) {
  const Json info = Json::parse(Ok({"--json", "info"}));
  EXPECT_EQ(info["nr_cpus"], 2);
  Ok({"create", "/ls"});
  Ok({"create", "/ls/one"});
  EXPECT_EQ(Ok({"ls", "/ls"}), "/ls/one\n");
  EXPECT_EQ(Json::parse(Ok({"--json", "ls", "/ls"})), Json::array({"/ls/one"}));
}

// Every value in `json` (recursively) as "KEY.PATH=value" lines, for the
// shape checks below.
void Leaves(const Json& json, const std::string& at,
            std::vector<std::pair<std::string, Json>>* out) {
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) {
      Leaves(value, at.empty() ? key : at + "/" + key, out);
    }
  } else if (json.is_array()) {
    for (size_t i = 0; i < json.size(); ++i) {
      Leaves(json[i], absl::StrCat(at, "/", i), out);
    }
  } else {
    out->emplace_back(at, json);
  }
}

// Issue 26, item 5: every command's --json has one shape. cgroup file names
// for what a file holds, numbers as numbers (never protobuf's strings for
// 64-bit ones), "max" for an unlimited limit and nowhere else, paths as
// text; `events --local` prints memory.events.local (it printed both).
TEST_F(CgacctctlTest, EveryJsonOutputHasOneShape) {
  const std::vector<std::vector<std::string>> commands = {
      {"create", "/shape", "--max=1M"},
      {"set", "/shape", "memory.high=512K"},
      {"charge", "/shape", "8", "file"},
      {"uncharge", "/shape", "4", "file"},
      {"charge", "/shape", "64K", "anon"},
      {"reclaim", "/shape", "4K"},
      {"stat", "/shape"},
      {"cat", "/shape", "memory.current", "memory.max", "memory.low",
       "memory.events"},
      {"events", "/shape"},
      {"events", "/shape", "--local"},
      {"tree", "/shape"},
      {"top", "/shape", "--iterations=1"},
      {"info"},
      {"health"},
      {"ls", "/"},
      {"cluster"},
  };
  std::map<std::string, Json> outputs;
  for (const std::vector<std::string>& command : commands) {
    std::vector<std::string> args = {"--json"};
    args.insert(args.end(), command.begin(), command.end());
    const std::string what = absl::StrJoin(command, " ");
    const std::string out = Ok(args);
    ASSERT_TRUE(Json::accept(out)) << what << ": " << out;
    const Json json = Json::parse(out);
    outputs[what] = json;
    std::vector<std::pair<std::string, Json>> leaves;
    Leaves(json, "", &leaves);
    for (const auto& [key, value] : leaves) {
      const std::string name = key.substr(key.rfind('/') + 1);
      // No camelCase (protobuf's JSON names) anywhere.
      EXPECT_TRUE(std::regex_match(name, std::regex(R"([a-z0-9_.]+)")))
          << what << ": " << key;
      if (!value.is_string()) continue;
      const std::string text = value.get<std::string>();
      EXPECT_FALSE(std::regex_match(text, std::regex(R"(-?\d+)")))
          << what << ": " << key << " is a number as a string: " << text;
      if (text == "max") {
        EXPECT_TRUE(std::regex_match(
            name, std::regex(R"(memory\.(max|high|min|low))")))
            << what << ": " << key;
      }
    }
  }
  const Json& created = outputs["create /shape --max=1M"];
  EXPECT_EQ(created["path"], "/shape");
  EXPECT_EQ(created["memory.max"], 1048576);
  EXPECT_EQ(created["memory.high"], "max");
  EXPECT_EQ(created["memory.oom.group"], 0);
  EXPECT_EQ(outputs["set /shape memory.high=512K"]["memory.high"], 524288);
  EXPECT_EQ(outputs["charge /shape 8 file"]["nr_pages"], 8);
  EXPECT_EQ(outputs["charge /shape 64K anon"]["nr_pages"], 16);
  EXPECT_EQ(outputs["uncharge /shape 4 file"]["path"], "/shape");
  const Json& stat = outputs["stat /shape"];
  const Json& cat =
      outputs["cat /shape memory.current memory.max memory.low memory.events"];
  for (const char* file :
       {"memory.current", "memory.max", "memory.low", "memory.events"}) {
    EXPECT_EQ(stat[file], cat[file]) << file;  // one shape for one file
  }
  EXPECT_EQ(stat["memory.low"], 0);
  EXPECT_TRUE(stat["memory.stat"]["anon"].is_number_unsigned());
  EXPECT_EQ(outputs["events /shape"]["memory.events"], stat["memory.events"]);
  EXPECT_FALSE(outputs["events /shape"].contains("memory.events.local"));
  EXPECT_EQ(outputs["events /shape --local"]["memory.events.local"],
            stat["memory.events.local"]);
  EXPECT_FALSE(outputs["events /shape --local"].contains("memory.events"));
  EXPECT_EQ(outputs["tree /shape"]["memory.max"], 1048576);
  EXPECT_EQ(outputs["top /shape --iterations=1"]["groups"][0]["memory.high"],
            524288);
  EXPECT_TRUE(outputs["info"]["page_size_bytes"].is_number_unsigned());
  EXPECT_EQ(outputs["info"].contains("cluster"), false);  // single node
  EXPECT_EQ(outputs["cluster"]["cluster_mode"], false);
}

}  // namespace
}  // namespace cgacct
