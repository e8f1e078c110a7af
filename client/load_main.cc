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
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/cli_util.h"
#include "client/grpc_util.h"
#include "client/histogram.h"
#include "client/load_report.h"
#include "client/metrics_scrape.h"
#include "client/netperf.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "cgacctd gRPC address");
ABSL_FLAG(std::string, metrics_target, "",
          "HOST:PORT of cgacctd's /metrics (loopback only); default: the "
          "--target host with port 9464");
ABSL_FLAG(std::string, scenario, "stat-reader",
          "stat-reader | hog | seed-rstat | netperf (client/netperf.h)");
ABSL_FLAG(int32_t, threads, 8, "stat-reader threads (stat-reader, seed-rstat)");
ABSL_FLAG(int32_t, hogs, 8, "memory hog workers (hog, seed-rstat)");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "how long to run");
ABSL_FLAG(std::string, json, "", "also write the report as JSON to this file");
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
  absl::Duration duration;
  std::string json_path;
  std::string group;
  uint64_t hog_max_bytes = 0;
  uint64_t hog_chunk_pages = 0;
  int hog_cpus = 0;  // 0 = all of the server's CPUs
  std::string flush_name;
  v1::FlushMode flush = v1::FLUSH_MODE_EXACT;
  int channels = 0;
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
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--scenario=", o.scenario,
                     ": expected stat-reader, hog or seed-rstat"));
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
  o.json_path = absl::GetFlag(FLAGS_json);
  o.group = absl::GetFlag(FLAGS_group);
  if (o.group.empty() || o.group.front() != '/') {
    return absl::InvalidArgumentError("--group must be an absolute path");
  }
  if (o.hogs > 0 && o.group == "/") {
    return absl::InvalidArgumentError(
        "--group=/ cannot take a memory.max; use a child group for hogs");
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
  uint64_t errors = 0;
  uint64_t throttle_us = 0;
  std::string first_error;
};

// Shared by all workers of a run.
struct RunControl {
  absl::Notification go;  // start gate, so the clock starts with all threads
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

void NoteError(absl::string_view rpc, const grpc::Status& status,
               LiveCounters& live, WorkerResult& result) {
  ++result.errors;
  live.errors.fetch_add(1, std::memory_order_relaxed);
  if (result.first_error.empty()) {
    result.first_error = absl::StrCat(rpc, ": ", FormatStatus(status));
  }
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

// A stat reader: GetStats on the group in a closed loop.
void RunStatReader(v1::Accounting::Stub& stub, const Options& o,
                   RunControl& control, LiveCounters& live,
                   WorkerResult& result) {
  v1::GetStatsRequest request;
  request.set_path(o.group);
  request.set_flush(o.flush);
  v1::GroupStats response;
  control.go.WaitForNotification();
  while (!control.stopping()) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
    const Clock::time_point start = Clock::now();
    const grpc::Status status = stub.GetStats(&context, request, &response);
    const uint64_t ns = NanosSince(start);
    if (status.ok()) {
      result.latency.Record(ns);
      ++result.ok;
      live.reads.fetch_add(1, std::memory_order_relaxed);
    } else {
      NoteError("GetStats", status, live, result);
    }
  }
}

// The group's ANON pages from an exact stats read (its `anon` entry, bytes).
absl::StatusOr<uint64_t> ReadAnonPages(v1::Accounting::Stub& stub,
                                       const std::string& path,
                                       uint64_t page_size_bytes,
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
  for (const v1::StatEntry& entry : stats.stat()) {
    if (entry.name() == "anon") return entry.value() / page_size_bytes;
  }
  return absl::NotFoundError(
      absl::StrCat("GetStats ", path, ": no \"anon\" entry"));
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
  void Run(RunControl& control, LiveCounters& live, WorkerResult& result) {
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
      if (status.ok()) {
        result.latency.Record(ns);
        // A charge is all or nothing: what was asked is what is held.
        held_pages_ += o_.hog_chunk_pages;
        result.charged_pages += o_.hog_chunk_pages;
        ++result.ok;
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
          result.throttle_us += us;
        }
      } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        result.latency.Record(ns);
        // A chunk of <= 8 pages: the kernel hog is OOM-killed. A costlier
        // chunk: its allocation fails with ENOMEM (no OOM, only `max`),
        // and the hog frees what it holds. Either way: uncharge all.
        if (ClassifyRefusedCharge(o_.hog_chunk_pages) ==
            HogRefusal::kOomKill) {
          ++result.ooms;
        } else {
          ++result.costly_enomems;
        }
        live.ooms.fetch_add(1, std::memory_order_relaxed);
        if (ReleaseAll(live, result)) ++result.cycles;
      } else {
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
          ReadAnonPages(stub_, path_, page_size_bytes_, o_.rpc_timeout);
      if (anon.ok()) nr_pages = *anon;
    }
    if (nr_pages == 0) {
      held_pages_ = 0;
      unsure_ = false;
      return true;
    }
    v1::UnchargeRequest request;
    request.set_path(path_);
    request.set_nr_pages(nr_pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    request.set_cpu(cpu_);
    v1::UnchargeResponse response;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o_.rpc_timeout));
    const grpc::Status status = stub_.Uncharge(&context, request, &response);
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

std::string HogPath(const Options& o, int i) {
  return absl::StrCat(o.group, "/hog-", i);
}

// Creates `path` and any missing ancestors (like mkdir -p); with `max_bytes`,
// sets memory.max on `path` whether it was created or already there.
absl::Status EnsureGroup(v1::Accounting::Stub& stub, const std::string& path,
                         std::optional<uint64_t> max_bytes,
                         absl::Duration timeout) {
  std::string prefix;
  const std::vector<absl::string_view> parts =
      absl::StrSplit(path, '/', absl::SkipEmpty());
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StrAppend(&prefix, "/", parts[i]);
    const bool last = i + 1 == parts.size();
    v1::CreateGroupRequest request;
    request.set_path(prefix);
    if (last && max_bytes.has_value()) {
      request.mutable_limits()->set_max_bytes(*max_bytes);
    }
    v1::Group group;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    grpc::Status status = stub.CreateGroup(&context, request, &group);
    if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      if (!last || !max_bytes.has_value()) continue;
      v1::SetLimitsRequest set;
      set.set_path(prefix);
      set.mutable_limits()->set_max_bytes(*max_bytes);
      grpc::ClientContext set_context;
      set_context.set_deadline(DeadlineAfter(timeout));
      status = stub.SetLimits(&set_context, set, &group);
      if (!status.ok()) {
        return absl::InternalError(absl::StrCat(
            "SetLimits ", prefix, " memory.max: ", FormatStatus(status)));
      }
    } else if (!status.ok()) {
      return absl::InternalError(
          absl::StrCat("CreateGroup ", prefix, ": ", FormatStatus(status)));
    }
  }
  return absl::OkStatus();
}

// Creates a hog's group; if one is left over from a killed run, uncharges the
// ANON pages it still holds so this run starts from zero.
absl::Status EnsureHogGroup(v1::Accounting::Stub& stub, const Options& o,
                            const std::string& path, uint64_t page_size_bytes) {
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
      ReadAnonPages(stub, path, page_size_bytes, o.rpc_timeout);
  if (!anon.ok()) return anon.status();
  if (*anon == 0) return absl::OkStatus();
  v1::UnchargeRequest uncharge;
  uncharge.set_path(path);
  uncharge.set_nr_pages(*anon);
  uncharge.set_kind(v1::PAGE_KIND_ANON);
  v1::UnchargeResponse response;
  grpc::ClientContext uncharge_context;
  uncharge_context.set_deadline(DeadlineAfter(o.rpc_timeout));
  const grpc::Status uncharged =
      stub.Uncharge(&uncharge_context, uncharge, &response);
  if (!uncharged.ok()) {
    return absl::InternalError(absl::StrCat("Uncharge leftover ", path, ": ",
                                            FormatStatus(uncharged)));
  }
  std::cerr << "cgacct-load: " << path << " held " << *anon
            << " ANON pages from an earlier run; uncharged\n";
  return absl::OkStatus();
}

// Deletes the hog groups, recording the pages the server reparented and the
// groups it could not delete in `report`.
void DeleteHogGroups(v1::Accounting::Stub& stub, const Options& o,
                     LoadReport& report) {
  for (int i = 0; i < o.hogs; ++i) {
    v1::DeleteGroupRequest request;
    request.set_path(HogPath(o, i));
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
      report.hog_groups_left += o.hogs - i - 1;
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

  // Groups.
  if (absl::Status s = EnsureGroup(
          *control, o.group,
          o.hogs > 0 ? std::optional<uint64_t>(o.hog_max_bytes) : std::nullopt,
          o.rpc_timeout);
      !s.ok()) {
    return Fail(s.message());
  }
  for (int i = 0; i < o.hogs; ++i) {
    if (absl::Status s =
            EnsureHogGroup(*control, o, HogPath(o, i), info.page_size_bytes());
        !s.ok()) {
      return Fail(s.message());
    }
  }

  // Channels: each its own TCP connection, connected before the clock starts.
  const int nr_workers = o.readers + o.hogs;
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

  // Workers: readers first, then hogs.
  RunControl run;
  auto live = std::make_unique<LiveCounters[]>(nr_workers);
  std::vector<WorkerResult> results(nr_workers);
  std::vector<std::unique_ptr<v1::Accounting::Stub>> stubs;
  std::vector<std::unique_ptr<Hog>> hogs;
  std::vector<std::thread> threads;
  stubs.reserve(nr_workers);
  threads.reserve(nr_workers);
  for (int w = 0; w < nr_workers; ++w) {
    stubs.push_back(v1::Accounting::NewStub(channels[w % nr_channels]));
    v1::Accounting::Stub* stub = stubs.back().get();
    if (w < o.readers) {
      threads.emplace_back(
          [&, stub, w] { RunStatReader(*stub, o, run, live[w], results[w]); });
    } else {
      const int i = w - o.readers;
      // Spread the hogs over --hog_cpus of the server's per-CPU slots; with
      // as many slots as hogs each stays on its own.
      const uint32_t step =
          hog_cpus == static_cast<uint32_t>(o.hogs) ? 0 : o.hogs;
      hogs.push_back(std::make_unique<Hog>(
          *stub, o, HogPath(o, i), static_cast<uint32_t>(i), step, hog_cpus,
          info.nr_cpus(), info.page_size_bytes()));
      Hog* hog = hogs.back().get();
      threads.emplace_back([&, hog, w] { hog->Run(run, live[w], results[w]); });
    }
  }

  InstallSignalHandlers();
  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + absl::ToChronoNanoseconds(o.duration);
  run.go.Notify();
  Clock::time_point last_tick = start;
  uint64_t last_reads = 0, last_charges = 0;
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
    // One line a second, plus the last partial second unless it is tiny.
    if (now - last_tick < std::chrono::milliseconds(200)) continue;
    uint64_t reads = 0, charges = 0, ooms = 0, errors = 0;
    for (int w = 0; w < nr_workers; ++w) {
      reads += live[w].reads.load(std::memory_order_relaxed);
      charges += live[w].charges.load(std::memory_order_relaxed);
      ooms += live[w].ooms.load(std::memory_order_relaxed);
      errors += live[w].errors.load(std::memory_order_relaxed);
    }
    const double dt = std::chrono::duration<double>(now - last_tick).count();
    std::cerr << absl::StrFormat(
        "cgacct-load: [%6.1fs] reads %9.0f/s  charges %9.0f/s  refused %d  "
        "errors %d\n",
        std::chrono::duration<double>(now - start).count(),
        (reads - last_reads) / dt, (charges - last_charges) / dt, ooms, errors);
    last_tick = now;
    last_reads = reads;
    last_charges = charges;
  }
  run.stop.store(true, std::memory_order_relaxed);
  report.elapsed = absl::FromChrono(Clock::now() - start);
  for (std::thread& t : threads) t.join();  // hogs uncharge before they return

  for (int w = 0; w < nr_workers; ++w) {
    const WorkerResult& r = results[w];
    if (w < o.readers) {
      report.reads += r.ok;
      report.read_errors += r.errors;
      report.read_latency.Merge(r.latency);
    } else {
      report.charges += r.ok;
      report.charged_pages += r.charged_pages;
      report.ooms += r.ooms;
      report.costly_enomems += r.costly_enomems;
      report.hog_cycles += r.cycles;
      report.charge_errors += r.errors;
      report.throttle_us += r.throttle_us;
      report.charge_latency.Merge(r.latency);
    }
    if (report.first_error.empty()) report.first_error = r.first_error;
  }
  if (o.hogs > 0) {
    DeleteHogGroups(*control, o, report);
  }

  {
    // The longest holds with the work each did (CPUs walked, entries
    // folded): what the /metrics maxima cannot say.
    v1::EngineInfo after;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
    if (control->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &after)
            .ok()) {
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
  if (g_interrupted.load(std::memory_order_relaxed)) return 130;
  const uint64_t errors = report.read_errors + report.charge_errors;
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
      "cgacct-load --scenario=stat-reader|hog|seed-rstat [--threads=N] "
      "[--hogs=N] [--duration=10s] [--json=FILE]\n"
      "cgacct-load --scenario=netperf [--streams=N] [--pages=3] [--batch=64] "
      "[--rpc=stream|batch|unary] [--hierarchy=root|deep]\n"
      "Closed-loop load against cgacctd (docs/DESIGN.md §6.2); the report goes "
      "to stdout, progress to stderr.");
  cgacct::client::ShowOwnFlagsInHelp();
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::cerr << "cgacct-load: unexpected argument \"" << positional[1]
              << "\"\n";
    return 1;
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
