// NewSocketSource() (server/rpc/receive_guard.h): tcp_info of this
// process's connections on one local port, read from their descriptors,
// and their sockets shut down. Its own file: <linux/tcp.h> (the kernel's
// struct tcp_info, with tcpi_bytes_received) and glibc's <netinet/tcp.h>
// cannot meet in one translation unit.
//
// Why descriptors and not a NETLINK_SOCK_DIAG dump (the interface of
// ss(8), what the guard used first): a dump walks the kernel's whole TCP
// established hash table whatever its filter (262,144 buckets on a 24 GB
// machine): 2.4 ms a pass with no connection against 12 us here, 2.3 ms
// against 0.29 ms with 100, the same 6.1 ms with 1,000
// (tests/bench/receive_guard_benchmark.cc, tests/bench/RESULTS.md).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/rpc/receive_guard.h"

namespace cgacct {
namespace {

constexpr uint8_t kTcpEstablished = 1;  // TCP_ESTABLISHED, include/net/tcp_states.h

// The local port of `address` if it is an IPv4 or IPv6 address, else -1.
int PortOf(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return -1;
}

// "ipv4:a.b.c.d:port" / "ipv6:[addr]:port", as gRPC's grpc_sockaddr_to_uri()
// (an IPv4-mapped IPv6 address is spelt ipv4). "" if not IP.
std::string PeerOf(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(v4.sin_port));
  }
  if (address.ss_family != AF_INET6) return "";
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
  const auto* bytes = v6.sin6_addr.s6_addr;
  static constexpr unsigned char kV4Mapped[12] = {0, 0, 0, 0, 0, 0,
                                                  0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(bytes, kV4Mapped, sizeof(kV4Mapped)) == 0) {
    inet_ntop(AF_INET, bytes + 12, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(v6.sin6_port));
  }
  inet_ntop(AF_INET6, bytes, text, sizeof(text));
  return absl::StrCat("ipv6:[", text, "]:", ntohs(v6.sin6_port));
}

class SocketSource final : public ReceivedBytesSource {
 public:
  explicit SocketSource(uint16_t local_port) : local_port_(local_port) {}

  absl::Status Sample(
      absl::flat_hash_map<std::string, uint64_t>* bytes_by_peer) override {
    bytes_by_peer->clear();
    listed_.clear();
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("/proc/self/fd: ", std::strerror(errno)));
    }
    const int dir_fd = dirfd(dir);
    ++pass_;
    while (const dirent* entry = readdir(dir)) {
      char* end = nullptr;
      const long number = std::strtol(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0' || number == dir_fd) continue;
      const int fd = static_cast<int>(number);
      Socket& socket = sockets_[fd];
      socket.pass = pass_;
      if (socket.inode == 0 || !socket.listed()) {
        // New to the source, or not one of the port's connections (its
        // number may have been reused since): what it is now. The listener
        // has the port too, and no peer.
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
          socket = Socket{};
          socket.pass = pass_;
          continue;
        }
        if (st.st_ino == socket.inode) continue;  // the same, not listed
        socket.inode = st.st_ino;
        socket.peer = PeerIfAccepted(fd);
        if (!socket.listed()) continue;
      }
      tcp_info info;
      std::memset(&info, 0, sizeof(info));
      socklen_t length = sizeof(info);
      // Older kernels fill a shorter tcp_info (bytes_received: 4.1).
      constexpr socklen_t kNeeded =
          offsetof(tcp_info, tcpi_bytes_received) + sizeof(__u64);
      if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) {
        socket.inode = 0;  // no longer a socket: read afresh next pass
        continue;
      }
      if (length < kNeeded || info.tcpi_state != kTcpEstablished) continue;
      // What gRPC has read: the bytes still in the socket's receive queue
      // are the kernel's (bounded by its receive buffer).
      int queued = 0;
      if (ioctl(fd, SIOCINQ, &queued) != 0 || queued < 0) queued = 0;
      socket.queued = static_cast<uint64_t>(queued);
      socket.received = info.tcpi_bytes_received;
      // The number may have been closed and reused since it was read:
      // then the socket is read afresh at the next pass.
      struct stat st;
      if (fstat(fd, &st) != 0 || st.st_ino != socket.inode) {
        socket.inode = 0;
        continue;
      }
      (*bytes_by_peer)[socket.peer] = socket.received > socket.queued
                                          ? socket.received - socket.queued
                                          : 0;
      listed_[socket.peer] = fd;
    }
    closedir(dir);
    // Descriptors no longer open are forgotten.
    for (auto it = sockets_.begin(); it != sockets_.end();) {
      if (it->second.pass != pass_) {
        sockets_.erase(it++);
      } else {
        ++it;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Close(absl::string_view peer) override {
    auto listed = listed_.find(peer);
    if (listed == listed_.end())
      return absl::NotFoundError(absl::StrCat(peer, " not listed"));
    const int fd = listed->second;
    listed_.erase(listed);
    auto it = sockets_.find(fd);
    if (it == sockets_.end() || it->second.inode == 0)
      return absl::NotFoundError(absl::StrCat(peer, " not open"));
    const ino_t inode = it->second.inode;
    // A dup of the descriptor holds the socket itself: checked to be the
    // listed one, it is the one shut down (shutdown(2) acts on the socket,
    // whichever descriptor names it), even if the number was closed and
    // reused since the sample.
    const int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mine < 0) return absl::NotFoundError(absl::StrCat(peer, " not open"));
    struct stat st;
    bool done = false;
    if (fstat(mine, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == inode)
      done = shutdown(mine, SHUT_RDWR) == 0;
    close(mine);
    if (!done) return absl::NotFoundError(absl::StrCat(peer, " not open"));
    return absl::OkStatus();
  }

 private:
  // What a descriptor of the process is, by number: its socket's inode (0:
  // not a socket, or to be read again), its peer if it is a connection
  // accepted on local_port_ ("" if not), the pass that last saw it, and
  // its tcpi_bytes_received and receive queue at that pass.
  struct Socket {
    ino_t inode = 0;
    std::string peer;
    uint64_t pass = 0;
    uint64_t received = 0;
    uint64_t queued = 0;
    bool listed() const { return !peer.empty(); }
  };

  // The peer of `fd` if it is a connection whose local port is
  // local_port_, else "".
  std::string PeerIfAccepted(int fd) const {
    sockaddr_storage address = {};
    socklen_t length = sizeof(address);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
        PortOf(address) != local_port_) {
      return "";
    }
    length = sizeof(address);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      return "";
    return PeerOf(address);
  }

  const uint16_t local_port_;
  absl::flat_hash_map<int, Socket> sockets_;
  // The descriptors of the connections the last Sample() listed, by peer.
  absl::flat_hash_map<std::string, int> listed_;
  uint64_t pass_ = 0;
};

}  // namespace

std::unique_ptr<ReceivedBytesSource> NewSocketSource(uint16_t local_port) {
  return std::make_unique<SocketSource>(local_port);
}

}  // namespace cgacct
