#include "client/load/load_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/load/json_writer.h"

namespace cgacct::load {
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

std::string HoldMaxText(const std::optional<double>& us) {
  return us.has_value() ? absl::StrFormat("%.1f us", *us) : "n/a";
}

// The server's longest flush-lock holds, the five longest shown.
void AppendLongestHolds(const LoadReport& r, std::string* out) {
  if (r.longest_holds.empty()) return;
  constexpr size_t kShown = 5;
  AppendRow(out, "longest holds",
            absl::StrCat("in time, since server start, not preempted (the "
                         "server keeps 16); the ",
                         std::min(kShown, r.longest_holds.size()),
                         " longest of ", r.longest_holds.size(),
                         " (one that folded nothing yet lasted long met a gap "
                         "the VM or an interrupt took):"));
  for (size_t i = 0; i < r.longest_holds.size() && i < kShown; ++i) {
    const FlushHoldLine& h = r.longest_holds[i];
    AppendRow(
        out, absl::StrCat("  #", i + 1),
        absl::StrFormat("%.1f us, %d CPU%s walked, %d entries folded (%s, "
                        "root %s)",
                        h.hold_us, h.cpus_walked, h.cpus_walked == 1 ? "" : "s",
                        h.groups_folded, h.policy, h.root_path));
  }
}

}  // namespace

void WriteSeriesJson(JsonWriter& w, const std::vector<IntervalStats>& series) {
  w.BeginArray();
  for (const IntervalStats& i : series) {
    w.BeginObject();
    w.Key("t_s").Double(i.t_end_s);
    w.Key("seconds").Double(i.seconds);
    w.Key("count").Uint(i.count);
    w.Key("errors").Uint(i.errors);
    w.Key("per_s").Double(i.seconds > 0 ? i.count / i.seconds : 0.0);
    w.Key("p50_us").Double(NsToUs(i.p50_ns));
    w.Key("p90_us").Double(NsToUs(i.p90_ns));
    w.Key("p99_us").Double(NsToUs(i.p99_ns));
    w.Key("max_us").Double(NsToUs(i.max_ns));
    w.EndObject();
  }
  w.EndArray();
}

IntervalStats SummarizeInterval(const LatencyHistogram& h, uint64_t errors,
                                double t_end_s, double seconds) {
  IntervalStats i;
  i.t_end_s = t_end_s;
  i.seconds = seconds;
  i.count = h.count();
  i.errors = errors;
  i.p50_ns = h.PercentileNs(0.50);
  i.p90_ns = h.PercentileNs(0.90);
  i.p99_ns = h.PercentileNs(0.99);
  i.max_ns = h.max_ns();
  return i;
}

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
      w.BeginObject()
          .Key("lower_us")
          .Uint(b.lower_us)
          .Key("count")
          .Uint(b.count);
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
}

void WriteLatencyAndSeriesJson(JsonWriter& w, const LatencyHistogram& h,
                               bool pow2_buckets,
                               const std::vector<IntervalStats>& series) {
  w.Key("latency");
  WriteLatencyJson(w, h, pow2_buckets);
  w.Key("time_series");
  WriteSeriesJson(w, series);
}

HogRefusal ClassifyRefusedCharge(uint64_t nr_pages) {
  return nr_pages > kCostlyChargePages ? HogRefusal::kCostlyEnomem
                                       : HogRefusal::kOomKill;
}

namespace {

// What was run: scenario, target, duration, warm-up.
void AppendRunRows(const LoadReport& r, std::string* out) {
  AppendRow(out, "scenario", r.scenario);
  AppendRow(
      out, "target",
      absl::StrCat(r.target, "  group ", r.group, "  flush ", r.flush_mode));
  AppendRow(
      out, "duration",
      absl::StrFormat("%.2f s (requested %s)", absl::ToDoubleSeconds(r.elapsed),
                      absl::FormatDuration(r.duration)));
  AppendRow(
      out, "warm-up",
      absl::StrCat(absl::FormatDuration(r.warmup),
                   " before the measurement, excluded from every figure"));
}

// The stat readers: reads, the open-loop schedule, read latency.
void AppendReaderRows(const LoadReport& r, std::string* out) {
  AppendRow(out, "stat readers",
            r.rate > 0 ? absl::StrFormat(
                             "%d readers, open loop at %.0f calls/s "
                             "(latency from each call's intended send time)",
                             r.threads, r.rate)
                       : absl::StrCat(r.threads, " readers, closed loop"));
  AppendRow(out, "reads",
            absl::StrFormat("%d total, %.0f/s, %d errors", r.reads,
                            PerSecond(r.reads, r.elapsed), r.read_errors));
  if (r.rate > 0) {
    const uint64_t sent = r.sent_reads;
    AppendRow(
        out, "schedule",
        absl::StrFormat("achieved %.0f of %.0f calls/s; %d of %d sent late "
                        "(%.2f%%), max send lag %.1f us; %d due never sent",
                        PerSecond(sent, r.elapsed), r.rate, r.late_reads, sent,
                        sent > 0 ? 100.0 * r.late_reads / sent : 0.0,
                        NsToUs(r.max_send_lag_ns), r.unsent_reads));
  }
  AppendRow(out, "read latency (us)", LatencyLine(r.read_latency));
  AppendRow(out, "read latency mode",
            r.read_latency.count() == 0
                ? std::string("n/a")
                : absl::StrCat(r.read_latency.Pow2ModeUs(),
                               " usec (power-of-2 bucket lower bound)"));
}

// "N of M <kind> groups deleted, P pages reparented", plus " (clean)" when
// every group went and nothing was reparented.
std::string CleanupText(const LoadReport& r, int groups,
                        absl::string_view kind) {
  std::string cleanup = absl::StrCat(groups - r.hog_groups_left, " of ", groups,
                                     " ", kind, " groups deleted, ",
                                     r.reparented_pages, " pages reparented");
  if (r.hog_groups_left == 0 && r.reparented_pages == 0) {
    absl::StrAppend(&cleanup, " (clean)");
  }
  return cleanup;
}

// The reclaim scenario: writers, their charges and throttle, memory.reclaim,
// memory.events and pgsteal deltas, the writer groups' cleanup.
void AppendWriterRows(const LoadReport& r, std::string* out) {
  AppendRow(
      out, "writers",
      absl::StrFormat("%d writers charging FILE pages, %d pages per "
                      "charge, memory.high %s",
                      r.writers, r.write_chunk_pages, SizeText(r.high_bytes)));
  AppendRow(
      out, "charges",
      absl::StrFormat("%d total, %.0f/s, %d pages, %d errors; %d over "
                      "memory.high (throttled)",
                      r.charges, PerSecond(r.charges, r.elapsed),
                      r.charged_pages, r.charge_errors, r.over_high_charges));
  AppendRow(out, "charge latency (us)", LatencyLine(r.charge_latency));
  AppendRow(out, "memory.high throttle",
            absl::StrFormat("%d us honoured (%.1f ms/s over all writers)",
                            r.throttle_us,
                            PerSecond(r.throttle_us, r.elapsed) / 1000.0));
  AppendRow(
      out, "memory.reclaim",
      absl::StrFormat("%s every %s: %d calls, %d short (UNAVAILABLE), "
                      "%d errors; %d pages reclaimed",
                      SizeText(r.reclaim_bytes),
                      absl::FormatDuration(r.reclaim_interval), r.reclaims,
                      r.reclaims_short, r.reclaim_errors, r.reclaimed_pages));
  AppendRow(out, "reclaim latency (us)", LatencyLine(r.reclaim_latency));
  AppendRow(out, "memory.events delta",
            r.events_delta.has_value()
                ? absl::StrFormat("high %d  max %d  oom %d  oom_kill %d",
                                  r.events_delta->high, r.events_delta->max,
                                  r.events_delta->oom, r.events_delta->oom_kill)
                : std::string("n/a (GetStats failed)"));
  AppendRow(out, "pgsteal delta",
            r.pgsteal_delta.has_value()
                ? absl::StrCat(*r.pgsteal_delta,
                               " pages (over-high and proactive reclaim)")
                : std::string("n/a"));
  AppendRow(out, "writer cleanup", CleanupText(r, r.writers, "writer"));
}

// The hogs: their charges, refusals, cycles, the hog groups' cleanup.
void AppendHogRows(const LoadReport& r, std::string* out) {
  AppendRow(out, "hogs",
            absl::StrFormat("%d workers on %d CPUs, %d pages per charge, "
                            "memory.max %s",
                            r.hogs, r.hog_cpus, r.hog_chunk_pages,
                            SizeText(r.hog_max_bytes)));
  AppendRow(out, "charges",
            absl::StrFormat("%d total, %.0f/s, %d pages, %d errors", r.charges,
                            PerSecond(r.charges, r.elapsed), r.charged_pages,
                            r.charge_errors));
  // A refused 64-page charge is not an OOM in the kernel (order > 3 fails
  // with ENOMEM, memory.events `max` only): counted apart.
  AppendRow(out, "refused charges",
            absl::StrFormat("%d OOM kills (<= %d pages), %d costly ENOMEMs "
                            "(> %d pages, no OOM); %.1f/s",
                            r.ooms, kCostlyChargePages, r.costly_enomems,
                            kCostlyChargePages,
                            PerSecond(r.ooms + r.costly_enomems, r.elapsed)));
  AppendRow(out, "hog cycles",
            absl::StrCat(r.hog_cycles,
                         " (a refused charge, then everything uncharged)"));
  AppendRow(out, "charge latency (us)", LatencyLine(r.charge_latency));
  if (r.throttle_us > 0) {
    AppendRow(out, "memory.high throttle",
              absl::StrCat(r.throttle_us, " us honoured"));
  }
  std::string cleanup = CleanupText(r, r.hogs, "hog");
  if (r.reparented_pages > 0) {
    absl::StrAppend(&cleanup, " (books disagree: see first RPC error)");
  }
  AppendRow(out, "hog cleanup", cleanup);
}

// The server: its configuration and its flush-lock holds.
void AppendServerRows(const LoadReport& r, std::string* out) {
  AppendRow(out, "server",
            absl::StrFormat(
                "nr_cpus %d  page size %d B  charge batch %d  "
                "flush lock policy %s  preempt model %s",
                r.nr_cpus, r.page_size_bytes, r.charge_batch_pages,
                r.flush_lock_policy == "adaptive" && r.flush_hold_budget_us > 0
                    ? absl::StrCat("adaptive (budget ", r.flush_hold_budget_us,
                                   " us)")
                    : r.flush_lock_policy,
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
  AppendRow(out, "flush-lock hold max", hold);
  if (r.flush_lock_hold_wall_max_us.has_value()) {
    AppendRow(
        out, "  by the wall clock",
        absl::StrCat(HoldMaxText(r.flush_lock_hold_wall_max_us),
                     " (holder preemption included; the line above counts "
                     "only flushes that kept their CPU)"));
  }
  if (r.hold_max_cpus_walked.has_value() &&
      r.hold_max_groups_folded.has_value()) {
    AppendRow(
        out, "most work in one hold",
        absl::StrFormat("%u CPU%s walked, %u entries folded (since server "
                        "start, any hold; work, unlike the times above and "
                        "below, has no preemption or VM noise)",
                        *r.hold_max_cpus_walked,
                        *r.hold_max_cpus_walked == 1 ? "" : "s",
                        *r.hold_max_groups_folded));
  }
  AppendLongestHolds(r, out);
}

}  // namespace

void AppendRow(std::string* out, absl::string_view name,
               absl::string_view value, int width) {
  absl::StrAppendFormat(out, "  %-*s %s\n", width, name, value);
}

std::string FormatLoadReportTable(const LoadReport& r) {
  std::string out = "cgacct-load report\n";
  AppendRunRows(r, &out);
  if (r.threads > 0) AppendReaderRows(r, &out);
  if (r.writers > 0) AppendWriterRows(r, &out);
  if (r.hogs > 0) AppendHogRows(r, &out);
  AppendServerRows(r, &out);
  if (!r.first_error.empty()) AppendRow(&out, "first RPC error", r.first_error);
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
  w.Key("warmup_s").Double(absl::ToDoubleSeconds(r.warmup));
  w.Key("mode").String(r.rate > 0 ? "open" : "closed");

  w.Key("reads").BeginObject();
  w.Key("total").Uint(r.reads);
  w.Key("per_s").Double(PerSecond(r.reads, r.elapsed));
  w.Key("errors").Uint(r.read_errors);
  WriteLatencyAndSeriesJson(w, r.read_latency, /*pow2_buckets=*/true,
                            r.read_series);
  w.EndObject();

  w.Key("open_loop");
  if (r.rate > 0) {
    const uint64_t sent = r.sent_reads;
    w.BeginObject();
    w.Key("rate_per_s").Double(r.rate);
    w.Key("achieved_per_s").Double(PerSecond(sent, r.elapsed));
    w.Key("sent").Uint(sent);
    w.Key("late").Uint(r.late_reads);
    w.Key("unsent").Uint(r.unsent_reads);
    w.Key("max_send_lag_us").Double(NsToUs(r.max_send_lag_ns));
    w.EndObject();
  } else {
    w.Null();
  }

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
  WriteLatencyAndSeriesJson(w, r.charge_latency, /*pow2_buckets=*/true,
                            r.charge_series);
  w.EndObject();

  w.Key("reclaim");
  if (r.writers > 0) {
    w.BeginObject();
    w.Key("writers").Int(r.writers);
    w.Key("high_bytes").Uint(r.high_bytes);
    w.Key("write_chunk_pages").Uint(r.write_chunk_pages);
    w.Key("over_high_charges").Uint(r.over_high_charges);
    w.Key("reclaim_bytes").Uint(r.reclaim_bytes);
    w.Key("reclaim_interval_s")
        .Double(absl::ToDoubleSeconds(r.reclaim_interval));
    w.Key("reclaims").Uint(r.reclaims);
    w.Key("reclaims_short").Uint(r.reclaims_short);
    w.Key("errors").Uint(r.reclaim_errors);
    w.Key("reclaimed_pages").Uint(r.reclaimed_pages);
    w.Key("latency");
    WriteLatencyJson(w, r.reclaim_latency, /*pow2_buckets=*/false);
    w.Key("events_delta");
    if (r.events_delta.has_value()) {
      w.BeginObject();
      w.Key("high").Uint(r.events_delta->high);
      w.Key("max").Uint(r.events_delta->max);
      w.Key("oom").Uint(r.events_delta->oom);
      w.Key("oom_kill").Uint(r.events_delta->oom_kill);
      w.EndObject();
    } else {
      w.Null();
    }
    w.Key("pgsteal_delta").OptionalUint(r.pgsteal_delta);
    w.EndObject();
  } else {
    w.Null();
  }

  w.Key("server").BeginObject();
  w.Key("nr_cpus").Uint(r.nr_cpus);
  w.Key("page_size_bytes").Uint(r.page_size_bytes);
  w.Key("charge_batch_pages").Uint(r.charge_batch_pages);
  w.Key("flush_lock_policy").String(r.flush_lock_policy);
  w.Key("flush_preempt_model").String(r.flush_preempt_model);
  w.Key("flush_hold_budget_us").Uint(r.flush_hold_budget_us);
  w.Key("hold_max_cpus_walked");
  w.OptionalUint(r.hold_max_cpus_walked);
  w.Key("hold_max_groups_folded");
  w.OptionalUint(r.hold_max_groups_folded);
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
  w.OptionalDouble(r.flush_lock_hold_max_us);
  w.Key("flush_lock_hold_max_us_before");
  w.OptionalDouble(r.flush_lock_hold_max_us_before);
  w.Key("flush_lock_hold_wall_max_us");
  w.OptionalDouble(r.flush_lock_hold_wall_max_us);
  w.Key("metrics_error").String(r.metrics_error);
  w.EndObject();

  w.Key("first_error").String(r.first_error);
  w.EndObject();
  return w.str() + "\n";
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

}  // namespace cgacct::load
