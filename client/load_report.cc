#include "client/load_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/json_writer.h"

namespace cgacct::client {
namespace {

double PerSecond(uint64_t n, absl::Duration elapsed) {
  const double s = absl::ToDoubleSeconds(elapsed);
  return s > 0 ? static_cast<double>(n) / s : 0.0;
}

double NsToUs(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

// The power-of-2 distribution as the kernel benchmark shows it:
// "[8, 16)   123456 |@@@@@@@@".
void AppendPow2Chart(const LatencyHistogram& h, std::string* out) {
  const std::vector<Pow2Bucket> buckets = h.Pow2Buckets();
  if (buckets.empty()) return;
  uint64_t peak = 0;
  for (const Pow2Bucket& b : buckets) peak = std::max(peak, b.count);
  for (const Pow2Bucket& b : buckets) {
    const std::string range =
        b.lower_us == 0
            ? "[0, 1)"
            : absl::StrCat("[", b.lower_us, ", ", 2 * b.lower_us, ")");
    const int bar = static_cast<int>((b.count * 40 + peak - 1) / peak);
    absl::StrAppendFormat(out, "    %-18s %12d |%s\n", range, b.count,
                          std::string(bar, '@'));
  }
}

// "67108864 B (64 MiB)"; "max" stays "max".
std::string SizeText(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "max";
  const struct {
    int shift;
    const char* unit;
  } units[] = {{30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const auto& u : units) {
    const uint64_t one = uint64_t{1} << u.shift;
    if (bytes >= one && bytes % one == 0) {
      return absl::StrCat(bytes, " B (", bytes >> u.shift, " ", u.unit, ")");
    }
  }
  return absl::StrCat(bytes, " B");
}

void Row(std::string* out, absl::string_view name, absl::string_view value) {
  absl::StrAppendFormat(out, "  %-24s %s\n", name, value);
}

std::string HoldMaxText(const std::optional<double>& us) {
  return us.has_value() ? absl::StrFormat("%.1f us", *us) : "n/a";
}

void OptionalDouble(JsonWriter& w, const std::optional<double>& v) {
  if (v.has_value()) {
    w.Double(*v);
  } else {
    w.Null();
  }
}

}  // namespace

std::string LatencyLine(const LatencyHistogram& h) {
  if (h.count() == 0) return "no samples";
  return absl::StrFormat(
      "p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  (mean %.1f)",
      NsToUs(h.PercentileNs(0.50)), NsToUs(h.PercentileNs(0.90)),
      NsToUs(h.PercentileNs(0.99)), NsToUs(h.PercentileNs(0.999)),
      NsToUs(h.max_ns()), h.mean_ns() / 1000.0);
}

void WriteLatencyJson(JsonWriter& w, const LatencyHistogram& h,
                      bool pow2_buckets) {
  w.BeginObject();
  w.Key("count").Uint(h.count());
  w.Key("p50_us").Double(NsToUs(h.PercentileNs(0.50)));
  w.Key("p90_us").Double(NsToUs(h.PercentileNs(0.90)));
  w.Key("p99_us").Double(NsToUs(h.PercentileNs(0.99)));
  w.Key("p99_9_us").Double(NsToUs(h.PercentileNs(0.999)));
  w.Key("max_us").Double(NsToUs(h.max_ns()));
  w.Key("mean_us").Double(h.mean_ns() / 1000.0);
  w.Key("mode_pow2_us").Uint(h.Pow2ModeUs());
  if (pow2_buckets) {
    w.Key("pow2_buckets").BeginArray();
    for (const Pow2Bucket& b : h.Pow2Buckets()) {
      w.BeginObject().Key("lower_us").Uint(b.lower_us).Key("count").Uint(
          b.count);
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
}

HogRefusal ClassifyRefusedCharge(uint64_t nr_pages) {
  return nr_pages > kCostlyChargePages ? HogRefusal::kCostlyEnomem
                                       : HogRefusal::kOomKill;
}

std::string FormatLoadReportTable(const LoadReport& r) {
  std::string out = "cgacct-load report\n";
  Row(&out, "scenario", r.scenario);
  Row(&out, "target",
      absl::StrCat(r.target, "  group ", r.group, "  flush ", r.flush_mode));
  Row(&out, "duration",
      absl::StrFormat("%.2f s (requested %s)", absl::ToDoubleSeconds(r.elapsed),
                      absl::FormatDuration(r.duration)));
  if (r.threads > 0) {
    Row(&out, "stat readers", absl::StrCat(r.threads, " threads"));
    Row(&out, "reads",
        absl::StrFormat("%d total, %.0f/s, %d errors", r.reads,
                        PerSecond(r.reads, r.elapsed), r.read_errors));
    Row(&out, "read latency (us)", LatencyLine(r.read_latency));
    Row(&out, "read latency mode",
        r.read_latency.count() == 0
            ? std::string("n/a")
            : absl::StrCat(r.read_latency.Pow2ModeUs(),
                           " usec (power-of-2 bucket lower bound)"));
  }
  if (r.hogs > 0) {
    Row(&out, "hogs",
        absl::StrFormat("%d workers on %d CPUs, %d pages per charge, "
                        "memory.max %s",
                        r.hogs, r.hog_cpus, r.hog_chunk_pages,
                        SizeText(r.hog_max_bytes)));
    Row(&out, "charges",
        absl::StrFormat("%d total, %.0f/s, %d pages, %d errors", r.charges,
                        PerSecond(r.charges, r.elapsed), r.charged_pages,
                        r.charge_errors));
    // A refused 64-page charge is not an OOM in the kernel (order > 3 fails
    // with ENOMEM, memory.events `max` only): counted apart.
    Row(&out, "refused charges",
        absl::StrFormat("%d OOM kills (<= %d pages), %d costly ENOMEMs "
                        "(> %d pages, no OOM); %.1f/s",
                        r.ooms, kCostlyChargePages, r.costly_enomems,
                        kCostlyChargePages,
                        PerSecond(r.ooms + r.costly_enomems, r.elapsed)));
    Row(&out, "hog cycles",
        absl::StrCat(r.hog_cycles,
                     " (a refused charge, then everything uncharged)"));
    Row(&out, "charge latency (us)", LatencyLine(r.charge_latency));
    if (r.throttle_us > 0) {
      Row(&out, "memory.high throttle",
          absl::StrCat(r.throttle_us, " us honoured"));
    }
    std::string cleanup = absl::StrCat(r.hogs - r.hog_groups_left, " of ",
                                       r.hogs, " hog groups deleted, ",
                                       r.reparented_pages, " pages reparented");
    if (r.hog_groups_left == 0 && r.reparented_pages == 0) {
      absl::StrAppend(&cleanup, " (clean)");
    } else if (r.reparented_pages > 0) {
      absl::StrAppend(&cleanup, " (books disagree: see first RPC error)");
    }
    Row(&out, "hog cleanup", cleanup);
  }
  Row(&out, "server",
      absl::StrFormat("nr_cpus %d  page size %d B  charge batch %d  "
                      "flush lock policy %s  preempt model %s",
                      r.nr_cpus, r.page_size_bytes, r.charge_batch_pages,
                      r.flush_lock_policy,
                      r.flush_preempt_model.empty() ? std::string("n/a")
                                                    : r.flush_preempt_model));
  std::string hold = HoldMaxText(r.flush_lock_hold_max_us);
  if (r.flush_lock_hold_max_us.has_value()) {
    absl::StrAppend(&hold, " (since server start; ",
                    HoldMaxText(r.flush_lock_hold_max_us_before),
                    " before this run)");
  } else if (!r.metrics_error.empty()) {
    absl::StrAppend(&hold, " (", r.metrics_error, ")");
  }
  Row(&out, "flush-lock hold max", hold);
  if (r.flush_lock_hold_wall_max_us.has_value()) {
    Row(&out, "  by the wall clock",
        absl::StrCat(HoldMaxText(r.flush_lock_hold_wall_max_us),
                     " (holder preemption included; the line above counts "
                     "only flushes that kept their CPU)"));
  }
  if (!r.longest_holds.empty()) {
    constexpr size_t kShown = 5;
    Row(&out, "longest holds",
        absl::StrCat("since server start, not preempted; the ",
                     std::min(kShown, r.longest_holds.size()), " longest of ",
                     r.longest_holds.size(), ":"));
    for (size_t i = 0; i < r.longest_holds.size() && i < kShown; ++i) {
      const FlushHoldLine& h = r.longest_holds[i];
      Row(&out, absl::StrCat("  #", i + 1),
          absl::StrFormat("%.1f us, %d CPU%s walked, %d entries folded (%s, "
                          "root %s)",
                          h.hold_us, h.cpus_walked,
                          h.cpus_walked == 1 ? "" : "s", h.groups_folded,
                          h.policy, h.root_path));
    }
  }
  if (!r.first_error.empty()) Row(&out, "first RPC error", r.first_error);
  if (r.read_latency.count() > 0) {
    out += "  read latency, power-of-2 buckets (usec):\n";
    AppendPow2Chart(r.read_latency, &out);
  }
  return out;
}

std::string LoadReportJson(const LoadReport& r) {
  JsonWriter w;
  w.BeginObject();
  w.Key("scenario").String(r.scenario);
  w.Key("target").String(r.target);
  w.Key("group").String(r.group);
  w.Key("flush_mode").String(r.flush_mode);
  w.Key("duration_s").Double(absl::ToDoubleSeconds(r.duration));
  w.Key("elapsed_s").Double(absl::ToDoubleSeconds(r.elapsed));
  w.Key("threads").Int(r.threads);
  w.Key("hogs").Int(r.hogs);
  w.Key("hog_cpus").Uint(r.hog_cpus);

  w.Key("reads").BeginObject();
  w.Key("total").Uint(r.reads);
  w.Key("per_s").Double(PerSecond(r.reads, r.elapsed));
  w.Key("errors").Uint(r.read_errors);
  w.Key("latency");
  WriteLatencyJson(w, r.read_latency, /*pow2_buckets=*/true);
  w.EndObject();

  w.Key("charges").BeginObject();
  w.Key("total").Uint(r.charges);
  w.Key("per_s").Double(PerSecond(r.charges, r.elapsed));
  w.Key("nr_pages").Uint(r.charged_pages);
  w.Key("chunk_pages").Uint(r.hog_chunk_pages);
  w.Key("max_bytes").Uint(r.hog_max_bytes);
  w.Key("ooms").Uint(r.ooms);
  w.Key("costly_enomems").Uint(r.costly_enomems);
  w.Key("hog_cycles").Uint(r.hog_cycles);
  w.Key("errors").Uint(r.charge_errors);
  w.Key("throttle_us").Uint(r.throttle_us);
  w.Key("reparented_pages").Uint(r.reparented_pages);
  w.Key("hog_groups_left").Int(r.hog_groups_left);
  w.Key("latency");
  WriteLatencyJson(w, r.charge_latency, /*pow2_buckets=*/true);
  w.EndObject();

  w.Key("server").BeginObject();
  w.Key("nr_cpus").Uint(r.nr_cpus);
  w.Key("page_size_bytes").Uint(r.page_size_bytes);
  w.Key("charge_batch_pages").Uint(r.charge_batch_pages);
  w.Key("flush_lock_policy").String(r.flush_lock_policy);
  w.Key("flush_preempt_model").String(r.flush_preempt_model);
  w.Key("longest_holds").BeginArray();
  for (const FlushHoldLine& h : r.longest_holds) {
    w.BeginObject();
    w.Key("hold_us").Double(h.hold_us);
    w.Key("cpus_walked").Uint(h.cpus_walked);
    w.Key("groups_folded").Uint(h.groups_folded);
    w.Key("root_path").String(h.root_path);
    w.Key("policy").String(h.policy);
    w.EndObject();
  }
  w.EndArray();
  w.Key("flush_lock_hold_max_us");
  OptionalDouble(w, r.flush_lock_hold_max_us);
  w.Key("flush_lock_hold_max_us_before");
  OptionalDouble(w, r.flush_lock_hold_max_us_before);
  w.Key("flush_lock_hold_wall_max_us");
  OptionalDouble(w, r.flush_lock_hold_wall_max_us);
  w.Key("metrics_error").String(r.metrics_error);
  w.EndObject();

  w.Key("first_error").String(r.first_error);
  w.EndObject();
  return w.str() + "\n";
}

}  // namespace cgacct::client
