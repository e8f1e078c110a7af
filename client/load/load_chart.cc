#include "client/load/load_chart.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

extern char** environ;

namespace cgacct::load {
namespace {

// What the chart plots: the readers' GetStats calls, or else the charges.
struct Plotted {
  const LatencyHistogram* latency;
  const std::vector<IntervalStats>* series;
  const char* what;
};

Plotted PlottedOf(const LoadReport& r) {
  if (r.threads > 0) {
    return {&r.read_latency, &r.read_series,
            r.rate > 0 ? "GetStats latency from the intended send time"
                       : "GetStats latency"};
  }
  return {&r.charge_latency, &r.charge_series, "Charge latency"};
}

// gnuplot string literal in double quotes.
std::string Quoted(const std::string& s) {
  return absl::StrCat(
      "\"", absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"");
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

std::string ChartSeriesData(const LoadReport& report) {
  std::string out = "# t_s p50_us p99_us max_us count\n";
  for (const IntervalStats& i : *PlottedOf(report).series) {
    if (i.count == 0) continue;  // nothing completed: no latency to plot
    absl::StrAppendFormat(&out, "%.3f %.3f %.3f %.3f %d\n", i.t_end_s,
                          i.p50_ns / 1000.0, i.p99_ns / 1000.0,
                          i.max_ns / 1000.0, i.count);
  }
  return out;
}

std::string ChartPercentileData(const LoadReport& report) {
  const LatencyHistogram& h = *PlottedOf(report).latency;
  std::string out = "# inverse_tail percentile latency_us\n";
  if (h.count() == 0) return out;
  // q = 1 - 10^(-k/10): 0, 20.6%, 36.9%, ... 90%, ... 99%, ... 99.999%;
  // stop where the tail holds less than one sample.
  for (int k = 0; k <= 50; ++k) {
    const double tail = std::pow(10.0, -k / 10.0);
    if (k > 0 && tail * static_cast<double>(h.count()) < 1.0) break;
    const double q = 1.0 - tail;
    absl::StrAppendFormat(&out, "%.6g %.6g %.3f\n", 1.0 / tail, 100.0 * q,
                          h.PercentileNs(q) / 1000.0);
  }
  return out;
}

std::string ChartScript(const LoadReport& report, const std::string& png_path,
                        const std::string& series_path,
                        const std::string& percentile_path) {
  const Plotted p = PlottedOf(report);
  const std::string title = absl::StrFormat(
      "cgacct-load %s: %s (%s loop%s, %.1f s after a %s warm-up)",
      report.scenario, p.what, report.rate > 0 ? "open" : "closed",
      report.rate > 0 ? absl::StrFormat(" at %.0f/s", report.rate) : "",
      absl::ToDoubleSeconds(report.elapsed),
      absl::FormatDuration(report.warmup));
  std::string gp;
  absl::StrAppend(&gp, "set terminal pngcairo size 1000,800 font \"sans,10\"\n",
                  "set output ", Quoted(png_path), "\n",
                  "set multiplot layout 2,1 title ", Quoted(title), "\n",
                  "set grid\n", "set key top left\n");
  // Latency over time.
  absl::StrAppend(
      &gp, "set xlabel \"seconds after the warm-up\"\n",
      "set ylabel \"latency (us)\"\n", "set logscale y\n",
      "set title \"per-second p50, p99 and max\"\n", "plot ",
      Quoted(series_path), " using 1:2 with linespoints title \"p50\", \\\n  ",
      Quoted(series_path), " using 1:3 with linespoints title \"p99\", \\\n  ",
      Quoted(series_path), " using 1:4 with lines dashtype 2 title \"max\"\n");
  // The distribution.
  absl::StrAppend(
      &gp, "set title \"percentile distribution of the measured run\"\n",
      "set xlabel \"percentile\"\n", "set logscale x\n",
      // Tic labels are format strings: %% is a literal %.
      "set xtics (\"0%%\" 1, \"90%%\" 10, \"99%%\" 100, \"99.9%%\" 1000, "
      "\"99.99%%\" 10000, \"99.999%%\" 100000)\n",
      "plot ", Quoted(percentile_path),
      " using 1:3 with linespoints title \"latency at percentile\"\n",
      "unset multiplot\n");
  return gp;
}

absl::Status WriteLatencyChart(const LoadReport& report,
                               const std::string& png_path) {
  if (PlottedOf(report).latency->count() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--chart=", png_path, ": the run has no samples to plot"));
  }
  const std::string series_path = png_path + ".series.dat";
  const std::string percentile_path = png_path + ".pct.dat";
  const std::string script_path = png_path + ".gp";
  if (absl::Status s = WriteFile(series_path, ChartSeriesData(report));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteFile(percentile_path, ChartPercentileData(report));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteFile(
          script_path,
          ChartScript(report, png_path, series_path, percentile_path));
      !s.ok()) {
    return s;
  }
  std::string arg0 = "gnuplot";
  std::string arg1 = script_path;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ);
  if (rc == ENOENT) {
    return absl::FailedPreconditionError(
        "--chart: gnuplot is not on PATH (Debian package gnuplot-nox; "
        "deploy/install-deps.sh installs it)");
  }
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("--chart: cannot run gnuplot: ", std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("--chart: waitpid(gnuplot): ", std::strerror(errno)));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        "--chart: gnuplot ", script_path, " failed (",
        WIFEXITED(status) ? absl::StrCat("exit status ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        ")"));
  }
  return absl::OkStatus();
}

}  // namespace cgacct::load
