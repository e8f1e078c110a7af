// RpcMetrics (server/metrics/rpc_metrics.h).
#include "server/metrics/rpc_metrics.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cgacct {
namespace {

// google.rpc.Code numbers, as the recorders take them.
namespace absl_code {
constexpr int OK = static_cast<int>(absl::StatusCode::kOk);
constexpr int RESOURCE_EXHAUSTED =
    static_cast<int>(absl::StatusCode::kResourceExhausted);
constexpr int UNKNOWN = static_cast<int>(absl::StatusCode::kUnknown);
constexpr int FAILED_PRECONDITION =
    static_cast<int>(absl::StatusCode::kFailedPrecondition);
}  // namespace absl_code

TEST(RpcMetricsTest, CountsPerMethodAndCode) {
  RpcMetrics rpc;
  rpc.Record(RpcMethod::kCharge, absl_code::OK, absl::Microseconds(5));
  rpc.Record(RpcMethod::kCharge, absl_code::OK, absl::Microseconds(5));
  rpc.Record(RpcMethod::kCharge, absl_code::RESOURCE_EXHAUSTED,
             absl::Microseconds(50));
  // Codes outside 0..16 count as UNKNOWN.
  rpc.Record(RpcMethod::kGetStats, 17, absl::Microseconds(1));
  rpc.Record(RpcMethod::kGetStats, -1, absl::Microseconds(1));
  rpc.RecordChargeRejected();
  EXPECT_EQ(rpc.handled(RpcMethod::kCharge, absl_code::OK), 2u);
  EXPECT_EQ(rpc.handled(RpcMethod::kCharge, absl_code::RESOURCE_EXHAUSTED), 1u);
  EXPECT_EQ(rpc.handled(RpcMethod::kGetStats, absl_code::UNKNOWN), 2u);
  EXPECT_EQ(rpc.handled(RpcMethod::kUncharge, absl_code::OK), 0u);
  EXPECT_EQ(rpc.latency(RpcMethod::kCharge).count, 3u);
  EXPECT_EQ(rpc.charges_rejected(), 1u);
  EXPECT_STREQ(RpcMethodName(RpcMethod::kGetEngineInfo), "GetEngineInfo");
  EXPECT_EQ(StatusCodeName(absl_code::FAILED_PRECONDITION),
            "FAILED_PRECONDITION");
  EXPECT_EQ(StatusCodeName(17), "UNKNOWN");
}

TEST(RpcMetricsTest, ChargeAnswersCountRejectionsButNotOoms) {
  RpcMetrics rpc;
  rpc.RecordChargeAnswer(absl::OkStatus());
  rpc.RecordChargeAnswer(absl::ResourceExhaustedError("memory.max of /a"));
  EXPECT_EQ(rpc.charges_rejected(), 0u);
  rpc.RecordChargeAnswer(absl::InvalidArgumentError("nr_pages must be > 0"));
  rpc.RecordChargeAnswer(absl::NotFoundError("no such group"));
  EXPECT_EQ(rpc.charges_rejected(), 2u);
}

TEST(RpcMetricsTest, ShedReasonsHaveTheirLabelNames) {
  RpcMetrics rpc;
  rpc.RecordShed(ShedReason::kInFlightPerIdentity);
  EXPECT_EQ(rpc.shed(ShedReason::kInFlightPerIdentity), 1u);
  EXPECT_EQ(rpc.shed(ShedReason::kStreamsPerIdentity), 0u);
  EXPECT_STREQ(ShedReasonName(ShedReason::kStreamsPerIdentity),
               "streams_per_identity");
}
}  // namespace
}  // namespace cgacct
