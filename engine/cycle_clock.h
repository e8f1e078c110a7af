// CycleClock: a cheap monotonic clock for timing lock holds; the
// implementation of Clock::Real()'s NowCycles() (engine/clock.h). Engine code
// reads time through its injected Clock, never from here; benchmarks may use
// it directly.
//
// The flush-lock tracer takes two timestamps per hold, and the per_cpu policy
// makes one hold per CPU: 800 timestamps per flush with 400 CPUs. Here
// steady_clock costs about 33 ns a call (vDSO on a VM) against 12 ns for the
// TSC, so on x86-64 this reads the TSC (the kernel's tracers do likewise) and
// converts with a rate calibrated once against steady_clock. Elsewhere it is
// steady_clock.
//
// Thread safety: thread-safe. Assumes an invariant TSC (constant_tsc and
// nonstop_tsc, as on current x86-64 machines and VMs).
#ifndef CGACCT_ENGINE_CYCLE_CLOCK_H_
#define CGACCT_ENGINE_CYCLE_CLOCK_H_

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace cgacct {

class CycleClock {
 public:
  // Ticks since an arbitrary origin.
  static int64_t Now() {
#if defined(__x86_64__)
    return static_cast<int64_t>(__rdtsc());
#else
    return SteadyNowNs();
#endif
  }
  // Converts a tick difference to nanoseconds.
  static int64_t ToNs(int64_t ticks) {
    return static_cast<int64_t>(static_cast<double>(ticks) * NsPerTick());
  }
  // Converts nanoseconds to ticks.
  static int64_t FromNs(int64_t ns) {
    return static_cast<int64_t>(static_cast<double>(ns) / NsPerTick());
  }
  // steady_clock now, in nanoseconds.
  static int64_t SteadyNowNs();

 private:
  static double NsPerTick();
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_CYCLE_CLOCK_H_
