// seed_rstat: the two rstat seed benchmarks, engine level, every flush-lock
// policy in one run (issue 5).
//
// Seed 1, "cgroup/rstat: avoid disabling irqs for O(num_cpu)" (400+ CPUs):
// stat readers reading one group's memory.stat for 10 s, (i) alone and
// (ii) with memory hogs, each on its own CPU, charging until OOM, then
// uncharging and starting again. Reported: reads, read latency p50/p99 and
// the mode of power-of-2 buckets, the longest flush-lock hold of a flush not
// preempted meanwhile (the irqs-off tracer's view, engine/rstat.h "Holds and
// preemption"), the longest by the wall clock, and the p99 hold.
// Seed 2, "cgroup/rstat: move css_rstat_lock outside cpu loop": 10 threads
// x 10,000 reads, total time.
//
// A read here is Engine::GetStats, what memory.stat costs in the kernel,
// without the RPC around it (cgacct-load measures that end to end). A fresh
// engine with --cpus modelled CPUs per policy and scenario.
//
//   seed_rstat [--cpus=400] [--duration=10s] [--readers=8] [--hogs=8]
//              [--policies=per_cpu,whole,batch:8,adaptive] [--flush=exact]
//              [--seed2_threads=10] [--seed2_reads=10000] [--json=FILE]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "engine/engine.h"

ABSL_FLAG(int, cpus, 400, "modelled CPUs");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "per scenario");
ABSL_FLAG(int, readers, 8, "stat reader threads");
ABSL_FLAG(int, hogs, 8, "memory hog threads (each on its own CPU)");
ABSL_FLAG(uint64_t, hog_max_pages, 16384, "memory.max of the hogs' parent");
ABSL_FLAG(std::string, policies, "per_cpu,whole,batch:8,adaptive",
          "policies to run");
ABSL_FLAG(std::string, flush, "exact",
          "read mode: exact or threshold (the kernel's)");
ABSL_FLAG(int, seed2_threads, 10, "seed 2: threads");
ABSL_FLAG(int, seed2_reads, 10000, "seed 2: reads per thread");
ABSL_FLAG(std::string, json, "", "also write the results as JSON here");

namespace cgacct {
namespace {

// Log-linear histogram of nanoseconds: 16 sub-buckets per power of two
// (values within 6.25%), lock-free recording.
class HoldHistogram {
 public:
  static constexpr int kSub = 16;
  static constexpr int kBuckets = 64 * kSub;
  void Record(int64_t ns) {
    if (ns < 1) ns = 1;
    counts_[Index(static_cast<uint64_t>(ns))].fetch_add(
        1, std::memory_order_relaxed);
    int64_t seen = max_.load(std::memory_order_relaxed);
    while (ns > seen &&
           !max_.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
    }
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  // Upper bound of the bucket holding quantile q.
  int64_t Quantile(double q) const {
    const uint64_t total = count_.load();
    if (total == 0) return 0;
    const uint64_t rank =
        static_cast<uint64_t>(q * static_cast<double>(total - 1)) + 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i].load(std::memory_order_relaxed);
      if (seen >= rank) return std::min<int64_t>(UpperBound(i), max_.load());
    }
    return max_.load();
  }
  int64_t max() const { return max_.load(); }
  uint64_t count() const { return count_.load(); }

 private:
  static int Index(uint64_t v) {
    const int log = 63 - __builtin_clzll(v);
    if (log < 4) return static_cast<int>(v);  // exact below 16
    const int sub = static_cast<int>((v >> (log - 4)) & (kSub - 1));
    return log * kSub + sub;
  }
  static int64_t UpperBound(int index) {
    const int log = index / kSub;
    const int sub = index % kSub;
    if (log < 4) return index;
    return static_cast<int64_t>((uint64_t{kSub} + sub + 1) << (log - 4)) - 1;
  }
  std::atomic<uint64_t> counts_[kBuckets] = {};
  std::atomic<int64_t> max_{0};
  std::atomic<uint64_t> count_{0};
};

class HoldObserver final : public EngineObserver {
 public:
  void OnFlushLockHold(const FlushLockHold& hold) override {
    holds.Record(absl::ToInt64Nanoseconds(hold.hold));
  }
  void OnFlushDone(absl::Duration, int, int) override {}
  HoldHistogram holds;
};

struct Latencies {
  std::vector<int64_t> ns;
  void Merge(const std::vector<int64_t>& more) {
    ns.insert(ns.end(), more.begin(), more.end());
  }
  double Percentile(double q) {
    if (ns.empty()) return 0;
    std::sort(ns.begin(), ns.end());
    return static_cast<double>(
        ns[static_cast<size_t>(q * static_cast<double>(ns.size() - 1))]);
  }
  // Reads per power-of-2 microsecond bucket: [0] is [0, 2) us, [k] is
  // [2^k, 2^(k+1)) us.
  std::vector<uint64_t> Pow2Counts() const {
    std::vector<uint64_t> buckets(40, 0);
    for (int64_t v : ns) {
      const uint64_t us = static_cast<uint64_t>(std::max<int64_t>(v / 1000, 1));
      ++buckets[std::min(39, 63 - __builtin_clzll(us))];
    }
    return buckets;
  }
  // Lower bound, in us, of the power-of-2 microsecond bucket with most reads.
  int64_t ModePow2Us() const {
    const std::vector<uint64_t> buckets = Pow2Counts();
    const int best = static_cast<int>(
        std::max_element(buckets.begin(), buckets.end()) - buckets.begin());
    return int64_t{1} << best;
  }
};

struct Row {
  std::string policy;
  std::string scenario;
  uint64_t reads = 0;
  double p50_us = 0, p99_us = 0;
  int64_t mode_us = 0;
  double hold_max_us = 0;       // not preempted (the irqs-off view)
  double hold_wall_max_us = 0;  // wall clock, preemption included
  double hold_p99_us = 0;       // wall clock
  uint64_t preempted_flushes = 0;
  std::vector<uint64_t> pow2_counts;
  uint64_t holds = 0;
  uint64_t charges = 0, ooms = 0;
  double seconds = 0;  // seed 2
};

std::unique_ptr<Engine> MakeEngine(const std::string& policy_name,
                                   HoldObserver* observer) {
  EngineOptions options;
  options.nr_cpus = absl::GetFlag(FLAGS_cpus);
  int batch = 8;
  options.flush_lock_policy = *ParseFlushLockPolicy(policy_name, &batch);
  options.flush_batch_cpus = batch;
  options.observer = observer;
  auto engine = std::move(*Engine::Create(options));
  LimitsUpdate limits;
  limits.max_pages = absl::GetFlag(FLAGS_hog_max_pages);
  (void)engine->CreateGroup("/seed", limits);
  for (int h = 0; h < absl::GetFlag(FLAGS_hogs); ++h)
    (void)engine->CreateGroup(absl::StrCat("/seed/hog-", h), {});
  return engine;
}

// The flush-lock hold columns of `row`, from the engine and the observer.
void FillHolds(const cgacct::Engine& engine, const HoldObserver& observer,
               Row* row) {
  const cgacct::EngineInfo info = engine.GetInfo();
  row->hold_max_us = absl::ToDoubleMicroseconds(info.flush_lock_hold_max);
  row->hold_wall_max_us =
      absl::ToDoubleMicroseconds(info.flush_lock_hold_wall_max);
  row->preempted_flushes = info.preempted_flushes;
  row->hold_p99_us = static_cast<double>(observer.holds.Quantile(0.99)) / 1000;
  row->holds = observer.holds.count();
}

Row RunSeed1(const std::string& policy, bool with_hogs, FlushMode mode) {
  HoldObserver observer;
  auto engine = MakeEngine(policy, &observer);
  const int nr_cpus = engine->nr_cpus();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> charges{0}, ooms{0};
  std::vector<std::thread> hogs;
  if (with_hogs) {
    const int n = absl::GetFlag(FLAGS_hogs);
    for (int h = 0; h < n; ++h) {
      hogs.emplace_back([&, h] {
        const std::string path = absl::StrCat("/seed/hog-", h);
        const int cpu = h * nr_cpus / n;
        uint64_t held = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          if (engine->Charge(path, 64, PageKind::kAnon, cpu).ok()) {
            held += 64;
            charges.fetch_add(1, std::memory_order_relaxed);
          } else {
            ooms.fetch_add(1, std::memory_order_relaxed);
            (void)engine->Uncharge(path, held, PageKind::kAnon, cpu);
            held = 0;
          }
        }
        if (held > 0) (void)engine->Uncharge(path, held, PageKind::kAnon, cpu);
      });
    }
  }
  Latencies all;
  absl::Mutex mu;
  std::vector<std::thread> readers;
  for (int r = 0; r < absl::GetFlag(FLAGS_readers); ++r) {
    readers.emplace_back([&] {
      std::vector<int64_t> mine;
      mine.reserve(1 << 20);
      while (!stop.load(std::memory_order_relaxed)) {
        const int64_t t0 = absl::GetCurrentTimeNanos();
        auto stats = engine->GetStats("/seed", mode);
        mine.push_back(absl::GetCurrentTimeNanos() - t0);
        if (!stats.ok()) std::abort();
      }
      absl::MutexLock l(&mu);
      all.Merge(mine);
    });
  }
  absl::SleepFor(absl::GetFlag(FLAGS_duration));
  stop = true;
  for (auto& t : readers) t.join();
  for (auto& t : hogs) t.join();
  Row row;
  row.policy = policy;
  row.scenario = with_hogs ? "readers+hogs" : "readers";
  row.reads = all.ns.size();
  row.p50_us = all.Percentile(0.50) / 1000;
  row.p99_us = all.Percentile(0.99) / 1000;
  row.mode_us = all.ModePow2Us();
  row.pow2_counts = all.Pow2Counts();
  FillHolds(*engine, observer, &row);
  row.charges = charges.load();
  row.ooms = ooms.load();
  return row;
}

Row RunSeed2(const std::string& policy, FlushMode mode) {
  HoldObserver observer;
  auto engine = MakeEngine(policy, &observer);
  const int threads = absl::GetFlag(FLAGS_seed2_threads);
  const int reads = absl::GetFlag(FLAGS_seed2_reads);
  // Some activity first, as on a live machine: every CPU has updates.
  for (int cpu = 0; cpu < engine->nr_cpus(); ++cpu)
    (void)engine->Charge("/seed/hog-0", 1, PageKind::kFile, cpu);
  const absl::Time start = absl::Now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < reads; ++i)
        if (!engine->GetStats("/seed", mode).ok()) std::abort();
    });
  }
  for (auto& t : workers) t.join();
  Row row;
  row.policy = policy;
  row.scenario = absl::StrCat(threads, "x", reads);
  row.reads = static_cast<uint64_t>(threads) * reads;
  row.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  FillHolds(*engine, observer, &row);
  return row;
}

}  // namespace
}  // namespace cgacct

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil keeps absl::Mutex deadlock detection on (6x per nested
  // lock); cgacctd turns it off, so does this benchmark.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  using cgacct::Row;
  const std::string flush = absl::GetFlag(FLAGS_flush);
  const cgacct::FlushMode mode = flush == "threshold"
                                     ? cgacct::FlushMode::kThreshold
                                     : cgacct::FlushMode::kExact;
  std::vector<Row> rows;
  const std::vector<std::string> policies =
      absl::StrSplit(absl::GetFlag(FLAGS_policies), ',');
  std::printf(
      "seed_rstat: cpus=%d readers=%d hogs=%d duration=%s reads=%s (%s)\n",
      absl::GetFlag(FLAGS_cpus), absl::GetFlag(FLAGS_readers),
      absl::GetFlag(FLAGS_hogs),
      absl::FormatDuration(absl::GetFlag(FLAGS_duration)).c_str(),
      flush.c_str(),
      mode == cgacct::FlushMode::kExact
          ? "every read flushes its subtree"
          : "the kernel's 64 x nr_cpus threshold");
  std::printf("%-10s %-13s %10s %9s %9s %8s %11s %11s %11s %9s %8s %8s\n",
              "policy", "scenario", "reads", "p50_us", "p99_us", "mode_us",
              "hold_max_us", "hold_p99_us", "wall_max_us", "holds", "preempt",
              "seconds");
  auto print = [](const Row& r) {
    std::printf(
        "%-10s %-13s %10llu %9.1f %9.1f %8lld %11.1f %11.2f %11.1f %9llu %8llu "
        "%8.2f\n",
        r.policy.c_str(), r.scenario.c_str(),
        static_cast<unsigned long long>(r.reads), r.p50_us, r.p99_us,
        static_cast<long long>(r.mode_us), r.hold_max_us, r.hold_p99_us,
        r.hold_wall_max_us, static_cast<unsigned long long>(r.holds),
        static_cast<unsigned long long>(r.preempted_flushes), r.seconds);
    std::fflush(stdout);
  };
  for (const std::string& policy : policies) {
    for (bool hogs : {false, true}) {
      rows.push_back(cgacct::RunSeed1(policy, hogs, mode));
      print(rows.back());
    }
  }
  for (const std::string& policy : policies) {
    rows.push_back(cgacct::RunSeed2(policy, mode));
    print(rows.back());
  }
  const std::string json = absl::GetFlag(FLAGS_json);
  if (!json.empty()) {
    std::ofstream out(json);
    out << "[\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << absl::StrFormat(
          "  {\"policy\": \"%s\", \"scenario\": \"%s\", \"flush\": \"%s\", "
          "\"reads\": %d, "
          "\"p50_us\": %.2f, \"p99_us\": %.2f, \"mode_us\": %d, "
          "\"hold_max_us\": %.2f, "
          "\"hold_wall_max_us\": %.2f, \"hold_p99_us\": %.3f, \"holds\": %d, "
          "\"preempted_flushes\": %d, \"charges\": %d, \"ooms\": %d, "
          "\"seconds\": %.3f, "
          "\"pow2_counts\": [%s]}%s\n",
          r.policy, r.scenario, flush, r.reads, r.p50_us, r.p99_us, r.mode_us,
          r.hold_max_us, r.hold_wall_max_us, r.hold_p99_us, r.holds,
          r.preempted_flushes, r.charges, r.ooms, r.seconds,
          absl::StrJoin(r.pow2_counts, ", "), i + 1 < rows.size() ? "," : "");
    }
    out << "]\n";
  }
  return 0;
}
