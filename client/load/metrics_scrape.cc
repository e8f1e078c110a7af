#include "client/load/metrics_scrape.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/cli/cli_util.h"

namespace cgacct::load {
namespace {

bool IsLoopback(absl::string_view host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

// libcurl's global state, set up once (curl_global_init() is not
// thread-safe in every libcurl build; call_once makes it so).
void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Body {
  std::string data;
  size_t max_bytes = 0;
  bool too_large = false;
};

size_t AppendBody(char* ptr, size_t size, size_t nmemb, void* userdata) {
  Body* body = static_cast<Body*>(userdata);
  const size_t n = size * nmemb;
  if (body->data.size() + n > body->max_bytes) {
    body->too_large = true;
    return 0;  // aborts the transfer with CURLE_WRITE_ERROR
  }
  body->data.append(ptr, n);
  return n;
}

// The status class of a failed transfer (see HttpGet's contract).
absl::Status CurlError(CURLcode code, const char* detail,
                       absl::string_view url) {
  const std::string message = absl::StrCat(
      "GET ", url, ": ", detail[0] != '\0' ? detail : curl_easy_strerror(code));
  switch (code) {
    case CURLE_PARTIAL_FILE:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_RECV_ERROR:
      // A body cut short or malformed HTTP; RECV_ERROR is a reset while
      // reading, i.e. a lost body.
      return code == CURLE_RECV_ERROR ? absl::UnavailableError(message)
                                      : absl::DataLossError(message);
    case CURLE_URL_MALFORMAT:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnavailableError(message);
  }
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
  absl::StatusOr<cli::HostPort> hp = cli::SplitHostPort(host_port);
  if (!hp.ok()) return hp.status();
  // Numeric loopback hosts only (plus "localhost"), so nothing ever leaves
  // the machine or goes to DNS.
  if (!IsLoopback(hp->host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics target \"", host_port,
                     "\": host must be \"localhost\" or a loopback address"));
  }
  const std::string host = hp->host == "localhost" ? "127.0.0.1" : hp->host;
  const std::string url =
      absl::StrCat("http://", cli::JoinHostPort(host, hp->port), path);

  InitCurlOnce();
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(),
                                              curl_easy_cleanup);
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  Body body;
  body.max_bytes = max_body_bytes;
  char error[CURL_ERROR_SIZE] = {0};
  CURL* h = curl.get();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");  // never through a proxy
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // thread-safe timeouts
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(
                       1, absl::ToInt64Milliseconds(timeout))));
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE,
                   static_cast<curl_off_t>(max_body_bytes));
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(
      curl_slist_append(nullptr, "Accept: text/plain"), curl_slist_free_all);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  const CURLcode code = curl_easy_perform(h);
  if (body.too_large || code == CURLE_FILESIZE_EXCEEDED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HTTP body larger than ", max_body_bytes, " bytes"));
  }
  if (code != CURLE_OK) return CurlError(code, error, url);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", url, ": HTTP status ", status));
  }
  return std::move(body.data);
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

absl::StatusOr<std::vector<MetricSample>> ScrapeMetrics(
    absl::string_view host_port, absl::Duration timeout) {
  absl::StatusOr<std::string> body = HttpGet(host_port, "/metrics", timeout);
  if (!body.ok()) return body.status();
  return ParseMetricsText(*body);
}

}  // namespace cgacct::load
