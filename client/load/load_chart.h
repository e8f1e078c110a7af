// cgacct-load --chart: a PNG of a run's latency, drawn by gnuplot (Debian
// gnuplot-nox): latency over time (p50, p99 and max of every one-second
// interval) above the percentile distribution of the whole measured run
// (x: 1 / (1 - q) on a log axis, as HdrHistogram plots it, so 99% and 99.9%
// get as much room as 50% and 90%).
//
// The chart shows the stat readers' GetStats latency when the run has
// readers, the charges' latency otherwise.
//
// Thread safety: thread-safe (no shared state); WriteLatencyChart runs a
// child process and waits for it.
#ifndef CGACCT_CLIENT_LOAD_LOAD_CHART_H_
#define CGACCT_CLIENT_LOAD_LOAD_CHART_H_

#include <string>

#include "absl/status/status.h"
#include "client/load/load_report.h"

namespace cgacct::load {

// The data file of the time series: one line "t_s p50_us p99_us max_us" per
// interval, after a '#' header line.
std::string ChartSeriesData(const LoadReport& report);

// The data file of the distribution: one line "inverse_tail percentile
// latency_us" (inverse_tail = 1 / (1 - q)) for q from 0 to 99.999% in steps
// of a tenth of a decade of the tail, up to the run's count, after a '#'
// header line.
std::string ChartPercentileData(const LoadReport& report);

// The gnuplot script that reads `series_path` and `percentile_path` and
// writes `png_path` (pngcairo, 1000x800).
std::string ChartScript(const LoadReport& report, const std::string& png_path,
                        const std::string& series_path,
                        const std::string& percentile_path);

// Writes PNG.series.dat, PNG.pct.dat and PNG.gp next to `png_path` and runs
// `gnuplot PNG.gp`, which writes `png_path`. Errors: FAILED_PRECONDITION when
// gnuplot is not on PATH (naming the Debian package), or the run has no
// samples to plot; UNAVAILABLE when a file cannot be written; INTERNAL when
// gnuplot fails (its stderr goes to ours).
absl::Status WriteLatencyChart(const LoadReport& report,
                               const std::string& png_path);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_LOAD_CHART_H_
