// A blocking HTTP/1.0 GET for tests that scrape /metrics, through libcurl
// (the same library as the clients' scraper, client/metrics_scrape.h).
#ifndef CGACCT_TESTS_SERVER_HTTP_GET_H_
#define CGACCT_TESTS_SERVER_HTTP_GET_H_

#include <curl/curl.h>

#include <memory>
#include <string>

namespace cgacct {
namespace test_util {

// GET http://127.0.0.1:port/path over HTTP/1.0 (the body then ends at the
// close or its Content-Length; no chunking); returns the whole response as
// received (status line, headers and body, not decoded: a gzip body stays
// gzip), or "" if nothing was received (connection refused, ...). A body cut
// short is returned as far as it came, so a test comparing it with its
// Content-Length sees the loss. `headers`: extra header lines, each ending in
// "\r\n". Timeout 30 s. Thread-safe.
inline std::string HttpGet(int port, const std::string& path,
                           const std::string& headers = "") {
  static const bool initialized = [] {
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  }();
  if (!initialized) return "";
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(),
                                              curl_easy_cleanup);
  if (curl == nullptr) return "";
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> list(nullptr,
                                                          curl_slist_free_all);
  for (size_t start = 0; start < headers.size();) {
    size_t end = headers.find("\r\n", start);
    if (end == std::string::npos) end = headers.size();
    if (end > start) {
      list.reset(curl_slist_append(list.release(),
                                   headers.substr(start, end - start).c_str()));
    }
    start = end + 2;
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + path;
  std::string response;
  CURL* h = curl.get();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_0);
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(h, CURLOPT_HEADER, 1L);  // status line and headers too
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(
      h, CURLOPT_WRITEFUNCTION,
      +[](char* ptr, size_t size, size_t nmemb, void* out) -> size_t {
        static_cast<std::string*>(out)->append(ptr, size * nmemb);
        return size * nmemb;
      });
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &response);
  curl_easy_perform(h);  // errors: whatever arrived is returned
  return response;
}

}  // namespace test_util
}  // namespace cgacct

#endif  // CGACCT_TESTS_SERVER_HTTP_GET_H_
