// A minimal blocking HTTP/1.0 GET for tests that scrape /metrics.
#ifndef CGACCT_TESTS_SERVER_HTTP_GET_H_
#define CGACCT_TESTS_SERVER_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace cgacct {
namespace test_util {

// GET http://127.0.0.1:port/path; returns the whole response (status line,
// headers and body), or "" if the connection fails. `headers`: extra header
// lines, each ending in "\r\n".
inline std::string HttpGet(int port, const std::string& path,
                           const std::string& headers = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
  if (write(fd, request.data(), request.size()) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  return response;
}

}  // namespace test_util
}  // namespace cgacct

#endif  // CGACCT_TESTS_SERVER_HTTP_GET_H_
