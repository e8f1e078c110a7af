// What the workers of a cgacct-load run share: the start gate and the
// clock (RunControl), the stop flag, SIGINT/SIGTERM, the per-worker
// progress counters and results, and how a failed call is noted.
//
// Thread safety: RunControl's fields are written before go.Notify() and
// read-only after it, except `stop` (atomic). LiveCounters are atomics
// written by one worker and read by the progress line. WorkerResult is
// written by its worker and read after join(). The free functions are
// thread-safe.
#ifndef CGACCT_CLIENT_LOAD_RUN_CONTROL_H_
#define CGACCT_CLIENT_LOAD_RUN_CONTROL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "client/load/histogram.h"
#include "client/load/load_report.h"
#include "grpcpp/support/status.h"

namespace cgacct::load {

using Clock = std::chrono::steady_clock;

// Shared by all workers of a run.
struct RunControl {
  absl::Notification go;  // start gate, so the clock starts with all threads
  // Written before go.Notify(), read-only after it (the Notification orders
  // the writes before every worker's reads).
  Clock::time_point start;          // the clock's start (warm-up included)
  Clock::time_point measure_start;  // start + --warmup
  Clock::time_point end;            // measure_start + --duration
  // Whether a call started (closed loop) or due (open loop) at `t` counts.
  bool Measured(Clock::time_point t) const { return t >= measure_start; }
  // Memory ordering: relaxed: the flag only ends loops; everything the
  // workers produce is published by join().
  std::atomic<bool> stop{false};
  bool stopping() const { return stop.load(std::memory_order_relaxed); }
};

// What the progress line reads while the workers run: one cache line per
// worker, written only by that worker.
// Memory ordering: relaxed everywhere: the counters are statistics, and the
// final numbers are taken from WorkerResult after join().
struct alignas(64) LiveCounters {
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> charges{0};
  std::atomic<uint64_t> ooms{0};  // refused charges: OOM kills + ENOMEMs
  std::atomic<uint64_t> errors{0};
};
static_assert(sizeof(LiveCounters) == 64, "one cache line per worker");

// One worker's results; written by the worker, read after join().
struct WorkerResult {
  LatencyHistogram latency;
  uint64_t ok = 0;  // reads or charges that succeeded
  uint64_t charged_pages = 0;
  uint64_t ooms = 0;            // refused charges of <= 8 pages (OOM kills)
  uint64_t costly_enomems = 0;  // refused charges of > 8 pages (no OOM)
  uint64_t cycles = 0;
  uint64_t errors = 0;  // whole run, warm-up included (decides exit status)
  uint64_t throttle_us = 0;
  uint64_t over_high = 0;  // charges answered with throttle_us > 0
  // Open loop only.
  uint64_t sent = 0;        // calls measured (ok or not)
  uint64_t late = 0;        // sent after their intended time
  uint64_t unsent = 0;      // due before the end, never sent
  uint64_t max_lag_ns = 0;  // longest send delay behind the schedule
  std::string first_error;
};

// Makes SIGINT and SIGTERM end the run early (StopRequested()); a second
// signal kills as usual.
void InstallStopSignalHandlers();
// Whether SIGINT or SIGTERM arrived since InstallStopSignalHandlers().
bool StopRequested();

// Whether the server may or may not have applied a call that failed with
// `code`.
bool IsAmbiguous(grpc::StatusCode code);

// Whether a call that failed with `code` should be followed by a pause:
// UNAVAILABLE or DEADLINE_EXCEEDED (do not spin against a server that is
// down or drowning).
bool ShouldBackOff(grpc::StatusCode code);

// Counts a failed call (and keeps the first error's text).
void NoteErrorNoSleep(absl::string_view rpc, const grpc::Status& status,
                      LiveCounters& live, WorkerResult& result);

// NoteErrorNoSleep, then a 10 ms pause when ShouldBackOff().
void NoteError(absl::string_view rpc, const grpc::Status& status,
               LiveCounters& live, WorkerResult& result);

// Records one measured call of `ns` nanoseconds in the worker's run-long
// histogram and in its current interval.
void RecordLatency(uint64_t ns, IntervalRecorder& interval,
                   WorkerResult& result);

// Records one measured successful Charge of `pages` pages that took `ns`:
// its latency, its pages, one more ok.
void RecordCharge(uint64_t ns, uint64_t pages, IntervalRecorder& interval,
                  WorkerResult& result);

// Sleeps the memory.high throttle a Charge answered (the kernel's
// mem_cgroup_handle_over_high() on the way back to user space), capped at
// 2 s as the server caps it; returns the microseconds slept.
uint64_t SleepThrottle(uint64_t throttle_us);

// Nanoseconds from `start` to now.
uint64_t NanosSince(Clock::time_point start);

// Sleeps until `t` in naps of at most 100 ms; false if the run was stopped
// first.
bool SleepUntil(Clock::time_point t, const RunControl& control);

// Prints "cgacct-load: MESSAGE" on stderr; returns 1, the exit status of a
// run whose set-up failed.
int Fail(absl::string_view message);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_RUN_CONTROL_H_
