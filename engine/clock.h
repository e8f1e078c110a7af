// Clock: the one place the engine reads time. Everything that reads time in
// engine/ goes through the Clock it was given (EngineOptions::clock, passed
// down to Rstat and the Reclaimer), so a test can substitute ManualClock.
//
// Three kinds of time, one interface:
//   NowNs()      monotonic nanoseconds: flush bookkeeping (staleness, the
//                periodic flush) and durations reported to the observer;
//   NowCycles()  a cheaper monotonic tick for timing short intervals (each
//                flush-lock hold takes two); CyclesToNs()/NsToCycles()
//                convert. The real clock reads the TSC on x86-64
//                (engine/cycle_clock.h); the default is NowNs() in ns;
//   WallNow()    wall-clock time, only for records a person reads (when one
//                of the longest flush holds happened).
//
// Thread safety: implementations must be thread-safe.
#ifndef CGACCT_ENGINE_CLOCK_H_
#define CGACCT_ENGINE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cgacct {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds since an arbitrary origin (> 0).
  virtual int64_t NowNs() const = 0;
  // Monotonic ticks since an arbitrary origin; only differences mean
  // anything, through CyclesToNs(). Default: NowNs().
  virtual int64_t NowCycles() const { return NowNs(); }
  // Tick difference to nanoseconds, and back. Default: 1 tick = 1 ns.
  virtual int64_t CyclesToNs(int64_t cycles) const { return cycles; }
  virtual int64_t NsToCycles(int64_t ns) const { return ns; }
  // Wall-clock time. Default: absl::Now().
  virtual absl::Time WallNow() const { return absl::Now(); }
  // The process-wide clock: steady_clock, the TSC for cycles, absl::Now().
  static const Clock& Real();
};

// A clock that moves only when told to (tests). Starts at 1 s; its cycles
// are its nanoseconds and its wall time is the Unix epoch plus NowNs().
class ManualClock final : public Clock {
 public:
  int64_t NowNs() const override {
    return now_ns_.load(std::memory_order_relaxed);
  }
  absl::Time WallNow() const override {
    return absl::UnixEpoch() + absl::Nanoseconds(NowNs());
  }
  void Advance(absl::Duration d) {
    now_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_CLOCK_H_
