// LogLine() (server/common/log_line.h): cgacctd's own stderr lines carry an
// RFC 3339 UTC time with milliseconds (issue 26, item 11: they had none).
#include "server/common/log_line.h"

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

TEST(LogLineTest, StampsTheLineWithUtcMilliseconds) {
  const absl::Time t =
      absl::FromCivil(absl::CivilSecond(2026, 12, 7, 12, 34, 56),
                      absl::UTCTimeZone()) +
      absl::Milliseconds(789) + absl::Microseconds(999);
  EXPECT_EQ(FormatLogLine("SIGHUP: tokens and policy reloaded", t),
            "2026-12-07T12:34:56.789Z cgacctd: SIGHUP: tokens and policy "
            "reloaded\n");
  // Whole seconds keep their three digits (a fixed width for sorting).
  EXPECT_EQ(FormatLogLine("x", t - absl::Milliseconds(789) -
                                   absl::Microseconds(999)),
            "2026-12-07T12:34:56.000Z cgacctd: x\n");
}

}  // namespace
}  // namespace cgacct
