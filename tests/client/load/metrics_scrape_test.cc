#include "client/load/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

// What a prometheus-cpp Exposer serves, trimmed.
constexpr char kExposition[] =
    R"(# HELP cgacct_rstat_flush_lock_hold_max_seconds Longest rstat flush-lock hold seen.
# TYPE cgacct_rstat_flush_lock_hold_max_seconds gauge
cgacct_rstat_flush_lock_hold_max_seconds 0.045341
# HELP cgacct_rstat_flush_lock_hold_seconds Time the rstat flush lock was held.
# TYPE cgacct_rstat_flush_lock_hold_seconds histogram
cgacct_rstat_flush_lock_hold_seconds_count{policy="per_cpu"} 120
cgacct_rstat_flush_lock_hold_seconds_sum{policy="per_cpu"} 0.0123
cgacct_rstat_flush_lock_hold_seconds_bucket{policy="per_cpu",le="1e-05"} 100
cgacct_rstat_flush_lock_hold_seconds_bucket{policy="per_cpu",le="+Inf"} 120
cgacct_charges_total{result="ok"} 1.5e+06 1712345678901
cgacct_charges_total{result="oom"} 250
cgacct_odd{path="/a\"b,c}",note="x\\y\nz" , } NaN
cgacct_inf +Inf
cgacct_neg_inf -Inf
)";

TEST(ParseMetricsTextTest, ParsesSamplesLabelsAndSpecialValues) {
  absl::StatusOr<std::vector<MetricSample>> samples =
      ParseMetricsText(kExposition);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 10u);

  const MetricSample& gauge = (*samples)[0];
  EXPECT_EQ(gauge.name, "cgacct_rstat_flush_lock_hold_max_seconds");
  EXPECT_TRUE(gauge.labels.empty());
  EXPECT_DOUBLE_EQ(gauge.value, 0.045341);

  const MetricSample& bucket = (*samples)[4];
  EXPECT_EQ(bucket.name, "cgacct_rstat_flush_lock_hold_seconds_bucket");
  ASSERT_EQ(bucket.labels.size(), 2u);
  EXPECT_EQ(bucket.labels[0].first, "policy");
  EXPECT_EQ(bucket.labels[0].second, "per_cpu");
  EXPECT_EQ(bucket.labels[1].first, "le");
  EXPECT_EQ(bucket.labels[1].second, "+Inf");
  EXPECT_DOUBLE_EQ(bucket.value, 120);

  EXPECT_DOUBLE_EQ((*samples)[5].value, 1.5e6);  // timestamp ignored

  const MetricSample& odd = (*samples)[7];
  ASSERT_EQ(odd.labels.size(), 2u);
  EXPECT_EQ(odd.labels[0].second, "/a\"b,c}");
  EXPECT_EQ(odd.labels[1].second, "x\\y\nz");
  EXPECT_TRUE(std::isnan(odd.value));
  EXPECT_TRUE(std::isinf((*samples)[8].value));
  EXPECT_GT((*samples)[8].value, 0);
  EXPECT_LT((*samples)[9].value, 0);
}

TEST(ParseMetricsTextTest, GaugeLookup) {
  absl::StatusOr<std::vector<MetricSample>> samples =
      ParseMetricsText(kExposition);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_DOUBLE_EQ(
      *MaxSampleValue(*samples, "cgacct_rstat_flush_lock_hold_max_seconds"),
      0.045341);
  // Split by a label: the largest series wins, or they add up.
  EXPECT_DOUBLE_EQ(*MaxSampleValue(*samples, "cgacct_charges_total"), 1.5e6);
  EXPECT_DOUBLE_EQ(*SumSampleValues(*samples, "cgacct_charges_total"),
                   1.5e6 + 250);
  // A prefix of a name is a different metric.
  EXPECT_FALSE(
      MaxSampleValue(*samples, "cgacct_rstat_flush_lock_hold").has_value());
  EXPECT_FALSE(SumSampleValues(*samples, "missing").has_value());
  // NaN never wins a max.
  EXPECT_FALSE(MaxSampleValue(*samples, "cgacct_odd").has_value());
}

TEST(ParseMetricsTextTest, AcceptsCrLfAndBlankLines) {
  absl::StatusOr<std::vector<MetricSample>> samples =
      ParseMetricsText("\r\n# TYPE a gauge\r\na 1\r\n\r\nb{x=\"y\"} 2\r\n");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_DOUBLE_EQ((*samples)[1].value, 2);
}

TEST(ParseMetricsTextTest, RejectsMalformedLinesWithTheLineNumber) {
  for (const char* text :
       {"ok 1\nmissing_value\n", "ok 1\nbad{x=\"y} 1\n", "ok 1\nbad{x=y} 1\n",
        "ok 1\nbad{x=\"y\" 1\n", "ok 1\n9starts_with_digit 1\n",
        "ok 1\nbad notanumber\n"}) {
    absl::StatusOr<std::vector<MetricSample>> samples = ParseMetricsText(text);
    ASSERT_FALSE(samples.ok()) << text;
    EXPECT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(samples.status().message().find("line 2"), std::string::npos)
        << samples.status();
  }
}

// A one-shot HTTP server on 127.0.0.1:<ephemeral port> that answers the first
// connection with `response` (or nothing, holding the connection open for
// `hold`) and records the request.
class OneShotHttpServer {
 public:
  explicit OneShotHttpServer(std::string response,
                             absl::Duration hold = absl::ZeroDuration())
      : response_(std::move(response)), hold_(hold) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listen_fd_, 1);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotHttpServer() {
    Join();
    close(listen_fd_);
  }

  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  // The request the server received; waits for the server to finish.
  const std::string& request() {
    Join();
    return request_;
  }

 private:
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  void Serve() {
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    if (hold_ > absl::ZeroDuration()) {
      absl::SleepFor(hold_);
    } else {
      size_t sent = 0;
      while (sent < response_.size()) {
        const ssize_t n = send(fd, response_.data() + sent,
                               response_.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
    }
    close(fd);
  }

  const std::string response_;
  const absl::Duration hold_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::string request_;
  std::thread thread_;
};

TEST(HttpGetTest, ContentLengthBody) {
  OneShotHttpServer server(
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
      "Content-Length: 5\r\n\r\nhello");
  absl::StatusOr<std::string> body =
      HttpGet(server.target(), "/metrics", absl::Seconds(5));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "hello");
  EXPECT_EQ(server.request().rfind("GET /metrics HTTP/1.1\r\n", 0), 0u)
      << server.request();
}

TEST(HttpGetTest, ChunkedBody) {
  OneShotHttpServer server(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4\r\ncgac\r\n5;ext=1\r\nct_rs\r\n0\r\n\r\n");
  absl::StatusOr<std::string> body =
      HttpGet(server.target(), "/metrics", absl::Seconds(5));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, "cgacct_rs");
}

TEST(HttpGetTest, CloseDelimitedBodyThenParse) {
  OneShotHttpServer server(
      absl::StrCat("HTTP/1.0 200 OK\r\n\r\n", kExposition));
  absl::StatusOr<std::string> body =
      HttpGet(server.target(), "/metrics", absl::Seconds(5));
  ASSERT_TRUE(body.ok()) << body.status();
  absl::StatusOr<std::vector<MetricSample>> samples = ParseMetricsText(*body);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_DOUBLE_EQ(
      *MaxSampleValue(*samples, "cgacct_rstat_flush_lock_hold_max_seconds"),
      0.045341);
}

TEST(HttpGetTest, NonOkStatusIsAnError) {
  OneShotHttpServer server(
      "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
  absl::StatusOr<std::string> body =
      HttpGet(server.target(), "/metrics", absl::Seconds(5));
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HttpGetTest, TruncatedBodyIsAnError) {
  OneShotHttpServer server("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  absl::StatusOr<std::string> body =
      HttpGet(server.target(), "/metrics", absl::Seconds(5));
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kDataLoss);
}

TEST(HttpGetTest, BodyLimit) {
  OneShotHttpServer server(
      "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789");
  absl::StatusOr<std::string> body =
      HttpGet(server.target(), "/metrics", absl::Seconds(5), /*max=*/4);
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(HttpGetTest, TimesOut) {
  OneShotHttpServer server("", /*hold=*/absl::Milliseconds(800));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> body =
      HttpGet(server.target(), "/metrics", absl::Milliseconds(200));
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(700));
}

TEST(HttpGetTest, ConnectionRefusedIsUnavailable) {
  // Bind a port, then close it, so nothing listens there.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  absl::StatusOr<std::string> body =
      HttpGet(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port)), "/metrics",
              absl::Seconds(2));
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable);
}

TEST(HttpGetTest, OnlyLoopbackTargets) {
  for (const char* target :
       {"10.0.0.1:9464", "192.168.1.1:9464", "example.com:9464",
        "[2001:db8::1]:9464", "no-port", "0.0.0.0:9464"}) {
    absl::StatusOr<std::string> body =
        HttpGet(target, "/metrics", absl::Seconds(1));
    ASSERT_FALSE(body.ok()) << target;
    EXPECT_EQ(body.status().code(), absl::StatusCode::kInvalidArgument)
        << target << ": " << body.status();
  }
  EXPECT_FALSE(HttpGet("127.0.0.1:9464", "no-slash", absl::Seconds(1)).ok());
  EXPECT_FALSE(HttpGet("127.0.0.1:9464", "/a b", absl::Seconds(1)).ok());
}

}  // namespace
}  // namespace cgacct::load
