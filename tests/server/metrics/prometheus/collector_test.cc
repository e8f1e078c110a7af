// MetricsCollector (server/metrics/prometheus/collector.h): the per-group
// series policy (depth, the group cap) and the families it builds.
#include "server/metrics/prometheus/collector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/prometheus/families.h"
#include "server/metrics/rpc_metrics.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kPage = 4096;

std::unique_ptr<Engine> NewEngine(EngineObserver* observer = nullptr) {
  EngineOptions options;
  options.nr_cpus = 2;
  options.page_size_bytes = kPage;
  options.observer = observer;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

// The value of the one series `series` ("name{labels}") in `text`, or -1.
double SeriesValue(const std::string& text, const std::string& series) {
  const std::string prefix = series + " ";
  size_t at = 0;
  while ((at = text.find(prefix, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      return std::stod(text.substr(at + prefix.size()));
    }
    at += prefix.size();
  }
  return -1;
}

// Lines of `family` ("name{" prefix) in `text`.
int CountSeries(const std::string& text, const std::string& family) {
  int n = 0;
  size_t at = 0;
  const std::string prefix = "\n" + family + "{";
  while ((at = text.find(prefix, at)) != std::string::npos) {
    ++n;
    at += prefix.size();
  }
  return n;
}

// --- Per-group series policy ---------------------------------------------

class GroupSeriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = NewEngine(&flush_);
    // / -> /a (max 8 pages) -> /a/x -> /a/x/deep; /b, /c.
    LimitsUpdate a_limits;
    a_limits.max_pages = 8;
    ASSERT_TRUE(engine_->CreateGroup("/a", a_limits).ok());
    ASSERT_TRUE(engine_->CreateGroup("/a/x", LimitsUpdate()).ok());
    ASSERT_TRUE(engine_->CreateGroup("/a/x/deep", LimitsUpdate()).ok());
    ASSERT_TRUE(engine_->CreateGroup("/b", LimitsUpdate()).ok());
    ASSERT_TRUE(engine_->CreateGroup("/c", LimitsUpdate()).ok());
  }

  std::string Scrape(MetricsOptions options) {
    MetricsCollector collector(*engine_, flush_, rpc_, std::move(options));
    return SerializeMetrics(collector);
  }

  RstatFlushObserver flush_;
  RpcMetrics rpc_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(GroupSeriesTest, CurrentMaxAndEventsPerGroup) {
  // /a/x charges 8 pages (its parent's max), then one more: an OOM at /a.
  ASSERT_TRUE(engine_->Charge("/a/x", 8, PageKind::kAnon).ok());
  EXPECT_EQ(engine_->Charge("/a/x", 1, PageKind::kAnon).status().code(),
            absl::StatusCode::kResourceExhausted);
  MetricsOptions options;
  options.group_depth = 3;
  const std::string text = Scrape(options);

  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_group_memory_max_bytes gauge"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE cgacct_group_memory_events_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_group_series_dropped gauge"));
  EXPECT_EQ(
      SeriesValue(text, "cgacct_group_memory_current_bytes{path=\"/a/x\"}"),
      8.0 * kPage);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_max_bytes{path=\"/a\"}"),
            8.0 * kPage);
  // "max" is +Inf.
  EXPECT_THAT(text,
              HasSubstr("cgacct_group_memory_max_bytes{path=\"/b\"} +Inf\n"));
  // The other limit files and memory.peak too (issue 26, item 8): /a's
  // high is "max", min and low 0; its peak is the 8 pages /a/x reached.
  EXPECT_THAT(text,
              HasSubstr("cgacct_group_memory_high_bytes{path=\"/a\"} +Inf\n"));
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_min_bytes{path=\"/a\"}"), 0);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_low_bytes{path=\"/a\"}"), 0);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_peak_bytes{path=\"/a\"}"),
            8.0 * kPage);
  LimitsUpdate protect;
  protect.high_pages = 6;
  protect.min_pages = 2;
  protect.low_pages = 4;
  ASSERT_TRUE(engine_->SetLimits("/a/x", protect).ok());
  const std::string after = Scrape(options);
  EXPECT_EQ(SeriesValue(after, "cgacct_group_memory_high_bytes{path=\"/a/x\"}"),
            6.0 * kPage);
  EXPECT_EQ(SeriesValue(after, "cgacct_group_memory_min_bytes{path=\"/a/x\"}"),
            2.0 * kPage);
  EXPECT_EQ(SeriesValue(after, "cgacct_group_memory_low_bytes{path=\"/a/x\"}"),
            4.0 * kPage);
  EXPECT_THAT(text,
              HasSubstr("cgacct_group_memory_max_bytes{path=\"/\"} +Inf\n"));
  // memory.events is hierarchical: the OOM at /a's limit counts at /a (and
  // would at its non-root ancestors), not at /a/x (the charging child) or
  // /b.
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"oom\","
                        "path=\"/a\"}"),
            1);
  // max: once per reclaim retry of the failing charge.
  EXPECT_GE(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"max\","
                        "path=\"/a\"}"),
            1);
  // The root never counts events (memcg_memory_event() stops below it).
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"oom\","
                        "path=\"/\"}"),
            0);
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"oom\","
                        "path=\"/a/x\"}"),
            0);
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"oom\","
                        "path=\"/b\"}"),
            0);
  // The kinds that can happen here, each present for every group
  // (oom_group_kill too, since memory.oom.group); sock_throttled, always 0
  // (no socket memory), is not exported.
  for (const char* kind :
       {"low", "high", "max", "oom", "oom_kill", "oom_group_kill"}) {
    EXPECT_GE(
        SeriesValue(text, absl::StrCat("cgacct_group_memory_events_total{event="
                                       "\"",
                                       kind, "\",path=\"/c\"}")),
        0)
        << kind;
  }
  EXPECT_THAT(text, Not(HasSubstr("event=\"sock_throttled\"")));
  // The global counter stays, without a group label (alerts use it).
  EXPECT_THAT(text, HasSubstr("\ncgacct_oom_total 1\n"));
  // Depth 3 covers all 6 groups.
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_current_bytes"), 6);
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_max_bytes"), 6);
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_events_total"), 6 * 6);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_series_dropped{reason=\"depth\"}"),
            0);
  EXPECT_EQ(
      SeriesValue(text, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      0);
}

// memory.oom.group kills are exported (issue 25: the series skipped
// oom_group_kill while the engine had no memory.oom.group): counted on the
// killed group, and in its ancestors' hierarchical counts.
TEST_F(GroupSeriesTest, OomGroupKillsAreExported) {
  ASSERT_TRUE(engine_->SetOomGroup("/a", true).ok());
  ASSERT_TRUE(engine_->Charge("/a/x", 8, PageKind::kAnon).ok());
  const absl::Status oom = engine_->Charge("/a/x", 1, PageKind::kAnon).status();
  ASSERT_EQ(OomGroupKillPath(oom), std::optional<std::string>("/a"));
  MetricsOptions options;
  options.group_depth = 3;
  const std::string text = Scrape(options);
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"oom_group_"
                        "kill\",path=\"/a\"}"),
            1);
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"oom_group_"
                        "kill\",path=\"/a/x\"}"),
            0);
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_events_total{event=\"oom_group_"
                        "kill\",path=\"/b\"}"),
            0);
}

TEST_F(GroupSeriesTest, DepthLeavesDeeperGroupsOutAndCountsThem) {
  MetricsOptions options;
  options.group_depth = 1;
  const std::string text = Scrape(options);
  // /, /a, /b, /c; not /a/x nor /a/x/deep.
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_current_bytes"), 4);
  EXPECT_THAT(text, Not(HasSubstr("path=\"/a/x\"")));
  EXPECT_EQ(SeriesValue(text, "cgacct_group_series_dropped{reason=\"depth\"}"),
            2);
  EXPECT_EQ(
      SeriesValue(text, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      0);

  // Depth 0: no per-group series, every group counted as left out.
  options.group_depth = 0;
  const std::string off = Scrape(options);
  EXPECT_THAT(off, Not(HasSubstr("cgacct_group_memory_current_bytes")));
  EXPECT_THAT(off, Not(HasSubstr("cgacct_group_memory_events_total")));
  EXPECT_EQ(SeriesValue(off, "cgacct_group_series_dropped{reason=\"depth\"}"),
            6);
  EXPECT_EQ(
      SeriesValue(off, "cgacct_group_series_dropped{reason=\"withheld\"}"), 0);

  // Off because access control is on and /metrics has no token: withheld,
  // not depth (before, an operator read 6 groups "too deep" at depth 0).
  options.group_series_withheld = true;
  const std::string withheld = Scrape(options);
  EXPECT_THAT(withheld, Not(HasSubstr("cgacct_group_memory_current_bytes")));
  EXPECT_EQ(
      SeriesValue(withheld, "cgacct_group_series_dropped{reason=\"depth\"}"),
      0);
  EXPECT_EQ(SeriesValue(withheld,
                        "cgacct_group_series_dropped{reason=\"withheld\"}"),
            6);
}

TEST_F(GroupSeriesTest, MaxGroupsKeepsTheShallowestAndSaysSoOnce) {
  std::vector<std::string> messages;
  MetricsOptions options;
  options.group_depth = 3;
  options.max_groups = 3;
  options.on_first_drop = [&messages](const std::string& m) {
    messages.push_back(m);
  };
  MetricsCollector collector(*engine_, flush_, rpc_, options);
  const std::string text = SerializeMetrics(collector);
  // Level order, path order within a level: /, /a, /b; not /c nor deeper.
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_current_bytes"), 3);
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_max_bytes"), 3);
  for (const char* path : {"/", "/a", "/b"}) {
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat(
                    "cgacct_group_memory_current_bytes{path=\"", path, "\"}")));
  }
  EXPECT_THAT(text, Not(HasSubstr("path=\"/c\"")));
  // /c, /a/x and /a/x/deep are within the depth: left out by the count.
  EXPECT_EQ(
      SeriesValue(text, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      3);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_series_dropped{reason=\"depth\"}"),
            0);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_THAT(messages[0], HasSubstr("3 of 6 groups"));
  EXPECT_THAT(messages[0], HasSubstr("--metrics_max_groups=3"));
  EXPECT_THAT(messages[0], HasSubstr("cgacct_group_series_dropped"));

  // Later scrapes still count, but say nothing more.
  ASSERT_TRUE(engine_->CreateGroup("/d", LimitsUpdate()).ok());
  const std::string again = SerializeMetrics(collector);
  EXPECT_EQ(
      SeriesValue(again, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      4);
  EXPECT_EQ(messages.size(), 1u);
}

// --- grpc_server_* ---------------------------------------------------------
}  // namespace
}  // namespace cgacct
