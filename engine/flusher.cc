#include "engine/flusher.h"

#include <algorithm>
#include <utility>

namespace cgacct {

PeriodicFlusher::PeriodicFlusher(absl::Duration interval, const Clock& clock,
                                 std::function<void()> flush)
    : interval_(interval),
      clock_(clock),
      flush_(std::move(flush)),
      last_flush_ns_(clock.NowNs()) {
  if (interval_ > absl::ZeroDuration())
    thread_ = std::thread([this] { Loop(); });
}

PeriodicFlusher::~PeriodicFlusher() {
  if (thread_.joinable()) {
    stop_.Notify();
    thread_.join();
  }
}

void PeriodicFlusher::Loop() {
  const absl::Duration tick = std::min(interval_, absl::Milliseconds(100));
  while (!stop_.WaitForNotificationWithTimeout(tick)) MaybeFlush();
}

bool PeriodicFlusher::MaybeFlush() {
  if (interval_ <= absl::ZeroDuration()) return false;
  const int64_t now = clock_.NowNs();
  int64_t last = last_flush_ns_.load(std::memory_order_relaxed);
  if (now - last < absl::ToInt64Nanoseconds(interval_)) return false;
  // One periodic flush per interval even if several threads call this.
  if (!last_flush_ns_.compare_exchange_strong(last, now,
                                              std::memory_order_relaxed))
    return false;
  flush_();
  return true;
}

}  // namespace cgacct
