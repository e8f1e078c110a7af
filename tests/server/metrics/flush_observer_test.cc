// RstatFlushObserver (server/metrics/flush_observer.h).
#include "server/metrics/flush_observer.h"

#include <gtest/gtest.h>

#include "absl/time/time.h"

namespace cgacct {
namespace {

TEST(RstatFlushObserverTest, KeepsPoliciesApart) {
  RstatFlushObserver observer;
  FlushLockHold hold;
  hold.policy = FlushLockPolicy::kWhole;
  hold.hold = absl::Microseconds(100);
  hold.wait = absl::Microseconds(7);
  hold.cpus_walked = 400;
  observer.OnFlushLockHold(hold);
  observer.OnFlushDone(absl::Microseconds(300), 400, 12);
  EXPECT_EQ(observer.lock_hold(FlushLockPolicy::kPerCpu).Collect().count, 0u);
  const auto whole = observer.lock_hold(FlushLockPolicy::kWhole).Collect();
  EXPECT_EQ(whole.count, 1u);
  EXPECT_EQ(whole.max_ns, 100000u);
  EXPECT_EQ(observer.lock_wait(FlushLockPolicy::kWhole).Collect().sum_ns,
            7000u);
  EXPECT_EQ(observer.flush_duration().Collect().count, 1u);
}

}  // namespace
}  // namespace cgacct
