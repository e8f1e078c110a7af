#include "client/netperf.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cgacct/client.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/cli_util.h"
#include "client/grpc_util.h"
#include "client/histogram.h"
#include "client/json_writer.h"
#include "client/load_chart.h"
#include "client/load_report.h"
#include "client/metrics_scrape.h"

// Shared with the other scenarios (client/load_main.cc).
ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, group);
ABSL_DECLARE_FLAG(absl::Duration, duration);
ABSL_DECLARE_FLAG(std::string, json);
ABSL_DECLARE_FLAG(std::string, chart);
ABSL_DECLARE_FLAG(absl::Duration, connect_timeout);
ABSL_DECLARE_FLAG(absl::Duration, rpc_timeout);
ABSL_DECLARE_FLAG(std::string, metrics_target);

ABSL_FLAG(int32_t, streams, 4, "netperf: concurrent streams (connections)");
ABSL_FLAG(uint64_t, pages, 3, "netperf: pages per charge and per uncharge");
ABSL_FLAG(int32_t, batch, 64,
          "netperf: ops per ChargeStream/ChargeBatch message (even: charge, "
          "uncharge pairs)");
ABSL_FLAG(std::string, rpc, "stream",
          "netperf: stream (ChargeStream) | batch (unary ChargeBatch) | unary "
          "(Charge and Uncharge) | library (cgacct::client: one session, "
          "--streams threads charging through its per-CPU stock)");
ABSL_FLAG(std::string, hierarchy, "root",
          "netperf: root (GROUP, directly under /) | deep (GROUP/mid/leaf, "
          "memory.min and memory.low on GROUP)");
ABSL_FLAG(uint64_t, resident_pages, 256,
          "netperf: pages each stream keeps charged during the run");
ABSL_FLAG(cgacct::client::ByteSize, protection_bytes,
          cgacct::client::ByteSize{0},
          "netperf --hierarchy=deep: memory.min = memory.low of GROUP; 0 = "
          "half of all streams' resident pages");

namespace cgacct::client {
namespace {

namespace v1 = ::cgacct::v1;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop_requested{false};
void OnSignal(int) { g_stop_requested.store(true, std::memory_order_relaxed); }

enum class RpcKind { kStream, kBatch, kUnary, kLibrary };

struct NetperfOptions {
  std::string target;
  std::string group;
  absl::Duration duration;
  std::string json_path;
  absl::Duration connect_timeout;
  absl::Duration rpc_timeout;
  int streams = 0;
  uint64_t pages = 0;
  int batch = 0;  // ops per message; 2 for unary (one charge, one uncharge)
  RpcKind rpc = RpcKind::kStream;
  std::string rpc_name;
  bool deep = false;
  std::string metrics_target;  // library: where RPCs per charge are scraped
  uint64_t resident_pages = 0;
  uint64_t protection_bytes = 0;
};

absl::StatusOr<NetperfOptions> NetperfOptionsFromFlags() {
  NetperfOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  o.group = absl::GetFlag(FLAGS_group);
  o.duration = absl::GetFlag(FLAGS_duration);
  o.json_path = absl::GetFlag(FLAGS_json);
  o.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  o.streams = absl::GetFlag(FLAGS_streams);
  o.pages = absl::GetFlag(FLAGS_pages);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.rpc_name = absl::GetFlag(FLAGS_rpc);
  const std::string hierarchy = absl::GetFlag(FLAGS_hierarchy);
  o.resident_pages = absl::GetFlag(FLAGS_resident_pages);
  o.protection_bytes = absl::GetFlag(FLAGS_protection_bytes).bytes;
  if (o.group.empty() || o.group.front() != '/' || o.group == "/") {
    return absl::InvalidArgumentError(
        "--group must be an absolute path below /");
  }
  if (o.duration <= absl::ZeroDuration() || o.duration > absl::Hours(24)) {
    return absl::InvalidArgumentError("--duration must be in (0, 24h]");
  }
  if (o.streams < 1 || o.streams > 1024) {
    return absl::InvalidArgumentError("--streams must be in 1..1024");
  }
  if (o.pages < 1 || o.pages > 127) {
    return absl::InvalidArgumentError("--pages must be in 1..127");
  }
  if (o.rpc_name == "stream") {
    o.rpc = RpcKind::kStream;
  } else if (o.rpc_name == "batch") {
    o.rpc = RpcKind::kBatch;
  } else if (o.rpc_name == "unary") {
    o.rpc = RpcKind::kUnary;
    o.batch = 2;
  } else if (o.rpc_name == "library") {
    o.rpc = RpcKind::kLibrary;
    o.metrics_target = absl::GetFlag(FLAGS_metrics_target);
    if (o.metrics_target.empty()) {
      absl::StatusOr<std::string> derived = MetricsTargetFor(o.target);
      o.metrics_target = derived.ok() ? *derived : "";
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rpc=", o.rpc_name, ": expected stream, batch, unary or library"));
  }
  if (o.batch < 2 || o.batch > 4096 || o.batch % 2 != 0) {
    return absl::InvalidArgumentError("--batch must be even, in 2..4096");
  }
  if (hierarchy == "root") {
    o.deep = false;
  } else if (hierarchy == "deep") {
    o.deep = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--hierarchy=", hierarchy, ": expected root or deep"));
  }
  if (o.resident_pages > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError("--resident_pages must be <= 2^30");
  }
  return o;
}

std::string LeafPath(const NetperfOptions& o) {
  return o.deep ? absl::StrCat(o.group, "/mid/leaf") : o.group;
}

// mkdir -p of `path`.
absl::Status EnsurePath(v1::Accounting::Stub& stub, const std::string& path,
                        absl::Duration timeout) {
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, "/", part);
    v1::CreateGroupRequest request;
    request.set_path(prefix);
    v1::Group group;
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(timeout));
    const grpc::Status s = stub.CreateGroup(&context, request, &group);
    if (!s.ok() && s.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      return absl::InternalError(
          absl::StrCat("CreateGroup ", prefix, ": ", FormatStatus(s)));
    }
  }
  return absl::OkStatus();
}

absl::Status SetProtection(v1::Accounting::Stub& stub, const std::string& path,
                           uint64_t bytes, absl::Duration timeout) {
  v1::SetLimitsRequest request;
  request.set_path(path);
  request.mutable_limits()->set_min_bytes(bytes);
  request.mutable_limits()->set_low_bytes(bytes);
  v1::Group group;
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  const grpc::Status s = stub.SetLimits(&context, request, &group);
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("SetLimits ", path, " min/low: ", FormatStatus(s)));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> AnonPages(v1::Accounting::Stub& stub,
                                   const std::string& path,
                                   uint64_t page_size_bytes,
                                   absl::Duration timeout) {
  v1::GetStatsRequest request;
  request.set_path(path);
  request.set_flush(v1::FLUSH_MODE_EXACT);
  v1::GroupStats stats;
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  const grpc::Status s = stub.GetStats(&context, request, &stats);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("GetStats ", path, ": ", FormatStatus(s)));
  }
  for (const v1::StatEntry& e : stats.stat()) {
    if (e.name() == "anon") return e.value() / page_size_bytes;
  }
  return absl::NotFoundError("no anon stat");
}

// What one stream did. Written by its thread only; `ops` and `messages` are
// also read by the progress line (relaxed atomics).
struct StreamResult {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> messages{0};
  uint64_t op_errors = 0;
  uint64_t rpc_errors = 0;
  LatencyHistogram latency;  // per message (round trip)
  IntervalRecorder interval;  // the same, per progress interval
  std::string first_error;
  bool resident_charged = false;
  bool resident_released = false;
};

void NoteError(StreamResult& r, std::string error) {
  if (r.first_error.empty()) r.first_error = std::move(error);
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
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(timeout));
  if (uncharge) {
    v1::UnchargeRequest request;
    request.set_path(path);
    request.set_nr_pages(pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::UnchargeResponse response;
    return stub.Uncharge(&context, request, &response);
  }
  v1::ChargeRequest request;
  request.set_path(path);
  request.set_nr_pages(pages);
  request.set_kind(v1::PAGE_KIND_ANON);
  v1::ChargeResponse response;
  return stub.Charge(&context, request, &response);
}

void RunStream(v1::Accounting::Stub& stub, const NetperfOptions& o,
               const std::string& path, int index, const absl::Notification& go,
               const std::atomic<bool>& stop, StreamResult& r) {
  if (o.resident_pages > 0) {
    const grpc::Status s =
        ChargeOnce(stub, path, o.resident_pages, false, o.rpc_timeout);
    if (!s.ok()) {
      ++r.rpc_errors;
      NoteError(r, absl::StrCat("resident Charge: ", FormatStatus(s)));
    } else {
      r.resident_charged = true;
    }
  }
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
  v1::ChargeBatchResponse response;
  go.WaitForNotification();

  if (o.rpc == RpcKind::kStream) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o.duration + absl::Seconds(60)));
    auto stream = stub.ChargeStream(&context);
    while (!stop.load(std::memory_order_relaxed)) {
      const Clock::time_point t0 = Clock::now();
      if (!stream->Write(request) || !stream->Read(&response)) {
        ++r.rpc_errors;
        NoteError(r, "ChargeStream broke");
        break;
      }
      {
        const uint64_t ns = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                                 t0)
                .count());
        r.latency.Record(ns);
        r.interval.Record(ns);
      }
      CheckResults(response, o.batch, r);
      r.ops.fetch_add(static_cast<uint64_t>(o.batch),
                      std::memory_order_relaxed);
      r.messages.fetch_add(1, std::memory_order_relaxed);
    }
    stream->WritesDone();
    const grpc::Status s = stream->Finish();
    if (!s.ok()) {
      ++r.rpc_errors;
      NoteError(r, absl::StrCat("ChargeStream: ", FormatStatus(s)));
    }
  } else {
    while (!stop.load(std::memory_order_relaxed)) {
      const Clock::time_point t0 = Clock::now();
      bool ok = true;
      if (o.rpc == RpcKind::kBatch) {
        grpc::ClientContext context;
        context.set_deadline(DeadlineAfter(o.rpc_timeout));
        const grpc::Status s = stub.ChargeBatch(&context, request, &response);
        ok = s.ok();
        if (!ok) NoteError(r, absl::StrCat("ChargeBatch: ", FormatStatus(s)));
        if (ok) CheckResults(response, o.batch, r);
      } else {
        // One op per RPC: a charge, then its uncharge.
        for (bool uncharge : {false, true}) {
          const Clock::time_point t = Clock::now();
          const grpc::Status s =
              ChargeOnce(stub, path, o.pages, uncharge, o.rpc_timeout);
          if (!s.ok()) {
            ok = false;
            NoteError(r, absl::StrCat(uncharge ? "Uncharge: " : "Charge: ",
                                      FormatStatus(s)));
            break;
          }
          {
            const uint64_t ns = static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(
                    Clock::now() - t)
                    .count());
            r.latency.Record(ns);
            r.interval.Record(ns);
          }
          r.messages.fetch_add(1, std::memory_order_relaxed);
          r.ops.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (!ok) {
        ++r.rpc_errors;
        break;
      }
      if (o.rpc == RpcKind::kBatch) {
        {
          const uint64_t ns = static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(
                  Clock::now() - t0)
                  .count());
          r.latency.Record(ns);
          r.interval.Record(ns);
        }
        r.ops.fetch_add(static_cast<uint64_t>(o.batch),
                        std::memory_order_relaxed);
        r.messages.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  if (r.resident_charged) {
    const grpc::Status s =
        ChargeOnce(stub, path, o.resident_pages, true, o.rpc_timeout);
    if (!s.ok()) {
      ++r.rpc_errors;
      NoteError(r, absl::StrCat("resident Uncharge: ", FormatStatus(s)));
    } else {
      r.resident_released = true;
    }
  }
}

// --rpc=library: the same loop through cgacct::client (one Client shared by
// every thread, as one application process would). A "message" is --batch
// ops (charge, uncharge, ...) timed together; most never leave the process.
void RunLibraryThread(cgacct::client::Client& client, const NetperfOptions& o,
                      const std::string& path, const absl::Notification& go,
                      const std::atomic<bool>& stop, StreamResult& r) {
  if (o.resident_pages > 0) {
    const cgacct::client::ChargeResult c =
        client.Charge(path, o.resident_pages);
    if (!c.ok()) {
      ++r.rpc_errors;
      NoteError(r, absl::StrCat("resident Charge: ", FormatStatus(c.status)));
    } else {
      r.resident_charged = true;
    }
  }
  go.WaitForNotification();
  while (!stop.load(std::memory_order_relaxed)) {
    const Clock::time_point t0 = Clock::now();
    bool ok = true;
    for (int i = 0; i < o.batch / 2 && ok; ++i) {
      const cgacct::client::ChargeResult c = client.Charge(path, o.pages);
      if (!c.ok()) {
        ++r.op_errors;
        NoteError(r, absl::StrCat("Charge: ", FormatStatus(c.status)));
        ok = false;
        break;
      }
      const grpc::Status u = client.Uncharge(path, o.pages);
      if (!u.ok()) {
        ++r.op_errors;
        NoteError(r, absl::StrCat("Uncharge: ", FormatStatus(u)));
        ok = false;
      }
    }
    if (!ok) break;
    const uint64_t ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0)
            .count());
    r.latency.Record(ns);
    r.interval.Record(ns);
    r.ops.fetch_add(static_cast<uint64_t>(o.batch), std::memory_order_relaxed);
    r.messages.fetch_add(1, std::memory_order_relaxed);
  }
  if (r.resident_charged) {
    const grpc::Status s = client.Uncharge(path, o.resident_pages);
    if (!s.ok()) {
      ++r.rpc_errors;
      NoteError(r, absl::StrCat("resident Uncharge: ", FormatStatus(s)));
    } else {
      r.resident_released = true;
    }
  }
}

// Charge and Uncharge RPCs the server has handled (grpc_server_handled_total
// of the two methods), from its /metrics; nullopt when it cannot be read.
std::optional<double> ServerChargeRpcs(const std::string& metrics_target) {
  if (metrics_target.empty()) return std::nullopt;
  absl::StatusOr<std::string> text =
      HttpGet(metrics_target, "/metrics", absl::Seconds(2));
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<std::vector<MetricSample>> samples = ParseMetricsText(*text);
  if (!samples.ok()) return std::nullopt;
  double n = 0;
  for (const MetricSample& m : *samples) {
    if (m.name != "grpc_server_handled_total") continue;
    for (const auto& [k, v] : m.labels)
      if (k == "grpc_method" && (v == "Charge" || v == "Uncharge")) n += m.value;
  }
  return n;
}

struct NetperfReport {
  double elapsed_s = 0;
  uint64_t ops = 0;
  uint64_t messages = 0;
  uint64_t op_errors = 0;
  uint64_t rpc_errors = 0;
  LatencyHistogram latency;
  std::vector<IntervalStats> series;  // per progress interval (~1 s)
  std::string first_error;
  std::optional<uint64_t> anon_left;
  uint32_t nr_cpus = 0;
  uint32_t charge_batch_pages = 0;
  uint64_t protection_bytes = 0;
  // --rpc=library
  cgacct::client::ClientStats library;
  std::optional<double> server_rpcs;  // Charge + Uncharge handled, delta
};

std::string FormatTable(const NetperfOptions& o, const NetperfReport& r) {
  std::string out;
  auto row = [&](absl::string_view name, const std::string& value) {
    absl::StrAppendFormat(&out, "  %-24s %s\n", name, value);
  };
  const double ops_s = r.elapsed_s > 0 ? r.ops / r.elapsed_s : 0;
  const double msg_s = r.elapsed_s > 0 ? r.messages / r.elapsed_s : 0;
  out += "cgacct-load netperf\n";
  row("target", o.target);
  row("group",
      absl::StrCat(LeafPath(o),
                   o.deep ? absl::StrCat(" (min=low=", r.protection_bytes,
                                         " B on ", o.group, ")")
                          : " (directly under /)"));
  row("rpc", o.rpc_name);
  row("streams", absl::StrCat(o.streams));
  row("pages per op", absl::StrCat(o.pages));
  row("ops per message", absl::StrCat(o.rpc == RpcKind::kUnary ? 1 : o.batch));
  row("resident pages/stream", absl::StrCat(o.resident_pages));
  row("server", absl::StrCat("nr_cpus ", r.nr_cpus, ", charge batch ",
                             r.charge_batch_pages, " pages"));
  row("elapsed", absl::StrFormat("%.2f s", r.elapsed_s));
  row("ops", absl::StrFormat("%d  (%.0f ops/s)", r.ops, ops_s));
  row("messages", absl::StrFormat("%d  (%.0f msg/s)", r.messages, msg_s));
  const LatencyHistogram& h = r.latency;
  row("latency/message (us)",
      h.count() == 0
          ? LatencyLine(h)
          : absl::StrFormat("%s  mode [%d, %d)", LatencyLine(h),
                            h.Pow2ModeUs(),
                            std::max<uint64_t>(1, 2 * h.Pow2ModeUs())));
  row("op errors", absl::StrCat(r.op_errors));
  row("rpc errors", absl::StrCat(r.rpc_errors));
  if (o.rpc == RpcKind::kLibrary) {
    const double charges = static_cast<double>(r.library.charges);
    row("library charges",
        absl::StrFormat("%d  (%.0f charges/s), %d from the stock (%.4f)",
                        r.library.charges,
                        r.elapsed_s > 0 ? charges / r.elapsed_s : 0,
                        r.library.stock_hits,
                        charges > 0 ? r.library.stock_hits / charges : 0));
    row("library RPCs", absl::StrFormat("%d Charge, %d Uncharge, %d retries",
                                        r.library.charge_rpcs,
                                        r.library.uncharge_rpcs,
                                        r.library.retries));
    row("server RPCs/charge",
        r.server_rpcs.has_value() && charges > 0
            ? absl::StrFormat("%.3g  (%.0f Charge+Uncharge handled, /metrics)",
                              *r.server_rpcs / charges, *r.server_rpcs)
            : std::string("n/a (no /metrics)"));
  }
  row("anon pages left",
      r.anon_left.has_value() ? absl::StrCat(*r.anon_left) : "n/a");
  if (!r.first_error.empty()) row("first error", r.first_error);
  return out;
}

std::string FormatJson(const NetperfOptions& o, const NetperfReport& r) {
  JsonWriter w;
  const LatencyHistogram& h = r.latency;
  w.BeginObject();
  w.Key("scenario").String("netperf");
  w.Key("target").String(o.target);
  w.Key("group").String(LeafPath(o));
  w.Key("hierarchy").String(o.deep ? "deep" : "root");
  w.Key("rpc").String(o.rpc_name);
  w.Key("streams").Int(o.streams);
  w.Key("pages").Uint(o.pages);
  w.Key("ops_per_message").Int(o.rpc == RpcKind::kUnary ? 1 : o.batch);
  w.Key("resident_pages").Uint(o.resident_pages);
  w.Key("protection_bytes").Uint(r.protection_bytes);
  w.Key("nr_cpus").Uint(r.nr_cpus);
  w.Key("charge_batch_pages").Uint(r.charge_batch_pages);
  w.Key("elapsed_s").Double(r.elapsed_s);
  w.Key("ops").Uint(r.ops);
  w.Key("ops_per_s").Double(r.elapsed_s > 0 ? r.ops / r.elapsed_s : 0);
  w.Key("messages").Uint(r.messages);
  w.Key("messages_per_s")
      .Double(r.elapsed_s > 0 ? r.messages / r.elapsed_s : 0);
  w.Key("latency");
  WriteLatencyJson(w, h, /*pow2_buckets=*/false);
  w.Key("time_series");
  WriteSeriesJson(w, r.series);
  w.Key("op_errors").Uint(r.op_errors);
  w.Key("rpc_errors").Uint(r.rpc_errors);
  if (o.rpc == RpcKind::kLibrary) {
    const double charges = static_cast<double>(r.library.charges);
    w.Key("library_charges").Uint(r.library.charges);
    w.Key("library_charges_per_s")
        .Double(r.elapsed_s > 0 ? charges / r.elapsed_s : 0);
    w.Key("library_stock_hits").Uint(r.library.stock_hits);
    w.Key("library_charge_rpcs").Uint(r.library.charge_rpcs);
    w.Key("library_uncharge_rpcs").Uint(r.library.uncharge_rpcs);
    w.Key("library_retries").Uint(r.library.retries);
    w.Key("server_rpcs_per_charge");
    if (r.server_rpcs.has_value() && charges > 0) {
      w.Double(*r.server_rpcs / charges);
    } else {
      w.Null();
    }
  }
  w.Key("anon_pages_left");
  if (r.anon_left.has_value()) {
    w.Uint(*r.anon_left);
  } else {
    w.Null();
  }
  w.Key("first_error").String(r.first_error);
  w.EndObject();
  return w.str() + "\n";
}

int Fail(absl::string_view message) {
  std::cerr << "cgacct-load: " << message << "\n";
  return 1;
}

}  // namespace

int RunNetperf() {
  absl::StatusOr<NetperfOptions> parsed = NetperfOptionsFromFlags();
  if (!parsed.ok()) return Fail(parsed.status().message());
  const NetperfOptions& o = *parsed;

  std::shared_ptr<grpc::Channel> control_channel = MakeChannel(o.target);
  if (absl::Status s =
          WaitForConnected(*control_channel, o.target, o.connect_timeout);
      !s.ok()) {
    return Fail(s.message());
  }
  auto control = v1::Accounting::NewStub(control_channel);
  v1::EngineInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(o.rpc_timeout));
    const grpc::Status s =
        control->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info);
    if (!s.ok()) return Fail(absl::StrCat("GetEngineInfo: ", FormatStatus(s)));
  }
  if (info.page_size_bytes() == 0) return Fail("server page size is 0");

  const std::string path = LeafPath(o);
  if (absl::Status s = EnsurePath(*control, path, o.rpc_timeout); !s.ok()) {
    return Fail(s.message());
  }
  NetperfReport report;
  report.nr_cpus = info.nr_cpus();
  report.charge_batch_pages = info.charge_batch_pages();
  report.protection_bytes = !o.deep ? 0
                            : o.protection_bytes > 0
                                ? o.protection_bytes
                                : o.resident_pages *
                                      static_cast<uint64_t>(o.streams) / 2 *
                                      info.page_size_bytes();
  // root: no protection anywhere on the path; deep: on the top level.
  if (absl::Status s = SetProtection(*control, o.group, report.protection_bytes,
                                     o.rpc_timeout);
      !s.ok()) {
    return Fail(s.message());
  }
  absl::StatusOr<uint64_t> anon_before =
      AnonPages(*control, path, info.page_size_bytes(), o.rpc_timeout);

  std::vector<std::unique_ptr<v1::Accounting::Stub>> stubs;
  std::unique_ptr<cgacct::client::Client> library;
  std::optional<double> rpcs_before;
  if (o.rpc == RpcKind::kLibrary) {
    std::shared_ptr<grpc::Channel> channel =
        MakeChannel(o.target, /*own_connection=*/true);
    cgacct::client::Options lo;
    lo.client_name = "cgacct-load netperf";
    lo.call_timeout = absl::ToChronoMilliseconds(o.rpc_timeout);
    if (const grpc::Status s =
            cgacct::client::Client::Open(channel, lo, &library);
        !s.ok()) {
      return Fail(absl::StrCat("cgacct::client::Client::Open: ",
                               FormatStatus(s)));
    }
  }
  for (int i = 0; i < o.streams && o.rpc != RpcKind::kLibrary; ++i) {
    std::shared_ptr<grpc::Channel> channel =
        MakeChannel(o.target, /*own_connection=*/true);
    if (absl::Status s =
            WaitForConnected(*channel, o.target, o.connect_timeout);
        !s.ok()) {
      return Fail(s.message());
    }
    stubs.push_back(v1::Accounting::NewStub(channel));
  }

  std::cerr << absl::StrFormat(
      "cgacct-load: netperf %s, %d streams x %d ops of %d pages, %s, "
      "server nr_cpus %d, charge batch %d\n",
      o.rpc_name, o.streams, o.rpc == RpcKind::kUnary ? 1 : o.batch, o.pages,
      path, info.nr_cpus(), info.charge_batch_pages());

  absl::Notification go;
  std::atomic<bool> stop{false};
  std::vector<StreamResult> results(o.streams);
  std::vector<std::thread> threads;
  for (int i = 0; i < o.streams; ++i) {
    if (o.rpc == RpcKind::kLibrary) {
      threads.emplace_back([&, i] {
        RunLibraryThread(*library, o, path, go, stop, results[i]);
      });
    } else {
      threads.emplace_back(
          [&, i] { RunStream(*stubs[i], o, path, i, go, stop, results[i]); });
    }
  }
  // Let every stream charge its resident pages first.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (o.rpc == RpcKind::kLibrary) {
    rpcs_before = ServerChargeRpcs(o.metrics_target);
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const Clock::time_point start = Clock::now();
  const Clock::time_point end = start + absl::ToChronoNanoseconds(o.duration);
  go.Notify();
  Clock::time_point last_tick = start;
  uint64_t last_ops = 0;
  // Every stream's messages since the last tick, into the series.
  LatencyHistogram spare, interval;
  auto take_interval = [&](double t_end_s, double seconds) {
    for (StreamResult& r : results) {
      uint64_t errors = 0;  // netperf counts its errors apart
      r.interval.Take(spare, &errors);
      interval.Merge(spare);
      spare.Reset();
    }
    report.series.push_back(SummarizeInterval(interval, 0, t_end_s, seconds));
    interval.Reset();
  };
  while (true) {
    const Clock::time_point now = Clock::now();
    if (now >= end || g_stop_requested.load(std::memory_order_relaxed)) break;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(end - now, std::chrono::milliseconds(100)));
    const Clock::time_point after = Clock::now();
    if (after - last_tick < std::chrono::seconds(1)) continue;
    uint64_t ops = 0;
    for (const StreamResult& r : results)
      ops += r.ops.load(std::memory_order_relaxed);
    const double dt = std::chrono::duration<double>(after - last_tick).count();
    const double t = std::chrono::duration<double>(after - start).count();
    take_interval(t, dt);
    std::cerr << absl::StrFormat(
        "cgacct-load: [%6.1fs] ops %10.0f/s  p99 %.1f us\n", t,
        (ops - last_ops) / dt, report.series.back().p99_ns / 1000.0);
    last_tick = after;
    last_ops = ops;
  }
  stop.store(true, std::memory_order_relaxed);
  report.elapsed_s =
      std::chrono::duration<double>(Clock::now() - start).count();
  for (std::thread& t : threads) t.join();
  if (library != nullptr) {
    report.library = library->stats();
    const std::optional<double> rpcs_after =
        ServerChargeRpcs(o.metrics_target);
    if (rpcs_before.has_value() && rpcs_after.has_value()) {
      report.server_rpcs = *rpcs_after - *rpcs_before;
    }
    // Returns the stock (CloseSession); the books must then balance.
    if (const grpc::Status s = library->Close(); !s.ok()) {
      ++report.rpc_errors;
      report.first_error = absl::StrCat("Close: ", FormatStatus(s));
    }
  }
  {
    // The messages that completed after the last tick.
    const Clock::time_point now = Clock::now();
    take_interval(std::chrono::duration<double>(now - start).count(),
                  std::chrono::duration<double>(now - last_tick).count());
    if (report.series.back().count == 0) report.series.pop_back();
  }

  for (StreamResult& r : results) {
    report.ops += r.ops.load(std::memory_order_relaxed);
    report.messages += r.messages.load(std::memory_order_relaxed);
    report.op_errors += r.op_errors;
    report.rpc_errors += r.rpc_errors;
    report.latency.Merge(r.latency);
    if (report.first_error.empty()) report.first_error = r.first_error;
  }
  absl::StatusOr<uint64_t> anon_after =
      AnonPages(*control, path, info.page_size_bytes(), o.rpc_timeout);
  if (anon_before.ok() && anon_after.ok()) {
    report.anon_left = *anon_after - std::min(*anon_after, *anon_before);
  }

  std::cout << FormatTable(o, report) << std::flush;
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path, std::ios::trunc);
    out << FormatJson(o, report);
    if (!out) return Fail(absl::StrCat("cannot write ", o.json_path));
  }
  if (const std::string chart = absl::GetFlag(FLAGS_chart); !chart.empty()) {
    // The message round trips, drawn as any scenario's charges.
    LoadReport plotted;
    plotted.scenario = absl::StrCat("netperf --rpc=", o.rpc_name);
    plotted.elapsed = absl::Seconds(report.elapsed_s);
    plotted.charge_latency = report.latency;
    plotted.charge_series = report.series;
    if (absl::Status s = WriteLatencyChart(plotted, chart); !s.ok()) {
      return Fail(s.message());
    }
    std::cerr << "cgacct-load: chart written to " << chart << "\n";
  }
  if (g_stop_requested.load(std::memory_order_relaxed)) return 130;
  if (report.op_errors > 0 || report.rpc_errors > 0 ||
      report.anon_left.value_or(0) != 0) {
    std::cerr << "cgacct-load: netperf: " << report.op_errors << " op errors, "
              << report.rpc_errors << " RPC errors"
              << (report.first_error.empty() ? "" : "; first: ")
              << report.first_error << "\n";
    return 3;
  }
  return 0;
}

}  // namespace cgacct::client
