#include "engine/cycle_clock.h"

#include <chrono>
#include <thread>

#include "engine/clock.h"

namespace cgacct {

int64_t CycleClock::SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {
class RealClock final : public Clock {
 public:
  int64_t NowNs() const override { return CycleClock::SteadyNowNs(); }
  int64_t NowCycles() const override { return CycleClock::Now(); }
  int64_t CyclesToNs(int64_t cycles) const override {
    return CycleClock::ToNs(cycles);
  }
  int64_t NsToCycles(int64_t ns) const override {
    return CycleClock::FromNs(ns);
  }
  absl::Time WallNow() const override { return absl::Now(); }
};
}  // namespace

const Clock& Clock::Real() {
  static const RealClock clock;
  return clock;
}

double CycleClock::NsPerTick() {
#if defined(__x86_64__)
  // Calibrated once (about 10 ms), on first use.
  static const double ns_per_tick = [] {
    const int64_t ns0 = SteadyNowNs();
    const int64_t t0 = Now();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int64_t ns1 = SteadyNowNs();
    const int64_t t1 = Now();
    return t1 > t0
               ? static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0)
               : 1.0;
  }();
  return ns_per_tick;
#else
  return 1.0;
#endif
}

}  // namespace cgacct
