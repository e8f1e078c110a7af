// consumer TARGET GROUP: opens a cgacct::client::Client on TARGET, charges
// and uncharges 3 pages of GROUP 1000 times (the stock absorbs all but the
// first), closes, and prints "consumer: OK charges=N rpcs=M"; then charges
// and uncharges GROUP once through a cgacct::client::ClusterClient (one
// node, not in cluster mode). Exit 0 only if every call succeeded and the
// stock hit (fewer than 10 Charge RPCs).
#include <cstdio>
#include <cgacct/client.h>
#include <cgacct/cluster_client.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  auto channel = grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials());
  cgacct::client::Options options;
  options.session_ttl = std::chrono::milliseconds(3000);
  std::unique_ptr<cgacct::client::Client> client;
  grpc::Status s = cgacct::client::Client::Open(channel, options, &client);
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: Open: %s\n", s.error_message().c_str());
    return 1;
  }
  for (int i = 0; i < 1000; ++i) {
    cgacct::client::ChargeResult r = client->Charge(argv[2], 3);
    if (!r.ok()) {
      std::fprintf(stderr, "consumer: Charge: %s\n", r.status.error_message().c_str());
      return 1;
    }
    s = client->Uncharge(argv[2], 3);
    if (!s.ok()) {
      std::fprintf(stderr, "consumer: Uncharge: %s\n", s.error_message().c_str());
      return 1;
    }
  }
  const cgacct::client::ClientStats st = client->stats();
  s = client->Close();
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: Close: %s\n", s.error_message().c_str());
    return 1;
  }
  std::printf("consumer: OK charges=%llu rpcs=%llu\n",
              static_cast<unsigned long long>(st.charges),
              static_cast<unsigned long long>(st.charge_rpcs));
  std::unique_ptr<cgacct::client::ClusterClient> cluster;
  s = cgacct::client::ClusterClient::Open({argv[1]}, {}, &cluster);
  if (s.ok()) s = cluster->Charge(argv[2], 3).status;
  if (s.ok()) s = cluster->Uncharge(argv[2], 3);
  if (s.ok()) s = cluster->Close();
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: ClusterClient: %s\n", s.error_message().c_str());
    return 1;
  }
  return st.charges == 1000 && st.charge_rpcs < 10 ? 0 : 1;
}
