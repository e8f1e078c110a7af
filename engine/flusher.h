// PeriodicFlusher: the engine's background flush of the whole tree, the
// kernel's flush_memcg_stats_dwork() (mm/memcontrol.c), every FLUSH_TIME
// (2 s by default).
//
// Invariants:
//   - At most one periodic flush per interval on the engine's clock, however
//     many threads call MaybeFlush() (a compare-and-swap on the last flush
//     time decides).
//   - The thread (if any) starts in the constructor and is stopped and joined
//     in the destructor, before anything the flush callback uses goes away:
//     declare the flusher after what it flushes.
//
// Thread safety: thread-safe.
#ifndef CGACCT_ENGINE_FLUSHER_H_
#define CGACCT_ENGINE_FLUSHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/clock.h"

namespace cgacct {

class PeriodicFlusher {
 public:
  // `flush` flushes the whole tree; it must be thread-safe. A zero
  // `interval` disables the flusher: no thread, MaybeFlush() never flushes.
  // `clock` must outlive the flusher.
  PeriodicFlusher(absl::Duration interval, const Clock& clock,
                  std::function<void()> flush);
  ~PeriodicFlusher();
  PeriodicFlusher(const PeriodicFlusher&) = delete;
  PeriodicFlusher& operator=(const PeriodicFlusher&) = delete;

  // Calls `flush` if `interval` has passed on the clock since the last
  // periodic flush; returns whether it did.
  bool MaybeFlush();

  absl::Duration interval() const { return interval_; }

 private:
  // Wakes often enough (every min(interval, 100 ms)) to notice a due flush
  // on the engine's clock, which a test may advance by hand.
  void Loop();

  const absl::Duration interval_;
  const Clock& clock_;
  const std::function<void()> flush_;
  std::atomic<int64_t> last_flush_ns_;
  absl::Notification stop_;
  std::thread thread_;  // last: started after everything it uses
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_FLUSHER_H_
