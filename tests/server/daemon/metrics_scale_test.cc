// /metrics at scale (issue 12 item 1): the real cgacctd with 10,000 and then
// 100,000 groups, scraped by curl (a real HTTP/1.1 client) without gzip and
// with it; every body must be whole: as long as its Content-Length, every
// line a well-formed exposition line, and the last family's line present at
// its end. Also checks the per-group policy at that scale (the default
// --metrics_max_groups=10000 exports 10,000 groups and counts the rest in
// cgacct_group_series_dropped) and, on a second daemon with
// --metrics_max_groups=200000, a scrape of all 100,000 groups.
//
// Prints one "SCRAPE ..." line per case (bytes and median time of 3 scrapes)
// for tests/bench/RESULTS.md. ctest label "scale", RUN_SERIAL; ~60 s on 2
// cores (g++ RelWithDebInfo). Sanitizer builds run it at a tenth of the
// scale (kScaleDown).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "tests/server/daemon.h"

namespace cgacct {
namespace {

using test_util::Daemon;

constexpr std::chrono::seconds kTimeout(20);

// Under a sanitizer (the test command's ASan+UBSan stage runs every test)
// the same checks run at a tenth of the scale: 1,000 and 10,000 groups, cap
// 1,000. The g++ stage runs the full scale, and the figures come from it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kScaleDown = 10;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int kScaleDown = 10;
#else
constexpr int kScaleDown = 1;
#endif
#else
constexpr int kScaleDown = 1;
#endif
constexpr int kSmall = 10000 / kScaleDown;  // groups in the first phase
constexpr int kLarge = 100000 / kScaleDown;
constexpr int kCap = 10000 / kScaleDown;  // --metrics_max_groups

struct Ports {
  int port = 0;
  int metrics_port = 0;
};

Ports ParsePorts(const std::string& line) {
  static const std::regex kLine(
      R"(listening on 127\.0\.0\.1:(\d+) \(metrics on 127\.0\.0\.1:(\d+),)");
  std::smatch m;
  if (!std::regex_search(line, m, kLine)) return {};
  return {std::stoi(m[1]), std::stoi(m[2])};
}

// Creates PARENT/g<first> .. PARENT/g<last-1> with 4 client threads.
void CreateGroups(v1::Accounting::Stub* stub, const std::string& parent,
                  int first, int last) {
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = first + t; i < last; i += kThreads) {
        grpc::ClientContext context;
        v1::CreateGroupRequest request;
        request.set_path(absl::StrCat(parent, "/g", i));
        v1::Group group;
        if (!stub->CreateGroup(&context, request, &group).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
}

using test_util::ReadFile;
using test_util::RunShell;

// Checks every line of an exposition body: "# HELP"/"# TYPE" comments, or
// NAME[{LABELS}] VALUE with a valid metric name and a number (or +Inf, -Inf,
// NaN). Returns "" or the first problem.
std::string CheckExposition(const std::string& body) {
  if (body.empty() || body.back() != '\n') return "body does not end in \\n";
  size_t start = 0;
  int line_no = 0;
  while (start < body.size()) {
    const size_t end = body.find('\n', start);
    const std::string_view line(body.data() + start, end - start);
    ++line_no;
    start = end + 1;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0)
      continue;
    size_t i = 0;
    auto name_char = [](char c, bool first) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
             c == ':' || (!first && c >= '0' && c <= '9');
    };
    while (i < line.size() && name_char(line[i], i == 0)) ++i;
    if (i == 0) return absl::StrCat("line ", line_no, ": no metric name");
    if (i < line.size() && line[i] == '{') {
      const size_t close = line.rfind('}');
      if (close == std::string_view::npos || close < i)
        return absl::StrCat("line ", line_no, ": unclosed labels");
      i = close + 1;
    }
    if (i >= line.size() || line[i] != ' ')
      return absl::StrCat("line ", line_no, ": no value");
    const std::string value(line.substr(i + 1));
    if (value == "+Inf" || value == "-Inf" || value == "NaN") continue;
    char* parsed_end = nullptr;
    std::strtod(value.c_str(), &parsed_end);
    if (parsed_end == value.c_str() || *parsed_end != '\0')
      return absl::StrCat("line ", line_no, ": bad value '", value, "'");
  }
  return "";
}

int CountPrefix(const std::string& body, const std::string& prefix) {
  int n = 0;
  const std::string needle = "\n" + prefix;
  for (size_t at = body.find(needle); at != std::string::npos;
       at = body.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

struct Scrape {
  std::string body;  // decompressed
  size_t wire_bytes = 0;
  double seconds = 0;
};

// One scrape of http://127.0.0.1:PORT/metrics by curl over HTTP/1.1, with
// or without "Accept-Encoding: gzip" (the body then decompressed by gzip
// -dc). Fails the test unless the body is as long as its Content-Length.
Scrape CurlScrape(int port, bool gzip, const std::string& dir) {
  Scrape out;
  const std::string body = dir + "/body";
  const std::string headers = dir + "/headers";
  const std::string stats = dir + "/stats";
  const std::string command = absl::StrCat(
      "curl -sS --http1.1 --max-time 60 ",
      gzip ? "-H 'Accept-Encoding: gzip' " : "", "-D ", headers, " -o ", body,
      " -w '%{size_download} %{time_total}' http://127.0.0.1:", port,
      "/metrics > ", stats);
  EXPECT_EQ(RunShell(command), 0) << command;
  std::istringstream(ReadFile(stats)) >> out.wire_bytes >> out.seconds;
  const std::string head = ReadFile(headers);
  static const std::regex kLength(R"(Content-Length: (\d+))",
                                  std::regex::icase);
  std::smatch m;
  EXPECT_TRUE(std::regex_search(head, m, kLength)) << head;
  if (!m.empty()) {
    EXPECT_EQ(out.wire_bytes, std::stoul(m[1]));
  }
  EXPECT_EQ(ReadFile(body).size(), out.wire_bytes);
  if (gzip) {
    EXPECT_NE(head.find("Content-Encoding: gzip"), std::string::npos) << head;
    EXPECT_EQ(RunShell(absl::StrCat("gzip -dc < ", body, " > ", body, ".txt")),
              0);
    out.body = ReadFile(body + ".txt");
  } else {
    out.body = ReadFile(body);
  }
  return out;
}

// Three scrapes of each kind; checks each body whole and returns the plain
// body of the last one. Prints the figures.
std::string ScrapeAndCheck(int port, const std::string& what,
                           const std::string& dir) {
  std::string last;
  for (bool gzip : {false, true}) {
    std::vector<double> seconds;
    size_t wire = 0, plain = 0;
    for (int i = 0; i < 3; ++i) {
      Scrape s = CurlScrape(port, gzip, dir);
      EXPECT_EQ(CheckExposition(s.body), "") << what << " gzip=" << gzip;
      // The last family of the last collectable ends the body.
      const size_t last_line = s.body.rfind('\n', s.body.size() - 2);
      EXPECT_EQ(s.body.compare(last_line + 1, 18, "cgacct_build_info{"), 0)
          << what << ": last line "
          << s.body.substr(last_line == std::string::npos ? 0 : last_line + 1);
      seconds.push_back(s.seconds);
      wire = s.wire_bytes;
      plain = s.body.size();
      last = std::move(s.body);
    }
    std::sort(seconds.begin(), seconds.end());
    std::printf(
        "SCRAPE %s %s: %zu bytes on the wire (%zu decompressed), "
        "median %.3f s of 3 (curl time_total)\n",
        what.c_str(), gzip ? "gzip" : "plain", wire, plain, seconds[1]);
    std::fflush(stdout);
  }
  return last;
}

double Value(const std::string& body, const std::string& series) {
  const size_t at = body.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(body.substr(at + series.size() + 2));
}

TEST(MetricsScaleTest, TenAndHundredThousandGroups) {
  char dir_template[] = "/tmp/cgacct-scale-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string cap_flag = absl::StrCat("--metrics_max_groups=", kCap);
  if (kScaleDown != 1) {
    std::printf("sanitizer build: %d and %d groups, %s\n", kSmall, kLarge,
                cap_flag.c_str());
  }

  Daemon daemon({"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                 "--cpus=2", cap_flag});
  const Ports ports = ParsePorts(daemon.ReadStdoutLine(kTimeout));
  ASSERT_GT(ports.metrics_port, 0);
  auto stub = v1::Accounting::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", ports.port),
                          grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    v1::CreateGroupRequest request;
    request.set_path("/scale");
    v1::Group group;
    ASSERT_TRUE(stub->CreateGroup(&context, request, &group).ok());
  }

  // kSmall groups under /scale: with / and /scale, kSmall + 2 within the
  // default depth (3); the cap (the default, 10,000, at full scale) exports
  // kCap of them.
  const auto t0 = std::chrono::steady_clock::now();
  CreateGroups(stub.get(), "/scale", 0, kSmall);
  const auto t1 = std::chrono::steady_clock::now();
  std::printf("CREATE %d groups: %.1f s\n", kSmall,
              std::chrono::duration<double>(t1 - t0).count());
  std::string body = ScrapeAndCheck(
      ports.metrics_port, absl::StrCat(kSmall, " groups, ", cap_flag), dir);
  EXPECT_EQ(CountPrefix(body, "cgacct_group_memory_current_bytes{"), kCap);
  EXPECT_EQ(Value(body, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
            2);
  EXPECT_EQ(Value(body, "cgacct_groups"), kSmall + 2);

  CreateGroups(stub.get(), "/scale", kSmall, kLarge);
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("CREATE %d more groups: %.1f s\n", kLarge - kSmall,
              std::chrono::duration<double>(t2 - t1).count());
  body = ScrapeAndCheck(ports.metrics_port,
                        absl::StrCat(kLarge, " groups, ", cap_flag), dir);
  EXPECT_EQ(CountPrefix(body, "cgacct_group_memory_current_bytes{"), kCap);
  EXPECT_EQ(CountPrefix(body, "cgacct_group_memory_events_total{"), 6 * kCap);
  EXPECT_EQ(Value(body, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
            kLarge + 2 - kCap);
  EXPECT_EQ(Value(body, "cgacct_group_series_dropped{reason=\"depth\"}"), 0);
  EXPECT_EQ(Value(body, "cgacct_groups"), kLarge + 2);
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.WaitExit(kTimeout), 0);
  // The one-time line, once, from the first scrape that dropped.
  const std::string err = daemon.ReadStderr();
  size_t said = 0;
  for (size_t at = err.find(cap_flag); at != std::string::npos;
       at = err.find(cap_flag, at + 1)) {
    ++said;
  }
  EXPECT_EQ(said, 1u) << err;
  EXPECT_NE(
      err.find(absl::StrCat("cgacctd: /metrics: 2 of ", kSmall + 2, " groups")),
      std::string::npos)
      << err;

  // Every one of kLarge groups exported: the largest body.
  Daemon all({"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
              "--cpus=2", "--metrics_max_groups=200000"});
  const Ports all_ports = ParsePorts(all.ReadStdoutLine(kTimeout));
  ASSERT_GT(all_ports.metrics_port, 0);
  auto all_stub = v1::Accounting::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", all_ports.port),
                          grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    v1::CreateGroupRequest request;
    request.set_path("/scale");
    v1::Group group;
    ASSERT_TRUE(all_stub->CreateGroup(&context, request, &group).ok());
  }
  CreateGroups(all_stub.get(), "/scale", 0, kLarge);
  body = ScrapeAndCheck(
      all_ports.metrics_port,
      absl::StrCat(kLarge, " groups, --metrics_max_groups=200000"), dir);
  EXPECT_EQ(CountPrefix(body, "cgacct_group_memory_current_bytes{"),
            kLarge + 2);
  EXPECT_EQ(CountPrefix(body, "cgacct_group_memory_max_bytes{"), kLarge + 2);
  EXPECT_EQ(Value(body, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
            0);
  all.Signal(SIGTERM);
  EXPECT_EQ(all.WaitExit(kTimeout), 0);
  RunShell("rm -rf " + dir);
}

}  // namespace
}  // namespace cgacct
