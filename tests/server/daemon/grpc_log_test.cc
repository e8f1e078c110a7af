// LogSiteLimiter (server/daemon/grpc_log.h): gRPC's log lines, at most a
// burst then a few a second per call site, the held-back count said with
// the next line through.
#include "server/daemon/grpc_log.h"

#include <vector>

#include "gtest/gtest.h"

namespace cgacct {
namespace {

TEST(LogSiteLimiterTest, ABurstThenAFewASecondPerSiteWithTheCountHeldBack) {
  LogSiteLimiter limiter;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  uint64_t suppressed = 0;
  absl::Duration since;
  int written = 0;
  // 1,000 lines of one site in the same instant: the burst only.
  for (int i = 0; i < 1000; ++i)
    written += limiter.Admit("a.cc:1", t0, &suppressed, &since);
  EXPECT_EQ(written, static_cast<int>(LogSiteLimiter::kBurst));
  // Another site has its own bucket.
  EXPECT_TRUE(limiter.Admit("b.cc:2", t0, &suppressed, &since));
  EXPECT_EQ(suppressed, 0u);
  // Half a second later one token is back: the line goes through and says
  // how many were held back, since when.
  EXPECT_TRUE(limiter.Admit("a.cc:1", t0 + absl::Milliseconds(500),
                            &suppressed, &since));
  EXPECT_EQ(suppressed, 1000u - LogSiteLimiter::kBurst);
  EXPECT_EQ(since, absl::Milliseconds(500));
  // A steady flood of 1,000 lines a second for 10 s: about kPerSecond a
  // second get through.
  written = 0;
  for (int i = 1; i <= 10000; ++i) {
    written += limiter.Admit("a.cc:1",
                             t0 + absl::Milliseconds(500) + absl::Milliseconds(i),
                             &suppressed, &since);
  }
  EXPECT_GE(written, 19);
  EXPECT_LE(written, 21);
  // A site that goes quiet after a burst: its count is taken once the
  // first held-back line is old enough, then starts again at 0.
  for (int i = 0; i < 50; ++i)
    limiter.Admit("c.cc:3", t0 + absl::Seconds(30), &suppressed, &since);
  EXPECT_TRUE(limiter.TakeHeldBack(t0 + absl::Seconds(30) + absl::Milliseconds(500),
                                   absl::Seconds(1))
                  .empty());
  std::vector<LogSiteLimiter::HeldBack> held =
      limiter.TakeHeldBack(t0 + absl::Seconds(31), absl::Seconds(1));
  bool found = false;
  for (const LogSiteLimiter::HeldBack& h : held) {
    if (h.site != "c.cc:3") continue;
    found = true;
    EXPECT_EQ(h.count, 50u - LogSiteLimiter::kBurst);
    EXPECT_EQ(h.since, absl::Seconds(1));
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(limiter.TakeHeldBack(t0 + absl::Seconds(40), absl::ZeroDuration())
                  .empty());
  // Quiet for long enough, the burst is whole again.
  written = 0;
  for (int i = 0; i < 100; ++i)
    written += limiter.Admit("a.cc:1", t0 + absl::Seconds(60), &suppressed,
                             &since);
  EXPECT_EQ(written, static_cast<int>(LogSiteLimiter::kBurst));
}

}  // namespace
}  // namespace cgacct
