#include "client/metrics_scrape.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/cli_util.h"

namespace cgacct::client {
namespace {

// Closes a file descriptor on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

bool IsLoopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

// Milliseconds left until `deadline`, for poll(); at least 0.
int PollTimeoutMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60'000));
}

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitFd(int fd, short events, absl::Time deadline,
                    absl::string_view what) {
  while (true) {
    pollfd pfd{fd, events, 0};
    const int n = poll(&pfd, 1, PollTimeoutMs(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) {
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat(what, ": timed out"));
      }
      continue;
    }
    if (errno != EINTR) return ErrnoError(what, errno);
  }
}

// Connects a non-blocking TCP socket to a loopback `host_port`.
absl::StatusOr<int> ConnectLoopback(absl::string_view host_port,
                                    absl::Time deadline) {
  absl::StatusOr<HostPort> hp = SplitHostPort(host_port);
  if (!hp.ok()) return hp.status();
  // Numeric hosts only (plus "localhost"), so nothing ever goes to DNS.
  const std::string host = hp->host == "localhost" ? "127.0.0.1" : hp->host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string port = absl::StrCat(hp->port);
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &result) != 0 ||
      result == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics target \"", host_port,
                     "\": host must be \"localhost\" or a loopback address"));
  }
  sockaddr_storage addr{};
  const socklen_t addr_len = result->ai_addrlen;
  std::memcpy(&addr, result->ai_addr, addr_len);
  const int family = result->ai_family;
  freeaddrinfo(result);
  if (!IsLoopback(reinterpret_cast<const sockaddr*>(&addr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics target \"", host_port,
                     "\" is not a loopback address; only loopback is scraped"));
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), addr_len) != 0 &&
      errno != EINPROGRESS) {
    const int err = errno;
    close(fd);
    return ErrnoError(absl::StrCat("connect to ", host_port), err);
  }
  absl::Status ready =
      WaitFd(fd, POLLOUT, deadline, absl::StrCat("connect to ", host_port));
  int err = 0;
  socklen_t err_len = sizeof(err);
  if (ready.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 &&
      err != 0) {
    ready = ErrnoError(absl::StrCat("connect to ", host_port), err);
  }
  if (!ready.ok()) {
    close(fd);
    return ready;
  }
  return fd;
}

// Decodes a chunked transfer-encoded body (RFC 9112 §7.1); trailers ignored.
absl::StatusOr<std::string> DecodeChunked(absl::string_view body) {
  std::string out;
  while (true) {
    const size_t eol = body.find("\r\n");
    if (eol == absl::string_view::npos) {
      return absl::DataLossError("chunked body: missing chunk size line");
    }
    absl::string_view size_text = body.substr(0, eol);
    size_text = size_text.substr(0, size_text.find(';'));  // extensions
    size_text = absl::StripAsciiWhitespace(size_text);
    uint64_t size = 0;
    if (size_text.empty() || size_text.size() > 15 ||
        !absl::SimpleHexAtoi(size_text, &size)) {
      return absl::DataLossError("chunked body: bad chunk size");
    }
    body.remove_prefix(eol + 2);
    if (size == 0) return out;
    if (body.size() < size + 2 || body.substr(size, 2) != "\r\n") {
      return absl::DataLossError("chunked body: truncated chunk");
    }
    out.append(body.data(), size);
    body.remove_prefix(size + 2);
  }
}

// Splits a raw HTTP/1.x response into its body, checking the status.
// `response` is everything read until the server closed the connection.
absl::StatusOr<std::string> ParseHttpResponse(absl::string_view response) {
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == absl::string_view::npos) {
    return absl::DataLossError("HTTP response without a complete header");
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(response.substr(0, header_end), "\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status_parts =
      absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  int status = 0;
  if (status_parts.size() < 2 || !absl::StartsWith(status_parts[0], "HTTP/") ||
      !absl::SimpleAtoi(status_parts[1], &status)) {
    return absl::DataLossError(
        absl::StrCat("malformed HTTP status line \"", lines[0], "\""));
  }
  if (status != 200) {
    return absl::FailedPreconditionError(
        absl::StrCat("HTTP status \"", lines[0], "\""));
  }
  bool chunked = false;
  std::optional<uint64_t> content_length;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const absl::string_view value =
        absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "transfer-encoding") {
      chunked = absl::StrContains(absl::AsciiStrToLower(value), "chunked");
    } else if (name == "content-length") {
      uint64_t length = 0;
      if (!absl::SimpleAtoi(value, &length)) {
        return absl::DataLossError("malformed Content-Length");
      }
      content_length = length;
    }
  }
  absl::string_view body = response.substr(header_end + 4);
  if (chunked) return DecodeChunked(body);
  if (content_length.has_value()) {
    if (body.size() < *content_length) {
      return absl::DataLossError(
          absl::StrCat("HTTP body truncated: ", body.size(), " of ",
                       *content_length, " bytes"));
    }
    return std::string(body.substr(0, *content_length));
  }
  return std::string(body);
}

// Parses a sample value: a float, or NaN / +Inf / -Inf as the format writes.
bool ParseSampleValue(absl::string_view text, double* value) {
  if (text == "NaN") {
    *value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (text == "+Inf" || text == "Inf") {
    *value = std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == "-Inf") {
    *value = -std::numeric_limits<double>::infinity();
    return true;
  }
  return absl::SimpleAtod(text, value);
}

bool IsMetricNameChar(char c, bool first) {
  return absl::ascii_isalpha(c) || c == '_' || c == ':' ||
         (!first && absl::ascii_isdigit(c));
}

void SkipBlanks(absl::string_view line, size_t* i) {
  while (*i < line.size() && (line[*i] == ' ' || line[*i] == '\t')) ++*i;
}

// Parses one non-comment line; returns a reason on failure.
std::optional<std::string> ParseSampleLine(absl::string_view line,
                                           MetricSample* sample) {
  size_t i = 0;
  while (i < line.size() && IsMetricNameChar(line[i], i == 0)) ++i;
  if (i == 0) return "expected a metric name";
  sample->name = std::string(line.substr(0, i));
  SkipBlanks(line, &i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      SkipBlanks(line, &i);
      if (i < line.size() && line[i] == '}') break;
      const size_t name_start = i;
      while (i < line.size() && IsMetricNameChar(line[i], i == name_start) &&
             line[i] != ':') {
        ++i;
      }
      if (i == name_start) return "expected a label name";
      std::string label(line.substr(name_start, i - name_start));
      SkipBlanks(line, &i);
      if (i >= line.size() || line[i] != '=') return "expected '='";
      ++i;
      SkipBlanks(line, &i);
      if (i >= line.size() || line[i] != '"') return "expected '\"'";
      ++i;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && i < line.size()) {
          const char e = line[i++];
          value.push_back(e == 'n' ? '\n' : e);  // \\, \" and \n
        } else {
          value.push_back(c);
        }
      }
      if (!closed) return "unterminated label value";
      sample->labels.emplace_back(std::move(label), std::move(value));
      SkipBlanks(line, &i);
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') break;
      return "expected ',' or '}'";
    }
    ++i;  // '}'
    SkipBlanks(line, &i);
  }
  size_t end = i;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  if (end == i) return "missing value";
  if (!ParseSampleValue(line.substr(i, end - i), &sample->value)) {
    return absl::StrCat("bad value \"", line.substr(i, end - i), "\"");
  }
  // An optional timestamp may follow; it is not needed here.
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::string> HttpGet(absl::string_view host_port,
                                    absl::string_view path,
                                    absl::Duration timeout,
                                    size_t max_body_bytes) {
  if (path.empty() || path.front() != '/' ||
      path.find_first_of(" \r\n") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad HTTP path \"", path, "\""));
  }
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> fd_or = ConnectLoopback(host_port, deadline);
  if (!fd_or.ok()) return fd_or.status();
  ScopedFd fd(*fd_or);

  // HTTP/1.0 with Connection: close: the server ends the body by closing, and
  // there is no keep-alive state to manage. No Accept-Encoding: plain text.
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port,
                   "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    absl::Status ready = WaitFd(fd.get(), POLLOUT, deadline, "HTTP send");
    if (!ready.ok()) return ready;
    const ssize_t n = send(fd.get(), request.data() + sent,
                           request.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("HTTP send", errno);
    }
    sent += static_cast<size_t>(n);
  }

  std::string response;
  char buf[16384];
  // Headers are small; allow them on top of the body limit.
  const size_t max_response_bytes = max_body_bytes + 64 * 1024;
  while (true) {
    absl::Status ready = WaitFd(fd.get(), POLLIN, deadline, "HTTP receive");
    if (!ready.ok()) return ready;
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("HTTP receive", errno);
    }
    if (n == 0) break;  // server closed: the response is complete
    response.append(buf, static_cast<size_t>(n));
    if (response.size() > max_response_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "HTTP response larger than ", max_response_bytes, " bytes"));
    }
  }
  absl::StatusOr<std::string> body = ParseHttpResponse(response);
  if (body.ok() && body->size() > max_body_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HTTP body larger than ", max_body_bytes, " bytes"));
  }
  return body;
}

absl::StatusOr<std::vector<MetricSample>> ParseMetricsText(
    absl::string_view text) {
  std::vector<MetricSample> samples;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);  // also drops a trailing '\r'
    if (line.empty() || line.front() == '#') continue;
    MetricSample sample;
    if (std::optional<std::string> error = ParseSampleLine(line, &sample)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metrics text line ", line_number, ": ", *error, ": \"", line, "\""));
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::optional<double> MaxSampleValue(const std::vector<MetricSample>& samples,
                                     absl::string_view name) {
  std::optional<double> max;
  for (const MetricSample& s : samples) {
    if (s.name != name || std::isnan(s.value)) continue;
    if (!max.has_value() || s.value > *max) max = s.value;
  }
  return max;
}

std::optional<double> SumSampleValues(const std::vector<MetricSample>& samples,
                                      absl::string_view name) {
  std::optional<double> sum;
  for (const MetricSample& s : samples) {
    if (s.name != name) continue;
    sum = sum.value_or(0) + s.value;
  }
  return sum;
}

}  // namespace cgacct::client
