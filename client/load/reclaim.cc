#include "client/load/reclaim.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cli/grpc_util.h"
#include "client/load/server_calls.h"

namespace cgacct::load {

std::string WriterPath(const LoadOptions& o, int i) {
  return absl::StrCat(o.group, "/writer-", i);
}

Writer::Writer(v1::Accounting::Stub& stub, const LoadOptions& o,
               std::string path, uint32_t cpu, uint64_t hold_pages)
    : stub_(stub),
      o_(o),
      path_(std::move(path)),
      cpu_(cpu),
      hold_pages_(std::max<uint64_t>(hold_pages, o.write_chunk_pages)) {}

void Writer::Run(RunControl& control, LiveCounters& live,
                 IntervalRecorder& interval, WorkerResult& result) {
  v1::ChargeRequest request;
  request.set_path(path_);
  request.set_nr_pages(o_.write_chunk_pages);
  request.set_kind(v1::PAGE_KIND_FILE);
  request.set_cpu(cpu_);
  v1::ChargeResponse response;
  control.go.WaitForNotification();
  while (!control.stopping()) {
    const TimedStatus call =
        TimedCharge(stub_, request, &response, o_.rpc_timeout);
    const bool measured = control.Measured(call.sent);
    if (call.status.ok()) {
      held_pages_ += o_.write_chunk_pages;
      live.charges.fetch_add(1, std::memory_order_relaxed);
      if (measured)
        RecordCharge(call.ns, o_.write_chunk_pages, interval, result);
      if (response.throttle_us() > 0) {
        const uint64_t us = SleepThrottle(response.throttle_us());
        if (measured) {
          result.throttle_us += us;
          ++result.over_high;
        }
      }
    } else {
      if (measured) interval.Error();
      NoteError("Charge", call.status, live, result);
      if (IsAmbiguous(call.status.error_code())) {
        held_pages_ += o_.write_chunk_pages;
      }
    }
    if (held_pages_ >= hold_pages_) Release(live, result);
  }
  Release(live, result);
}

void Writer::Release(LiveCounters& live, WorkerResult& result) {
  if (held_pages_ == 0) return;
  const grpc::Status status = UnchargePages(
      stub_, path_, held_pages_, v1::PAGE_KIND_FILE, cpu_, o_.rpc_timeout);
  if (!status.ok()) {
    NoteError("Uncharge", status, live, result);
    return;  // retried at the next Release
  }
  held_pages_ = 0;
}

void RunReclaimer(v1::Accounting::Stub& stub, const LoadOptions& o,
                  uint64_t page_size_bytes, RunControl& control,
                  ReclaimerResult& result) {
  v1::ReclaimRequest request;
  request.set_path(o.group);
  request.set_nr_bytes(o.reclaim_bytes);
  v1::ReclaimResponse response;
  control.go.WaitForNotification();
  const Clock::duration every = absl::ToChronoNanoseconds(o.reclaim_interval);
  Clock::time_point next = control.start;
  while (SleepUntil(next, control)) {
    grpc::ClientContext context;
    context.set_deadline(cli::DeadlineAfter(o.rpc_timeout));
    const Clock::time_point start = Clock::now();
    const grpc::Status status = stub.Reclaim(&context, request, &response);
    const uint64_t ns = NanosSince(start);
    if (control.Measured(start)) {
      if (status.ok()) {
        ++result.reclaims;
        result.reclaimed_pages += response.reclaimed_bytes() / page_size_bytes;
        result.latency.Record(ns);
      } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
        // memory_reclaim()'s -EAGAIN: not all of it could be reclaimed.
        ++result.short_reclaims;
        result.latency.Record(ns);
      } else {
        ++result.errors;
        if (result.first_error.empty()) {
          result.first_error =
              absl::StrCat("Reclaim: ", cli::FormatStatus(status));
        }
      }
    }
    next = std::max(next + every, Clock::now());
  }
}

absl::StatusOr<EventsSnapshot> ReadEvents(v1::Accounting::Stub& stub,
                                          const std::string& path,
                                          absl::Duration timeout) {
  absl::StatusOr<v1::GroupStats> read = ReadExactStats(stub, path, timeout);
  if (!read.ok()) return read.status();
  const v1::GroupStats& stats = *read;
  EventsSnapshot snap;
  snap.events.high = stats.events().high();
  snap.events.max = stats.events().max();
  snap.events.oom = stats.events().oom();
  snap.events.oom_kill = stats.events().oom_kill();
  for (const v1::StatEntry& entry : stats.stat()) {
    if (entry.name() == "pgsteal") snap.pgsteal = entry.value();
  }
  return snap;
}

void SetEventsDelta(const EventsSnapshot& before, const EventsSnapshot& after,
                    LoadReport& report) {
  EventCounts d;
  d.high = after.events.high - before.events.high;
  d.max = after.events.max - before.events.max;
  d.oom = after.events.oom - before.events.oom;
  d.oom_kill = after.events.oom_kill - before.events.oom_kill;
  report.events_delta = d;
  if (after.pgsteal.has_value() && before.pgsteal.has_value()) {
    report.pgsteal_delta = *after.pgsteal - *before.pgsteal;
  }
}

}  // namespace cgacct::load
