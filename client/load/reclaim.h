// cgacct-load --scenario=reclaim: memory.high and memory.reclaim under
// load. --writers Writers charge FILE pages in --write_chunk_pages chunks
// into GROUP/writer-i (memory.high = --high_bytes on GROUP), sleeping the
// throttle_us each charge returns, and uncharge what they hold once they
// hold --high_bytes each; a reclaimer (RunReclaimer) calls Reclaim
// (memory.reclaim) on GROUP for --reclaim_bytes every --reclaim_interval.
// GROUP's memory.events and pgsteal are read before and after the run
// (ReadEvents, EventsDelta).
//
// Thread safety: a Writer is thread-compatible: one thread runs it;
// ReclaimerResult is written by the reclaimer's thread and read after
// join(); the free functions are thread-safe.
#ifndef CGACCT_CLIENT_LOAD_RECLAIM_H_
#define CGACCT_CLIENT_LOAD_RECLAIM_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/load/histogram.h"
#include "client/load/load_report.h"
#include "client/load/options.h"
#include "client/load/run_control.h"

namespace cgacct::load {

// GROUP/writer-i, writer i's own group.
std::string WriterPath(const LoadOptions& o, int i);

// One FILE page writer of the reclaim scenario, charging into its own group
// (a page-cache writer under its parent's memory.high): charges chunks,
// sleeps the throttle_us each charge returns, and once it holds
// `hold_pages` uncharges them (the server uncharges what reclaim left of
// them, so over-asking is harmless: a call whose outcome is unknown just
// adds its chunk to what is uncharged).
class Writer {
 public:
  Writer(v1::Accounting::Stub& stub, const LoadOptions& o, std::string path,
         uint32_t cpu, uint64_t hold_pages);

  void Run(RunControl& control, LiveCounters& live, IntervalRecorder& interval,
           WorkerResult& result);

  // Pages that the last Release could not uncharge (0 after a clean run).
  uint64_t held_pages() const { return held_pages_; }

 private:
  void Release(LiveCounters& live, WorkerResult& result);

  v1::Accounting::Stub& stub_;
  const LoadOptions& o_;
  const std::string path_;
  const uint32_t cpu_;
  const uint64_t hold_pages_;
  uint64_t held_pages_ = 0;  // FILE pages charged and not yet uncharged
};

// What the reclaimer of the reclaim scenario saw; written by its thread,
// read after join().
struct ReclaimerResult {
  LatencyHistogram latency;
  uint64_t reclaims = 0;
  uint64_t short_reclaims = 0;
  uint64_t errors = 0;
  uint64_t reclaimed_pages = 0;
  std::string first_error;
};

// Calls Reclaim (memory.reclaim) on the group every --reclaim_interval, on
// a fixed schedule (a late call does not make the next one come sooner).
void RunReclaimer(v1::Accounting::Stub& stub, const LoadOptions& o,
                  uint64_t page_size_bytes, RunControl& control,
                  ReclaimerResult& result);

// GROUP's memory.events (hierarchical) and memory.stat pgsteal, exact.
struct EventsSnapshot {
  EventCounts events;
  std::optional<uint64_t> pgsteal;
};

absl::StatusOr<EventsSnapshot> ReadEvents(v1::Accounting::Stub& stub,
                                          const std::string& path,
                                          absl::Duration timeout);

// `after` - `before`, counter by counter, into the report's
// events_delta and (when both have it) pgsteal_delta.
void SetEventsDelta(const EventsSnapshot& before, const EventsSnapshot& after,
                    LoadReport& report);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_RECLAIM_H_
