// consumer TARGET GROUP: an application of the installed cgacct::client,
// written against its headers only (no gRPC type in sight):
//   * Client::Open(target): charges and uncharges 3 pages of GROUP 1000
//     times (the stock absorbs all but the first), and checks through
//     groups() that memory.current counts the stock while it is open;
//   * groups(): creates GROUP/child with memory.max 1 MiB, lowers its
//     memory.high, reads it back, reads the first WatchEvents update,
//     lists GROUP, deletes the child;
//   * a ClusterClient (one node, not in cluster mode) charges and
//     uncharges GROUP once, and reads it through its groups().
// Prints "consumer: OK charges=N rpcs=M". Exit 0 only if every call
// succeeded and the stock hit (fewer than 10 Charge RPCs).
#include <cstdio>
#include <string>

#include <cgacct/client.h>
#include <cgacct/cluster_client.h>

namespace {

int Fail(const char* what, const cgacct::client::Status& s) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string group = argv[2];
  const std::string child = group + "/child";
  cgacct::client::Options options;
  options.session_ttl = std::chrono::milliseconds(3000);
  std::unique_ptr<cgacct::client::Client> client;
  cgacct::client::Status s =
      cgacct::client::Client::Open(argv[1], options, &client);
  if (!s.ok()) return Fail("Open", s);
  for (int i = 0; i < 1000; ++i) {
    cgacct::client::ChargeResult r = client->Charge(group, 3);
    if (!r.ok()) return Fail("Charge", r.status);
    s = client->Uncharge(group, 3);
    if (!s.ok()) return Fail("Uncharge", s);
  }
  cgacct::client::Groups& groups = client->groups();
  auto stats = groups.GetStats(group);
  if (!stats.ok()) return Fail("GetStats", stats.status());
  // The Client's stock counts in memory.current (as the kernel's per-CPU
  // stock does), and so may the server's own (4 KiB pages by default).
  if (client->stocked_pages() == 0 ||
      stats->memory_current_bytes < client->stocked_pages() * 4096) {
    std::fprintf(stderr, "consumer: memory.current %llu, stock %llu pages\n",
                 static_cast<unsigned long long>(stats->memory_current_bytes),
                 static_cast<unsigned long long>(client->stocked_pages()));
    return 1;
  }
  cgacct::client::LimitsUpdate limits;
  limits.max_bytes = 1 << 20;
  auto created = groups.CreateGroup(child, limits);
  if (!created.ok()) return Fail("CreateGroup", created.status());
  limits = {};
  limits.high_bytes = 512 << 10;
  auto set = groups.SetLimits(child, limits);
  if (!set.ok()) return Fail("SetLimits", set.status());
  if (set->limits.max_bytes != (1 << 20) || set->limits.high_bytes != (512 << 10) ||
      set->limits.min_bytes != 0) {
    std::fprintf(stderr, "consumer: SetLimits answered other limits\n");
    return 1;
  }
  auto watch = groups.WatchEvents(child, std::chrono::milliseconds(5000));
  if (!watch.ok()) return Fail("WatchEvents", watch.status());
  auto first = (*watch)->Next();
  if (!first.ok()) return Fail("WatchEvents: Next", first.status());
  if (first->path != child || first->events.max != 0) {
    std::fprintf(stderr, "consumer: WatchEvents: unexpected first update\n");
    return 1;
  }
  auto listed = groups.ListGroups(group);
  if (!listed.ok()) return Fail("ListGroups", listed.status());
  if (listed->size() != 1 || listed->front() != child) {
    std::fprintf(stderr, "consumer: ListGroups: not [%s]\n", child.c_str());
    return 1;
  }
  auto reparented = groups.DeleteGroup(child);
  if (!reparented.ok()) return Fail("DeleteGroup", reparented.status());
  // The group is gone: the watch ends NOT_FOUND.
  auto after = (*watch)->Next();
  if (after.ok() || after.status().code() != cgacct::client::StatusCode::kNotFound) {
    std::fprintf(stderr, "consumer: the watch did not end NOT_FOUND: %s\n",
                 after.status().ToString().c_str());
    return 1;
  }
  const cgacct::client::ClientStats st = client->stats();
  s = client->Close();
  if (!s.ok()) return Fail("Close", s);
  std::printf("consumer: OK charges=%llu rpcs=%llu\n",
              static_cast<unsigned long long>(st.charges),
              static_cast<unsigned long long>(st.charge_rpcs));
  std::unique_ptr<cgacct::client::ClusterClient> cluster;
  s = cgacct::client::ClusterClient::Open({argv[1]}, {}, &cluster);
  if (s.ok()) s = cluster->Charge(group, 3).status;
  if (s.ok()) s = cluster->Uncharge(group, 3);
  if (s.ok()) s = cluster->groups().GetStats(group).status();
  if (s.ok()) s = cluster->Close();
  if (!s.ok()) return Fail("ClusterClient", s);
  return st.charges == 1000 && st.charge_rpcs < 10 ? 0 : 1;
}
