// cgacct-load: the load generator (docs/DESIGN.md §6.2).
//
// Scenarios (closed loop, one blocking RPC at a time per worker thread):
//   stat-reader  --threads readers call GetStats on --group until --duration.
//   hog          --hogs workers charge ANON pages in --hog_chunk_pages chunks
//                into their own child group GROUP/hog-i until the group's
//                memory.max (--hog_max_bytes) makes a charge fail with
//                RESOURCE_EXHAUSTED, then uncharge all they hold and start
//                again (a "cycle"). As in the kernel, a refused charge of
//                at most 8 pages is an OOM kill of the hog, and a costlier
//                one (the default 64-page chunk: order 6 > 3) is an ENOMEM
//                without OOM (memory.events `max` only); the report counts
//                the two apart. The hogs charge through --hog_cpus per-CPU
//                slots: "all" (the default) moves each hog to its next CPU
//                after every charge, so together they charge on every
//                modelled CPU and every CPU's rstat updated list is
//                non-empty when a flush walks it, as with the seed's 400
//                hogs on 400 CPUs; N uses slots i * nr_cpus / N (N = --hogs:
//                hog i stays on slot i * nr_cpus / hogs).
//   seed-rstat   both at once: the shape of the kernel benchmark behind
//                "cgroup/rstat: avoid disabling irqs for O(num_cpu)" (400
//                stat readers + 400 hogs charging until OOM, 10 s).
//   reclaim      memory.high and memory.reclaim under load: --writers
//                workers charge FILE pages in --write_chunk_pages chunks into
//                GROUP/writer-i (memory.high = --high_bytes on GROUP),
//                honouring the throttle_us each charge returns, and uncharge
//                what is left of their pages once they hold --high_bytes
//                each; a reclaimer calls Reclaim (memory.reclaim) on GROUP
//                for --reclaim_bytes every --reclaim_interval. The report
//                gives charge and reclaim latency, the throttle, the pages
//                reclaimed and GROUP's memory.events deltas (high, max, oom).
//
// Closed loop (the default): each worker sends its next call when the last
// one returns, and latency runs from send to answer; the stat readers are
// then asynchronous calls driven by --io_threads threads (ReaderDriver), the
// hogs, writers and reclaimer blocking threads. Open loop (--rate=N, stat
// readers, a blocking thread each: RunStatReader): N GetStats calls per
// second in total on a fixed schedule
// spread evenly over the readers (client/open_loop.h); latency runs from each
// call's intended send time, as wrk2 measures it, so a server stall counts
// against every call it delayed; the report says how many calls went out
// late, how many due were never sent and the achieved rate. Either way the
// first --warmup (1 s) is run but excluded from every figure; the report
// carries a per-second series (p50/p90/p99/max), --json writes it all and
// --chart=FILE.png plots it with gnuplot (client/load_chart.h).
//
// Group lifecycle: GROUP (and missing ancestors) is created if missing and
// left in place; for hog scenarios its memory.max is set to --hog_max_bytes.
// Each hog owns GROUP/hog-i, so what it uncharges is exactly what it charged
// (a call that timed out is reconciled from the group's exact `anon`
// stat). At the end every hog uncharges what it still holds and its group is
// deleted; the report shows the pages the server reparented on deletion,
// which must be 0. A hog group left over by a killed run is emptied first.
// Run one cgacct-load per --group at a time: two runs on the same group share
// the hog groups and corrupt each other's books.
//
// Exit status: 0 after a clean run; 1 when the server is unreachable or the
// set-up fails (one line on stderr); 3 when the run finished but some RPCs
// failed unexpectedly; 130 when interrupted (the report is still printed).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "grpcpp/alarm.h"
#include "client/cli_util.h"
#include "client/grpc_util.h"
#include "client/histogram.h"
#include "client/load_chart.h"
#include "client/load_report.h"
#include "client/metrics_scrape.h"
#include "client/netperf.h"
#include "client/session_churn.h"
#include "client/open_loop.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "cgacctd gRPC address");
ABSL_FLAG(std::string, metrics_target, "",
          "HOST:PORT of cgacctd's /metrics (loopback only); default: the "
          "--target host with port 9464");
ABSL_FLAG(std::string, scenario, "stat-reader",
          "stat-reader | hog | seed-rstat | reclaim | netperf "
          "(client/netperf.h) | session-churn (client/session_churn.h)");
ABSL_FLAG(int32_t, threads, 8,
          "stat readers, each one GetStats call in flight at a time on its "
          "own connection (stat-reader, seed-rstat)");
ABSL_FLAG(int32_t, hogs, 8, "memory hog workers (hog, seed-rstat)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "how long to run");
ABSL_FLAG(std::string, json, "", "also write the report as JSON to this file");
ABSL_FLAG(double, rate, 0,
          "open loop: GetStats calls per second in total, spread evenly over "
          "the stat readers, latency measured from each call's intended send "
          "time (wrk2's model); 0: closed loop");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "run this long before measuring; excluded from every figure");
ABSL_FLAG(std::string, chart, "",
          "also plot latency over time (p50/p99 per second) and the "
          "percentile distribution to this PNG (runs gnuplot)");
ABSL_FLAG(int32_t, writers, 4, "FILE page writers (reclaim)");
ABSL_FLAG(cgacct::client::ByteSize, high_bytes,
          cgacct::client::ByteSize{32 << 20},
          "memory.high of --group (reclaim)");
ABSL_FLAG(uint64_t, write_chunk_pages, 16, "FILE pages per Charge (reclaim)");
ABSL_FLAG(cgacct::client::ByteSize, reclaim_bytes,
          cgacct::client::ByteSize{4 << 20},
          "bytes per Reclaim (memory.reclaim) call (reclaim)");
ABSL_FLAG(absl::Duration, reclaim_interval, absl::Milliseconds(100),
          "time between two Reclaim calls (reclaim)");
ABSL_FLAG(std::string, group, "/cgacct-load",
          "test group; created if missing and left in place");
ABSL_FLAG(cgacct::client::ByteSize, hog_max_bytes,
          cgacct::client::ByteSize{64 << 20},
          "memory.max of --group for hog scenarios (\"max\", 64M, 1G ...)");
ABSL_FLAG(uint64_t, hog_chunk_pages, 64,
          "ANON pages per hog Charge call; a refused charge of <= 8 pages "
          "counts as an OOM kill, of more as a costly ENOMEM (no OOM)");
ABSL_FLAG(std::string, hog_cpus, "all",
          "per-CPU slots the hogs charge through (hog, seed-rstat): all "
          "(each hog moves to its next CPU after every charge, so every "
          "modelled CPU gets updates) or N (N slots spread over the server's "
          "CPUs; N = --hogs keeps each hog on a slot of its own)");
ABSL_FLAG(std::string, flush, "exact",
          "GetStats flush mode: exact | threshold | none");
ABSL_FLAG(int32_t, channels, 0,
          "gRPC connections shared round-robin by the workers; 0: one per "
          "worker");
ABSL_FLAG(int32_t, io_threads, 1,
          "closed loop: threads driving the stat readers' asynchronous calls "
          "(shared round-robin); 0: a blocking thread per reader. Open loop "
          "(--rate) always runs a thread per reader");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(5),
          "how long to wait for the server to accept connections");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(5),
          "deadline of every RPC");

namespace cgacct::client {
namespace {

namespace v1 = ::cgacct::v1;
using Clock = std::chrono::steady_clock;

// Set by SIGINT/SIGTERM: end the run early, still clean up and report.
// A lock-free atomic is async-signal-safe.
std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true, std::memory_order_relaxed); }

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal kills as usual
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

struct Options {
  std::string target;
  std::string metrics_target;
  std::string scenario;
  int readers = 0;  // 0 when the scenario has none
  int hogs = 0;     // 0 when the scenario has none
  int writers = 0;  // 0 when the scenario has none (reclaim)
  absl::Duration duration;
  absl::Duration warmup;
  double rate = 0;  // open loop: total GetStats/s; 0 = closed loop
  std::string json_path;
  std::string chart_path;
  uint64_t high_bytes = 0;
  uint64_t write_chunk_pages = 0;
  uint64_t reclaim_bytes = 0;
  absl::Duration reclaim_interval;
  std::string group;
  uint64_t hog_max_bytes = 0;
  uint64_t hog_chunk_pages = 0;
  int hog_cpus = 0;  // 0 = all of the server's CPUs
  std::string flush_name;
  v1::FlushMode flush = v1::FLUSH_MODE_EXACT;
  int channels = 0;
  int io_threads = 1;  // threads driving the stat readers' calls
  absl::Duration connect_timeout;
  absl::Duration rpc_timeout;
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  o.target = absl::GetFlag(FLAGS_target);
  o.metrics_target = absl::GetFlag(FLAGS_metrics_target);
  if (o.metrics_target.empty()) {
    absl::StatusOr<std::string> derived = MetricsTargetFor(o.target);
    // Not fatal: the report then says n/a for the server-side numbers.
    o.metrics_target = derived.ok() ? *derived : "";
  }
  o.scenario = absl::GetFlag(FLAGS_scenario);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int hogs = absl::GetFlag(FLAGS_hogs);
  if (o.scenario == "stat-reader") {
    o.readers = threads;
  } else if (o.scenario == "hog") {
    o.hogs = hogs;
  } else if (o.scenario == "seed-rstat") {
    o.readers = threads;
    o.hogs = hogs;
  } else if (o.scenario == "reclaim") {
    o.writers = absl::GetFlag(FLAGS_writers);
    if (o.writers < 1 || o.writers > 4096) {
      return absl::InvalidArgumentError("--writers must be in 1..4096");
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--scenario=", o.scenario,
                     ": expected stat-reader, hog, seed-rstat or reclaim"));
  }
  // Bounded: a few thousand threads at most, a day at most.
  if (threads < 1 || threads > 4096) {
    return absl::InvalidArgumentError("--threads must be in 1..4096");
  }
  if (hogs < 1 || hogs > 4096) {
    return absl::InvalidArgumentError("--hogs must be in 1..4096");
  }
  o.duration = absl::GetFlag(FLAGS_duration);
  if (o.duration <= absl::ZeroDuration() || o.duration > absl::Hours(24)) {
    return absl::InvalidArgumentError("--duration must be in (0, 24h]");
  }
  o.warmup = absl::GetFlag(FLAGS_warmup);
  if (o.warmup < absl::ZeroDuration() || o.warmup > absl::Hours(1)) {
    return absl::InvalidArgumentError("--warmup must be in [0, 1h]");
  }
  o.rate = absl::GetFlag(FLAGS_rate);
  if (!(o.rate >= 0 && o.rate <= 1e7)) {
    return absl::InvalidArgumentError(
        "--rate must be in [0, 10000000] calls/s (0: closed loop)");
  }
  if (o.rate > 0 && o.readers == 0) {
    return absl::InvalidArgumentError(
        "--rate paces the stat readers: use it with --scenario=stat-reader "
        "or seed-rstat");
  }
  o.json_path = absl::GetFlag(FLAGS_json);
  o.chart_path = absl::GetFlag(FLAGS_chart);
  o.high_bytes = absl::GetFlag(FLAGS_high_bytes).bytes;
  o.write_chunk_pages = absl::GetFlag(FLAGS_write_chunk_pages);
  if (o.write_chunk_pages == 0 || o.write_chunk_pages > (1u << 20)) {
    return absl::InvalidArgumentError(
        "--write_chunk_pages must be in 1..1048576");
  }
  o.reclaim_bytes = absl::GetFlag(FLAGS_reclaim_bytes).bytes;
  if (o.writers > 0 && (o.reclaim_bytes == 0 || o.reclaim_bytes == UINT64_MAX)) {
    return absl::InvalidArgumentError(
        "--reclaim_bytes must be a positive size");
  }
  o.reclaim_interval = absl::GetFlag(FLAGS_reclaim_interval);
  if (o.reclaim_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--reclaim_interval must be positive");
  }
  o.group = absl::GetFlag(FLAGS_group);
  if (o.group.empty() || o.group.front() != '/') {
    return absl::InvalidArgumentError("--group must be an absolute path");
  }
  if ((o.hogs > 0 || o.writers > 0) && o.group == "/") {
    return absl::InvalidArgumentError(
        "--group=/ cannot take a memory.max or memory.high; use a child "
        "group for hogs and writers");
  }
  o.hog_max_bytes = absl::GetFlag(FLAGS_hog_max_bytes).bytes;
  o.hog_chunk_pages = absl::GetFlag(FLAGS_hog_chunk_pages);
  if (o.hog_chunk_pages == 0 || o.hog_chunk_pages > (1u << 20)) {
    return absl::InvalidArgumentError(
        "--hog_chunk_pages must be in 1..1048576");
  }
  if (const std::string hog_cpus = absl::GetFlag(FLAGS_hog_cpus);
      hog_cpus != "all" &&
      (!absl::SimpleAtoi(hog_cpus, &o.hog_cpus) || o.hog_cpus < 1 ||
       o.hog_cpus > 4096)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hog_cpus=", hog_cpus, ": expected all or a number in 1..4096"));
  }
  o.flush_name = absl::GetFlag(FLAGS_flush);
  if (o.flush_name == "exact") {
    o.flush = v1::FLUSH_MODE_EXACT;
  } else if (o.flush_name == "threshold") {
    o.flush = v1::FLUSH_MODE_THRESHOLD;
  } else if (o.flush_name == "none") {
    o.flush = v1::FLUSH_MODE_NONE;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--flush=", o.flush_name, ": expected exact, threshold or none"));
  }
  o.channels = absl::GetFlag(FLAGS_channels);
  if (o.channels < 0)
    return absl::InvalidArgumentError("--channels must be >= 0");
  o.io_threads = absl::GetFlag(FLAGS_io_threads);
  if (o.io_threads < 0 || o.io_threads > 256) {
    return absl::InvalidArgumentError("--io_threads must be in 0..256");
  }
  o.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  if (o.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--rpc_timeout must be positive");
  }
  return o;
}

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

bool IsAmbiguous(grpc::StatusCode code) {
  // The server may or may not have applied the call.
  return code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::CANCELLED ||
         code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::INTERNAL;
}

// Counts a failed call (and keeps the first error's text).
void NoteErrorNoSleep(absl::string_view rpc, const grpc::Status& status,
                      LiveCounters& live, WorkerResult& result) {
  ++result.errors;
  live.errors.fetch_add(1, std::memory_order_relaxed);
  if (result.first_error.empty()) {
    result.first_error = absl::StrCat(rpc, ": ", FormatStatus(status));
  }
}

// NoteErrorNoSleep, then a pause after UNAVAILABLE or DEADLINE_EXCEEDED.
void NoteError(absl::string_view rpc, const grpc::Status& status,
               LiveCounters& live, WorkerResult& result) {
  NoteErrorNoSleep(rpc, status, live, result);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // Do not spin against a server that is down or drowning.
    absl::SleepFor(absl::Milliseconds(10));
  }
}

uint64_t NanosSince(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start)
          .count());
}

// Sleeps until `t` in naps of at most 100 ms; false if the run was stopped
// first.
bool SleepUntil(Clock::time_point t, const RunControl& control) {
  for (Clock::time_point now = Clock::now(); now < t; now = Clock::now()) {
    if (control.stopping()) return false;
    std::this_thread::sleep_until(
        std::min(t, now + std::chrono::milliseconds(100)));
  }
  return !control.stopping();
}

// An open-loop stat reader: one thread, GetStats on the group on its share of
// --rate (reader `index` of o.readers), sleeping (sleep_until) until each
// call is due. Open loop keeps a thread per reader: the asynchronous driver
// below could only wait for a due time with grpc::Alarm, whose timers fire
// on a millisecond grid, or take the send from a timer thread; both added
// 0.4-0.9 ms to the p50 at 1,000-4,000 calls/s in side-by-side runs
// (tests/bench/RESULTS.md, "cgacct-load against h2load"). (Closed loop with
// this function is what --io_threads=0 selects.)
void RunStatReader(v1::Accounting::Stub& stub, const Options& o, int index,
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
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
    const Clock::time_point start = Clock::now();
    const grpc::Status status = stub.GetStats(&context, request, &response);
    const Clock::time_point from = schedule.has_value() ? intended : start;
    const uint64_t ns = NanosSince(from);
    if (schedule.has_value()) schedule->Advance();
    const bool measured = control.Measured(from);
    if (status.ok()) {
      live.reads.fetch_add(1, std::memory_order_relaxed);
    } else {
      // Errors count over the whole run, warm-up included: never hidden.
      if (measured) interval.Error();
      NoteError("GetStats", status, live, result);
    }
    if (!measured) continue;  // warm-up
    ++result.sent;
    if (schedule.has_value()) {
      result.late += late ? 1 : 0;
      result.max_lag_ns = std::max<uint64_t>(
          result.max_lag_ns,
          std::chrono::duration_cast<std::chrono::nanoseconds>(start - intended)
              .count());
    }
    if (status.ok()) {
      result.latency.Record(ns);
      interval.Record(ns);
      ++result.ok;
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

// The closed-loop stat readers: each reader is one GetStats call in flight
// at a time on its own stub (channel), the next sent when it returns.
// Readers are not threads: --io_threads threads each drive a share of them
// through one completion queue with asynchronous calls, as h2load drives its
// connections from one event loop. The thread that polls is the thread that
// handles the answer: no second thread woken per call, which is what the
// blocking stubs cost (tests/bench/RESULTS.md, "cgacct-load against
// h2load").
class ReaderDriver {
 public:
  // One reader: its call and where its numbers go. Touched only by the
  // driver's thread (the results are read after join()).
  struct Reader {
    v1::Accounting::Stub* stub = nullptr;
    LiveCounters* live = nullptr;
    IntervalRecorder* interval = nullptr;
    WorkerResult* result = nullptr;
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GroupStats>> call;
    v1::GroupStats response;
    grpc::Status status;
    Clock::time_point sent;  // when the current call started
    // After UNAVAILABLE or DEADLINE_EXCEEDED: a 10 ms pause (grpc::Alarm's
    // millisecond grain does not matter here) before the next call.
    bool back_off = false;
    std::unique_ptr<grpc::Alarm> alarm;
  };

  ReaderDriver(const Options& o, RunControl& control)
      : o_(o), control_(control) {
    request_.set_path(o.group);
    request_.set_flush(o.flush);
  }

  void Add(v1::Accounting::Stub* stub, LiveCounters* live,
           IntervalRecorder* interval, WorkerResult* result) {
    auto r = std::make_unique<Reader>();
    r->stub = stub;
    r->live = live;
    r->interval = interval;
    r->result = result;
    readers_.push_back(std::move(r));
  }

  // Runs every reader until the run stops and its last call has returned.
  void Run() {
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
      if (control_.stopping()) continue;
      if (r.back_off) {
        r.back_off = false;
        r.alarm = std::make_unique<grpc::Alarm>();
        r.alarm->Set(&cq_,
                     std::chrono::system_clock::now() +
                         std::chrono::milliseconds(10),
                     Tag(r, /*alarm=*/true));
        ++pending_;
      } else {
        Send(r);
      }
    }
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }

 private:
  void Send(Reader& r) {
    r.context = std::make_unique<grpc::ClientContext>();
    r.context->set_deadline(DeadlineAfter(o_.rpc_timeout));
    r.sent = Clock::now();
    r.call = r.stub->PrepareAsyncGetStats(r.context.get(), request_, &cq_);
    r.call->StartCall();
    r.call->Finish(&r.response, &r.status, Tag(r, /*alarm=*/false));
    ++pending_;
  }

  // The call returned: its numbers.
  void Done(Reader& r) {
    const uint64_t ns = NanosSince(r.sent);
    const bool measured = control_.Measured(r.sent);
    WorkerResult& result = *r.result;
    if (r.status.ok()) {
      r.live->reads.fetch_add(1, std::memory_order_relaxed);
    } else {
      // Errors count over the whole run, warm-up included: never hidden.
      if (measured) r.interval->Error();
      NoteErrorNoSleep("GetStats", r.status, *r.live, result);
      r.back_off =
          r.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
          r.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    }
    if (!measured) return;  // warm-up
    ++result.sent;
    if (r.status.ok()) {
      result.latency.Record(ns);
      r.interval->Record(ns);
      ++result.ok;
    }
  }

  static void* Tag(Reader& r, bool alarm) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(&r) |
                                   (alarm ? 1 : 0));
  }

  const Options& o_;
  RunControl& control_;
  v1::GetStatsRequest request_;  // the same for every call: built once
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Reader>> readers_;
  int64_t pending_ = 0;  // calls and alarms not yet off cq_
};

// One Uncharge of `nr_pages` pages of `kind` from `path` on CPU slot `cpu`
// (nullopt: the server's choice), with a deadline `timeout` from now; the
// call's status.
grpc::Status UnchargePages(v1::Accounting::Stub& stub, const std::string& path,
                           uint64_t nr_pages, v1::PageKind kind,
                           std::optional<uint32_t> cpu,
                           absl::Duration timeout) {
  v1::UnchargeRequest request;
  request.set_path(path);
  request.set_nr_pages(nr_pages);
  request.set_kind(kind);
  if (cpu.has_value()) request.set_cpu(*cpu);
  v1::UnchargeResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  return stub.Uncharge(&context, request, &response);
}

// GetStats of `path` with an exact flush; UNAVAILABLE naming the path and
// the gRPC status on failure.
absl::StatusOr<v1::GroupStats> ReadExactStats(v1::Accounting::Stub& stub,
                                              const std::string& path,
                                              absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  v1::GetStatsRequest request;
  request.set_path(path);
  request.set_flush(v1::FLUSH_MODE_EXACT);
  v1::GroupStats stats;
  const grpc::Status status = stub.GetStats(&context, request, &stats);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("GetStats ", path, ": ", FormatStatus(status)));
  }
  return stats;
}

// The group's pages of memory.stat entry `name` ("anon", "file": bytes)
// from an exact stats read.
absl::StatusOr<uint64_t> ReadStatPages(v1::Accounting::Stub& stub,
                                       const std::string& path,
                                       uint64_t page_size_bytes,
                                       absl::Duration timeout,
                                       absl::string_view name = "anon") {
  absl::StatusOr<v1::GroupStats> stats = ReadExactStats(stub, path, timeout);
  if (!stats.ok()) return stats.status();
  for (const v1::StatEntry& entry : stats->stat()) {
    if (entry.name() == name) return entry.value() / page_size_bytes;
  }
  return absl::NotFoundError(
      absl::StrCat("GetStats ", path, ": no \"", name, "\" entry"));
}

// One memory hog, charging into its own group. Its k-th charge goes through
// slot (first_slot + k * step) mod nr_slots, slot j being per-CPU slot
// j * nr_cpus / nr_slots; it uncharges through the slot of its last charge.
class Hog {
 public:
  Hog(v1::Accounting::Stub& stub, const Options& o, std::string path,
      uint32_t first_slot, uint32_t step, uint32_t nr_slots, uint32_t nr_cpus,
      uint64_t page_size_bytes)
      : stub_(stub),
        o_(o),
        path_(std::move(path)),
        slot_(first_slot % nr_slots),
        step_(step % nr_slots),
        nr_slots_(nr_slots),
        nr_cpus_(nr_cpus),
        page_size_bytes_(page_size_bytes) {
    cpu_ = CpuOf(slot_);
  }

  // Charges until OOM, uncharges everything, repeats until stopped; then
  // uncharges what it still holds.
  void Run(RunControl& control, LiveCounters& live, IntervalRecorder& interval,
           WorkerResult& result) {
    v1::ChargeRequest request;
    request.set_path(path_);
    request.set_nr_pages(o_.hog_chunk_pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse response;
    control.go.WaitForNotification();
    while (!control.stopping()) {
      request.set_cpu(cpu_);
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(o_.rpc_timeout));
      const Clock::time_point start = Clock::now();
      const grpc::Status status = stub_.Charge(&context, request, &response);
      const uint64_t ns = NanosSince(start);
      // Calls started in the warm-up change the books but no figure.
      const bool measured = control.Measured(start);
      if (status.ok()) {
        if (measured) {
          result.latency.Record(ns);
          interval.Record(ns);
          result.charged_pages += o_.hog_chunk_pages;
          ++result.ok;
        }
        // A charge is all or nothing: what was asked is what is held.
        held_pages_ += o_.hog_chunk_pages;
        live.charges.fetch_add(1, std::memory_order_relaxed);
        if (step_ != 0) {  // on to the next CPU
          slot_ = (slot_ + step_) % nr_slots_;
          cpu_ = CpuOf(slot_);
        }
        if (response.throttle_us() > 0) {
          // memory.high: sleep what the kernel would have (capped at 2 s).
          const uint64_t us =
              std::min<uint64_t>(response.throttle_us(), 2'000'000);
          absl::SleepFor(absl::Microseconds(us));
          if (measured) result.throttle_us += us;
        }
      } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        // A chunk of <= 8 pages: the kernel hog is OOM-killed. A costlier
        // chunk: its allocation fails with ENOMEM (no OOM, only `max`),
        // and the hog frees what it holds. Either way: uncharge all.
        if (measured) {
          result.latency.Record(ns);
          interval.Record(ns);
          if (ClassifyRefusedCharge(o_.hog_chunk_pages) ==
              HogRefusal::kOomKill) {
            ++result.ooms;
          } else {
            ++result.costly_enomems;
          }
        }
        live.ooms.fetch_add(1, std::memory_order_relaxed);
        if (ReleaseAll(live, result) && measured) ++result.cycles;
      } else {
        if (measured) interval.Error();
        NoteError("Charge", status, live, result);
        if (IsAmbiguous(status.error_code())) unsure_ = true;
      }
    }
    ReleaseAll(live, result);
  }

 private:
  // Uncharges every page this hog holds; false if that failed (retried at
  // the next OOM or at the end).
  bool ReleaseAll(LiveCounters& live, WorkerResult& result) {
    uint64_t nr_pages = held_pages_;
    if (unsure_) {
      // A call timed out: the group's exact stats say what it really holds.
      absl::StatusOr<uint64_t> anon =
          ReadStatPages(stub_, path_, page_size_bytes_, o_.rpc_timeout);
      if (anon.ok()) nr_pages = *anon;
    }
    if (nr_pages == 0) {
      held_pages_ = 0;
      unsure_ = false;
      return true;
    }
    const grpc::Status status = UnchargePages(
        stub_, path_, nr_pages, v1::PAGE_KIND_ANON, cpu_, o_.rpc_timeout);
    if (!status.ok()) {
      NoteError("Uncharge", status, live, result);
      unsure_ = true;  // reconcile from the stats next time
      return false;
    }
    held_pages_ = 0;
    unsure_ = false;
    return true;
  }

  uint32_t CpuOf(uint32_t slot) const {
    return static_cast<uint32_t>(uint64_t{slot} * nr_cpus_ / nr_slots_);
  }

  v1::Accounting::Stub& stub_;
  const Options& o_;
  const std::string path_;
  uint32_t slot_;       // current slot
  const uint32_t step_;  // 0: the hog stays on one slot
  const uint32_t nr_slots_;
  const uint32_t nr_cpus_;
  uint32_t cpu_ = 0;  // the current slot's CPU
  const uint64_t page_size_bytes_;
  uint64_t held_pages_ = 0;  // ANON pages charged and not yet uncharged
  bool unsure_ = false;      // a call's outcome is unknown: re-read the stats
};

// One FILE page writer of the reclaim scenario, charging into its own group
// (a page-cache writer under its parent's memory.high): charges chunks,
// sleeps the throttle_us each charge returns, and once it holds
// `hold_pages` uncharges them (the server uncharges what reclaim left of
// them, so over-asking is harmless: a call whose outcome is unknown just
// adds its chunk to what is uncharged).
class Writer {
 public:
  Writer(v1::Accounting::Stub& stub, const Options& o, std::string path,
         uint32_t cpu, uint64_t hold_pages)
      : stub_(stub),
        o_(o),
        path_(std::move(path)),
        cpu_(cpu),
        hold_pages_(std::max<uint64_t>(hold_pages, o.write_chunk_pages)) {}

  void Run(RunControl& control, LiveCounters& live, IntervalRecorder& interval,
           WorkerResult& result) {
    v1::ChargeRequest request;
    request.set_path(path_);
    request.set_nr_pages(o_.write_chunk_pages);
    request.set_kind(v1::PAGE_KIND_FILE);
    request.set_cpu(cpu_);
    v1::ChargeResponse response;
    control.go.WaitForNotification();
    while (!control.stopping()) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(o_.rpc_timeout));
      const Clock::time_point start = Clock::now();
      const grpc::Status status = stub_.Charge(&context, request, &response);
      const uint64_t ns = NanosSince(start);
      const bool measured = control.Measured(start);
      if (status.ok()) {
        held_pages_ += o_.write_chunk_pages;
        live.charges.fetch_add(1, std::memory_order_relaxed);
        if (measured) {
          result.latency.Record(ns);
          interval.Record(ns);
          result.charged_pages += o_.write_chunk_pages;
          ++result.ok;
        }
        if (response.throttle_us() > 0) {
          // mem_cgroup_handle_over_high(): sleep what the kernel would have.
          const uint64_t us =
              std::min<uint64_t>(response.throttle_us(), 2'000'000);
          absl::SleepFor(absl::Microseconds(us));
          if (measured) {
            result.throttle_us += us;
            ++result.over_high;
          }
        }
      } else {
        if (measured) interval.Error();
        NoteError("Charge", status, live, result);
        if (IsAmbiguous(status.error_code())) {
          held_pages_ += o_.write_chunk_pages;
        }
      }
      if (held_pages_ >= hold_pages_) Release(live, result);
    }
    Release(live, result);
  }

  // Pages that the last Release could not uncharge (0 after a clean run).
  uint64_t held_pages() const { return held_pages_; }

 private:
  void Release(LiveCounters& live, WorkerResult& result) {
    if (held_pages_ == 0) return;
    const grpc::Status status = UnchargePages(
        stub_, path_, held_pages_, v1::PAGE_KIND_FILE, cpu_, o_.rpc_timeout);
    if (!status.ok()) {
      NoteError("Uncharge", status, live, result);
      return;  // retried at the next Release
    }
    held_pages_ = 0;
  }

  v1::Accounting::Stub& stub_;
  const Options& o_;
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
void RunReclaimer(v1::Accounting::Stub& stub, const Options& o,
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
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
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
          result.first_error = absl::StrCat("Reclaim: ", FormatStatus(status));
        }
      }
    }
    next = std::max(next + every, Clock::now());
  }
}

// GROUP's memory.events (hierarchical) and memory.stat pgsteal, exact.
struct EventsSnapshot {
  EventCounts events;
  std::optional<uint64_t> pgsteal;
};

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

std::string WriterPath(const Options& o, int i) {
  return absl::StrCat(o.group, "/writer-", i);
}

std::string HogPath(const Options& o, int i) {
  return absl::StrCat(o.group, "/hog-", i);
}

// Creates `path` and any missing ancestors (like mkdir -p); with `limits`,
// sets them on `path` whether it was created or already there.
absl::Status EnsureGroup(v1::Accounting::Stub& stub, const std::string& path,
                         std::optional<v1::Limits> limits,
                         absl::Duration timeout) {
  std::string prefix;
  const std::vector<absl::string_view> parts =
      absl::StrSplit(path, '/', absl::SkipEmpty());
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StrAppend(&prefix, "/", parts[i]);
    const bool last = i + 1 == parts.size();
    v1::CreateGroupRequest request;
    request.set_path(prefix);
    if (last && limits.has_value()) *request.mutable_limits() = *limits;
    v1::Group group;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    grpc::Status status = stub.CreateGroup(&context, request, &group);
    if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      if (!last || !limits.has_value()) continue;
      v1::SetLimitsRequest set;
      set.set_path(prefix);
      *set.mutable_limits() = *limits;
      grpc::ClientContext set_context;
      set_context.set_deadline(DeadlineAfter(timeout));
      status = stub.SetLimits(&set_context, set, &group);
      if (!status.ok()) {
        return absl::InternalError(absl::StrCat(
            "SetLimits ", prefix, ": ", FormatStatus(status)));
      }
    } else if (!status.ok()) {
      return absl::InternalError(
          absl::StrCat("CreateGroup ", prefix, ": ", FormatStatus(status)));
    }
  }
  return absl::OkStatus();
}

// Creates a hog's (ANON) or writer's (FILE) group; if one is left over from
// a killed run, uncharges the pages of `kind` it still holds so this run
// starts from zero.
absl::Status EnsureWorkerGroup(v1::Accounting::Stub& stub, const Options& o,
                               const std::string& path,
                               uint64_t page_size_bytes,
                               v1::PageKind kind = v1::PAGE_KIND_ANON) {
  const absl::string_view stat = kind == v1::PAGE_KIND_FILE ? "file" : "anon";
  v1::CreateGroupRequest request;
  request.set_path(path);
  v1::Group group;
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(o.rpc_timeout));
  const grpc::Status status = stub.CreateGroup(&context, request, &group);
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
    return absl::InternalError(
        absl::StrCat("CreateGroup ", path, ": ", FormatStatus(status)));
  }
  absl::StatusOr<uint64_t> anon =
      ReadStatPages(stub, path, page_size_bytes, o.rpc_timeout, stat);
  if (!anon.ok()) return anon.status();
  if (*anon == 0) return absl::OkStatus();
  const grpc::Status uncharged = UnchargePages(
      stub, path, *anon, kind, /*cpu=*/std::nullopt, o.rpc_timeout);
  if (!uncharged.ok()) {
    return absl::InternalError(absl::StrCat("Uncharge leftover ", path, ": ",
                                            FormatStatus(uncharged)));
  }
  std::cerr << "cgacct-load: " << path << " held " << *anon << " " << stat
            << " pages from an earlier run; uncharged\n";
  return absl::OkStatus();
}

// Deletes the hog groups, recording the pages the server reparented and the
// groups it could not delete in `report`.
void DeleteWorkerGroups(v1::Accounting::Stub& stub, const Options& o,
                        LoadReport& report) {
  const int n = o.hogs + o.writers;
  for (int i = 0; i < n; ++i) {
    v1::DeleteGroupRequest request;
    request.set_path(i < o.hogs ? HogPath(o, i) : WriterPath(o, i - o.hogs));
    v1::DeleteGroupResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
    const grpc::Status status = stub.DeleteGroup(&context, request, &response);
    if (status.ok()) {
      report.reparented_pages += response.reparented_pages();
      continue;
    }
    ++report.hog_groups_left;
    if (report.first_error.empty()) {
      report.first_error = absl::StrCat("DeleteGroup ", request.path(), ": ",
                                        FormatStatus(status));
    }
    // A server that is gone or frozen will not answer the others either:
    // count them as left instead of waiting out a deadline for each.
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
        status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      report.hog_groups_left += n - i - 1;
      return;
    }
  }
}

// Scrapes the longest flush-lock hold (in us) from /metrics: `metric` is
// cgacct_rstat_flush_lock_hold_max_seconds (flushes not preempted, the
// irqs-off view) or cgacct_rstat_flush_lock_hold_wall_max_seconds.
absl::StatusOr<double> ScrapeFlushLockHoldMaxUs(
    const Options& o,
    const std::string& metric = "cgacct_rstat_flush_lock_hold_max_seconds") {
  if (o.metrics_target.empty()) {
    return absl::InvalidArgumentError("no --metrics_target");
  }
  absl::StatusOr<std::string> body =
      HttpGet(o.metrics_target, "/metrics", absl::Seconds(2));
  if (!body.ok()) return body.status();
  absl::StatusOr<std::vector<MetricSample>> samples = ParseMetricsText(*body);
  if (!samples.ok()) return samples.status();
  std::optional<double> seconds = MaxSampleValue(*samples, metric);
  if (!seconds.has_value()) {
    return absl::NotFoundError(absl::StrCat(metric, " not in /metrics"));
  }
  return *seconds * 1e6;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

int Fail(absl::string_view message) {
  std::cerr << "cgacct-load: " << message << "\n";
  return 1;
}

int Run(const Options& o) {
  // Connect first: one clear line if nobody is listening.
  std::shared_ptr<grpc::Channel> control_channel = MakeChannel(o.target);
  if (absl::Status s =
          WaitForConnected(*control_channel, o.target, o.connect_timeout);
      !s.ok()) {
    return Fail(s.message());
  }
  std::unique_ptr<v1::Accounting::Stub> control =
      v1::Accounting::NewStub(control_channel);

  v1::EngineInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
    const grpc::Status status =
        control->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info);
    if (!status.ok()) {
      return Fail(absl::StrCat("GetEngineInfo: ", FormatStatus(status)));
    }
  }
  std::cerr << absl::StrFormat(
      "cgacct-load: cgacctd %s: nr_cpus %d, page size %d B, charge batch %d "
      "pages, flush lock policy %s, groups %d\n",
      o.target, info.nr_cpus(), info.page_size_bytes(),
      info.charge_batch_pages(), info.flush_lock_policy(), info.nr_groups());
  if (info.nr_cpus() == 0 || info.page_size_bytes() == 0) {
    return Fail("GetEngineInfo returned nr_cpus or page_size_bytes 0");
  }
  if (o.hog_cpus > static_cast<int>(info.nr_cpus())) {
    return Fail(absl::StrCat("--hog_cpus=", o.hog_cpus, " exceeds the server's ",
                             info.nr_cpus(), " CPUs"));
  }
  const uint32_t hog_cpus =
      o.hog_cpus == 0 ? info.nr_cpus() : static_cast<uint32_t>(o.hog_cpus);

  LoadReport report;
  report.scenario = o.scenario;
  report.target = o.target;
  report.group = o.group;
  report.flush_mode = o.flush_name;
  report.duration = o.duration;
  report.threads = o.readers;
  report.hogs = o.hogs;
  report.hog_chunk_pages = o.hogs > 0 ? o.hog_chunk_pages : 0;
  report.hog_max_bytes = o.hogs > 0 ? o.hog_max_bytes : 0;
  report.hog_cpus = o.hogs > 0 ? hog_cpus : 0;
  report.nr_cpus = info.nr_cpus();
  report.page_size_bytes = info.page_size_bytes();
  report.charge_batch_pages = info.charge_batch_pages();
  report.flush_lock_policy = info.flush_lock_policy();
  report.flush_preempt_model = info.flush_preempt_model();
  if (absl::StatusOr<double> before = ScrapeFlushLockHoldMaxUs(o);
      before.ok()) {
    report.flush_lock_hold_max_us_before = *before;
  }

  report.warmup = o.warmup;
  report.rate = o.rate;
  report.writers = o.writers;
  if (o.writers > 0) {
    report.high_bytes = o.high_bytes;
    report.write_chunk_pages = o.write_chunk_pages;
    report.reclaim_bytes = o.reclaim_bytes;
    report.reclaim_interval = o.reclaim_interval;
  }

  // Groups.
  std::optional<v1::Limits> limits;
  if (o.hogs > 0) {
    limits.emplace();
    limits->set_max_bytes(o.hog_max_bytes);
  } else if (o.writers > 0) {
    limits.emplace();
    limits->set_max_bytes(UINT64_MAX);  // memory.high alone bounds the group
    limits->set_high_bytes(o.high_bytes);
  }
  if (absl::Status s = EnsureGroup(*control, o.group, limits, o.rpc_timeout);
      !s.ok()) {
    return Fail(s.message());
  }
  for (int i = 0; i < o.hogs; ++i) {
    if (absl::Status s = EnsureWorkerGroup(*control, o, HogPath(o, i),
                                           info.page_size_bytes());
        !s.ok()) {
      return Fail(s.message());
    }
  }
  for (int i = 0; i < o.writers; ++i) {
    if (absl::Status s =
            EnsureWorkerGroup(*control, o, WriterPath(o, i),
                              info.page_size_bytes(), v1::PAGE_KIND_FILE);
        !s.ok()) {
      return Fail(s.message());
    }
  }

  // Channels: each its own TCP connection, connected before the clock starts.
  const int nr_workers = o.readers + o.hogs + o.writers;
  const int nr_channels =
      o.channels == 0 ? nr_workers : std::min(o.channels, nr_workers);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  channels.reserve(nr_channels);
  for (int i = 0; i < nr_channels; ++i) {
    channels.push_back(MakeChannel(o.target, /*own_connection=*/true));
    if (absl::Status s =
            WaitForConnected(*channels.back(), o.target, o.connect_timeout);
        !s.ok()) {
      return Fail(s.message());
    }
  }

  // Workers: readers first, then hogs, then writers (and the reclaimer).
  RunControl run;
  auto live = std::make_unique<LiveCounters[]>(nr_workers);
  auto intervals = std::make_unique<IntervalRecorder[]>(nr_workers);
  std::vector<WorkerResult> results(nr_workers);
  ReclaimerResult reclaimer;
  std::vector<std::unique_ptr<v1::Accounting::Stub>> stubs;
  std::vector<std::unique_ptr<Hog>> hogs;
  std::vector<std::unique_ptr<Writer>> writers;
  std::vector<std::unique_ptr<ReaderDriver>> drivers;
  // Closed loop: the readers' calls driven by --io_threads threads (0: a
  // blocking thread per reader). Open loop: a thread per reader.
  const bool async_readers = o.rate == 0 && o.io_threads > 0;
  for (int i = 0; async_readers && i < std::min(o.io_threads, o.readers);
       ++i) {
    drivers.push_back(std::make_unique<ReaderDriver>(o, run));
  }
  std::vector<std::thread> threads;
  stubs.reserve(nr_workers);
  threads.reserve(nr_workers + 1);
  for (int w = 0; w < nr_workers; ++w) {
    stubs.push_back(v1::Accounting::NewStub(channels[w % nr_channels]));
    v1::Accounting::Stub* stub = stubs.back().get();
    if (w < o.readers && async_readers) {
      drivers[w % drivers.size()]->Add(stub, &live[w], &intervals[w],
                                       &results[w]);
    } else if (w < o.readers) {
      threads.emplace_back([&, stub, w] {
        RunStatReader(*stub, o, w, run, live[w], intervals[w], results[w]);
      });
    } else if (w < o.readers + o.hogs) {
      const int i = w - o.readers;
      // Spread the hogs over --hog_cpus of the server's per-CPU slots; with
      // as many slots as hogs each stays on its own.
      const uint32_t step =
          hog_cpus == static_cast<uint32_t>(o.hogs) ? 0 : o.hogs;
      hogs.push_back(std::make_unique<Hog>(
          *stub, o, HogPath(o, i), static_cast<uint32_t>(i), step, hog_cpus,
          info.nr_cpus(), info.page_size_bytes()));
      Hog* hog = hogs.back().get();
      threads.emplace_back(
          [&, hog, w] { hog->Run(run, live[w], intervals[w], results[w]); });
    } else {
      const int i = w - o.readers - o.hogs;
      // Each writer holds up to memory.high's worth, so together they
      // push the group over it.
      writers.push_back(std::make_unique<Writer>(
          *stub, o, WriterPath(o, i), static_cast<uint32_t>(i) % info.nr_cpus(),
          o.high_bytes / info.page_size_bytes()));
      Writer* writer = writers.back().get();
      threads.emplace_back([&, writer, w] {
        writer->Run(run, live[w], intervals[w], results[w]);
      });
    }
  }
  for (std::unique_ptr<ReaderDriver>& d : drivers) {
    threads.emplace_back([&d] { d->Run(); });
  }
  if (o.writers > 0) {
    threads.emplace_back([&] {
      RunReclaimer(*control, o, info.page_size_bytes(), run, reclaimer);
    });
  }

  // Takes every worker's interval since the last tick into the series.
  LatencyHistogram spare, read_interval, charge_interval;
  auto take_interval = [&](double t_end_s, double seconds) {
    uint64_t read_errors = 0, charge_errors = 0;
    for (int w = 0; w < nr_workers; ++w) {
      uint64_t errors = 0;
      intervals[w].Take(spare, &errors);
      if (w < o.readers) {
        read_interval.Merge(spare);
        read_errors += errors;
      } else {
        charge_interval.Merge(spare);
        charge_errors += errors;
      }
      spare.Reset();
    }
    if (o.readers > 0) {
      report.read_series.push_back(SummarizeInterval(
          read_interval, read_errors, t_end_s, seconds));
    }
    if (o.hogs + o.writers > 0) {
      report.charge_series.push_back(SummarizeInterval(
          charge_interval, charge_errors, t_end_s, seconds));
    }
    read_interval.Reset();
    charge_interval.Reset();
  };

  InstallSignalHandlers();
  run.start = Clock::now();
  run.measure_start = run.start + absl::ToChronoNanoseconds(o.warmup);
  run.end = run.measure_start + absl::ToChronoNanoseconds(o.duration);
  run.go.Notify();
  const Clock::time_point start = run.measure_start;
  const Clock::time_point end = run.end;
  // Warm-up: runs, counts nothing (the workers record no call started, or
  // due, before measure_start).
  while (Clock::now() < start &&
         !g_interrupted.load(std::memory_order_relaxed)) {
    std::this_thread::sleep_for(std::min<Clock::duration>(
        start - Clock::now(), std::chrono::milliseconds(100)));
  }
  std::optional<EventsSnapshot> events_before;
  if (o.writers > 0) {
    if (absl::StatusOr<EventsSnapshot> snap =
            ReadEvents(*control, o.group, o.rpc_timeout);
        snap.ok()) {
      events_before = *snap;
    }
  }
  Clock::time_point last_tick = std::max(start, Clock::now());
  uint64_t last_reads = 0, last_charges = 0;
  for (int w = 0; w < nr_workers; ++w) {
    last_reads += live[w].reads.load(std::memory_order_relaxed);
    last_charges += live[w].charges.load(std::memory_order_relaxed);
  }
  for (bool done = false; !done;) {
    const Clock::time_point now = Clock::now();
    done = now >= end || g_interrupted.load(std::memory_order_relaxed);
    const Clock::time_point next_tick =
        std::min(end, last_tick + std::chrono::seconds(1));
    if (!done && now < next_tick) {
      // Short naps so a signal ends the run promptly.
      std::this_thread::sleep_for(std::min<Clock::duration>(
          next_tick - now, std::chrono::milliseconds(100)));
      continue;
    }
    // One line a second, plus the last partial second unless it is tiny
    // (whose calls then go into the final interval taken after the join).
    if (now - last_tick < std::chrono::milliseconds(200)) continue;
    uint64_t reads = 0, charges = 0, ooms = 0, errors = 0;
    for (int w = 0; w < nr_workers; ++w) {
      reads += live[w].reads.load(std::memory_order_relaxed);
      charges += live[w].charges.load(std::memory_order_relaxed);
      ooms += live[w].ooms.load(std::memory_order_relaxed);
      errors += live[w].errors.load(std::memory_order_relaxed);
    }
    const double dt = std::chrono::duration<double>(now - last_tick).count();
    const double t = std::chrono::duration<double>(now - start).count();
    take_interval(t, dt);
    const IntervalStats& last = o.readers > 0 ? report.read_series.back()
                                              : report.charge_series.back();
    std::cerr << absl::StrFormat(
        "cgacct-load: [%6.1fs] reads %9.0f/s  charges %9.0f/s  refused %d  "
        "errors %d  p99 %.1f us\n",
        t, (reads - last_reads) / dt, (charges - last_charges) / dt, ooms,
        errors, last.p99_ns / 1000.0);
    last_tick = now;
    last_reads = reads;
    last_charges = charges;
  }
  run.stop.store(true, std::memory_order_relaxed);
  const Clock::time_point stopped = Clock::now();
  report.elapsed = absl::FromChrono(std::max(stopped, start) - start);
  for (std::thread& t : threads) t.join();  // hogs uncharge before they return
  {
    // The calls that completed after the last tick (those in flight at the
    // stop included).
    const Clock::time_point now = Clock::now();
    if (now > last_tick) {
      const size_t reads_before = report.read_series.size();
      const size_t charges_before = report.charge_series.size();
      take_interval(std::chrono::duration<double>(now - start).count(),
                    std::chrono::duration<double>(now - last_tick).count());
      // Keep the final interval only if something completed in it.
      if (report.read_series.size() > reads_before &&
          report.read_series.back().count + report.read_series.back().errors ==
              0) {
        report.read_series.pop_back();
      }
      if (report.charge_series.size() > charges_before &&
          report.charge_series.back().count +
                  report.charge_series.back().errors ==
              0) {
        report.charge_series.pop_back();
      }
    }
  }

  for (int w = 0; w < nr_workers; ++w) {
    const WorkerResult& r = results[w];
    if (w < o.readers) {
      report.reads += r.ok;
      report.read_errors += r.errors;
      report.sent_reads += r.sent;
      report.late_reads += r.late;
      report.unsent_reads += r.unsent;
      report.max_send_lag_ns = std::max(report.max_send_lag_ns, r.max_lag_ns);
      report.read_latency.Merge(r.latency);
    } else {
      report.charges += r.ok;
      report.charged_pages += r.charged_pages;
      report.ooms += r.ooms;
      report.costly_enomems += r.costly_enomems;
      report.hog_cycles += r.cycles;
      report.charge_errors += r.errors;
      report.throttle_us += r.throttle_us;
      report.over_high_charges += r.over_high;
      report.charge_latency.Merge(r.latency);
    }
    if (report.first_error.empty()) report.first_error = r.first_error;
  }
  if (o.writers > 0) {
    report.reclaims = reclaimer.reclaims;
    report.reclaims_short = reclaimer.short_reclaims;
    report.reclaim_errors = reclaimer.errors;
    report.reclaimed_pages = reclaimer.reclaimed_pages;
    report.reclaim_latency = reclaimer.latency;
    if (report.first_error.empty()) report.first_error = reclaimer.first_error;
    absl::StatusOr<EventsSnapshot> after =
        ReadEvents(*control, o.group, o.rpc_timeout);
    if (after.ok() && events_before.has_value()) {
      EventCounts d;
      d.high = after->events.high - events_before->events.high;
      d.max = after->events.max - events_before->events.max;
      d.oom = after->events.oom - events_before->events.oom;
      d.oom_kill = after->events.oom_kill - events_before->events.oom_kill;
      report.events_delta = d;
      if (after->pgsteal.has_value() && events_before->pgsteal.has_value()) {
        report.pgsteal_delta = *after->pgsteal - *events_before->pgsteal;
      }
    }
  }
  if (o.hogs + o.writers > 0) {
    DeleteWorkerGroups(*control, o, report);
  }

  {
    // The longest holds with the work each did (CPUs walked, entries
    // folded): what the /metrics maxima cannot say.
    v1::EngineInfo after;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
    if (control->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &after)
            .ok()) {
      report.hold_max_cpus_walked = after.flush_lock_hold_max_cpus_walked();
      report.hold_max_groups_folded =
          after.flush_lock_hold_max_groups_folded();
      report.flush_hold_budget_us = after.flush_hold_budget_us();
      for (const v1::FlushLockHold& h : after.longest_flush_holds()) {
        FlushHoldLine line;
        line.hold_us = static_cast<double>(h.hold_ns()) / 1000;
        line.cpus_walked = h.cpus_walked();
        line.groups_folded = h.groups_folded();
        line.root_path = h.root_path();
        line.policy = h.policy();
        report.longest_holds.push_back(std::move(line));
      }
    }
  }
  absl::StatusOr<double> hold_max_us = ScrapeFlushLockHoldMaxUs(o);
  absl::StatusOr<double> wall_max_us = ScrapeFlushLockHoldMaxUs(
      o, "cgacct_rstat_flush_lock_hold_wall_max_seconds");
  if (wall_max_us.ok()) report.flush_lock_hold_wall_max_us = *wall_max_us;
  if (hold_max_us.ok()) {
    report.flush_lock_hold_max_us = *hold_max_us;
  } else {
    report.metrics_error = std::string(hold_max_us.status().message());
  }

  std::cout << FormatLoadReportTable(report) << std::flush;
  if (!o.json_path.empty()) {
    if (absl::Status s =
            WriteFileAtomically(o.json_path, LoadReportJson(report));
        !s.ok()) {
      return Fail(s.message());
    }
  }
  if (!o.chart_path.empty()) {
    if (absl::Status s = WriteLatencyChart(report, o.chart_path); !s.ok()) {
      return Fail(s.message());
    }
    std::cerr << "cgacct-load: chart written to " << o.chart_path << "\n";
  }
  if (g_interrupted.load(std::memory_order_relaxed)) return 130;
  const uint64_t errors =
      report.read_errors + report.charge_errors + report.reclaim_errors;
  if (errors > 0 || report.reparented_pages > 0 || report.hog_groups_left > 0) {
    std::cerr << "cgacct-load: " << errors << " RPC errors, "
              << report.reparented_pages << " pages reparented, "
              << report.hog_groups_left << " hog groups left"
              << (report.first_error.empty() ? "" : "; first: ")
              << report.first_error << "\n";
    return 3;
  }
  return 0;
}

}  // namespace
}  // namespace cgacct::client

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "load generator for cgacctd.\n"
      "cgacct-load --scenario=stat-reader|hog|seed-rstat|reclaim "
      "[--threads=N] [--hogs=N] [--writers=N] [--rate=N] [--warmup=1s] "
      "[--duration=10s] [--json=FILE] [--chart=FILE.png]\n"
      "cgacct-load --scenario=netperf [--streams=N] [--pages=3] [--batch=64] "
      "[--rpc=stream|batch|unary|library] [--hierarchy=root|deep]\n"
      "cgacct-load --scenario=session-churn [--churn_clients=4] "
      "[--churn_rounds=3] [--churn_pages=300] [--session_ttl_ms=1000]\n"
      "Closed-loop (or, with --rate, open-loop) load against cgacctd "
      "(docs/DESIGN.md §6.2); the report goes "
      "to stdout, progress to stderr.");
  cgacct::client::ShowOwnFlagsInHelp();
  // Debian's Abseil keeps absl::Mutex's lock-order graph on (as cgacctd
  // notes); gRPC's locks paid for it on every call here (GraphCycles
  // ~3% of the client's CPU under perf).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::cerr << "cgacct-load: unexpected argument \"" << positional[1]
              << "\"\n";
    return 1;
  }
  if (cgacct::client::IsSessionChurnChild()) {
    return cgacct::client::RunSessionChurnChild();
  }
  if (absl::GetFlag(FLAGS_scenario) == "session-churn") {
    return cgacct::client::RunSessionChurn(argv[0]);
  }
  if (absl::GetFlag(FLAGS_scenario) == "netperf") {
    return cgacct::client::RunNetperf();
  }
  absl::StatusOr<cgacct::client::Options> options =
      cgacct::client::OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "cgacct-load: " << options.status().message() << "\n";
    return 1;
  }
  return cgacct::client::Run(*options);
}
