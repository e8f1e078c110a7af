#include "client/load/netperf_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/load/json_writer.h"

namespace cgacct::load {
namespace {

double PerSecond(double n, double elapsed_s) {
  return elapsed_s > 0 ? n / elapsed_s : 0;
}

// The library's charges per server Charge+Uncharge RPC, when /metrics was
// read and something was charged.
std::optional<double> ServerRpcsPerCharge(const NetperfReport& r) {
  const double charges = static_cast<double>(r.library.charges);
  if (!r.server_rpcs.has_value() || charges <= 0) return std::nullopt;
  return *r.server_rpcs / charges;
}

void AppendLibraryRows(const NetperfReport& r, std::string* out) {
  const double charges = static_cast<double>(r.library.charges);
  AppendRow(out, "library charges",
            absl::StrFormat("%d  (%.0f charges/s), %d from the stock (%.4f)",
                            r.library.charges, PerSecond(charges, r.elapsed_s),
                            r.library.stock_hits,
                            charges > 0 ? r.library.stock_hits / charges : 0));
  AppendRow(out, "library RPCs",
            absl::StrFormat("%d Charge, %d Uncharge, %d retries",
                            r.library.charge_rpcs, r.library.uncharge_rpcs,
                            r.library.retries));
  const std::optional<double> per_charge = ServerRpcsPerCharge(r);
  AppendRow(
      out, "server RPCs/charge",
      per_charge.has_value()
          ? absl::StrFormat("%.3g  (%.0f Charge+Uncharge handled, /metrics)",
                            *per_charge, *r.server_rpcs)
          : std::string("n/a (no /metrics)"));
}

}  // namespace

std::string NetperfLeafPath(const NetperfOptions& o) {
  return o.deep ? absl::StrCat(o.group, "/mid/leaf") : o.group;
}

int OpsPerMessage(const NetperfOptions& o) {
  return o.rpc == RpcKind::kUnary ? 1 : o.batch;
}

std::string FormatNetperfTable(const NetperfOptions& o,
                               const NetperfReport& r) {
  std::string out = "cgacct-load netperf\n";
  AppendRow(&out, "target", TargetsText(o.targets, o.target));
  AppendRow(&out, "group",
            absl::StrCat(NetperfLeafPath(o),
                         o.deep ? absl::StrCat(" (min=low=", r.protection_bytes,
                                               " B on ", o.group, ")")
                                : " (directly under /)"));
  AppendRow(&out, "rpc", o.rpc_name);
  AppendRow(&out, "streams", absl::StrCat(o.streams));
  AppendRow(&out, "pages per op", absl::StrCat(o.pages));
  AppendRow(&out, "ops per message", absl::StrCat(OpsPerMessage(o)));
  AppendRow(&out, "resident pages/stream", absl::StrCat(o.resident_pages));
  AppendRow(&out, "server",
            absl::StrCat("nr_cpus ", r.nr_cpus, ", charge batch ",
                         r.charge_batch_pages, " pages"));
  AppendRow(&out, "elapsed", absl::StrFormat("%.2f s", r.elapsed_s));
  AppendRow(&out, "ops",
            absl::StrFormat("%d  (%.0f ops/s)", r.ops,
                            PerSecond(r.ops, r.elapsed_s)));
  AppendRow(&out, "messages",
            absl::StrFormat("%d  (%.0f msg/s)", r.messages,
                            PerSecond(r.messages, r.elapsed_s)));
  const LatencyHistogram& h = r.latency;
  AppendRow(
      &out, "latency/message (us)",
      h.count() == 0
          ? LatencyLine(h)
          : absl::StrFormat("%s  mode [%d, %d)", LatencyLine(h), h.Pow2ModeUs(),
                            std::max<uint64_t>(1, 2 * h.Pow2ModeUs())));
  AppendRow(&out, "op errors", absl::StrCat(r.op_errors));
  AppendRow(&out, "rpc errors", absl::StrCat(r.rpc_errors));
  if (o.rpc == RpcKind::kLibrary) AppendLibraryRows(r, &out);
  AppendRow(&out, "anon pages left",
            r.anon_left.has_value() ? absl::StrCat(*r.anon_left) : "n/a");
  if (!r.first_error.empty()) AppendRow(&out, "first error", r.first_error);
  return out;
}

std::string NetperfJson(const NetperfOptions& o, const NetperfReport& r) {
  JsonWriter w;
  w.BeginObject();
  w.Key("scenario").String("netperf");
  w.Key("target").String(TargetsText(o.targets, o.target));
  w.Key("group").String(NetperfLeafPath(o));
  w.Key("hierarchy").String(o.deep ? "deep" : "root");
  w.Key("rpc").String(o.rpc_name);
  w.Key("streams").Int(o.streams);
  w.Key("pages").Uint(o.pages);
  w.Key("ops_per_message").Int(OpsPerMessage(o));
  w.Key("resident_pages").Uint(o.resident_pages);
  w.Key("protection_bytes").Uint(r.protection_bytes);
  w.Key("nr_cpus").Uint(r.nr_cpus);
  w.Key("charge_batch_pages").Uint(r.charge_batch_pages);
  w.Key("elapsed_s").Double(r.elapsed_s);
  w.Key("ops").Uint(r.ops);
  w.Key("ops_per_s").Double(PerSecond(r.ops, r.elapsed_s));
  w.Key("messages").Uint(r.messages);
  w.Key("messages_per_s").Double(PerSecond(r.messages, r.elapsed_s));
  WriteLatencyAndSeriesJson(w, r.latency, /*pow2_buckets=*/false, r.series);
  w.Key("op_errors").Uint(r.op_errors);
  w.Key("rpc_errors").Uint(r.rpc_errors);
  if (o.rpc == RpcKind::kLibrary) {
    w.Key("library_charges").Uint(r.library.charges);
    w.Key("library_charges_per_s")
        .Double(PerSecond(static_cast<double>(r.library.charges), r.elapsed_s));
    w.Key("library_stock_hits").Uint(r.library.stock_hits);
    w.Key("library_charge_rpcs").Uint(r.library.charge_rpcs);
    w.Key("library_uncharge_rpcs").Uint(r.library.uncharge_rpcs);
    w.Key("library_retries").Uint(r.library.retries);
    w.Key("server_rpcs_per_charge").OptionalDouble(ServerRpcsPerCharge(r));
  }
  w.Key("anon_pages_left").OptionalUint(r.anon_left);
  w.Key("first_error").String(r.first_error);
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace cgacct::load
