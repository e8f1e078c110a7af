// CallLimiter (server/pipeline/call_limiter.h): per-identity stream and
// in-flight admission, and the shed reason its refusals carry.
#include "server/pipeline/call_limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace cgacct {
namespace {

using ::testing::HasSubstr;
using Kind = CallLimiter::Kind;

TEST(CallLimiterTest, AdmitsUpToTheLimitPerIdentityThenSheds) {
  CallLimiter::Options options;
  options.max_streams_per_identity = 2;
  options.max_in_flight_per_identity = 1;
  CallLimiter limiter(options);
  absl::StatusOr<CallLimiter::Permit> a = limiter.Acquire(Kind::kStream, "");
  absl::StatusOr<CallLimiter::Permit> b = limiter.Acquire(Kind::kStream, "");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(limiter.InUse(Kind::kStream, ""), 2u);
  absl::StatusOr<CallLimiter::Permit> c = limiter.Acquire(Kind::kStream, "");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ShedReasonOf(c.status()), ShedReason::kStreamsPerIdentity);
  EXPECT_THAT(c.status().message(), HasSubstr("cgacctd is shedding load"));
  EXPECT_THAT(c.status().message(), HasSubstr("--max_streams_per_identity"));
  EXPECT_THAT(c.status().message(), HasSubstr("not a memory.max OOM"));
  // Another identity has its own count; in-flight is counted apart.
  EXPECT_TRUE(limiter.Acquire(Kind::kStream, "tenant-b").ok());
  absl::StatusOr<CallLimiter::Permit> m = limiter.Acquire(Kind::kInFlight, "");
  ASSERT_TRUE(m.ok());
  absl::StatusOr<CallLimiter::Permit> m2 =
      limiter.Acquire(Kind::kInFlight, "tenant\n");
  ASSERT_TRUE(m2.ok());
  absl::StatusOr<CallLimiter::Permit> m3 =
      limiter.Acquire(Kind::kInFlight, "tenant\n");
  ASSERT_FALSE(m3.ok());
  EXPECT_EQ(ShedReasonOf(m3.status()), ShedReason::kInFlightPerIdentity);
  EXPECT_THAT(m3.status().message(), HasSubstr("identity \"tenant\\n\""));
  EXPECT_THAT(m3.status().message(), HasSubstr("--max_in_flight_per_identity"));
  // A released permit (destroyed, moved-from or Release()d once) gives back
  // exactly one unit.
  CallLimiter::Permit moved = *std::move(a);
  moved.Release();
  moved.Release();
  EXPECT_EQ(limiter.InUse(Kind::kStream, ""), 1u);
  EXPECT_TRUE(limiter.Acquire(Kind::kStream, "").ok());
  EXPECT_EQ(limiter.InUse(Kind::kStream, ""), 1u);  // the temporary went
}

TEST(CallLimiterTest, ZeroMeansNoLimit) {
  CallLimiter::Options options;
  options.max_streams_per_identity = 0;
  options.max_in_flight_per_identity = 0;
  CallLimiter limiter(options);
  std::vector<CallLimiter::Permit> held;
  for (int i = 0; i < 10000; ++i) {
    absl::StatusOr<CallLimiter::Permit> p =
        limiter.Acquire(Kind::kInFlight, "");
    ASSERT_TRUE(p.ok());
    held.push_back(*std::move(p));
  }
  EXPECT_EQ(limiter.InUse(Kind::kInFlight, ""), 10000u);
  held.clear();
  EXPECT_EQ(limiter.InUse(Kind::kInFlight, ""), 0u);
}

TEST(ShedReasonOfTest, OnlyTheLimitersRefusalsCarryAReason) {
  EXPECT_EQ(ShedReasonOf(absl::ResourceExhaustedError("memory.max of /a")),
            std::nullopt);
  EXPECT_EQ(ShedReasonOf(absl::OkStatus()), std::nullopt);
  CallLimiter::Options options;
  options.max_in_flight_per_identity = 1;
  CallLimiter limiter(options);
  absl::StatusOr<CallLimiter::Permit> held =
      limiter.Acquire(Kind::kInFlight, "a");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(ShedReasonOf(limiter.Acquire(Kind::kInFlight, "a").status()),
            ShedReason::kInFlightPerIdentity);
}
}  // namespace
}  // namespace cgacct
