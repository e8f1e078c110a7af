#include "client/load/driver.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/cli/grpc_util.h"
#include "client/load/hog.h"
#include "client/load/load_chart.h"
#include "client/load/metrics_scrape.h"
#include "client/load/reclaim.h"
#include "client/load/server_calls.h"
#include "client/load/stat_reader.h"

namespace cgacct::load {
namespace {

constexpr char kHoldMaxMetric[] = "cgacct_rstat_flush_lock_hold_max_seconds";
constexpr char kHoldWallMaxMetric[] =
    "cgacct_rstat_flush_lock_hold_wall_max_seconds";

// Scrapes the longest flush-lock hold (in us) from /metrics: `metric` is
// kHoldMaxMetric (flushes not preempted, the irqs-off view) or
// kHoldWallMaxMetric.
absl::StatusOr<double> ScrapeFlushLockHoldMaxUs(const LoadOptions& o,
                                                const std::string& metric) {
  if (o.metrics_target.empty()) {
    return absl::InvalidArgumentError("no --metrics_target");
  }
  absl::StatusOr<std::vector<MetricSample>> samples =
      ScrapeMetrics(o.metrics_target, absl::Seconds(2));
  if (!samples.ok()) return samples.status();
  std::optional<double> seconds = MaxSampleValue(*samples, metric);
  if (!seconds.has_value()) {
    return absl::NotFoundError(absl::StrCat(metric, " not in /metrics"));
  }
  return *seconds * 1e6;
}

// Creates a hog's (ANON) or writer's (FILE) group; if one is left over from
// a killed run, uncharges the pages of `kind` it still holds so this run
// starts from zero.
absl::Status EnsureWorkerGroup(v1::Accounting::Stub& stub, const LoadOptions& o,
                               const std::string& path,
                               uint64_t page_size_bytes, v1::PageKind kind) {
  const absl::string_view stat = kind == v1::PAGE_KIND_FILE ? "file" : "anon";
  v1::CreateGroupRequest request;
  request.set_path(path);
  v1::Group group;
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(o.rpc_timeout));
  const grpc::Status status = stub.CreateGroup(&context, request, &group);
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
    return absl::InternalError(
        absl::StrCat("CreateGroup ", path, ": ", cli::FormatStatus(status)));
  }
  absl::StatusOr<uint64_t> left =
      ReadStatPages(stub, path, page_size_bytes, o.rpc_timeout, stat);
  if (!left.ok()) return left.status();
  if (*left == 0) return absl::OkStatus();
  const grpc::Status uncharged = UnchargePages(
      stub, path, *left, kind, /*cpu=*/std::nullopt, o.rpc_timeout);
  if (!uncharged.ok()) {
    return absl::InternalError(absl::StrCat("Uncharge leftover ", path, ": ",
                                            cli::FormatStatus(uncharged)));
  }
  std::cerr << "cgacct-load: " << path << " held " << *left << " " << stat
            << " pages from an earlier run; uncharged\n";
  return absl::OkStatus();
}

// Deletes the hog and writer groups, recording the pages the server
// reparented and the groups it could not delete in `report`.
void DeleteWorkerGroups(v1::Accounting::Stub& stub, const LoadOptions& o,
                        LoadReport& report) {
  const int n = o.hogs + o.writers;
  for (int i = 0; i < n; ++i) {
    v1::DeleteGroupRequest request;
    request.set_path(i < o.hogs ? HogPath(o, i) : WriterPath(o, i - o.hogs));
    v1::DeleteGroupResponse response;
    grpc::ClientContext context;
    context.set_deadline(cli::DeadlineAfter(o.rpc_timeout));
    const grpc::Status status = stub.DeleteGroup(&context, request, &response);
    if (status.ok()) {
      report.reparented_pages += response.reparented_pages();
      continue;
    }
    ++report.hog_groups_left;
    if (report.first_error.empty()) {
      report.first_error = absl::StrCat("DeleteGroup ", request.path(), ": ",
                                        cli::FormatStatus(status));
    }
    // A server that is gone or frozen will not answer the others either:
    // count them as left instead of waiting out a deadline for each.
    if (ShouldBackOff(status.error_code())) {
      report.hog_groups_left += n - i - 1;
      return;
    }
  }
}

// One run of the driver's scenarios. Built and run by one thread (main);
// the workers it starts touch only their own slots of live_, intervals_
// and results_ (and reclaimer_), which this thread reads after join(),
// except the LiveCounters (atomics) and IntervalRecorders (locked) that the
// progress line reads while they run.
class LoadRun {
 public:
  explicit LoadRun(const LoadOptions& o)
      : o_(o), nr_workers_(o.readers + o.hogs + o.writers) {}

  // The whole run; the exit status.
  int Run();

 private:
  // Connects, reads GetEngineInfo and starts the report. Each step's error
  // is the line the run fails with.
  absl::Status Connect();
  absl::Status SetUpGroups();
  // The workers' channels: each its own TCP connection, connected before
  // the clock starts.
  absl::Status OpenChannels();
  // Workers: readers first, then hogs, then writers (and the reclaimer).
  void StartWorkers();
  // Starts the clock, sleeps through the warm-up, prints a progress line a
  // second until the end or a signal, then stops and joins the workers.
  void Measure();
  // Every worker's interval since the last tick, into the series.
  void TakeInterval(double t_end_s, double seconds);
  // The calls that completed after the last tick (those in flight at the
  // stop included), kept only if something completed.
  void TakeFinalInterval();
  // The workers' results, the reclaim figures and the server's after the
  // run, into the report.
  void Collect();
  // The report on stdout, --json and --chart; the exit status.
  int Output();

  const LoadOptions& o_;
  const int nr_workers_;
  std::unique_ptr<v1::Accounting::Stub> control_;
  v1::EngineInfo info_;
  uint32_t hog_cpus_ = 0;
  LoadReport report_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;

  RunControl run_;
  std::unique_ptr<LiveCounters[]> live_;
  std::unique_ptr<IntervalRecorder[]> intervals_;
  std::vector<WorkerResult> results_;
  ReclaimerResult reclaimer_;
  std::vector<std::unique_ptr<v1::Accounting::Stub>> stubs_;
  std::vector<std::unique_ptr<Hog>> hogs_;
  std::vector<std::unique_ptr<Writer>> writers_;
  std::vector<std::unique_ptr<ReaderDriver>> drivers_;
  std::vector<std::thread> threads_;

  std::optional<EventsSnapshot> events_before_;
  Clock::time_point last_tick_;
  // Scratch histograms of TakeInterval, kept to reuse their buckets.
  LatencyHistogram spare_, read_interval_, charge_interval_;
};

int LoadRun::Run() {
  for (absl::Status (LoadRun::*step)() :
       {&LoadRun::Connect, &LoadRun::SetUpGroups, &LoadRun::OpenChannels}) {
    if (absl::Status s = (this->*step)(); !s.ok()) return Fail(s.message());
  }
  StartWorkers();
  Measure();
  Collect();
  return Output();
}

absl::Status LoadRun::Connect() {
  // Connect first: one clear line if nobody is listening.
  absl::StatusOr<ControlConnection> control =
      ConnectControl(o_.target, o_.connect_timeout, o_.rpc_timeout);
  if (!control.ok()) return control.status();
  control_ = std::move(control->stub);
  info_ = std::move(control->info);
  std::cerr << absl::StrFormat(
      "cgacct-load: cgacctd %s: nr_cpus %d, page size %d B, charge batch %d "
      "pages, flush lock policy %s, groups %d\n",
      o_.target, info_.nr_cpus(), info_.page_size_bytes(),
      info_.charge_batch_pages(), info_.flush_lock_policy(), info_.nr_groups());
  if (info_.nr_cpus() == 0 || info_.page_size_bytes() == 0) {
    return absl::FailedPreconditionError(
        "GetEngineInfo returned nr_cpus or page_size_bytes 0");
  }
  if (o_.hog_cpus > static_cast<int>(info_.nr_cpus())) {
    return absl::InvalidArgumentError(absl::StrCat("--hog_cpus=", o_.hog_cpus,
                                                   " exceeds the server's ",
                                                   info_.nr_cpus(), " CPUs"));
  }
  hog_cpus_ =
      o_.hog_cpus == 0 ? info_.nr_cpus() : static_cast<uint32_t>(o_.hog_cpus);
  report_ = ReportHeader(o_, info_, hog_cpus_);
  if (absl::StatusOr<double> before =
          ScrapeFlushLockHoldMaxUs(o_, kHoldMaxMetric);
      before.ok()) {
    report_.flush_lock_hold_max_us_before = *before;
  }
  return absl::OkStatus();
}

absl::Status LoadRun::SetUpGroups() {
  std::optional<v1::Limits> limits;
  if (o_.hogs > 0) {
    limits.emplace();
    limits->set_max_bytes(o_.hog_max_bytes);
  } else if (o_.writers > 0) {
    limits.emplace();
    limits->set_max_bytes(UINT64_MAX);  // memory.high alone bounds the group
    limits->set_high_bytes(o_.high_bytes);
  }
  if (absl::Status s = EnsureGroup(*control_, o_.group, limits, o_.rpc_timeout);
      !s.ok()) {
    return s;
  }
  // The hogs' groups (ANON pages), then the writers' (FILE pages).
  for (int i = 0; i < o_.hogs + o_.writers; ++i) {
    const bool hog = i < o_.hogs;
    if (absl::Status s = EnsureWorkerGroup(
            *control_, o_, hog ? HogPath(o_, i) : WriterPath(o_, i - o_.hogs),
            info_.page_size_bytes(),
            hog ? v1::PAGE_KIND_ANON : v1::PAGE_KIND_FILE);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status LoadRun::OpenChannels() {
  const int nr_channels =
      o_.channels == 0 ? nr_workers_ : std::min(o_.channels, nr_workers_);
  channels_.reserve(nr_channels);
  for (int i = 0; i < nr_channels; ++i) {
    // Several targets (a cluster's nodes): the connections go to them in
    // turn, so the workers spread over the nodes.
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        load::Connect(TargetFor(o_.targets, o_.target, i), o_.connect_timeout,
                      /*own_connection=*/true);
    if (!channel.ok()) return channel.status();
    channels_.push_back(*std::move(channel));
  }
  return absl::OkStatus();
}

void LoadRun::StartWorkers() {
  live_ = std::make_unique<LiveCounters[]>(nr_workers_);
  intervals_ = std::make_unique<IntervalRecorder[]>(nr_workers_);
  results_.resize(nr_workers_);
  // Closed loop: the readers' calls driven by --io_threads threads (0: a
  // blocking thread per reader). Open loop: a thread per reader.
  const bool async_readers = o_.rate == 0 && o_.io_threads > 0;
  for (int i = 0; async_readers && i < std::min(o_.io_threads, o_.readers);
       ++i) {
    drivers_.push_back(std::make_unique<ReaderDriver>(o_, run_));
  }
  stubs_.reserve(nr_workers_);
  threads_.reserve(nr_workers_ + 1);
  for (int w = 0; w < nr_workers_; ++w) {
    stubs_.push_back(v1::Accounting::NewStub(channels_[w % channels_.size()]));
    v1::Accounting::Stub* stub = stubs_.back().get();
    LiveCounters& live = live_[w];
    IntervalRecorder& interval = intervals_[w];
    WorkerResult& result = results_[w];
    if (w < o_.readers && async_readers) {
      drivers_[w % drivers_.size()]->Add(stub, &live, &interval, &result);
    } else if (w < o_.readers) {
      threads_.emplace_back([this, stub, w, &live, &interval, &result] {
        RunStatReader(*stub, o_, w, run_, live, interval, result);
      });
    } else if (w < o_.readers + o_.hogs) {
      const int i = w - o_.readers;
      // Spread the hogs over --hog_cpus of the server's per-CPU slots; with
      // as many slots as hogs each stays on its own.
      hogs_.push_back(std::make_unique<Hog>(
          *stub, o_, HogPath(o_, i), static_cast<uint32_t>(i),
          HogSlotStep(hog_cpus_, o_.hogs), hog_cpus_, info_.nr_cpus(),
          info_.page_size_bytes()));
      Hog* hog = hogs_.back().get();
      threads_.emplace_back([this, hog, &live, &interval, &result] {
        hog->Run(run_, live, interval, result);
      });
    } else {
      const int i = w - o_.readers - o_.hogs;
      // Each writer holds up to memory.high's worth, so together they
      // push the group over it.
      writers_.push_back(
          std::make_unique<Writer>(*stub, o_, WriterPath(o_, i),
                                   static_cast<uint32_t>(i) % info_.nr_cpus(),
                                   o_.high_bytes / info_.page_size_bytes()));
      Writer* writer = writers_.back().get();
      threads_.emplace_back([this, writer, &live, &interval, &result] {
        writer->Run(run_, live, interval, result);
      });
    }
  }
  for (std::unique_ptr<ReaderDriver>& d : drivers_) {
    threads_.emplace_back([&d] { d->Run(); });
  }
  if (o_.writers > 0) {
    threads_.emplace_back([this] {
      RunReclaimer(*control_, o_, info_.page_size_bytes(), run_, reclaimer_);
    });
  }
}

void LoadRun::TakeInterval(double t_end_s, double seconds) {
  uint64_t read_errors = 0, charge_errors = 0;
  for (int w = 0; w < nr_workers_; ++w) {
    uint64_t errors = 0;
    intervals_[w].Take(spare_, &errors);
    if (w < o_.readers) {
      read_interval_.Merge(spare_);
      read_errors += errors;
    } else {
      charge_interval_.Merge(spare_);
      charge_errors += errors;
    }
    spare_.Reset();
  }
  if (o_.readers > 0) {
    report_.read_series.push_back(
        SummarizeInterval(read_interval_, read_errors, t_end_s, seconds));
  }
  if (o_.hogs + o_.writers > 0) {
    report_.charge_series.push_back(
        SummarizeInterval(charge_interval_, charge_errors, t_end_s, seconds));
  }
  read_interval_.Reset();
  charge_interval_.Reset();
}

void LoadRun::TakeFinalInterval() {
  const Clock::time_point start = run_.measure_start;
  const Clock::time_point now = Clock::now();
  if (now <= last_tick_) return;
  const size_t reads_before = report_.read_series.size();
  const size_t charges_before = report_.charge_series.size();
  TakeInterval(std::chrono::duration<double>(now - start).count(),
               std::chrono::duration<double>(now - last_tick_).count());
  // Keep the final interval only if something completed in it.
  const auto drop_if_empty = [](std::vector<IntervalStats>& series,
                                size_t before) {
    if (series.size() > before &&
        series.back().count + series.back().errors == 0) {
      series.pop_back();
    }
  };
  drop_if_empty(report_.read_series, reads_before);
  drop_if_empty(report_.charge_series, charges_before);
}

void LoadRun::Measure() {
  InstallStopSignalHandlers();
  run_.start = Clock::now();
  run_.measure_start = run_.start + absl::ToChronoNanoseconds(o_.warmup);
  run_.end = run_.measure_start + absl::ToChronoNanoseconds(o_.duration);
  run_.go.Notify();
  const Clock::time_point start = run_.measure_start;
  const Clock::time_point end = run_.end;
  // Warm-up: runs, counts nothing (the workers record no call started, or
  // due, before measure_start).
  while (Clock::now() < start && !StopRequested()) {
    std::this_thread::sleep_for(std::min<Clock::duration>(
        start - Clock::now(), std::chrono::milliseconds(100)));
  }
  if (o_.writers > 0) {
    if (absl::StatusOr<EventsSnapshot> snap =
            ReadEvents(*control_, o_.group, o_.rpc_timeout);
        snap.ok()) {
      events_before_ = *snap;
    }
  }
  last_tick_ = std::max(start, Clock::now());
  uint64_t last_reads = 0, last_charges = 0, last_ooms = 0;
  for (int w = 0; w < nr_workers_; ++w) {
    last_reads += live_[w].reads.load(std::memory_order_relaxed);
    last_charges += live_[w].charges.load(std::memory_order_relaxed);
  }
  for (bool done = false; !done;) {
    const Clock::time_point now = Clock::now();
    done = now >= end || StopRequested();
    const Clock::time_point next_tick =
        std::min(end, last_tick_ + std::chrono::seconds(1));
    if (!done && now < next_tick) {
      // Short naps so a signal ends the run promptly.
      std::this_thread::sleep_for(std::min<Clock::duration>(
          next_tick - now, std::chrono::milliseconds(100)));
      continue;
    }
    // One line a second, plus the last partial second unless it is tiny
    // (whose calls then go into the final interval taken after the join).
    if (now - last_tick_ < std::chrono::milliseconds(200)) continue;
    uint64_t reads = 0, charges = 0, ooms = 0, errors = 0;
    for (int w = 0; w < nr_workers_; ++w) {
      reads += live_[w].reads.load(std::memory_order_relaxed);
      charges += live_[w].charges.load(std::memory_order_relaxed);
      ooms += live_[w].ooms.load(std::memory_order_relaxed);
      errors += live_[w].errors.load(std::memory_order_relaxed);
    }
    const double dt = std::chrono::duration<double>(now - last_tick_).count();
    const double t = std::chrono::duration<double>(now - start).count();
    TakeInterval(t, dt);
    const IntervalStats& last = o_.readers > 0 ? report_.read_series.back()
                                               : report_.charge_series.back();
    // Rates over the last second, as the report's per-second series (a
    // cumulative refused count here included the warm-up the report leaves
    // out, so the two did not agree: 3,291 live against 3,006 reported).
    std::cerr << absl::StrFormat(
        "cgacct-load: [%6.1fs] reads %9.0f/s  charges %9.0f/s  refused "
        "%7.0f/s  errors %d so far  p99 %.1f us\n",
        t, (reads - last_reads) / dt, (charges - last_charges) / dt,
        (ooms - last_ooms) / dt, errors, last.p99_ns / 1000.0);
    last_tick_ = now;
    last_reads = reads;
    last_charges = charges;
    last_ooms = ooms;
  }
  run_.stop.store(true, std::memory_order_relaxed);
  const Clock::time_point stopped = Clock::now();
  report_.elapsed = absl::FromChrono(std::max(stopped, start) - start);
  for (std::thread& t : threads_) t.join();  // hogs uncharge before returning
  TakeFinalInterval();
}

void LoadRun::Collect() {
  for (int w = 0; w < nr_workers_; ++w) {
    AddWorkerResult(results_[w], /*reader=*/w < o_.readers, report_);
  }
  if (o_.writers > 0) {
    report_.reclaims = reclaimer_.reclaims;
    report_.reclaims_short = reclaimer_.short_reclaims;
    report_.reclaim_errors = reclaimer_.errors;
    report_.reclaimed_pages = reclaimer_.reclaimed_pages;
    report_.reclaim_latency = reclaimer_.latency;
    if (report_.first_error.empty()) {
      report_.first_error = reclaimer_.first_error;
    }
    absl::StatusOr<EventsSnapshot> after =
        ReadEvents(*control_, o_.group, o_.rpc_timeout);
    if (after.ok() && events_before_.has_value()) {
      SetEventsDelta(*events_before_, *after, report_);
    }
  }
  if (o_.hogs + o_.writers > 0) DeleteWorkerGroups(*control_, o_, report_);

  // The longest holds with the work each did (CPUs walked, entries folded):
  // what the /metrics maxima cannot say.
  if (absl::StatusOr<v1::EngineInfo> after =
          GetEngineInfo(*control_, o_.rpc_timeout);
      after.ok()) {
    report_.hold_max_cpus_walked = after->flush_lock_hold_max_cpus_walked();
    report_.hold_max_groups_folded = after->flush_lock_hold_max_groups_folded();
    report_.flush_hold_budget_us = after->flush_hold_budget_us();
    for (const v1::FlushLockHold& h : after->longest_flush_holds()) {
      FlushHoldLine line;
      line.hold_us = static_cast<double>(h.hold_ns()) / 1000;
      line.cpus_walked = h.cpus_walked();
      line.groups_folded = h.groups_folded();
      line.root_path = h.root_path();
      line.policy = h.policy();
      report_.longest_holds.push_back(std::move(line));
    }
  }
  absl::StatusOr<double> hold_max_us =
      ScrapeFlushLockHoldMaxUs(o_, kHoldMaxMetric);
  absl::StatusOr<double> wall_max_us =
      ScrapeFlushLockHoldMaxUs(o_, kHoldWallMaxMetric);
  if (wall_max_us.ok()) report_.flush_lock_hold_wall_max_us = *wall_max_us;
  if (hold_max_us.ok()) {
    report_.flush_lock_hold_max_us = *hold_max_us;
  } else {
    report_.metrics_error = std::string(hold_max_us.status().message());
  }
}

int LoadRun::Output() {
  std::cout << FormatLoadReportTable(report_) << std::flush;
  if (!o_.json_path.empty()) {
    if (absl::Status s =
            WriteFileAtomically(o_.json_path, LoadReportJson(report_));
        !s.ok()) {
      return Fail(s.message());
    }
  }
  if (!o_.chart_path.empty()) {
    if (absl::Status s = WriteLatencyChart(report_, o_.chart_path); !s.ok()) {
      return Fail(s.message());
    }
    std::cerr << "cgacct-load: chart written to " << o_.chart_path << "\n";
  }
  std::string summary;
  const int status = RunExitStatus(report_, StopRequested(), &summary);
  std::cerr << summary;
  return status;
}

}  // namespace

LoadReport ReportHeader(const LoadOptions& o, const v1::EngineInfo& info,
                        uint32_t hog_cpus) {
  LoadReport report;
  report.scenario = o.scenario;
  report.target = TargetsText(o.targets, o.target);
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
  report.warmup = o.warmup;
  report.rate = o.rate;
  report.writers = o.writers;
  if (o.writers > 0) {
    report.high_bytes = o.high_bytes;
    report.write_chunk_pages = o.write_chunk_pages;
    report.reclaim_bytes = o.reclaim_bytes;
    report.reclaim_interval = o.reclaim_interval;
  }
  return report;
}

void AddWorkerResult(const WorkerResult& r, bool reader, LoadReport& report) {
  if (reader) {
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

int RunExitStatus(const LoadReport& report, bool interrupted,
                  std::string* summary) {
  summary->clear();
  if (interrupted) return 130;
  const uint64_t errors =
      report.read_errors + report.charge_errors + report.reclaim_errors;
  if (errors == 0 && report.reparented_pages == 0 &&
      report.hog_groups_left == 0) {
    return 0;
  }
  *summary = absl::StrCat(
      "cgacct-load: ", errors, " RPC errors, ", report.reparented_pages,
      " pages reparented, ", report.hog_groups_left, " hog groups left",
      report.first_error.empty() ? "" : "; first: ", report.first_error, "\n");
  return 3;
}

int RunLoad(const LoadOptions& o) { return LoadRun(o).Run(); }

}  // namespace cgacct::load
