// session-churn's report (client/load/session_churn.h): the table's rows
// and the JSON document.
#include "client/load/session_churn.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cgacct::load {
namespace {

SessionChurnOptions Options() {
  SessionChurnOptions o;
  o.target = "127.0.0.1:1";
  o.group = "/churn";
  o.clients = 4;
  o.rounds = 2;
  o.ttl_ms = 1000;
  return o;
}

std::vector<ChurnRound> Rounds() {
  ChurnRound ok;
  ok.held_pages = 1200;
  ok.to_zero_ms = 1234.4;
  ok.within_bound = true;
  ok.delta = SessionCounters{4, 1200};
  ChurnRound late;
  late.held_pages = 1200;
  return {ok, late};
}

TEST(SessionChurnReportTest, Table) {
  EXPECT_EQ(
      FormatSessionChurnTable(Options(), Rounds(),
                              "round 2: a client did "
                              "not get ready"),
      "cgacct-load session-churn\n"
      "  target                     127.0.0.1:1\n"
      "  group                      /churn\n"
      "  clients x rounds           4 x 2 (half SIGKILL, half SIGTERM; none "
      "closes)\n"
      "  session ttl                1000 ms (bound: ttl + 1000 ms)\n"
      "  round 1                    held 1200 pages; back to 0 after 1234 ms; "
      "expired 4 sessions, returned 1200 pages\n"
      "  round 2                    held 1200 pages; back to 0 after (never) "
      "(OVER THE BOUND); expired n/a sessions, returned n/a pages\n"
      "  first error                round 2: a client did not get ready\n");
}

TEST(SessionChurnReportTest, Json) {
  const nlohmann::json j =
      nlohmann::json::parse(SessionChurnJson(Options(), Rounds(), ""));
  EXPECT_EQ(j["scenario"], "session-churn");
  EXPECT_EQ(j["clients"], 4);
  EXPECT_EQ(j["session_ttl_ms"], 1000);
  ASSERT_EQ(j["rounds"].size(), 2u);
  EXPECT_EQ(j["rounds"][0]["held_pages"], 1200);
  EXPECT_EQ(j["rounds"][0]["within_bound"], true);
  EXPECT_EQ(j["rounds"][0]["sessions_expired"], 4);
  EXPECT_EQ(j["rounds"][0]["returned_pages_expire"], 1200);
  EXPECT_EQ(j["rounds"][1]["to_zero_ms"], -1);
  EXPECT_TRUE(j["rounds"][1]["sessions_expired"].is_null());
  EXPECT_TRUE(j["rounds"][1]["returned_pages_expire"].is_null());
  EXPECT_EQ(j["first_error"], "");
}

}  // namespace
}  // namespace cgacct::load
