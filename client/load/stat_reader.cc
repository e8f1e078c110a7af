#include "client/load/stat_reader.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli/grpc_util.h"
#include "client/load/open_loop.h"

namespace cgacct::load {

void CountRead(const grpc::Status& status, uint64_t ns, bool measured,
               LiveCounters& live, IntervalRecorder& interval,
               WorkerResult& result) {
  if (status.ok()) {
    live.reads.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (measured) interval.Error();
    NoteErrorNoSleep("GetStats", status, live, result);
  }
  if (!measured) return;  // warm-up
  ++result.sent;
  if (status.ok()) {
    RecordLatency(ns, interval, result);
    ++result.ok;
  }
}

void RunStatReader(v1::Accounting::Stub& stub, const LoadOptions& o, int index,
                   RunControl& control, LiveCounters& live,
                   IntervalRecorder& interval, WorkerResult& result) {
  v1::GetStatsRequest request;
  request.set_path(o.group);
  request.set_flush(o.flush);
  v1::GroupStats response;
  control.go.WaitForNotification();
  std::optional<OpenLoopSchedule> schedule;
  if (o.rate > 0) schedule.emplace(o.rate, o.readers, index, control.start);
  while (!control.stopping()) {
    Clock::time_point intended;
    bool late = false;
    if (schedule.has_value()) {
      intended = schedule->intended();
      // Free before the call is due: wait for it. Still busy with the last
      // call when it was due: send at once, late.
      if (Clock::now() < intended) {
        if (!SleepUntil(intended, control)) break;
      } else {
        late = true;
      }
    }
    grpc::ClientContext context;
    context.set_deadline(cli::DeadlineAfter(o.rpc_timeout));
    const Clock::time_point start = Clock::now();
    const grpc::Status status = stub.GetStats(&context, request, &response);
    const Clock::time_point from = schedule.has_value() ? intended : start;
    const uint64_t ns = NanosSince(from);
    if (schedule.has_value()) schedule->Advance();
    const bool measured = control.Measured(from);
    CountRead(status, ns, measured, live, interval, result);
    if (measured && schedule.has_value()) {
      result.late += late ? 1 : 0;
      result.max_lag_ns = std::max<uint64_t>(
          result.max_lag_ns,
          std::chrono::duration_cast<std::chrono::nanoseconds>(start - intended)
              .count());
    }
    if (!status.ok() && ShouldBackOff(status.error_code())) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  if (schedule.has_value()) {
    // The calls due in the measured window that never went out.
    const Clock::time_point stop = std::min(control.end, Clock::now());
    result.unsent = schedule->DueBefore(stop) -
                    std::min(schedule->DueBefore(stop),
                             schedule->DueBefore(control.measure_start));
  }
}

ReaderDriver::ReaderDriver(const LoadOptions& o, RunControl& control)
    : o_(o), control_(control) {
  request_.set_path(o.group);
  request_.set_flush(o.flush);
}

void ReaderDriver::Add(v1::Accounting::Stub* stub, LiveCounters* live,
                       IntervalRecorder* interval, WorkerResult* result) {
  auto r = std::make_unique<Reader>();
  r->stub = stub;
  r->live = live;
  r->interval = interval;
  r->result = result;
  readers_.push_back(std::move(r));
}

void ReaderDriver::Run() {
  control_.go.WaitForNotification();
  for (std::unique_ptr<Reader>& r : readers_) Send(*r);
  while (pending_ > 0) {
    void* tag = nullptr;
    bool ok = false;
    // Wake up at least every 100 ms (a stopped run sends nothing more and
    // ends when the calls in flight are back).
    const grpc::CompletionQueue::NextStatus next = cq_.AsyncNext(
        &tag, &ok,
        std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::TIMEOUT) continue;
    --pending_;
    const uintptr_t bits = reinterpret_cast<uintptr_t>(tag);
    Reader& r = *reinterpret_cast<Reader*>(bits & ~uintptr_t{1});
    if ((bits & 1) == 0) Done(r);  // else: the back-off pause is over
    if (!control_.stopping()) Next(r);
  }
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

void ReaderDriver::Next(Reader& r) {
  if (!r.back_off) {
    Send(r);
    return;
  }
  r.back_off = false;
  r.alarm = std::make_unique<grpc::Alarm>();
  r.alarm->Set(&cq_,
               std::chrono::system_clock::now() + std::chrono::milliseconds(10),
               Tag(r, /*alarm=*/true));
  ++pending_;
}

void ReaderDriver::Send(Reader& r) {
  r.context = std::make_unique<grpc::ClientContext>();
  r.context->set_deadline(cli::DeadlineAfter(o_.rpc_timeout));
  r.sent = Clock::now();
  r.call = r.stub->PrepareAsyncGetStats(r.context.get(), request_, &cq_);
  r.call->StartCall();
  r.call->Finish(&r.response, &r.status, Tag(r, /*alarm=*/false));
  ++pending_;
}

void ReaderDriver::Done(Reader& r) {
  const uint64_t ns = NanosSince(r.sent);
  CountRead(r.status, ns, control_.Measured(r.sent), *r.live, *r.interval,
            *r.result);
  r.back_off = !r.status.ok() && ShouldBackOff(r.status.error_code());
}

void* ReaderDriver::Tag(Reader& r, bool alarm) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(&r) |
                                 (alarm ? 1 : 0));
}

}  // namespace cgacct::load
