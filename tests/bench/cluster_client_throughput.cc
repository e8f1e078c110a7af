// cluster_client_throughput TARGET GROUPS THREADS SECONDS BATCH: charges/s
// through one cgacct::client::ClusterClient (issue 23's "library charges/s
// against 3 nodes / against one"; cluster_bench.py runs it against a
// 3-node cluster and a single node in the same run).
//
// GROUPS is a comma-separated list of groups (one per shard in a
// cluster); THREADS threads each charge and uncharge 1 page of every
// group in turn for SECONDS; BATCH is the library's first batch
// (Options::batch_pages; 0: every charge and uncharge is an RPC, at the
// owner of the group's shard). Prints one JSON line:
//   {"pairs_per_s": N, "errors": N, "charge_rpcs": N}
// Exits 1 when Open fails.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cgacct/cluster_client.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr,
                 "usage: cluster_client_throughput TARGET GROUPS THREADS "
                 "SECONDS BATCH\n");
    return 2;
  }
  std::vector<std::string> groups;
  std::stringstream list(argv[2]);
  for (std::string g; std::getline(list, g, ',');) groups.push_back(g);
  const int threads = std::atoi(argv[3]);
  const int seconds = std::atoi(argv[4]);
  cgacct::client::ClusterOptions options;
  options.client.batch_pages = std::strtoull(argv[5], nullptr, 10);
  options.client.max_batch_pages =
      options.client.batch_pages == 0 ? 0 : 4 * options.client.batch_pages;
  std::unique_ptr<cgacct::client::ClusterClient> cc;
  const cgacct::client::Status s =
      cgacct::client::ClusterClient::Open({argv[1]}, options, &cc);
  if (!s.ok()) {
    std::fprintf(stderr, "Open: %s\n", s.ToString().c_str());
    return 1;
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pairs{0}, errors{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      size_t i = static_cast<size_t>(t);
      while (!stop.load(std::memory_order_relaxed)) {
        const std::string& g = groups[i++ % groups.size()];
        if (!cc->Charge(g, 1).ok() || !cc->Uncharge(g, 1).ok()) {
          errors.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        pairs.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // One second of warm-up (sessions opened at every owner), then measure.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t p0 = pairs.load();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const uint64_t p1 = pairs.load();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  stop.store(true);
  for (std::thread& w : workers) w.join();
  const cgacct::client::ClusterStats st = cc->stats();
  std::printf("{\"pairs_per_s\": %.1f, \"errors\": %llu, \"charge_rpcs\": %llu}\n",
              static_cast<double>(p1 - p0) / took,
              static_cast<unsigned long long>(errors.load()),
              static_cast<unsigned long long>(st.clients.charge_rpcs));
  return cc->Close().ok() ? 0 : 1;
}
