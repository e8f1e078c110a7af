#include "server/rpc/status.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace cgacct {
namespace {

TEST(ToGrpcStatusTest, OkIsOk) {
  const grpc::Status s = ToGrpcStatus(absl::OkStatus());
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.error_message(), "");
}

TEST(ToGrpcStatusTest, EveryCanonicalCodeMapsOneToOneWithMessage) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status in(static_cast<absl::StatusCode>(code), "msg for code");
    const grpc::Status out = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(out.error_code()), code);
    EXPECT_EQ(out.error_message(), "msg for code");
  }
}

TEST(ToGrpcStatusTest, EngineErrorsKeepCodeAndMessage) {
  EXPECT_EQ(
      ToGrpcStatus(absl::ResourceExhaustedError("oom in /p")).error_code(),
      grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(
      ToGrpcStatus(absl::ResourceExhaustedError("oom in /p")).error_message(),
      "oom in /p");
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("x")).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(ToGrpcStatusTest, NonCanonicalCodeBecomesUnknown) {
  const grpc::Status out =
      ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "odd"));
  EXPECT_EQ(out.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(out.error_message(), "odd");
}

TEST(ToGrpcStatusCodeTest, IsTheCodeOfToGrpcStatus) {
  EXPECT_EQ(ToGrpcStatusCode(absl::OkStatus()), grpc::StatusCode::OK);
  for (int code = 0; code <= 17; ++code) {
    const absl::Status in(static_cast<absl::StatusCode>(code), "m");
    EXPECT_EQ(ToGrpcStatusCode(in), ToGrpcStatus(in).error_code()) << code;
  }
  EXPECT_EQ(
      ToGrpcStatusCode(absl::Status(static_cast<absl::StatusCode>(42), "odd")),
      grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace cgacct
