#include "client/load/run_control.h"

#include <signal.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/grpc_util.h"

namespace cgacct::load {
namespace {

// Set by SIGINT/SIGTERM: end the run early, still clean up and report.
// A lock-free atomic is async-signal-safe.
std::atomic<bool> g_stop_requested{false};

void OnSignal(int) { g_stop_requested.store(true, std::memory_order_relaxed); }

}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal kills as usual
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool StopRequested() {
  return g_stop_requested.load(std::memory_order_relaxed);
}

bool IsAmbiguous(grpc::StatusCode code) {
  return code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::CANCELLED ||
         code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::INTERNAL;
}

bool ShouldBackOff(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

void NoteErrorNoSleep(absl::string_view rpc, const grpc::Status& status,
                      LiveCounters& live, WorkerResult& result) {
  ++result.errors;
  live.errors.fetch_add(1, std::memory_order_relaxed);
  if (result.first_error.empty()) {
    result.first_error = absl::StrCat(rpc, ": ", cli::FormatStatus(status));
  }
}

void NoteError(absl::string_view rpc, const grpc::Status& status,
               LiveCounters& live, WorkerResult& result) {
  NoteErrorNoSleep(rpc, status, live, result);
  if (ShouldBackOff(status.error_code())) {
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void RecordLatency(uint64_t ns, IntervalRecorder& interval,
                   WorkerResult& result) {
  result.latency.Record(ns);
  interval.Record(ns);
}

void RecordCharge(uint64_t ns, uint64_t pages, IntervalRecorder& interval,
                  WorkerResult& result) {
  RecordLatency(ns, interval, result);
  result.charged_pages += pages;
  ++result.ok;
}

uint64_t SleepThrottle(uint64_t throttle_us) {
  const uint64_t us = std::min<uint64_t>(throttle_us, 2'000'000);
  absl::SleepFor(absl::Microseconds(us));
  return us;
}

uint64_t NanosSince(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start)
          .count());
}

bool SleepUntil(Clock::time_point t, const RunControl& control) {
  for (Clock::time_point now = Clock::now(); now < t; now = Clock::now()) {
    if (control.stopping()) return false;
    std::this_thread::sleep_until(
        std::min(t, now + std::chrono::milliseconds(100)));
  }
  return !control.stopping();
}

int Fail(absl::string_view message) {
  std::cerr << "cgacct-load: " << message << "\n";
  return 1;
}

}  // namespace cgacct::load
