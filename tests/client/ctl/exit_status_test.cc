// cgacctctl's exit status classes and one-line errors
// (client/ctl/exit_status.h).
#include "client/ctl/exit_status.h"

#include "gtest/gtest.h"

namespace cgacct::ctl {
namespace {

TEST(ExitStatusForTest, OneClassPerKindOfFailure) {
  EXPECT_EQ(ExitStatusFor(grpc::StatusCode::OK), kExitOk);
  EXPECT_EQ(ExitStatusFor(grpc::StatusCode::NOT_FOUND), kExitNotFound);
  for (grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::PERMISSION_DENIED,
        grpc::StatusCode::UNAUTHENTICATED,
        grpc::StatusCode::FAILED_PRECONDITION,
        grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::ALREADY_EXISTS,
        grpc::StatusCode::OUT_OF_RANGE}) {
    EXPECT_EQ(ExitStatusFor(code), kExitRefused) << code;
  }
  EXPECT_EQ(ExitStatusFor(grpc::StatusCode::UNAVAILABLE), kExitUnavailable);
  EXPECT_EQ(ExitStatusFor(grpc::StatusCode::DEADLINE_EXCEEDED),
            kExitUnavailable);
  EXPECT_EQ(ExitStatusFor(grpc::StatusCode::INTERNAL), kExitOther);
  EXPECT_EQ(ExitStatusFor(grpc::StatusCode::UNIMPLEMENTED), kExitOther);
}

TEST(OneLineTest, LineBreaksBecomeSpaces) {
  EXPECT_EQ(OneLine("a\r\nb\nc\rd"), "a b c d");
  EXPECT_EQ(OneLine("plain"), "plain");
}

TEST(PrintRpcErrorTest, ReturnsTheStatusClass) {
  EXPECT_EQ(PrintRpcError("create /a",
                          grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "x")),
            kExitRefused);
  EXPECT_EQ(PrintUsageError("missing command"), kExitUsage);
}

}  // namespace
}  // namespace cgacct::ctl
