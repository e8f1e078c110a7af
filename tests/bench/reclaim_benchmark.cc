// Reclaim-cycle latency with many idle groups: partial walks on the shared
// cursor against forced full walks, the scenario of "mm: vmscan: restore
// incremental cgroup iteration" (Johannes Weiner, 2024; docs/DESIGN.md §1).
//
// A parent holds N idle children, each with leftover FILE cache, and one
// busy child that keeps reading new files (charging FILE pages) past the
// parent's memory.max. Every charge that fails at the limit runs a reclaim
// cycle (try_to_free_mem_cgroup_pages() on the parent). Two engines with the
// same tree run the same workload in the same process, interleaved in
// rounds so they share the machine's noise:
//   partial  the engine's default: partial walks on the parent's shared
//            cursor, stopping once the goal is met (one full walk only
//            before giving up);
//   full     EngineOptions::memcg_full_walk: every walk covers the whole
//            subtree (the kernel between 2019 and 2024 for direct reclaim,
//            and kswapd always) — the baseline.
// The engine reports each cycle's duration through EngineObserver. Output:
// the distribution of cycle durations per mode (p50/p99/max, share of
// cycles over 10 ms and 100 ms), pages reclaimed per cycle, and OOMs.
//
// Not part of the test run. Usage (defaults shown):
//   reclaim_benchmark --children=10000 --idle_pages=8192 --charge_pages=16
//                     --charged_pages=2000000 --rounds=20 --cpus=4
// idle_pages is chosen so an idle group is scanned at priority 12 (the
// kernel's idle groups hold megabytes of cache): 8192 >> 12 = 2 pages.
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cycle_clock.h"
#include "engine/engine.h"
#include "engine/observer.h"

namespace cgacct {
namespace {

struct Config {
  int children = 10000;
  uint64_t idle_pages = 8192;
  uint64_t charge_pages = 16;
  uint64_t charged_pages = 2000000;
  int rounds = 20;
  int cpus = 4;
};

// Collects every reclaim cycle of one engine.
class CycleLog : public EngineObserver {
 public:
  void OnFlushLockHold(const FlushLockHold&) override {}
  void OnFlushDone(absl::Duration, int, int) override {}
  void OnReclaimDone(absl::Duration cycle, uint64_t scanned, uint64_t stolen,
                     bool full_walk) override {
    std::lock_guard<std::mutex> l(mu_);
    cycle_ns_.push_back(absl::ToInt64Nanoseconds(cycle));
    stolen_ += stolen;
    if (full_walk) ++full_walk_cycles_;
  }
  std::vector<int64_t> cycle_ns() const { return cycle_ns_; }
  uint64_t stolen() const { return stolen_; }
  uint64_t full_walk_cycles() const { return full_walk_cycles_; }

 private:
  std::mutex mu_;
  std::vector<int64_t> cycle_ns_;
  uint64_t stolen_ = 0;
  uint64_t full_walk_cycles_ = 0;
};

struct Mode {
  const char* name;
  bool full_walk;
  CycleLog log;
  std::unique_ptr<Engine> engine;
  uint64_t charged = 0;
  uint64_t charge_failures = 0;
  int64_t busy_ns = 0;  // wall time spent in this mode's charges
  // Scheduling noise (the machine is shared): the longest time one charge
  // (with all its reclaim cycles) spent on the CPU, and how many charges
  // spent over 1 ms of their wall time off it.
  int64_t max_charge_cpu_ns = 0;
  uint64_t preempted_charges = 0;
};

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "reclaim_benchmark: %s\n", what.c_str());
  std::exit(1);
}

void Setup(Mode& mode, const Config& config) {
  EngineOptions options;
  options.nr_cpus = config.cpus;
  options.observer = &mode.log;
  options.memcg_full_walk = mode.full_walk;
  auto engine = Engine::Create(options);
  if (!engine.ok()) Die(engine.status().ToString());
  mode.engine = std::move(*engine);
  Engine& e = *mode.engine;
  // Room for the idle cache plus 64 MiB for the busy child to start with.
  LimitsUpdate limits;
  limits.max_pages = config.children * config.idle_pages + 16384;
  if (!e.CreateGroup("/p", limits).ok()) Die("create /p");
  for (int i = 0; i < config.children; ++i) {
    const std::string path = absl::StrFormat("/p/idle%05d", i);
    if (!e.CreateGroup(path, {}).ok()) Die("create " + path);
    // Over 64 pages: an exact charge, nothing parked in a stock.
    if (!e.Charge(path, config.idle_pages, PageKind::kFile, i % config.cpus)
             .ok())
      Die("charge " + path);
  }
  if (!e.CreateGroup("/p/busy", {}).ok()) Die("create /p/busy");
}

// The busy child reads `pages` more pages of new files, charge_pages at a
// time, on CPU 0.
void Run(Mode& mode, const Config& config, uint64_t pages) {
  const int64_t start = CycleClock::SteadyNowNs();
  for (uint64_t done = 0; done < pages; done += config.charge_pages) {
    const int64_t wall0 = CycleClock::SteadyNowNs();
    const int64_t cpu0 = ThreadCpuNs();
    auto r =
        mode.engine->Charge("/p/busy", config.charge_pages, PageKind::kFile, 0);
    const int64_t cpu_ns = ThreadCpuNs() - cpu0;
    const int64_t wall_ns = CycleClock::SteadyNowNs() - wall0;
    mode.max_charge_cpu_ns = std::max(mode.max_charge_cpu_ns, cpu_ns);
    if (wall_ns - cpu_ns > 1'000'000) ++mode.preempted_charges;
    if (r.ok()) {
      mode.charged += config.charge_pages;
    } else {
      ++mode.charge_failures;
    }
  }
  mode.busy_ns += CycleClock::SteadyNowNs() - start;
}

double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(p * (sorted.size() - 1) + 0.5);
  return static_cast<double>(sorted[std::min(i, sorted.size() - 1)]);
}

std::string Micros(double ns) {
  if (ns >= 1e6) return absl::StrFormat("%.2f ms", ns / 1e6);
  return absl::StrFormat("%.1f µs", ns / 1e3);
}

bool ParseFlag(const char* arg, const char* name, uint64_t* out) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (std::strncmp(arg, prefix.c_str(), prefix.size()) != 0) return false;
  char* end = nullptr;
  *out = std::strtoull(arg + prefix.size(), &end, 10);
  if (end == arg + prefix.size() || *end != '\0')
    Die(absl::StrCat("bad value in ", arg));
  return true;
}

}  // namespace
}  // namespace cgacct

int main(int argc, char** argv) {
  using namespace cgacct;
  Config config;
  for (int i = 1; i < argc; ++i) {
    uint64_t v = 0;
    if (ParseFlag(argv[i], "children", &v)) {
      config.children = static_cast<int>(v);
    } else if (ParseFlag(argv[i], "idle_pages", &v)) {
      config.idle_pages = v;
    } else if (ParseFlag(argv[i], "charge_pages", &v)) {
      config.charge_pages = std::max<uint64_t>(v, 1);
    } else if (ParseFlag(argv[i], "charged_pages", &v)) {
      config.charged_pages = v;
    } else if (ParseFlag(argv[i], "rounds", &v)) {
      config.rounds = static_cast<int>(std::max<uint64_t>(v, 1));
    } else if (ParseFlag(argv[i], "cpus", &v)) {
      config.cpus = static_cast<int>(std::max<uint64_t>(v, 1));
    } else {
      Die(absl::StrCat("unknown argument ", argv[i],
                       " (see the file comment for the flags)"));
    }
  }

  Mode modes[2] = {{"partial", false, {}, nullptr},
                   {"full", true, {}, nullptr}};
  for (Mode& mode : modes) Setup(mode, config);
  std::printf(
      "%d idle children x %" PRIu64 " FILE pages, busy child charging %" PRIu64
      " pages x %" PRIu64 " past the parent's max, %d rounds, %d CPU slots\n\n",
      config.children, config.idle_pages, config.charge_pages,
      config.charged_pages / config.charge_pages, config.rounds, config.cpus);
  // Interleave the two modes round by round: same machine, same noise.
  const uint64_t per_round = config.charged_pages / config.rounds;
  for (int r = 0; r < config.rounds; ++r)
    for (Mode& mode : modes) Run(mode, config, per_round);

  std::printf(
      "| walks | cycles | p50 | p99 | max | > 10 ms | > 100 ms | pages "
      "reclaimed / cycle | cycles ending in a full walk | OOMs | busy-child "
      "charge time | longest charge on-CPU | charges > 1 ms off-CPU |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double p99[2] = {0, 0};
  int64_t worst = 0;
  uint64_t ooms = 0;
  for (int m = 0; m < 2; ++m) {
    Mode& mode = modes[m];
    std::vector<int64_t> ns = mode.log.cycle_ns();
    std::sort(ns.begin(), ns.end());
    const size_t over_10ms =
        ns.end() - std::upper_bound(ns.begin(), ns.end(), 10'000'000);
    const size_t over_100ms =
        ns.end() - std::upper_bound(ns.begin(), ns.end(), 100'000'000);
    const double n = std::max<double>(1, ns.size());
    p99[m] = Percentile(ns, 0.99);
    worst = std::max(worst, ns.empty() ? 0 : ns.back());
    const EngineCounters counters = mode.engine->GetCounters();
    const uint64_t oom = counters.charges_oom + counters.charges_refused;
    ooms += oom;
    std::printf("| %s | %zu | %s | %s | %s | %.2f%% | %.2f%% | %.1f | %" PRIu64
                " | %" PRIu64 " | %.2f s | %s | %" PRIu64 " |\n",
                mode.name, ns.size(), Micros(Percentile(ns, 0.5)).c_str(),
                Micros(p99[m]).c_str(),
                Micros(ns.empty() ? 0 : static_cast<double>(ns.back())).c_str(),
                100.0 * over_10ms / n, 100.0 * over_100ms / n,
                static_cast<double>(mode.log.stolen()) / n,
                mode.log.full_walk_cycles(), oom, mode.busy_ns / 1e9,
                Micros(static_cast<double>(mode.max_charge_cpu_ns)).c_str(),
                mode.preempted_charges);
  }
  const bool goal = p99[0] * 10 <= p99[1] && worst <= 100'000'000 && ooms == 0;
  std::printf(
      "\npartial p99 / full p99 = %.4f (goal <= 0.1); longest cycle %s "
      "(goal <= 100 ms); OOMs %" PRIu64 " (goal 0): %s\n",
      p99[1] > 0 ? p99[0] / p99[1] : 0.0, Micros(worst).c_str(), ooms,
      goal ? "goal met" : "GOAL MISSED");
  return goal ? 0 : 2;
}
