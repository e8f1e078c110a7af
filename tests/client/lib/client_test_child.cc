// client_test_child TARGET GROUP TTL_MS: a process using cgacct::client the
// way an application does, for client_test's SIGKILL test and
// cgacct-load-like churn: opens a Client (session lease TTL_MS, a small
// batch so that RPCs are frequent), prints "ready SESSION_ID" once it holds
// pages, then charges and uncharges GROUP in a loop (net growth to ~400
// pages held, then steady) until it is killed. Never closes its session.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cgacct/client.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: client_test_child TARGET GROUP TTL_MS\n");
    return 2;
  }
  const std::string group = argv[2];
  cgacct::client::Options options;
  options.session_ttl = std::chrono::milliseconds(std::atoi(argv[3]));
  options.batch_pages = 4;
  options.max_batch_pages = 16;
  std::unique_ptr<cgacct::client::Client> client;
  // The target's form of Open (cgacct/channel.h makes the channel).
  const cgacct::client::Status s =
      cgacct::client::Client::Open(argv[1], options, &client);
  if (!s.ok()) {
    std::fprintf(stderr, "client_test_child: Open: %s\n",
                 s.ToString().c_str());
    return 1;
  }
  uint64_t held = 0;
  bool announced = false;
  for (uint64_t i = 0;; ++i) {
    const cgacct::client::ChargeResult c = client->Charge(group, 3);
    if (!c.ok()) {
      std::fprintf(stderr, "client_test_child: Charge: %s\n",
                   c.status.ToString().c_str());
      return 1;
    }
    held += 3;
    const uint64_t back = held < 400 ? 2 : 3;
    if (!client->Uncharge(group, back).ok()) return 1;
    held -= back;
    if (!announced && held >= 10) {
      std::printf("ready %s\n", client->session_id().c_str());
      std::fflush(stdout);
      announced = true;
    }
  }
}
