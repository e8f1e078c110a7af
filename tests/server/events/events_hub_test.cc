// EventsHub (server/events/events_hub.h): who watches which group, the
// notifier thread's coalescing, and the terminal notifications.
#include "server/events/events_hub.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace cgacct {
namespace {

class RecordingWatcher : public EventsHub::Watcher {
 public:
  void OnEventsChanged() override {
    changed.fetch_add(1);
    if (block_first && changed.load() == 1) {
      entered.Notify();
      release.WaitForNotification();
    }
  }
  void OnGroupDeleted() override { deleted.fetch_add(1); }
  void OnShutdown() override { shutdown.fetch_add(1); }

  bool block_first = false;
  absl::Notification entered, release;
  std::atomic<int> changed{0}, deleted{0}, shutdown{0};
};

void WaitFor(const std::function<bool()>& done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(EventsHubTest, ChangesDuringACallbackCoalesceIntoOne) {
  EventsHub hub;
  RecordingWatcher w;
  w.block_first = true;
  ASSERT_TRUE(hub.Subscribe(7, &w));
  hub.OnMemoryEvents(7);
  w.entered.WaitForNotification();
  for (int i = 0; i < 100; ++i) hub.OnMemoryEvents(7);
  hub.OnMemoryEvents(8);  // nobody watches 8
  w.release.Notify();
  WaitFor([&] { return w.changed.load() >= 2; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(w.changed.load(), 2);  // the blocked call, then one for all 100
  hub.Unsubscribe(7, &w);
  hub.OnMemoryEvents(7);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(w.changed.load(), 2);
  EXPECT_EQ(hub.nr_watchers(), 0);
}

TEST(EventsHubTest, DeletionAndShutdownAreTerminal) {
  EventsHub hub;
  RecordingWatcher a, b;
  ASSERT_TRUE(hub.Subscribe(1, &a));
  ASSERT_TRUE(hub.Subscribe(2, &b));
  hub.OnGroupDeleted(1);
  WaitFor([&] { return a.deleted.load() == 1; });
  EXPECT_EQ(a.deleted.load(), 1);
  hub.OnMemoryEvents(1);  // a is gone
  hub.Shutdown();         // returns after b's OnShutdown
  EXPECT_EQ(b.shutdown.load(), 1);
  EXPECT_EQ(a.shutdown.load(), 0);
  EXPECT_EQ(a.changed.load(), 0);
  EXPECT_FALSE(hub.Subscribe(3, &a));
  EXPECT_EQ(hub.nr_watchers(), 0);
}

TEST(EventsHubTest, UnsubscribeWaitsForARunningCallback) {
  EventsHub hub;
  RecordingWatcher w;
  w.block_first = true;
  ASSERT_TRUE(hub.Subscribe(5, &w));
  hub.OnMemoryEvents(5);
  w.entered.WaitForNotification();
  std::atomic<bool> returned{false};
  std::thread t([&] {
    hub.Unsubscribe(5, &w);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());  // the callback still runs
  w.release.Notify();
  t.join();
  EXPECT_TRUE(returned.load());
}

}  // namespace
}  // namespace cgacct
