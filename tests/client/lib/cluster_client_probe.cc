// cluster_client_probe TARGET FAILOVER_MS: cgacct::client::ClusterClient
// driven line by line from stdin, for the cluster tests
// (tests/server/cluster/cluster_test.py), which start the real etcd and
// nodes and kill owners between commands. Options as the Python library's
// test uses: session lease 3 s, no batching (memory.current is what the
// application holds), 1 s call timeout, 2 attempts.
//
// Commands, one per line; one JSON line answers each:
//   charge PATH N | uncharge PATH N
//       {"code": C, "message": "...", "took_s": S}
//   create PATH MAX_BYTES   (groups().CreateGroup; 0: no max)
//                {"code": C, "message": "..."}
//   current PATH (groups().GetStats) {"code": C, "message": "...",
//                 "current_bytes": N}
//   owner PATH   {"owner": "host:port"}
//   held PATH    {"held": N}
//   stats        {"map_reads": N, "moves": N, "watch_moves": N,
//                 "recharge_failed_pages": N,
//                 "reopened_sessions": N, "resume_deferred_pages": N}
//   close        {"code": C, "message": "..."}, then exits 0
// Exits 1 with a line on stderr when Open fails, 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "cgacct/cluster_client.h"

namespace {

// Enough JSON escaping for status messages.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string StatusJson(const cgacct::client::Status& s) {
  return "\"code\": " + std::to_string(static_cast<int>(s.code())) +
         ", \"message\": " + Quoted(s.message());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cluster_client_probe TARGET FAILOVER_MS\n");
    return 2;
  }
  cgacct::client::ClusterOptions options;
  options.failover_timeout = std::chrono::milliseconds(std::atoi(argv[2]));
  options.client.session_ttl = std::chrono::milliseconds(3000);
  options.client.batch_pages = 0;
  options.client.max_batch_pages = 0;
  options.client.call_timeout = std::chrono::milliseconds(1000);
  options.client.max_attempts = 2;
  // What the library did on its own, on stderr (the test prints it when it
  // fails).
  const auto t0 = std::chrono::steady_clock::now();
  options.client.on_event = [t0](const cgacct::client::Event& e) {
    static const char* const kNames[] = {"session_reopened", "recharge_failed",
                                         "drained", "stream_broken",
                                         "recharge_deferred"};
    const int type = static_cast<int>(e.type);
    if (e.type == cgacct::client::Event::Type::kDrained) return;
    std::fprintf(stderr, "event %.3f %s %s %llu %d %s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                     .count(),
                 type < 5 ? kNames[type] : "?", e.group.c_str(),
                 static_cast<unsigned long long>(e.nr_pages),
                 static_cast<int>(e.status.code()), e.status.message().c_str());
  };
  std::unique_ptr<cgacct::client::ClusterClient> cc;
  const cgacct::client::Status opened =
      cgacct::client::ClusterClient::Open({argv[1]}, options, &cc);
  if (!opened.ok()) {
    std::fprintf(stderr, "cluster_client_probe: Open: %s\n",
                 opened.message().c_str());
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command, path;
    uint64_t n = 0;
    in >> command >> path >> n;
    std::string answer;
    if (command == "charge" || command == "uncharge") {
      const auto t0 = std::chrono::steady_clock::now();
      const cgacct::client::Status s = command == "charge"
                                           ? cc->Charge(path, n).status
                                           : cc->Uncharge(path, n);
      const double took = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - t0)
                              .count();
      answer = "{" + StatusJson(s) + ", \"took_s\": " + std::to_string(took) +
               "}";
    } else if (command == "create") {
      // ClusterClient::groups(): at any node, committed through etcd.
      cgacct::client::LimitsUpdate limits;
      if (n > 0) limits.max_bytes = n;
      const auto g = cc->groups().CreateGroup(path, limits);
      answer = "{" + StatusJson(g.status()) + "}";
    } else if (command == "current") {
      // GetStats at any node (forwarded to the owner; summed above the
      // shard roots).
      const auto st = cc->groups().GetStats(path);
      answer = "{" + StatusJson(st.status()) + ", \"current_bytes\": " +
               std::to_string(st.ok() ? st->memory_current_bytes : 0) + "}";
    } else if (command == "owner") {
      answer = "{\"owner\": " + Quoted(cc->owner(path)) + "}";
    } else if (command == "held") {
      answer = "{\"held\": " + std::to_string(cc->held_pages(path)) + "}";
    } else if (command == "stats") {
      const cgacct::client::ClusterStats st = cc->stats();
      answer = "{\"map_reads\": " + std::to_string(st.map_reads) +
               ", \"moves\": " + std::to_string(st.moves) +
               ", \"watch_moves\": " + std::to_string(st.watch_moves) +
               ", \"recharge_failed_pages\": " +
               std::to_string(st.recharge_failed_pages) +
               ", \"reopened_sessions\": " +
               std::to_string(st.clients.reopened_sessions) +
               ", \"resume_deferred_pages\": " +
               std::to_string(st.clients.resume_deferred_pages) + "}";
    } else if (command == "close") {
      std::cout << "{" << StatusJson(cc->Close()) << "}" << std::endl;
      return 0;
    } else {
      answer = "{\"code\": 3, \"message\": \"unknown command\"}";
    }
    std::cout << answer << std::endl;
  }
  return 0;
}
