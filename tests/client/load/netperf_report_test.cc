// netperf's report (client/load/netperf_report.h) and its derived settings
// (client/load/netperf.h): the table's rows, the JSON document's keys in
// order, the library rows of --rpc=library, the protection of deep runs.
#include "client/load/netperf_report.h"

#include <string>
#include <vector>

#include "client/load/netperf.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cgacct::load {
namespace {

NetperfOptions Options(RpcKind rpc, const std::string& rpc_name) {
  NetperfOptions o;
  o.target = "127.0.0.1:50051";
  o.group = "/np";
  o.streams = 2;
  o.pages = 3;
  o.batch = rpc == RpcKind::kUnary ? 2 : 64;
  o.rpc = rpc;
  o.rpc_name = rpc_name;
  o.resident_pages = 256;
  return o;
}

NetperfReport Report() {
  NetperfReport r;
  r.elapsed_s = 2;
  r.ops = 1000;
  r.messages = 10;
  r.nr_cpus = 4;
  r.charge_batch_pages = 64;
  r.anon_left = 0;
  return r;
}

TEST(NetperfReportTest, Table) {
  EXPECT_EQ(FormatNetperfTable(Options(RpcKind::kStream, "stream"), Report()),
            "cgacct-load netperf\n"
            "  target                   127.0.0.1:50051\n"
            "  group                    /np (directly under /)\n"
            "  rpc                      stream\n"
            "  streams                  2\n"
            "  pages per op             3\n"
            "  ops per message          64\n"
            "  resident pages/stream    256\n"
            "  server                   nr_cpus 4, charge batch 64 pages\n"
            "  elapsed                  2.00 s\n"
            "  ops                      1000  (500 ops/s)\n"
            "  messages                 10  (5 msg/s)\n"
            "  latency/message (us)     no samples\n"
            "  op errors                0\n"
            "  rpc errors               0\n"
            "  anon pages left          0\n");
}

TEST(NetperfReportTest, DeepUnaryWithAnError) {
  NetperfOptions o = Options(RpcKind::kUnary, "unary");
  o.deep = true;
  NetperfReport r = Report();
  r.protection_bytes = 1 << 20;
  r.anon_left.reset();
  r.first_error = "Charge: UNAVAILABLE";
  const std::string table = FormatNetperfTable(o, r);
  EXPECT_NE(table.find("  group                    /np/mid/leaf "
                       "(min=low=1048576 B on /np)\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  ops per message          1\n"), std::string::npos);
  EXPECT_NE(table.find("  anon pages left          n/a\n"), std::string::npos);
  EXPECT_NE(table.find("  first error              Charge: UNAVAILABLE\n"),
            std::string::npos);
}

TEST(NetperfReportTest, LibraryRows) {
  NetperfReport r = Report();
  r.library.charges = 400;
  r.library.stock_hits = 396;
  r.library.charge_rpcs = 3;
  r.library.uncharge_rpcs = 1;
  r.server_rpcs = 4;
  const std::string table =
      FormatNetperfTable(Options(RpcKind::kLibrary, "library"), r);
  EXPECT_NE(table.find("  library charges          400  (200 charges/s), 396 "
                       "from the stock (0.9900)\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  library RPCs             3 Charge, 1 Uncharge, 0 "
                       "retries\n"),
            std::string::npos);
  EXPECT_NE(table.find("  server RPCs/charge       0.01  (4 Charge+Uncharge "
                       "handled, /metrics)\n"),
            std::string::npos);
  r.server_rpcs.reset();
  EXPECT_NE(FormatNetperfTable(Options(RpcKind::kLibrary, "library"), r)
                .find("  server RPCs/charge       n/a (no /metrics)\n"),
            std::string::npos);
}

std::vector<std::string> Keys(const nlohmann::ordered_json& j) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  return keys;
}

TEST(NetperfReportTest, JsonKeysInOrder) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      NetperfJson(Options(RpcKind::kStream, "stream"), Report()));
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"scenario",
                                               "target",
                                               "group",
                                               "hierarchy",
                                               "rpc",
                                               "streams",
                                               "pages",
                                               "ops_per_message",
                                               "resident_pages",
                                               "protection_bytes",
                                               "nr_cpus",
                                               "charge_batch_pages",
                                               "elapsed_s",
                                               "ops",
                                               "ops_per_s",
                                               "messages",
                                               "messages_per_s",
                                               "latency",
                                               "time_series",
                                               "op_errors",
                                               "rpc_errors",
                                               "anon_pages_left",
                                               "first_error"}));
  EXPECT_EQ(j["scenario"], "netperf");
  EXPECT_EQ(j["hierarchy"], "root");
  EXPECT_EQ(j["ops_per_s"], 500);
  EXPECT_EQ(j["anon_pages_left"], 0);
}

TEST(NetperfReportTest, LibraryJson) {
  NetperfReport r = Report();
  r.library.charges = 400;
  r.library.stock_hits = 396;
  r.anon_left.reset();
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      NetperfJson(Options(RpcKind::kLibrary, "library"), r));
  EXPECT_EQ(j["library_charges"], 400);
  EXPECT_EQ(j["library_charges_per_s"], 200);
  EXPECT_EQ(j["library_stock_hits"], 396);
  EXPECT_TRUE(j["server_rpcs_per_charge"].is_null());
  EXPECT_TRUE(j["anon_pages_left"].is_null());
}

TEST(NetperfProtectionBytesTest, DeepRunsProtectHalfTheResidentPages) {
  NetperfOptions o = Options(RpcKind::kStream, "stream");
  EXPECT_EQ(NetperfProtectionBytes(o, 4096), 0u);  // root: none
  o.deep = true;
  EXPECT_EQ(NetperfProtectionBytes(o, 4096), 256u * 2 / 2 * 4096);
  o.protection_bytes = 12345;
  EXPECT_EQ(NetperfProtectionBytes(o, 4096), 12345u);
}

}  // namespace
}  // namespace cgacct::load
