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
using ::testing::AllOf;
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

// Issue 22's attack round (row 11a): 200 concurrent 4 MB ChargeBatches of
// one tenant, within its 1024 messages, took cgacctd from 57 to 877 MB. The
// bytes of an identity's in-flight messages are bounded too: a message that
// would pass the bound is shed (one alone always passes), other identities
// are unaffected, and a permit's bytes come back with it.
TEST(CallLimiterTest, InFlightBytesAreBoundedPerIdentity) {
  CallLimiter::Options options;
  options.max_in_flight_bytes_per_identity = 10 << 20;
  CallLimiter limiter(options);
  std::vector<CallLimiter::Permit> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<CallLimiter::Permit> p =
        limiter.Acquire(Kind::kInFlight, "a", 4 << 20);
    ASSERT_TRUE(p.ok()) << i;
    held.push_back(*std::move(p));
  }
  EXPECT_EQ(limiter.BytesInUse("a"), uint64_t{8} << 20);
  absl::StatusOr<CallLimiter::Permit> third =
      limiter.Acquire(Kind::kInFlight, "a", 4 << 20);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(ShedReasonOf(third.status()),
            ShedReason::kInFlightBytesPerIdentity);
  EXPECT_THAT(third.status().message(),
              HasSubstr("--max_in_flight_bytes_per_identity"));
  EXPECT_EQ(limiter.InUse(Kind::kInFlight, "a"), 2u);  // nothing taken
  // Small messages still fit; another identity has its own bytes.
  EXPECT_TRUE(limiter.Acquire(Kind::kInFlight, "a", 1 << 20).ok());
  EXPECT_TRUE(limiter.Acquire(Kind::kInFlight, "b", 9 << 20).ok());
  held.pop_back();
  EXPECT_EQ(limiter.BytesInUse("a"), uint64_t{4} << 20);
  EXPECT_TRUE(limiter.Acquire(Kind::kInFlight, "a", 4 << 20).ok());
  held.clear();
  EXPECT_EQ(limiter.BytesInUse("a"), 0u);
  // One message larger than the bound, alone, is admitted.
  EXPECT_TRUE(limiter.Acquire(Kind::kInFlight, "a", 16 << 20).ok());
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

// A unary call admitted before its request is read adds the bytes once it
// is: by Acquire's rule (one message alone passes; past the bound, shed and
// nothing added).
TEST(CallLimiterTest, BytesAddedAfterTheReadFollowAcquiresRule) {
  CallLimiter::Options options;
  options.max_in_flight_bytes_per_identity = 100;
  CallLimiter limiter(options);
  CallLimiter::Permit first = *limiter.Acquire(Kind::kInFlight, "a");
  CallLimiter::Permit second = *limiter.Acquire(Kind::kInFlight, "a");
  EXPECT_TRUE(limiter.AddBytes(first, 150).ok());  // alone: passes
  EXPECT_EQ(limiter.BytesInUse("a"), 150u);
  // A call admitted now is shed before its read: the identity is past it.
  EXPECT_EQ(ShedReasonOf(limiter.Acquire(Kind::kInFlight, "a").status()),
            ShedReason::kInFlightBytesPerIdentity);
  const absl::Status shed = limiter.AddBytes(second, 10);
  EXPECT_EQ(ShedReasonOf(shed), ShedReason::kInFlightBytesPerIdentity);
  EXPECT_EQ(limiter.BytesInUse("a"), 150u);
  EXPECT_TRUE(limiter.AddBytes(second, 0).ok());
  first.Release();
  EXPECT_TRUE(limiter.AddBytes(second, 90).ok());
  EXPECT_EQ(limiter.BytesInUse("a"), 90u);
  second.Release();
  EXPECT_EQ(limiter.BytesInUse("a"), 0u);
  CallLimiter::Permit empty;
  EXPECT_TRUE(limiter.AddBytes(empty, 1000).ok());  // a probe: nothing held
}

// Issue 22's attack round, row 11a: reads of an identity's requests are
// bounded; past the bound they wait in order (not shed) and start as reads
// end; a cancelled waiter never starts; other identities are not affected.
TEST(CallLimiterTest, ReadsPastTheBoundWaitInOrder) {
  CallLimiter::Options options;
  options.max_reads_per_identity = 2;
  CallLimiter limiter(options);
  std::vector<int> started;
  EXPECT_EQ(limiter.BeginRead("a", [&] { started.push_back(1); }), 0u);
  EXPECT_EQ(limiter.BeginRead("a", [&] { started.push_back(2); }), 0u);
  const uint64_t third = limiter.BeginRead("a", [&] { started.push_back(3); });
  const uint64_t fourth = limiter.BeginRead("a", [&] { started.push_back(4); });
  const uint64_t fifth = limiter.BeginRead("a", [&] { started.push_back(5); });
  EXPECT_NE(third, 0u);
  EXPECT_NE(fourth, 0u);
  EXPECT_EQ(limiter.ReadsInUse("a"), 2u);
  EXPECT_EQ(limiter.ReadsWaiting("a"), 3u);
  // Another identity has its own slots.
  EXPECT_EQ(limiter.BeginRead("b", [] {}), 0u);
  limiter.EndRead("b");
  EXPECT_TRUE(limiter.CancelRead("a", fourth));
  EXPECT_FALSE(limiter.CancelRead("a", fourth));  // once
  limiter.EndRead("a");  // the slot passes to the third
  EXPECT_EQ(started, std::vector<int>({3}));
  EXPECT_EQ(limiter.ReadsInUse("a"), 2u);
  limiter.EndRead("a");  // to the fifth (the fourth was cancelled)
  EXPECT_EQ(started, std::vector<int>({3, 5}));
  EXPECT_FALSE(limiter.CancelRead("a", fifth));  // already started
  limiter.EndRead("a");
  limiter.EndRead("a");
  EXPECT_EQ(limiter.ReadsInUse("a"), 0u);
  EXPECT_EQ(limiter.ReadsWaiting("a"), 0u);
  // No bound: every read starts at once.
  CallLimiter::Options unbounded;
  unbounded.max_reads_per_identity = 0;
  CallLimiter free_limiter(unbounded);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(free_limiter.BeginRead("a", [] {}), 0u);
}

// A ChargeStream keeps a read pending while it is open, and gRPC 1.51 takes a
// pending read's whole message (issue 22): an identity's ChargeStreams have a
// bound of their own, inside its bound on streams.
TEST(CallLimiterTest, ChargeStreamsHaveTheirOwnBoundInsideTheStreams) {
  CallLimiter::Options options;
  options.max_streams_per_identity = 4;
  options.max_charge_streams_per_identity = 2;
  CallLimiter limiter(options);
  auto c1 = limiter.Acquire(CallLimiter::Kind::kChargeStream, "a");
  auto c2 = limiter.Acquire(CallLimiter::Kind::kChargeStream, "a");
  ASSERT_TRUE(c1.ok());
  ASSERT_TRUE(c2.ok());
  auto c3 = limiter.Acquire(CallLimiter::Kind::kChargeStream, "a");
  ASSERT_FALSE(c3.ok());
  EXPECT_EQ(ShedReasonOf(c3.status()), ShedReason::kChargeStreamsPerIdentity);
  EXPECT_THAT(std::string(c3.status().message()),
              AllOf(HasSubstr("2 ChargeStreams open"),
                    HasSubstr("--max_in_flight_bytes_per_identity"),
                    HasSubstr("--max_message_bytes")));
  // Other streams still fit under the stream bound; another identity has
  // its own ChargeStreams.
  auto w1 = limiter.Acquire(CallLimiter::Kind::kStream, "a");
  auto w2 = limiter.Acquire(CallLimiter::Kind::kStream, "a");
  ASSERT_TRUE(w1.ok());
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(limiter.InUse(CallLimiter::Kind::kStream, "a"), 4u);
  EXPECT_EQ(limiter.InUse(CallLimiter::Kind::kChargeStream, "a"), 2u);
  EXPECT_EQ(ShedReasonOf(
                limiter.Acquire(CallLimiter::Kind::kStream, "a").status()),
            ShedReason::kStreamsPerIdentity);
  EXPECT_TRUE(limiter.Acquire(CallLimiter::Kind::kChargeStream, "b").ok());
  // A ChargeStream that ends gives both back.
  c1->Release();
  EXPECT_EQ(limiter.InUse(CallLimiter::Kind::kChargeStream, "a"), 1u);
  EXPECT_EQ(limiter.InUse(CallLimiter::Kind::kStream, "a"), 3u);
  EXPECT_TRUE(limiter.Acquire(CallLimiter::Kind::kChargeStream, "a").ok());
}

// SessionStream reads take slots of their own: an identity's requests being
// read do not hold up its session reads, nor the other way round.
TEST(CallLimiterTest, SessionReadsHaveSlotsOfTheirOwn) {
  CallLimiter::Options options;
  options.max_reads_per_identity = 1;
  options.max_session_reads_per_identity = 2;
  CallLimiter limiter(options);
  using Pool = CallLimiter::ReadPool;
  std::vector<int> started;
  EXPECT_EQ(limiter.BeginRead("a", [] {}), 0u);
  EXPECT_NE(limiter.BeginRead("a", [&] { started.push_back(0); }), 0u);
  EXPECT_EQ(limiter.BeginRead("a", [] {}, Pool::kSession), 0u);
  EXPECT_EQ(limiter.BeginRead("a", [] {}, Pool::kSession), 0u);
  const uint64_t waiting =
      limiter.BeginRead("a", [&] { started.push_back(1); }, Pool::kSession);
  EXPECT_NE(waiting, 0u);
  EXPECT_EQ(limiter.ReadsInUse("a"), 1u);
  EXPECT_EQ(limiter.ReadsInUse("a", Pool::kSession), 2u);
  EXPECT_EQ(limiter.ReadsWaiting("a", Pool::kSession), 1u);
  limiter.EndRead("a", Pool::kSession);  // to the waiting session read
  EXPECT_EQ(started, std::vector<int>({1}));
  EXPECT_FALSE(limiter.CancelRead("a", waiting, Pool::kSession));
  limiter.EndRead("a");  // to the waiting request read
  EXPECT_EQ(started, std::vector<int>({1, 0}));
  limiter.EndRead("a");
  limiter.EndRead("a", Pool::kSession);
  limiter.EndRead("a", Pool::kSession);
  EXPECT_EQ(limiter.ReadsInUse("a"), 0u);
  EXPECT_EQ(limiter.ReadsInUse("a", Pool::kSession), 0u);
}
}  // namespace
}  // namespace cgacct
