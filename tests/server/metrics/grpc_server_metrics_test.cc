// GrpcServerMetrics (server/metrics/grpc_server_metrics.h): the method table
// from the proto and the counters behind the grpc_server_* families.
#include "server/metrics/grpc_server_metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"

namespace cgacct {
namespace {

namespace absl_code {
constexpr int OK = 0;
constexpr int CANCELLED = static_cast<int>(absl::StatusCode::kCancelled);
constexpr int INVALID_ARGUMENT =
    static_cast<int>(absl::StatusCode::kInvalidArgument);
constexpr int RESOURCE_EXHAUSTED =
    static_cast<int>(absl::StatusCode::kResourceExhausted);
constexpr int UNAUTHENTICATED =
    static_cast<int>(absl::StatusCode::kUnauthenticated);
}  // namespace absl_code

TEST(GrpcMethodsTest, TypesFromTheProto) {
  const std::vector<GrpcMethodInfo> methods = CgacctdGrpcMethods();
  auto type_of = [&methods](const std::string& service,
                            const std::string& method) -> std::string {
    for (const GrpcMethodInfo& m : methods) {
      if (m.service == service && m.method == method) return m.type;
    }
    return "absent";
  };
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "Charge"), "unary");
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "ChargeStream"), "bidi_stream");
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "WatchEvents"), "server_stream");
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "GetEngineInfo"), "unary");
  EXPECT_EQ(type_of("grpc.health.v1.Health", "Check"), "unary");
  EXPECT_EQ(type_of("grpc.health.v1.Health", "Watch"), "server_stream");
  EXPECT_EQ(GrpcCodeGoName(absl_code::OK), std::string("OK"));
  EXPECT_EQ(GrpcCodeGoName(absl_code::CANCELLED), std::string("Canceled"));
  EXPECT_EQ(GrpcCodeGoName(absl_code::INVALID_ARGUMENT),
            std::string("InvalidArgument"));
  EXPECT_EQ(GrpcCodeGoName(absl_code::RESOURCE_EXHAUSTED),
            std::string("ResourceExhausted"));
  EXPECT_EQ(GrpcCodeGoName(absl_code::UNAUTHENTICATED),
            std::string("Unauthenticated"));
  EXPECT_EQ(GrpcCodeGoName(99), std::string("Unknown"));
}

TEST(GrpcMethodsTest, AccountingMethodsAreTheOnesThePipelineEnds) {
  for (const GrpcMethodInfo& m : CgacctdGrpcMethods()) {
    if (m.service == "cgacct.v1.Accounting") {
      ASSERT_TRUE(m.rpc_method.has_value()) << m.method;
      EXPECT_EQ(RpcMethodName(*m.rpc_method), m.method);
    } else {
      EXPECT_FALSE(m.rpc_method.has_value()) << m.method;
    }
  }
}

TEST(GrpcServerMetricsTest, CountsPerMethodIndex) {
  GrpcServerMetrics metrics(CgacctdGrpcMethods());
  const int check = metrics.MethodIndex("/grpc.health.v1.Health/Check");
  ASSERT_GE(check, 0);
  EXPECT_EQ(metrics.MethodIndex("/no.Such/Method"), -1);
  metrics.RecordStarted(check);
  metrics.RecordReceived(check);
  metrics.RecordSent(check);
  metrics.RecordHandled(check, 0, absl::Microseconds(3));
  metrics.RecordHandled(check, 99, absl::Microseconds(3));  // UNKNOWN
  EXPECT_EQ(metrics.started(check), 1u);
  EXPECT_EQ(metrics.received(check), 1u);
  EXPECT_EQ(metrics.sent(check), 1u);
  EXPECT_EQ(metrics.handled(check, 0), 1u);
  EXPECT_EQ(metrics.handled(check, 2), 1u);
  EXPECT_EQ(metrics.latency(check).count, 2u);
}
}  // namespace
}  // namespace cgacct
