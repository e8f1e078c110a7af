// The send schedule of cgacct-load's open-loop mode (--rate), after wrk2:
// every request has an intended send time fixed in advance, and its latency
// is measured from that time, not from when the request actually went out.
// A server stall then counts against every request it delayed, not only the
// one in flight (no "coordinated omission").
//
// Thread safety: an OpenLoopSchedule is thread-compatible; each worker owns
// one.
#ifndef CGACCT_CLIENT_LOAD_OPEN_LOOP_H_
#define CGACCT_CLIENT_LOAD_OPEN_LOOP_H_

#include <chrono>
#include <cmath>
#include <cstdint>

namespace cgacct::load {

// One worker's share of a total rate spread over `workers` workers: worker
// `index` sends its k-th request (k = 0, 1, ...) at
//   start + (k + index / workers) * interval,  interval = workers / rate_per_s
// seconds, so the merged schedule of all workers is evenly spaced at
// 1 / rate_per_s. Times are computed from k (no accumulated rounding drift).
// Preconditions: rate_per_s > 0, workers >= 1, 0 <= index < workers.
class OpenLoopSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  OpenLoopSchedule(double rate_per_s, int workers, int index,
                   Clock::time_point start)
      : start_(start),
        interval_ns_(1e9 * workers / rate_per_s),
        offset_ns_(interval_ns_ * index / workers) {}

  // The intended send time of the current request.
  Clock::time_point intended() const { return At(k_); }

  // Moves on to the next request.
  void Advance() { ++k_; }

  // Requests sent so far (Advance() calls).
  uint64_t sent() const { return k_; }

  // The worker's own interval between two of its requests, in ns.
  double interval_ns() const { return interval_ns_; }

  // How many requests, the current one included, were due before `t` and
  // have not been sent: what a run ending at `t` leaves unsent. 0 when the
  // current request is due at or after `t`.
  uint64_t DueBefore(Clock::time_point t) const {
    if (At(k_) >= t) return 0;
    const double until_ns = static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_)
            .count());
    // Slots j with start + offset + j * interval < t, minus those sent.
    const uint64_t due = static_cast<uint64_t>(
        std::ceil((until_ns - offset_ns_) / interval_ns_));
    return due > k_ ? due - k_ : 0;
  }

 private:
  Clock::time_point At(uint64_t k) const {
    return start_ + std::chrono::nanoseconds(static_cast<int64_t>(
                        std::llround(offset_ns_ + interval_ns_ * k)));
  }

  Clock::time_point start_;
  double interval_ns_;
  double offset_ns_;
  uint64_t k_ = 0;
};

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_OPEN_LOOP_H_
