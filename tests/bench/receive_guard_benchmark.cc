// One sampling pass of the receive guard (server/rpc/receive_guard.h) with N
// loopback connections accepted on its port: NewSocketSource() (the
// process's own descriptors, TCP_INFO) against the NETLINK_SOCK_DIAG dump it
// replaced (kept here as the baseline: a dump per family, filtered in the
// kernel by the local port, which still walks the whole TCP hash table).
// The per-pass time is the guard's cost: a pass every 20 ms.
//
//   build/tests/bench/receive_guard_benchmark --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true   (one command line)
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "benchmark/benchmark.h"
#include "server/rpc/receive_guard.h"

namespace cgacct {
namespace {

// A listening socket on 127.0.0.1 with `n` connections accepted on it.
struct Connections {
  explicit Connections(int n) {
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    listener = socket(AF_INET, SOCK_STREAM, 0);
    bind(listener, reinterpret_cast<sockaddr*>(&address), length);
    listen(listener, 4096);
    getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
    port = ntohs(address.sin_port);
    for (int i = 0; i < n; ++i) {
      const int client = socket(AF_INET, SOCK_STREAM, 0);
      connect(client, reinterpret_cast<sockaddr*>(&address), length);
      fds.push_back(client);
      fds.push_back(accept(listener, nullptr, nullptr));
    }
  }
  ~Connections() {
    for (int fd : fds) close(fd);
    close(listener);
  }
  int listener = -1;
  uint16_t port = 0;
  std::vector<int> fds;
};

// The baseline: one NETLINK_SOCK_DIAG dump per family of the established
// TCP sockets whose local port is `port`, with tcp_info; returns how many.
int SockDiagDump(int netlink, uint16_t port) {
  int listed = 0;
  for (const int family : {AF_INET, AF_INET6}) {
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
    message.request.sdiag_family = static_cast<__u8>(family);
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_ext = 1 << (INET_DIAG_INFO - 1);
    message.request.idiag_states = 1u << 1;  // TCP_ESTABLISHED
    message.filter.rta_type = INET_DIAG_REQ_BYTECODE;
    message.filter.rta_len = RTA_LENGTH(sizeof(message.ops));
    message.ops[0].code = INET_DIAG_BC_S_EQ;
    message.ops[0].yes = sizeof(message.ops);
    message.ops[0].no = sizeof(message.ops) + 4;
    message.ops[1].no = port;
    sockaddr_nl kernel = {};
    kernel.nl_family = AF_NETLINK;
    sendto(netlink, &message, sizeof(message), 0,
           reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel));
    alignas(nlmsghdr) char buffer[32768];
    bool done = false;
    while (!done) {
      const ssize_t n = recv(netlink, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      size_t left = static_cast<size_t>(n);
      for (const char* next = buffer; left >= sizeof(nlmsghdr);) {
        const auto* h = reinterpret_cast<const nlmsghdr*>(next);
        if (h->nlmsg_len < sizeof(nlmsghdr) || h->nlmsg_len > left) break;
        const size_t step = std::min<size_t>(NLMSG_ALIGN(h->nlmsg_len), left);
        next += step;
        left -= step;
        if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
          done = true;
          break;
        }
        if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) ++listed;
      }
    }
  }
  return listed;
}

void BM_SockDiagDump(benchmark::State& state) {
  Connections connections(static_cast<int>(state.range(0)));
  const int netlink =
      socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  int listed = 0;
  for (auto _ : state) {
    listed = SockDiagDump(netlink, connections.port);
    benchmark::DoNotOptimize(listed);
  }
  close(netlink);
  if (listed != state.range(0)) state.SkipWithError("not every connection");
}
BENCHMARK(BM_SockDiagDump)->Arg(0)->Arg(100)->Arg(1000);

void BM_SocketSourceSample(benchmark::State& state) {
  Connections connections(static_cast<int>(state.range(0)));
  auto source = NewSocketSource(connections.port);
  absl::flat_hash_map<std::string, uint64_t> bytes;
  for (auto _ : state) {
    benchmark::DoNotOptimize(source->Sample(&bytes));
  }
  if (static_cast<int64_t>(bytes.size()) != state.range(0))
    state.SkipWithError("not every connection");
}
BENCHMARK(BM_SocketSourceSample)->Arg(0)->Arg(100)->Arg(1000);

}  // namespace
}  // namespace cgacct

BENCHMARK_MAIN();
