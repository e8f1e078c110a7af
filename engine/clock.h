// Clock: where the engine reads monotonic time for flush bookkeeping
// (staleness, the periodic flush). Injectable so tests can move time.
//
// Thread safety: implementations must be thread-safe.
#ifndef CGACCT_ENGINE_CLOCK_H_
#define CGACCT_ENGINE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace cgacct {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds since an arbitrary origin (> 0).
  virtual int64_t NowNs() const = 0;
  // The process-wide steady clock.
  static const Clock& Real();
};

// A clock that moves only when told to (tests). Starts at 1 s.
class ManualClock final : public Clock {
 public:
  int64_t NowNs() const override {
    return now_ns_.load(std::memory_order_relaxed);
  }
  void Advance(absl::Duration d) {
    now_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_CLOCK_H_
