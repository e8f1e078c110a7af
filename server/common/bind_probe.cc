#include "server/common/bind_probe.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cgacct {

absl::Status ProbeBind(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host =
      colon == std::string::npos ? std::string() : listen.substr(0, colon);
  const std::string port =
      colon == std::string::npos ? listen : listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (port.empty() ||
      getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                  &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError("invalid address (want HOST:PORT)");
  }
  absl::Status status;
  const int fd = socket(found->ai_family, SOCK_STREAM, 0);
  if (fd < 0) {
    status = absl::UnavailableError(std::strerror(errno));
  } else {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
      status = absl::UnavailableError(
          errno == EADDRINUSE ? "address already in use (another cgacctd, "
                                "or another program, has the port)"
                              : std::strerror(errno));
    }
    close(fd);
  }
  freeaddrinfo(found);
  return status;
}

}  // namespace cgacct
