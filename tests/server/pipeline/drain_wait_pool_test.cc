// DrainWaitPool (server/drain_wait_pool.h): blocking tasks run side by side
// on threads of their own up to the cap, queue beyond it, and the
// destructor runs what is queued before it joins.
#include "server/pipeline/drain_wait_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace cgacct {
namespace {

TEST(DrainWaitPoolTest, BlockingTasksRunSideBySideUpToTheCap) {
  constexpr int kCap = 4;
  DrainWaitPool pool(kCap);
  absl::Mutex mu;
  int running = 0;
  int most = 0;
  absl::Notification release;
  std::atomic<int> done{0};
  for (int i = 0; i < 2 * kCap; ++i) {
    pool.Run([&] {
      {
        absl::MutexLock l(&mu);
        most = std::max(most, ++running);
      }
      release.WaitForNotification();  // blocks, as a waiting charge does
      {
        absl::MutexLock l(&mu);
        --running;
      }
      done.fetch_add(1);
    });
  }
  {
    // All kCap threads start and block; the other kCap tasks queue.
    absl::MutexLock l(&mu);
    EXPECT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(
                                +[](int* r) { return *r == kCap; }, &running),
                            absl::Seconds(10)));
  }
  EXPECT_EQ(pool.threads(), static_cast<size_t>(kCap));
  EXPECT_EQ(done.load(), 0);
  release.Notify();
  while (done.load() < 2 * kCap) absl::SleepFor(absl::Milliseconds(1));
  absl::MutexLock l(&mu);
  EXPECT_EQ(most, kCap);
  EXPECT_EQ(pool.tasks(), static_cast<uint64_t>(2 * kCap));
}

TEST(DrainWaitPoolTest, IdleThreadsAreReusedAndTheDestructorRunsQueuedTasks) {
  std::atomic<int> done{0};
  {
    DrainWaitPool pool(1);
    absl::Notification first;
    pool.Run([&] {
      done.fetch_add(1);
      first.Notify();
    });
    first.WaitForNotification();
    // One thread, idle now: reused, never a second one.
    for (int i = 0; i < 10; ++i) pool.Run([&] { done.fetch_add(1); });
    EXPECT_EQ(pool.threads(), 1u);
  }  // the destructor runs what is still queued
  EXPECT_EQ(done.load(), 11);
}

}  // namespace
}  // namespace cgacct
