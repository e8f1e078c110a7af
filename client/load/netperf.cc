#include "client/load/netperf.h"

#include <algorithm>
#include <atomic>
#include <chrono>
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
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cgacct/client.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/cli/grpc_util.h"
#include "client/load/histogram.h"
#include "client/load/load_chart.h"
#include "client/load/load_report.h"
#include "client/load/metrics_scrape.h"
#include "client/load/netperf_report.h"
#include "client/load/run_control.h"
#include "client/load/server_calls.h"

namespace cgacct::load {
namespace {

// What one stream did. Written by its thread only; `ops` and `messages` are
// also read by the progress line (relaxed atomics).
struct StreamResult {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> messages{0};
  uint64_t op_errors = 0;
  uint64_t rpc_errors = 0;
  LatencyHistogram latency;   // per message (round trip)
  IntervalRecorder interval;  // the same, per progress interval
  std::string first_error;
  bool resident_charged = false;
  bool resident_released = false;
};

void NoteError(StreamResult& r, std::string error) {
  if (r.first_error.empty()) r.first_error = std::move(error);
}

// A message of `ops` ops sent at `t0` came back.
void RecordMessage(StreamResult& r, Clock::time_point t0, uint64_t ops) {
  const uint64_t ns = NanosSince(t0);
  r.latency.Record(ns);
  r.interval.Record(ns);
  r.ops.fetch_add(ops, std::memory_order_relaxed);
  r.messages.fetch_add(1, std::memory_order_relaxed);
}

// Counts the non-OK results of a response; true if all are OK.
bool CheckResults(const v1::ChargeBatchResponse& response, int want,
                  StreamResult& r) {
  if (response.results_size() != want) {
    ++r.rpc_errors;
    NoteError(r, absl::StrCat("response has ", response.results_size(),
                              " results for ", want, " ops"));
    return false;
  }
  bool ok = true;
  for (const v1::OpResult& result : response.results()) {
    if (result.code() != 0) {
      ++r.op_errors;
      ok = false;
      NoteError(r, absl::StrCat("op ", result.id(), ": code ", result.code(),
                                ": ", result.message()));
    }
  }
  return ok;
}

grpc::Status ChargeOnce(v1::Accounting::Stub& stub, const std::string& path,
                        uint64_t pages, bool uncharge, absl::Duration timeout) {
  if (uncharge) {
    return UnchargePages(stub, path, pages, v1::PAGE_KIND_ANON,
                         /*cpu=*/std::nullopt, timeout);
  }
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(timeout));
  v1::ChargeRequest request;
  request.set_path(path);
  request.set_nr_pages(pages);
  request.set_kind(v1::PAGE_KIND_ANON);
  v1::ChargeResponse response;
  return stub.Charge(&context, request, &response);
}

// Counts a failed call on the resident pages (`what`: "resident Charge",
// "resident Uncharge"); true if it succeeded.
template <typename StatusT>  // grpc::Status or client::Status
bool ResidentCallOk(StreamResult& r, absl::string_view what,
                    const StatusT& s) {
  if (s.ok()) return true;
  ++r.rpc_errors;
  NoteError(r, absl::StrCat(what, ": ", cli::FormatStatus(s)));
  return false;
}

// Charges the stream's resident pages (its "socket buffer") through
// `charge`, a callable returning the call's grpc::Status or client::Status.
template <typename ChargeFn>
void ChargeResident(const NetperfOptions& o, StreamResult& r, ChargeFn charge) {
  if (o.resident_pages == 0) return;
  r.resident_charged = ResidentCallOk(r, "resident Charge", charge());
}

// Uncharges the resident pages, if they were charged, through `uncharge`.
template <typename UnchargeFn>
void ReleaseResident(StreamResult& r, UnchargeFn uncharge) {
  if (!r.resident_charged) return;
  r.resident_released = ResidentCallOk(r, "resident Uncharge", uncharge());
}

// --rpc=stream: `request` on one ChargeStream, one message in flight.
void RunChargeStream(v1::Accounting::Stub& stub, const NetperfOptions& o,
                     const v1::ChargeBatchRequest& request,
                     const std::atomic<bool>& stop, StreamResult& r) {
  v1::ChargeBatchResponse response;
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(o.duration + absl::Seconds(60)));
  auto stream = stub.ChargeStream(&context);
  while (!stop.load(std::memory_order_relaxed)) {
    const Clock::time_point t0 = Clock::now();
    if (!stream->Write(request) || !stream->Read(&response)) {
      ++r.rpc_errors;
      NoteError(r, "ChargeStream broke");
      break;
    }
    RecordMessage(r, t0, static_cast<uint64_t>(o.batch));
    CheckResults(response, o.batch, r);
  }
  stream->WritesDone();
  const grpc::Status s = stream->Finish();
  if (!s.ok()) {
    ++r.rpc_errors;
    NoteError(r, absl::StrCat("ChargeStream: ", cli::FormatStatus(s)));
  }
}

// --rpc=batch: `request` as unary ChargeBatch calls, until stopped or a
// call fails.
void RunChargeBatches(v1::Accounting::Stub& stub, const NetperfOptions& o,
                      const v1::ChargeBatchRequest& request,
                      const std::atomic<bool>& stop, StreamResult& r) {
  v1::ChargeBatchResponse response;
  while (!stop.load(std::memory_order_relaxed)) {
    const Clock::time_point t0 = Clock::now();
    grpc::ClientContext context;
    context.set_deadline(cli::DeadlineAfter(o.rpc_timeout));
    const grpc::Status s = stub.ChargeBatch(&context, request, &response);
    if (!s.ok()) {
      NoteError(r, absl::StrCat("ChargeBatch: ", cli::FormatStatus(s)));
      ++r.rpc_errors;
      return;
    }
    CheckResults(response, o.batch, r);
    RecordMessage(r, t0, static_cast<uint64_t>(o.batch));
  }
}

// --rpc=unary: a Charge, then its Uncharge, one op per RPC, until stopped
// or a call fails.
void RunUnaryCalls(v1::Accounting::Stub& stub, const NetperfOptions& o,
                   const std::string& path, const std::atomic<bool>& stop,
                   StreamResult& r) {
  while (!stop.load(std::memory_order_relaxed)) {
    for (bool uncharge : {false, true}) {
      const Clock::time_point t0 = Clock::now();
      const grpc::Status s =
          ChargeOnce(stub, path, o.pages, uncharge, o.rpc_timeout);
      if (!s.ok()) {
        NoteError(r, absl::StrCat(uncharge ? "Uncharge: " : "Charge: ",
                                  cli::FormatStatus(s)));
        ++r.rpc_errors;
        return;
      }
      RecordMessage(r, t0, 1);
    }
  }
}

// One stream of --rpc=stream|batch|unary on its own connection.
void RunStream(v1::Accounting::Stub& stub, const NetperfOptions& o,
               const std::string& path, int index, const absl::Notification& go,
               const std::atomic<bool>& stop, StreamResult& r) {
  ChargeResident(o, r, [&] {
    return ChargeOnce(stub, path, o.resident_pages, false, o.rpc_timeout);
  });
  // One request for the whole run: the same charge/uncharge pairs.
  v1::ChargeBatchRequest request;
  for (int i = 0; i < o.batch; ++i) {
    v1::ChargeOp* op = request.add_ops();
    op->set_id(static_cast<uint64_t>(index) << 32 | static_cast<uint64_t>(i));
    op->set_uncharge(i % 2 == 1);
    op->set_path(path);
    op->set_nr_pages(o.pages);
    op->set_kind(v1::PAGE_KIND_ANON);
  }
  go.WaitForNotification();
  switch (o.rpc) {
    case RpcKind::kStream:
      RunChargeStream(stub, o, request, stop, r);
      break;
    case RpcKind::kBatch:
      RunChargeBatches(stub, o, request, stop, r);
      break;
    case RpcKind::kUnary:
    case RpcKind::kLibrary:  // not here: RunLibraryThread
      RunUnaryCalls(stub, o, path, stop, r);
      break;
  }
  ReleaseResident(r, [&] {
    return ChargeOnce(stub, path, o.resident_pages, true, o.rpc_timeout);
  });
}

// --rpc=library: the same loop through cgacct::client (one Client shared by
// every thread, as one application process would). A "message" is --batch
// ops (charge, uncharge, ...) timed together; most never leave the process.
void RunLibraryThread(client::Client& client, const NetperfOptions& o,
                      const std::string& path, const absl::Notification& go,
                      const std::atomic<bool>& stop, StreamResult& r) {
  ChargeResident(o, r,
                 [&] { return client.Charge(path, o.resident_pages).status; });
  go.WaitForNotification();
  while (!stop.load(std::memory_order_relaxed)) {
    const Clock::time_point t0 = Clock::now();
    bool ok = true;
    for (int i = 0; i < o.batch / 2 && ok; ++i) {
      const client::ChargeResult c = client.Charge(path, o.pages);
      if (!c.ok()) {
        ++r.op_errors;
        NoteError(r, absl::StrCat("Charge: ", cli::FormatStatus(c.status)));
        ok = false;
        break;
      }
      const client::Status u = client.Uncharge(path, o.pages);
      if (!u.ok()) {
        ++r.op_errors;
        NoteError(r, absl::StrCat("Uncharge: ", cli::FormatStatus(u)));
        ok = false;
      }
    }
    if (!ok) break;
    RecordMessage(r, t0, static_cast<uint64_t>(o.batch));
  }
  ReleaseResident(r, [&] { return client.Uncharge(path, o.resident_pages); });
}

// Charge and Uncharge RPCs the server has handled (grpc_server_handled_total
// of the two methods), from its /metrics; nullopt when it cannot be read.
std::optional<double> ServerChargeRpcs(const std::string& metrics_target) {
  if (metrics_target.empty()) return std::nullopt;
  absl::StatusOr<std::vector<MetricSample>> samples =
      ScrapeMetrics(metrics_target, absl::Seconds(2));
  if (!samples.ok()) return std::nullopt;
  double n = 0;
  for (const MetricSample& m : *samples) {
    if (m.name != "grpc_server_handled_total") continue;
    for (const auto& [k, v] : m.labels) {
      if (k == "grpc_method" && (v == "Charge" || v == "Uncharge")) {
        n += m.value;
      }
    }
  }
  return n;
}

// One netperf run. Built and run by one thread (main); each stream thread
// touches only its own StreamResult, which this thread reads after join()
// (and, while they run, the atomics and IntervalRecorder).
class NetperfRun {
 public:
  explicit NetperfRun(const NetperfOptions& o)
      : o_(o), path_(NetperfLeafPath(o)), results_(o.streams) {}

  // The whole run; the exit status.
  int Run();

 private:
  // Connects, reads GetEngineInfo, creates the groups and sets the
  // protection; opens the library's Client or the streams' connections.
  absl::Status SetUp();
  absl::Status OpenClients();
  // Starts the streams, lets them charge their resident pages, starts the
  // clock and prints a progress line a second until the end or a signal;
  // then stops and joins them.
  void Measure();
  // Every stream's messages since the last tick, into the series.
  void TakeInterval(double t_end_s, double seconds);
  // The library's figures, the last interval, the streams' results and the
  // pages left, into the report.
  void Collect();
  // The table, --json and --chart; the exit status.
  int Output();

  const NetperfOptions& o_;
  const std::string path_;
  std::unique_ptr<v1::Accounting::Stub> control_;
  v1::EngineInfo info_;
  NetperfReport report_;
  absl::StatusOr<uint64_t> anon_before_;
  std::vector<std::unique_ptr<v1::Accounting::Stub>> stubs_;
  std::unique_ptr<client::Client> library_;
  std::optional<double> rpcs_before_;
  std::vector<StreamResult> results_;
  Clock::time_point start_;
  Clock::time_point last_tick_;
  // Scratch histograms of TakeInterval, kept to reuse their buckets.
  LatencyHistogram spare_, interval_;
};

int NetperfRun::Run() {
  for (absl::Status (NetperfRun::*step)() :
       {&NetperfRun::SetUp, &NetperfRun::OpenClients}) {
    if (absl::Status s = (this->*step)(); !s.ok()) return Fail(s.message());
  }
  std::cerr << absl::StrFormat(
      "cgacct-load: netperf %s, %d streams x %d ops of %d pages, %s, "
      "server nr_cpus %d, charge batch %d\n",
      o_.rpc_name, o_.streams, OpsPerMessage(o_), o_.pages, path_,
      info_.nr_cpus(), info_.charge_batch_pages());
  Measure();
  Collect();
  return Output();
}

absl::Status NetperfRun::SetUp() {
  absl::StatusOr<ControlConnection> control =
      ConnectControl(o_.target, o_.connect_timeout, o_.rpc_timeout);
  if (!control.ok()) return control.status();
  control_ = std::move(control->stub);
  info_ = std::move(control->info);
  if (info_.page_size_bytes() == 0) {
    return absl::FailedPreconditionError("server page size is 0");
  }
  if (absl::Status s =
          EnsureGroup(*control_, path_, std::nullopt, o_.rpc_timeout);
      !s.ok()) {
    return s;
  }
  report_.nr_cpus = info_.nr_cpus();
  report_.charge_batch_pages = info_.charge_batch_pages();
  report_.protection_bytes =
      NetperfProtectionBytes(o_, info_.page_size_bytes());
  // root: no protection anywhere on the path; deep: on the top level.
  v1::SetLimitsRequest request;
  request.set_path(o_.group);
  request.mutable_limits()->set_min_bytes(report_.protection_bytes);
  request.mutable_limits()->set_low_bytes(report_.protection_bytes);
  v1::Group group;
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(o_.rpc_timeout));
  if (const grpc::Status s = control_->SetLimits(&context, request, &group);
      !s.ok()) {
    return absl::InternalError(absl::StrCat(
        "SetLimits ", o_.group, " min/low: ", cli::FormatStatus(s)));
  }
  anon_before_ =
      ReadStatPages(*control_, path_, info_.page_size_bytes(), o_.rpc_timeout);
  return absl::OkStatus();
}

absl::Status NetperfRun::OpenClients() {
  if (o_.rpc == RpcKind::kLibrary) {
    client::Options options;
    options.client_name = "cgacct-load netperf";
    options.call_timeout = absl::ToChronoMilliseconds(o_.rpc_timeout);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        cli::MakeChannel(o_.target, /*own_connection=*/true);
    if (!channel.ok()) return channel.status();
    if (const client::Status s =
            client::Client::Open(*std::move(channel), options, &library_);
        !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cgacct::client::Client::Open: ", cli::FormatStatus(s)));
    }
    return absl::OkStatus();
  }
  for (int i = 0; i < o_.streams; ++i) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        Connect(TargetFor(o_.targets, o_.target, i), o_.connect_timeout,
                /*own_connection=*/true);
    if (!channel.ok()) return channel.status();
    stubs_.push_back(v1::Accounting::NewStub(*channel));
  }
  return absl::OkStatus();
}

void NetperfRun::TakeInterval(double t_end_s, double seconds) {
  for (StreamResult& r : results_) {
    uint64_t errors = 0;  // netperf counts its errors apart
    r.interval.Take(spare_, &errors);
    interval_.Merge(spare_);
    spare_.Reset();
  }
  report_.series.push_back(SummarizeInterval(interval_, 0, t_end_s, seconds));
  interval_.Reset();
}

void NetperfRun::Measure() {
  absl::Notification go;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < o_.streams; ++i) {
    StreamResult& r = results_[i];
    if (o_.rpc == RpcKind::kLibrary) {
      threads.emplace_back([this, &go, &stop, &r] {
        RunLibraryThread(*library_, o_, path_, go, stop, r);
      });
    } else {
      threads.emplace_back([this, i, &go, &stop, &r] {
        RunStream(*stubs_[i], o_, path_, i, go, stop, r);
      });
    }
  }
  // Let every stream charge its resident pages first.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (o_.rpc == RpcKind::kLibrary) {
    rpcs_before_ = ServerChargeRpcs(o_.metrics_target);
  }
  InstallStopSignalHandlers();

  start_ = Clock::now();
  const Clock::time_point end = start_ + absl::ToChronoNanoseconds(o_.duration);
  go.Notify();
  last_tick_ = start_;
  uint64_t last_ops = 0;
  while (true) {
    const Clock::time_point now = Clock::now();
    if (now >= end || StopRequested()) break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(end - now, std::chrono::milliseconds(100)));
    const Clock::time_point after = Clock::now();
    if (after - last_tick_ < std::chrono::seconds(1)) continue;
    uint64_t ops = 0;
    for (const StreamResult& r : results_) {
      ops += r.ops.load(std::memory_order_relaxed);
    }
    const double dt = std::chrono::duration<double>(after - last_tick_).count();
    const double t = std::chrono::duration<double>(after - start_).count();
    TakeInterval(t, dt);
    std::cerr << absl::StrFormat(
        "cgacct-load: [%6.1fs] ops %10.0f/s  p99 %.1f us\n", t,
        (ops - last_ops) / dt, report_.series.back().p99_ns / 1000.0);
    last_tick_ = after;
    last_ops = ops;
  }
  stop.store(true, std::memory_order_relaxed);
  report_.elapsed_s =
      std::chrono::duration<double>(Clock::now() - start_).count();
  for (std::thread& t : threads) t.join();
}

void NetperfRun::Collect() {
  if (library_ != nullptr) {
    report_.library = library_->stats();
    const std::optional<double> rpcs_after =
        ServerChargeRpcs(o_.metrics_target);
    if (rpcs_before_.has_value() && rpcs_after.has_value()) {
      report_.server_rpcs = *rpcs_after - *rpcs_before_;
    }
    // Returns the stock (CloseSession); the books must then balance.
    if (const client::Status s = library_->Close(); !s.ok()) {
      ++report_.rpc_errors;
      report_.first_error = absl::StrCat("Close: ", cli::FormatStatus(s));
    }
  }
  // The messages that completed after the last tick.
  const Clock::time_point now = Clock::now();
  TakeInterval(std::chrono::duration<double>(now - start_).count(),
               std::chrono::duration<double>(now - last_tick_).count());
  if (report_.series.back().count == 0) report_.series.pop_back();

  for (StreamResult& r : results_) {
    report_.ops += r.ops.load(std::memory_order_relaxed);
    report_.messages += r.messages.load(std::memory_order_relaxed);
    report_.op_errors += r.op_errors;
    report_.rpc_errors += r.rpc_errors;
    report_.latency.Merge(r.latency);
    if (report_.first_error.empty()) report_.first_error = r.first_error;
  }
  absl::StatusOr<uint64_t> anon_after =
      ReadStatPages(*control_, path_, info_.page_size_bytes(), o_.rpc_timeout);
  if (anon_before_.ok() && anon_after.ok()) {
    report_.anon_left = *anon_after - std::min(*anon_after, *anon_before_);
  }
}

int NetperfRun::Output() {
  std::cout << FormatNetperfTable(o_, report_) << std::flush;
  if (!o_.json_path.empty()) {
    if (absl::Status s =
            WriteFileAtomically(o_.json_path, NetperfJson(o_, report_));
        !s.ok()) {
      return Fail(s.message());
    }
  }
  if (!o_.chart_path.empty()) {
    // The message round trips, drawn as any scenario's charges.
    LoadReport plotted;
    plotted.scenario = absl::StrCat("netperf --rpc=", o_.rpc_name);
    plotted.elapsed = absl::Seconds(report_.elapsed_s);
    plotted.charge_latency = report_.latency;
    plotted.charge_series = report_.series;
    if (absl::Status s = WriteLatencyChart(plotted, o_.chart_path); !s.ok()) {
      return Fail(s.message());
    }
    std::cerr << "cgacct-load: chart written to " << o_.chart_path << "\n";
  }
  if (StopRequested()) return 130;
  if (report_.op_errors > 0 || report_.rpc_errors > 0 ||
      report_.anon_left.value_or(0) != 0) {
    std::cerr << "cgacct-load: netperf: " << report_.op_errors << " op errors, "
              << report_.rpc_errors << " RPC errors"
              << (report_.first_error.empty() ? "" : "; first: ")
              << report_.first_error << "\n";
    return 3;
  }
  return 0;
}

}  // namespace

uint64_t NetperfProtectionBytes(const NetperfOptions& o,
                                uint64_t page_size_bytes) {
  if (!o.deep) return 0;
  if (o.protection_bytes > 0) return o.protection_bytes;
  return o.resident_pages * static_cast<uint64_t>(o.streams) / 2 *
         page_size_bytes;
}

int RunNetperf(const NetperfOptions& o) { return NetperfRun(o).Run(); }

}  // namespace cgacct::load
