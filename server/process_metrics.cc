#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "server/build_revision.h"  // generated: CGACCT_REVISION

#ifndef CGACCT_VERSION
#define CGACCT_VERSION "0.0.0"
#endif

namespace cgacct {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily OneValue(const char* name, const char* help, MetricType type,
                      double value) {
  MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  ClientMetric metric;
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

// Virtual and resident size in pages: the first two fields of statm.
std::optional<std::pair<double, double>> ReadStatm() {
  std::ifstream in("/proc/self/statm");
  unsigned long long size = 0, resident = 0;
  if (!(in >> size >> resident)) return std::nullopt;
  return std::make_pair(static_cast<double>(size),
                        static_cast<double>(resident));
}

std::optional<double> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor opendir() used
}

// Seconds since the epoch: boot time (btime of /proc/stat) plus the
// process's starttime (field 22 of /proc/self/stat, clock ticks since boot).
std::optional<double> ReadStartTime() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  // Field 2 (comm) is in parentheses and may hold spaces: count fields from
  // the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  unsigned long long starttime = 0;
  // Fields 3 .. 21 then 22.
  for (int i = 3; i <= 21; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  if (!(rest >> starttime)) return std::nullopt;
  std::ifstream proc_stat("/proc/stat");
  unsigned long long btime = 0;
  bool found = false;
  while (std::getline(proc_stat, line)) {
    if (line.rfind("btime ", 0) == 0) {
      btime = std::stoull(line.substr(6));
      found = true;
      break;
    }
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  if (!found || ticks <= 0) return std::nullopt;
  return static_cast<double>(btime) +
         static_cast<double>(starttime) / static_cast<double>(ticks);
}

}  // namespace

std::vector<MetricFamily> ProcessCollector::Collect() const {
  std::vector<MetricFamily> out;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    const double cpu =
        static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
        static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) *
            1e-6;
    out.push_back(OneValue("process_cpu_seconds_total",
                           "Total user and system CPU time spent in seconds.",
                           MetricType::Counter, cpu));
  }
  if (const auto statm = ReadStatm()) {
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    out.push_back(OneValue("process_resident_memory_bytes",
                           "Resident memory size in bytes.", MetricType::Gauge,
                           statm->second * page));
    out.push_back(OneValue("process_virtual_memory_bytes",
                           "Virtual memory size in bytes.", MetricType::Gauge,
                           statm->first * page));
  }
  if (const auto fds = CountOpenFds()) {
    out.push_back(OneValue("process_open_fds",
                           "Number of open file descriptors.",
                           MetricType::Gauge, *fds));
  }
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    out.push_back(OneValue(
        "process_max_fds", "Maximum number of open file descriptors.",
        MetricType::Gauge,
        nofile.rlim_cur == RLIM_INFINITY
            ? std::numeric_limits<double>::infinity()
            : static_cast<double>(nofile.rlim_cur)));
  }
  if (const auto start = ReadStartTime()) {
    out.push_back(OneValue(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        MetricType::Gauge, *start));
  }
  return out;
}

std::vector<MetricFamily> BuildInfoCollector::Collect() const {
  MetricFamily family;
  family.name = "cgacct_build_info";
  family.help =
      "Always 1; the labels say which cgacctd this is: version (the "
      "project's) and revision (git, at build time).";
  family.type = MetricType::Gauge;
  ClientMetric metric;
  metric.label = {{"revision", CgacctRevision()}, {"version", CgacctVersion()}};
  metric.gauge.value = 1;
  family.metric.push_back(std::move(metric));
  std::vector<MetricFamily> out;
  out.push_back(std::move(family));
  return out;
}

const char* CgacctVersion() { return CGACCT_VERSION; }
const char* CgacctRevision() { return CGACCT_REVISION; }

}  // namespace cgacct
