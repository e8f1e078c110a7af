// client_grow_shrink TARGET GROUP PAGES CALLS ROUNDS: one
// cgacct::client::Client growing GROUP by PAGES pages a Charge() for CALLS
// calls, then shrinking it by as many Uncharge()s, ROUNDS times, on one
// thread (issue 26, item 10: RPCs per library call in a growth-then-shrink
// pattern; grow_shrink.py runs it beside the Python library and raw stubs).
// Prints one JSON line:
//   {"calls": N, "charge_rpcs": N, "uncharge_rpcs": N, "seconds": S}
// Exits 1 when Open or a call fails.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cgacct/client.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr,
                 "usage: client_grow_shrink TARGET GROUP PAGES CALLS "
                 "ROUNDS\n");
    return 2;
  }
  const std::string group = argv[2];
  const uint64_t pages = std::strtoull(argv[3], nullptr, 10);
  const long calls = std::atol(argv[4]);
  const long rounds = std::atol(argv[5]);
  std::unique_ptr<cgacct::client::Client> c;
  cgacct::client::Status s =
      cgacct::client::Client::Open(argv[1], cgacct::client::Options{}, &c);
  if (!s.ok()) {
    std::fprintf(stderr, "Open: %s\n", s.ToString().c_str());
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  for (long r = 0; r < rounds; ++r) {
    for (long i = 0; i < calls; ++i) {
      cgacct::client::ChargeResult charged = c->Charge(group, pages);
      if (!charged.ok()) {
        std::fprintf(stderr, "Charge: %s\n",
                     charged.status.ToString().c_str());
        return 1;
      }
    }
    for (long i = 0; i < calls; ++i) {
      s = c->Uncharge(group, pages);
      if (!s.ok()) {
        std::fprintf(stderr, "Uncharge: %s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  const cgacct::client::ClientStats stats = c->stats();
  std::printf(
      "{\"calls\": %ld, \"charge_rpcs\": %llu, \"uncharge_rpcs\": %llu, "
      "\"seconds\": %.6f}\n",
      2 * calls * rounds, static_cast<unsigned long long>(stats.charge_rpcs),
      static_cast<unsigned long long>(stats.uncharge_rpcs), seconds);
  return c->Close().ok() ? 0 : 1;
}
