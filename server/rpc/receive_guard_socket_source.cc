// NewSockDiagSource() (server/rpc/receive_guard.h): tcp_info of one local
// port's connections by NETLINK_SOCK_DIAG. Its own file: <linux/tcp.h> (the
// kernel's struct tcp_info, with tcpi_bytes_received) and glibc's
// <netinet/tcp.h> cannot meet in one translation unit.
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/rpc/receive_guard.h"

namespace cgacct {
namespace {

constexpr int kTcpEstablished = 1;  // TCP_ESTABLISHED, include/net/tcp_states.h

// "ipv4:a.b.c.d:port" / "ipv6:[addr]:port", as gRPC's grpc_sockaddr_to_uri()
// (an IPv4-mapped IPv6 address is spelt ipv4).
std::string PeerOf(const inet_diag_msg& msg) {
  char text[INET6_ADDRSTRLEN] = {};
  const int port = ntohs(msg.id.idiag_dport);
  const auto* bytes = reinterpret_cast<const unsigned char*>(msg.id.idiag_dst);
  if (msg.idiag_family == AF_INET) {
    inet_ntop(AF_INET, bytes, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", port);
  }
  static constexpr unsigned char kV4Mapped[12] = {0, 0, 0, 0, 0, 0,
                                                  0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(bytes, kV4Mapped, sizeof(kV4Mapped)) == 0) {
    inet_ntop(AF_INET, bytes + 12, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", port);
  }
  inet_ntop(AF_INET6, bytes, text, sizeof(text));
  return absl::StrCat("ipv6:[", text, "]:", port);
}

class SockDiagSource final : public ReceivedBytesSource {
 public:
  explicit SockDiagSource(uint16_t local_port) : local_port_(local_port) {}
  ~SockDiagSource() override {
    if (fd_ >= 0) close(fd_);
  }

  absl::Status Sample(
      absl::flat_hash_map<std::string, uint64_t>* bytes_by_peer) override {
    bytes_by_peer->clear();
    if (fd_ < 0) {
      fd_ = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
      if (fd_ < 0) {
        return absl::UnavailableError(absl::StrCat(
            "socket(NETLINK_SOCK_DIAG): ", std::strerror(errno)));
      }
    }
    for (const int family : {AF_INET, AF_INET6}) {
      if (absl::Status s = Dump(family, bytes_by_peer); !s.ok()) {
        close(fd_);
        fd_ = -1;
        return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Dump(int family,
                    absl::flat_hash_map<std::string, uint64_t>* out) {
    // The request: established TCP sockets of `family` with INET_DIAG_INFO,
    // filtered by the bytecode "sport == local_port_" (as ss(8) builds it:
    // on a match jump to the end, else past it).
    struct {
      nlmsghdr header;
      inet_diag_req_v2 request;
      rtattr filter;
      inet_diag_bc_op ops[2];
    } message;
    std::memset(&message, 0, sizeof(message));
    message.header.nlmsg_len = sizeof(message);
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    message.header.nlmsg_seq = ++seq_;
    message.request.sdiag_family = static_cast<__u8>(family);
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_ext = 1 << (INET_DIAG_INFO - 1);
    message.request.idiag_states = 1u << kTcpEstablished;
    message.filter.rta_type = INET_DIAG_REQ_BYTECODE;
    message.filter.rta_len = RTA_LENGTH(sizeof(message.ops));
    message.ops[0].code = INET_DIAG_BC_S_EQ;
    message.ops[0].yes = sizeof(message.ops);
    message.ops[0].no = sizeof(message.ops) + 4;
    message.ops[1].no = local_port_;
    sockaddr_nl kernel = {};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd_, &message, sizeof(message), 0,
               reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
      return absl::UnavailableError(
          absl::StrCat("sock_diag request: ", std::strerror(errno)));
    }
    alignas(nlmsghdr) char buffer[32768];
    while (true) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(
            absl::StrCat("sock_diag answer: ", std::strerror(errno)));
      }
      // NLMSG_OK/NLMSG_NEXT, without their signed/unsigned comparison.
      size_t left = static_cast<size_t>(n);
      for (const char* next = buffer; left >= sizeof(nlmsghdr);) {
        const auto* h = reinterpret_cast<const nlmsghdr*>(next);
        if (h->nlmsg_len < sizeof(nlmsghdr) || h->nlmsg_len > left) break;
        const size_t step = std::min<size_t>(NLMSG_ALIGN(h->nlmsg_len), left);
        next += step;
        left -= step;
        if (h->nlmsg_seq != seq_) continue;
        if (h->nlmsg_type == NLMSG_DONE) return absl::OkStatus();
        if (h->nlmsg_type == NLMSG_ERROR) {
          const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
          return absl::UnavailableError(absl::StrCat(
              "sock_diag: ", std::strerror(-error->error)));
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
        const auto* msg =
            static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
        int attr_len = static_cast<int>(h->nlmsg_len) -
                       static_cast<int>(NLMSG_LENGTH(sizeof(*msg)));
        for (auto* a = reinterpret_cast<const rtattr*>(msg + 1);
             RTA_OK(a, attr_len); a = RTA_NEXT(a, attr_len)) {
          if (a->rta_type != INET_DIAG_INFO) continue;
          // Older kernels send a shorter tcp_info (bytes_received: 4.1).
          constexpr size_t kNeeded = offsetof(tcp_info, tcpi_bytes_received) +
                                     sizeof(__u64);
          if (RTA_PAYLOAD(a) < kNeeded) continue;
          tcp_info info;
          std::memcpy(&info, RTA_DATA(a), kNeeded);
          // What gRPC has read: the bytes still in the socket's receive
          // queue are the kernel's (bounded by its receive buffer).
          const uint64_t queued = msg->idiag_rqueue;
          (*out)[PeerOf(*msg)] = info.tcpi_bytes_received > queued
                                     ? info.tcpi_bytes_received - queued
                                     : 0;
        }
      }
    }
  }

  const uint16_t local_port_;
  int fd_ = -1;
  uint32_t seq_ = 0;
};

}  // namespace

std::unique_ptr<ReceivedBytesSource> NewSockDiagSource(uint16_t local_port) {
  return std::make_unique<SockDiagSource>(local_port);
}

}  // namespace cgacct
