// hold_noise: how often a running thread loses time it cannot see as a
// context switch (docs/DESIGN.md §9.3). A flush-lock hold that was not
// preempted can still contain an interrupt handled on the holder's CPU or
// time the hypervisor took; this program measures how often that happens and
// how long it lasts, with no lock at all.
//
// The thread spins reading CLOCK_MONOTONIC in windows of --window (20 µs, a
// few hundred per_cpu holds' worth of work). A window whose largest gap
// between two consecutive reads exceeds --gap is "disturbed"; it is then
// classified by the thread's context switches (getrusage(RUSAGE_THREAD)) and
// by its CPU time (CLOCK_THREAD_CPUTIME_ID, which excludes stolen time when
// the guest kernel accounts steal): preempted, stolen (the CPU time lost at
// least half the gap) or "on CPU" (an interrupt or anything else the guest
// counts as the thread's own time, which no per-thread clock can filter).
//
//   hold_noise [--seconds=10] [--window_us=20] [--gap_us=50]
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int64_t Now(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

int64_t ContextSwitches() {
  rusage usage;
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nivcsw + usage.ru_nvcsw;
}

int64_t Flag(int argc, char** argv, const char* name, int64_t fallback) {
  const size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=')
      return std::atoll(argv[i] + n + 1);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t seconds = Flag(argc, argv, "--seconds", 10);
  const int64_t window_ns = Flag(argc, argv, "--window_us", 20) * 1000;
  const int64_t gap_ns = Flag(argc, argv, "--gap_us", 50) * 1000;
  const int64_t end = Now(CLOCK_MONOTONIC) + seconds * 1'000'000'000;
  int64_t windows = 0, preempted = 0, stolen = 0, on_cpu = 0;
  std::vector<int64_t> on_cpu_gaps;
  while (Now(CLOCK_MONOTONIC) < end) {
    const int64_t switches = ContextSwitches();
    const int64_t cpu0 = Now(CLOCK_THREAD_CPUTIME_ID);
    const int64_t start = Now(CLOCK_MONOTONIC);
    int64_t prev = start, now = start, max_gap = 0;
    while (now - start < window_ns) {
      now = Now(CLOCK_MONOTONIC);
      max_gap = std::max(max_gap, now - prev);
      prev = now;
    }
    const int64_t cpu = Now(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    ++windows;
    if (max_gap <= gap_ns) continue;
    if (ContextSwitches() != switches) {
      ++preempted;
    } else if ((now - start) - cpu >= max_gap / 2) {
      ++stolen;
    } else {
      ++on_cpu;
      on_cpu_gaps.push_back(max_gap);
    }
  }
  std::sort(on_cpu_gaps.begin(), on_cpu_gaps.end());
  auto q = [&](double f) -> double {
    if (on_cpu_gaps.empty()) return 0;
    return static_cast<double>(on_cpu_gaps[static_cast<size_t>(
               f * static_cast<double>(on_cpu_gaps.size() - 1))]) /
           1000;
  };
  std::printf(
      "hold_noise: %lld s, %lld windows of %lld us; gaps over %lld us: "
      "%lld preempted, %lld stolen, %lld on CPU (%.1f/s; gap p50 %.0f us, "
      "max %.0f us)\n",
      static_cast<long long>(seconds), static_cast<long long>(windows),
      static_cast<long long>(window_ns / 1000),
      static_cast<long long>(gap_ns / 1000), static_cast<long long>(preempted),
      static_cast<long long>(stolen), static_cast<long long>(on_cpu),
      static_cast<double>(on_cpu) / static_cast<double>(seconds), q(0.5),
      q(1.0));
  return 0;
}
