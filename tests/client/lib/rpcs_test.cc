// The retry rules of cgacct::client's RPCs (client/lib/rpcs.h): which codes
// are retried, and which NOT_FOUND means the session is gone.
#include "client/lib/rpcs.h"

#include "gtest/gtest.h"

namespace cgacct::client::internal {
namespace {

TEST(ClientRetryableTest, TransportCodesAndAbortedAreRetried) {
  EXPECT_TRUE(Retryable(grpc::StatusCode::UNAVAILABLE));
  EXPECT_TRUE(Retryable(grpc::StatusCode::DEADLINE_EXCEEDED));
  EXPECT_TRUE(Retryable(grpc::StatusCode::ABORTED));
  // A node shutting down cancels the calls in flight; the library never
  // cancels its own.
  EXPECT_TRUE(Retryable(grpc::StatusCode::CANCELLED));
  EXPECT_TRUE(NotServedHere(grpc::StatusCode::CANCELLED));
}

TEST(ClientRetryableTest, TheServersAnswersAreNot) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED,
        grpc::StatusCode::NOT_FOUND, grpc::StatusCode::INVALID_ARGUMENT,
        grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::INTERNAL,
        grpc::StatusCode::UNKNOWN}) {
    EXPECT_FALSE(Retryable(code)) << code;
  }
}

TEST(ClientSessionGoneTest, NotFoundNamingTheSession) {
  EXPECT_TRUE(SessionGone(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                       "session_id \"abc\" not found")));
}

TEST(ClientSessionGoneTest, NotFoundNamingAGroupOrAnotherCode) {
  EXPECT_FALSE(SessionGone(
      grpc::Status(grpc::StatusCode::NOT_FOUND, "path \"/a\" not found")));
  EXPECT_FALSE(SessionGone(
      grpc::Status(grpc::StatusCode::NOT_FOUND, "no such session_id")));
  EXPECT_FALSE(SessionGone(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "session_id \"abc\"")));
  EXPECT_FALSE(SessionGone(grpc::Status::OK));
}

}  // namespace
}  // namespace cgacct::client::internal
