// MetricsExposer (server/metrics/prometheus/exposer.h): /metrics over HTTP.
#include "server/metrics/prometheus/exposer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/prometheus/collector.h"
#include "server/metrics/rpc_metrics.h"
#include "tests/server/http_get.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

class MetricsExposerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 2;
    options.observer = &observer_;
    engine_ = *Engine::Create(options);
    collector_ = std::make_shared<MetricsCollector>(*engine_, observer_, rpc_);
  }

  RstatFlushObserver observer_;
  RpcMetrics rpc_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<MetricsCollector> collector_;
};

TEST_F(MetricsExposerTest, ServesMetricsOverHttpOnPortZero) {
  absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
      MetricsExposer::Start("127.0.0.1:0", collector_);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  ASSERT_GT((*exposer)->port(), 0);
  const std::string response =
      test_util::HttpGet((*exposer)->port(), "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("cgacct_groups 1"));
  EXPECT_THAT(response,
              HasSubstr("cgacct_group_memory_current_bytes{path=\"/\"} 0"));
}

TEST_F(MetricsExposerTest, TakenPortIsAnErrorNotAnException) {
  absl::StatusOr<std::unique_ptr<MetricsExposer>> first =
      MetricsExposer::Start("127.0.0.1:0", collector_);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  absl::StatusOr<std::unique_ptr<MetricsExposer>> second =
      MetricsExposer::Start(taken, collector_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(taken));
}

}  // namespace
}  // namespace cgacct
