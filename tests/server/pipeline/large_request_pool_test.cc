// LargeRequestPool (server/pipeline/large_request_pool.h): identities take
// turns, one task each, so a tenant's queue delays another tenant's task by
// at most one task per thread; threads start on demand up to the cap; the
// destructor runs what is queued before it joins.
#include "server/pipeline/large_request_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace cgacct {
namespace {

using ::testing::ElementsAre;

// Records the order tasks ran in.
struct Order {
  absl::Mutex mu;
  std::vector<std::string> ran ABSL_GUARDED_BY(mu);
  void Note(const std::string& name) {
    absl::MutexLock l(&mu);
    ran.push_back(name);
  }
  std::vector<std::string> Get() {
    absl::MutexLock l(&mu);
    return ran;
  }
};

TEST(LargeRequestPoolTest, IdentitiesTakeTurns) {
  Order order;
  absl::Notification started;
  absl::Notification release;
  {
    LargeRequestPool pool(1);
    pool.Run("a", [&] {
      order.Note("a1");
      started.Notify();
      release.WaitForNotification();
    });
    if (!started.WaitForNotificationWithTimeout(absl::Seconds(10))) {
      release.Notify();  // so that the destructor can end
      FAIL() << "a1 never started";
    }
    // While a1 runs: three more of A's, then B's, then another of A's.
    for (const char* name : {"a2", "a3", "a4"})
      pool.Run("a", [&order, name] { order.Note(name); });
    pool.Run("b", [&] { order.Note("b1"); });
    pool.Run("b", [&] { order.Note("b2"); });
    EXPECT_EQ(pool.queued(), 5u);
    release.Notify();
  }  // the destructor runs what is queued
  // B's first task waited for one of A's, not for all three.
  EXPECT_THAT(order.Get(), ElementsAre("a1", "a2", "b1", "a3", "b2", "a4"));
}

TEST(LargeRequestPoolTest, ThreadsStartOnDemandUpToTheCap) {
  // What the tasks use outlives the pool (its destructor runs them).
  absl::Mutex mu;
  int running = 0;
  absl::Notification release;
  LargeRequestPool pool(2);
  EXPECT_EQ(pool.max_threads(), 2u);
  EXPECT_EQ(pool.threads(), 0u);
  for (int i = 0; i < 5; ++i) {
    pool.Run(i % 2 == 0 ? "a" : "b", [&] {
      {
        absl::MutexLock l(&mu);
        ++running;
      }
      release.WaitForNotification();
      absl::MutexLock l(&mu);
      --running;
    });
  }
  {
    absl::MutexLock l(&mu);
    auto two = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return running == 2; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&two), absl::Seconds(10)));
  }
  EXPECT_EQ(pool.threads(), 2u);
  EXPECT_EQ(pool.queued(), 3u);
  release.Notify();
}

TEST(LargeRequestPoolTest, DefaultsToOneThreadPerCpu) {
  LargeRequestPool pool;
  EXPECT_GE(pool.max_threads(), 1u);
}

}  // namespace
}  // namespace cgacct
