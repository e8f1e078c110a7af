// The numbers one cgacct-load run produces, and their two renderings: a table
// for people (stdout) and JSON for scripts (--json).
//
// Thread safety: LoadReport is a plain value (thread-compatible); the
// formatting functions are thread-safe.
#ifndef CGACCT_CLIENT_LOAD_LOAD_REPORT_H_
#define CGACCT_CLIENT_LOAD_LOAD_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/load/histogram.h"
#include "client/load/json_writer.h"

namespace cgacct::load {

// One of the server's longest flush-lock holds (GetEngineInfo's
// longest_flush_holds): the irqs-off view of what the holder did.
struct FlushHoldLine {
  double hold_us = 0;
  uint32_t cpus_walked = 0;    // CPUs walked inside the hold
  uint32_t groups_folded = 0;  // (group, CPU) entries folded inside it
  std::string root_path;       // the flushed subtree
  std::string policy;
};

// 1 << PAGE_ALLOC_COSTLY_ORDER: the largest charge, in pages, whose failure
// OOMs in the kernel (and in cgacctd: mem_cgroup_oom() returns early for a
// costlier one, which fails with ENOMEM and memory.events `max` only).
inline constexpr uint64_t kCostlyChargePages = 8;

// What a hog's refused charge (RESOURCE_EXHAUSTED) stands for, as the
// kernel's callers see it: a charge of at most kCostlyChargePages pages (a
// page fault) ends in the memcg OOM killer, which kills the hog; a costlier
// one (a large allocation) fails with ENOMEM, and the hog, like a process
// whose allocation failed, frees what it holds. Either way the hog then
// uncharges everything and starts over.
enum class HogRefusal { kOomKill, kCostlyEnomem };
HogRefusal ClassifyRefusedCharge(uint64_t nr_pages);

// One interval (about a second) of a run's time series: the calls that
// completed in it. Latencies in ns (PercentileNs's bucket upper edge).
struct IntervalStats {
  double t_end_s = 0;   // end of the interval, seconds after the warm-up
  double seconds = 0;   // its length
  uint64_t count = 0;   // successful calls completed in it
  uint64_t errors = 0;  // failed calls completed in it
  uint64_t p50_ns = 0;
  uint64_t p90_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t max_ns = 0;
};

// The summary of one interval's histogram (`h` holds its successful calls).
IntervalStats SummarizeInterval(const LatencyHistogram& h, uint64_t errors,
                                double t_end_s, double seconds);

// One worker's calls of the current interval (about a second), taken by the
// main thread at each progress tick to build the per-second series. The
// worker records into it after every call; the tick swaps the histogram out,
// so the lock is held for O(1) by either side.
struct IntervalRecorder {
  // Thread-safe.
  void Record(uint64_t ns) {
    absl::MutexLock l(&mu);
    latency.Record(ns);
  }
  void Error() {
    absl::MutexLock l(&mu);
    ++errors;
  }
  // Moves the interval's samples into `out` (which must be empty) and its
  // error count into `*errors_out`, starting a new interval.
  void Take(LatencyHistogram& out, uint64_t* errors_out) {
    absl::MutexLock l(&mu);
    std::swap(latency, out);
    *errors_out = errors;
    errors = 0;
  }

  absl::Mutex mu;
  LatencyHistogram latency ABSL_GUARDED_BY(mu);
  uint64_t errors ABSL_GUARDED_BY(mu) = 0;
};

// Writes `series` as a JSON array of {t_s, seconds, count, errors, per_s,
// p50_us, p90_us, p99_us, max_us}. Shared by every scenario's --json.
void WriteSeriesJson(JsonWriter& w, const std::vector<IntervalStats>& series);

// memory.events counters of one group (hierarchical), for deltas.
struct EventCounts {
  uint64_t high = 0;
  uint64_t max = 0;
  uint64_t oom = 0;
  uint64_t oom_kill = 0;
};

struct LoadReport {
  // What was run.
  std::string scenario;  // "stat-reader", "hog", "seed-rstat" or "reclaim"
  std::string target;
  std::string group;
  std::string flush_mode;   // GetStats flush: "exact", "threshold", "none"
  absl::Duration duration;  // requested
  absl::Duration elapsed;   // measured, from the warm-up's end to the stop
  // Run before the measurement starts and excluded from every figure below
  // (calls started, or due in open loop, before its end are not counted).
  absl::Duration warmup;
  int threads = 0;  // stat readers, --threads (0: none)
  int hogs = 0;     // hog workers (0: none)
  uint64_t hog_chunk_pages = 0;
  uint64_t hog_max_bytes = 0;  // memory.max of the group for hogs
  // Per-CPU slots the hogs charge through: every modelled CPU ("all") or N
  // of them (--hog_cpus); 0 without hogs.
  uint32_t hog_cpus = 0;

  // Stat readers: GetStats calls.
  uint64_t reads = 0;  // successful reads
  // Failed reads (any code), over the whole run, warm-up included: a
  // failure is never hidden.
  uint64_t read_errors = 0;
  // Closed loop: from the call's start to its end. Open loop (rate > 0): from
  // the call's intended send time to its end.
  LatencyHistogram read_latency;
  // Per-second series of the reads (and of the charges below), after the
  // warm-up, by completion time.
  std::vector<IntervalStats> read_series;

  // Open loop (--rate): the total intended rate of GetStats calls, spread
  // evenly over the stat readers; 0 = closed loop.
  double rate = 0;
  // Calls sent after their intended time because the reader was still
  // waiting for its previous answer (the server fell behind the schedule).
  uint64_t sent_reads = 0;  // calls measured (after the warm-up), ok or not
  uint64_t late_reads = 0;
  // Calls due before the end that were never sent (the backlog at the end).
  uint64_t unsent_reads = 0;
  // The longest delay of a send behind its intended time, ns.
  uint64_t max_send_lag_ns = 0;

  // Hogs: Charge calls of ANON pages until refused, then uncharge and
  // repeat. A refused charge is an OOM kill or a costly ENOMEM
  // (ClassifyRefusedCharge(hog_chunk_pages)).
  uint64_t charges = 0;  // successful charges
  uint64_t charged_pages = 0;
  uint64_t ooms = 0;                // refused charges of <= 8 pages: OOM kills
  uint64_t costly_enomems = 0;      // refused charges of > 8 pages: no OOM
  uint64_t hog_cycles = 0;          // a refusal followed by a full uncharge
  uint64_t charge_errors = 0;       // other failures of Charge/Uncharge
  uint64_t throttle_us = 0;         // memory.high throttle honoured, summed
  LatencyHistogram charge_latency;  // every Charge attempt, refusals included
  std::vector<IntervalStats> charge_series;
  // Pages the server reparented when the hog groups were deleted at the end:
  // non-zero means the hogs' books and the server's disagree.
  uint64_t reparented_pages = 0;
  // Hog groups that could not be deleted at the end (server gone, ...).
  int hog_groups_left = 0;

  // Scenario "reclaim": --writers charge FILE pages into GROUP/writer-i
  // (memory.high = high_bytes on GROUP) in write_chunk_pages chunks, the
  // charges above counting them; a reclaimer calls Reclaim (memory.reclaim)
  // on GROUP every reclaim_interval.
  int writers = 0;
  uint64_t high_bytes = 0;
  uint64_t write_chunk_pages = 0;
  uint64_t reclaim_bytes = 0;  // asked per Reclaim call
  absl::Duration reclaim_interval;
  uint64_t reclaims = 0;         // Reclaim calls that reclaimed all asked
  uint64_t reclaims_short = 0;   // UNAVAILABLE: could not reclaim all asked
  uint64_t reclaim_errors = 0;   // other failures
  uint64_t reclaimed_pages = 0;  // reclaimed_bytes / page size, summed
  LatencyHistogram reclaim_latency;
  uint64_t over_high_charges = 0;  // charges answered with throttle_us > 0
  // GROUP's memory.events at the end minus at the start (hierarchical);
  // nullopt when a GetStats failed.
  std::optional<EventCounts> events_delta;
  // memory.stat pgsteal (all reclaim: over-high and proactive) delta.
  std::optional<uint64_t> pgsteal_delta;

  // Server side (GetEngineInfo before the run, /metrics after it).
  uint32_t nr_cpus = 0;
  uint64_t page_size_bytes = 0;
  uint32_t charge_batch_pages = 0;
  std::string flush_lock_policy;
  std::string flush_preempt_model;  // "none" or "full" ("" from old servers)
  // GetEngineInfo's longest flush-lock holds after the run, longest first
  // (since server start; at most 16).
  std::vector<FlushHoldLine> longest_holds;
  // GetEngineInfo after the run: the most CPUs walked and the most entries
  // folded by one hold since server start (nullopt if the call failed).
  std::optional<uint32_t> hold_max_cpus_walked;
  std::optional<uint32_t> hold_max_groups_folded;
  // adaptive's --flush_hold_budget in µs (0: one CPU with updates per hold).
  uint64_t flush_hold_budget_us = 0;
  // cgacct_rstat_flush_lock_hold_max_seconds in us, since server start;
  // nullopt when the scrape failed (then metrics_error says why).
  std::optional<double> flush_lock_hold_max_us;
  std::optional<double> flush_lock_hold_max_us_before;  // scraped at start
  // cgacct_rstat_flush_lock_hold_wall_max_seconds in us: the wall clock,
  // preemption of the holder included.
  std::optional<double> flush_lock_hold_wall_max_us;
  std::string metrics_error;

  // The first unexpected RPC error, for the report ("" if none).
  std::string first_error;
};

// "p50 62.1  p90 80.3  p99 ...  max ...  (mean ...)", microseconds, or "no
// samples". Shared by every cgacct-load scenario's table.
std::string LatencyLine(const LatencyHistogram& h);

// Writes `h` as a JSON object: count, p50_us, p90_us, p99_us, p99_9_us,
// max_us, mean_us, mode_pow2_us and, if pow2_buckets, the power-of-2
// buckets ([{lower_us, count}]). Shared by every scenario's --json.
void WriteLatencyJson(JsonWriter& w, const LatencyHistogram& h,
                      bool pow2_buckets);

// Writes the keys "latency" (WriteLatencyJson) and "time_series"
// (WriteSeriesJson) of a family of calls: what every scenario's --json
// says of its calls.
void WriteLatencyAndSeriesJson(JsonWriter& w, const LatencyHistogram& h,
                               bool pow2_buckets,
                               const std::vector<IntervalStats>& series);

// Appends one row of a cgacct-load table: "  NAME VALUE\n", the name
// left-aligned in `width` columns. Shared by every scenario's table.
void AppendRow(std::string* out, absl::string_view name,
               absl::string_view value, int width = 24);

// Renders the report as an aligned, human-readable table ending in '\n'.
std::string FormatLoadReportTable(const LoadReport& report);

// Renders the report as a JSON object (pretty-printed, ending in '\n'). Times
// are in microseconds (suffix _us) or seconds (_s); absent values are null.
std::string LoadReportJson(const LoadReport& report);

// Writes `text` to `path` through PATH.tmp and a rename, so a reader never
// sees half a report. Errors: UNAVAILABLE naming the file.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& text);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_LOAD_REPORT_H_
