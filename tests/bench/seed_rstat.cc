// seed_rstat: the two rstat seed benchmarks, engine level, every flush-lock
// policy in one run (issue 5).
//
// Seed 1, "cgroup/rstat: avoid disabling irqs for O(num_cpu)" (400+ CPUs):
// stat readers reading one group's memory.stat for 10 s, (i) alone and
// (ii) with memory hogs charging until a charge is refused at memory.max (an
// OOM kill for a chunk of <= 8 pages, a costly ENOMEM without OOM for a
// larger one, as the kernel does), then uncharging and starting
// again. The seed's 400 hogs ran on 400 CPUs, so every CPU's updated list was
// non-empty when a flush walked it: with --hog_cpus=all (the default) each
// hog moves to its next CPU after every charge, so the --hogs threads
// together charge on every modelled CPU in turn; --hog_cpus=N spreads them
// over N CPUs (N = --hogs: each hog on one CPU of its own, issue 5's shape). Reported: reads, read latency p50/p99 and
// the mode of power-of-2 buckets, the longest flush-lock hold of a flush not
// preempted meanwhile (the irqs-off tracer's view, engine/rstat.h "Holds and
// preemption"), the CPUs walked and (group, CPU) entries folded inside that
// hold, the most entries any hold folded (the work view, free of preemption
// and steal noise), the longest hold by the wall clock, and the p99 hold.
// `whole` runs under both preempt models (--flush_preempt_model; a policy
// may name its own, as in whole(full)): under none it holds the lock across
// every CPU, under full it drops it for a waiting flusher.
// Seed 2, "cgroup/rstat: move css_rstat_lock outside cpu loop": 10 threads
// x 10,000 reads, total time.
//
// A read here is Engine::GetStats, what memory.stat costs in the kernel,
// without the RPC around it (cgacct-load measures that end to end). A fresh
// engine with --cpus modelled CPUs per policy and scenario.
//
//   seed_rstat [--cpus=400] [--duration=10s] [--readers=8] [--hogs=8]
//              [--hog_cpus=all|N] [--hog_chunk_pages=64]
//              [--flush_preempt_model=none|full] [--flush_hold_budget=0]
//              [--policies=per_cpu,whole(none),whole(full),batch:8,adaptive]
//              [--flush=exact] [--seed2_threads=10] [--seed2_reads=10000]
//              [--json=FILE]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
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
ABSL_FLAG(int, hogs, 8, "memory hog threads");
ABSL_FLAG(std::string, hog_cpus, "all",
          "CPUs the hogs charge on: all (each hog moves to its next CPU after "
          "every charge, so every modelled CPU gets updates) or N (N CPUs "
          "spread over the modelled ones; N = --hogs puts each hog on a CPU "
          "of its own)");
ABSL_FLAG(std::string, flush_preempt_model, "none",
          "preempt model of policies that do not name one: none or full");
ABSL_FLAG(uint64_t, hog_max_pages, 16384, "memory.max of the hogs' parent");
ABSL_FLAG(uint64_t, hog_chunk_pages, 64,
          "ANON pages per hog charge (1 = a faulting process's page at a "
          "time: 64x the rstat updates per page)");
ABSL_FLAG(std::string, policies,
          "per_cpu,whole(none),whole(full),batch:8,adaptive",
          "policies to run; POLICY(none|full) sets the preempt model");
ABSL_FLAG(absl::Duration, flush_hold_budget, absl::ZeroDuration(),
          "adaptive: the longest planned hold, cgacctd's --flush_hold_budget "
          "(0: one CPU with updates per hold)");
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
    int seen = max_entries.load(std::memory_order_relaxed);
    while (hold.groups_folded > seen &&
           !max_entries.compare_exchange_weak(seen, hold.groups_folded,
                                              std::memory_order_relaxed)) {
    }
    seen = max_cpus.load(std::memory_order_relaxed);
    while (hold.cpus_walked > seen &&
           !max_cpus.compare_exchange_weak(seen, hold.cpus_walked,
                                           std::memory_order_relaxed)) {
    }
  }
  void OnFlushDone(absl::Duration, int, int) override {}
  HoldHistogram holds;
  // The most (group, CPU) entries and CPUs any hold folded and walked.
  std::atomic<int> max_entries{0};
  std::atomic<int> max_cpus{0};
};

// "all" or N in [1, nr_cpus]; 0 for anything else.
int HogCpus(int nr_cpus) {
  const std::string v = absl::GetFlag(FLAGS_hog_cpus);
  if (v == "all") return nr_cpus;
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < 1 || n > nr_cpus) return 0;
  return n;
}

// A policy as the table names it: "whole(full)" -> whole under kFull; a
// policy without a model gets --flush_preempt_model.
struct PolicySpec {
  std::string name;  // as printed: whole(none), per_cpu, batch:8
  FlushLockPolicy policy = FlushLockPolicy::kPerCpu;
  int batch_cpus = 8;
  FlushPreemptModel model = FlushPreemptModel::kNone;
};

std::optional<PolicySpec> ParsePolicySpec(const std::string& text) {
  PolicySpec spec;
  std::string base = text;
  std::string model = absl::GetFlag(FLAGS_flush_preempt_model);
  if (const size_t open = text.find('(');
      open != std::string::npos && text.back() == ')') {
    base = text.substr(0, open);
    model = text.substr(open + 1, text.size() - open - 2);
  }
  const auto policy = ParseFlushLockPolicy(base, &spec.batch_cpus);
  const auto parsed_model = ParseFlushPreemptModel(model);
  if (!policy.has_value() || !parsed_model.has_value()) return std::nullopt;
  spec.policy = *policy;
  spec.model = *parsed_model;
  // The model only changes `whole`; name it there, where it matters.
  spec.name = *policy == FlushLockPolicy::kWhole
                  ? absl::StrCat(base, "(", model, ")")
                  : base;
  return spec;
}

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
  double hold_p999_us = 0;      // wall clock
  int hold_cpus = 0;     // CPUs walked inside the hold_max_us hold
  int hold_entries = 0;  // (group, CPU) entries folded inside it
  int max_entries = 0;   // the most entries any hold folded
  uint64_t preempted_flushes = 0;
  std::vector<uint64_t> pow2_counts;
  uint64_t holds = 0;
  uint64_t charges = 0, ooms = 0;
  double seconds = 0;  // seed 2
};

EngineOptions SeedOptions(const PolicySpec& spec, HoldObserver* observer) {
  EngineOptions options;
  options.nr_cpus = absl::GetFlag(FLAGS_cpus);
  options.flush_lock_policy = spec.policy;
  options.flush_batch_cpus = spec.batch_cpus;
  options.flush_preempt_model = spec.model;
  options.flush_hold_budget = absl::GetFlag(FLAGS_flush_hold_budget);
  options.observer = observer;
  return options;
}

std::unique_ptr<Engine> MakeEngine(const PolicySpec& spec,
                                   HoldObserver* observer) {
  // main() validated these options for every policy.
  auto engine = std::move(*Engine::Create(SeedOptions(spec, observer)));
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
  row->hold_p999_us =
      static_cast<double>(observer.holds.Quantile(0.999)) / 1000;
  row->holds = observer.holds.count();
  if (!info.longest_flush_holds.empty()) {
    row->hold_cpus = info.longest_flush_holds[0].cpus_walked;
    row->hold_entries = info.longest_flush_holds[0].groups_folded;
  }
  row->max_entries = observer.max_entries.load();
}

Row RunSeed1(const PolicySpec& policy, bool with_hogs, FlushMode mode) {
  HoldObserver observer;
  auto engine = MakeEngine(policy, &observer);
  const int nr_cpus = engine->nr_cpus();
  const int hog_cpus = HogCpus(nr_cpus);
  const uint64_t chunk = absl::GetFlag(FLAGS_hog_chunk_pages);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> charges{0}, ooms{0};
  std::vector<std::thread> hogs;
  if (with_hogs) {
    const int n = absl::GetFlag(FLAGS_hogs);
    for (int h = 0; h < n; ++h) {
      hogs.emplace_back([&, h, n] {
        const std::string path = absl::StrCat("/seed/hog-", h);
        // The k-th charge of hog h goes to CPU slot (h + k * n) mod
        // hog_cpus, slot i being CPU i * nr_cpus / hog_cpus.
        int slot = h % hog_cpus;
        int cpu = slot * nr_cpus / hog_cpus;
        uint64_t held = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          if (hog_cpus != n) {
            cpu = static_cast<int>(static_cast<int64_t>(slot) * nr_cpus /
                                   hog_cpus);
            slot = (slot + n) % hog_cpus;
          }
          if (engine->Charge(path, chunk, PageKind::kAnon, cpu).ok()) {
            held += chunk;
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
  row.policy = policy.name;
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

Row RunSeed2(const PolicySpec& policy, FlushMode mode) {
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
  row.policy = policy.name;
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
  const int nr_cpus = absl::GetFlag(FLAGS_cpus);
  if (nr_cpus < 1 || cgacct::HogCpus(nr_cpus) == 0) {
    std::fprintf(stderr, "seed_rstat: --hog_cpus=%s is not all or 1..%d\n",
                 absl::GetFlag(FLAGS_hog_cpus).c_str(), nr_cpus);
    return 2;
  }
  if (absl::GetFlag(FLAGS_hog_chunk_pages) < 1 ||
      absl::GetFlag(FLAGS_hog_chunk_pages) > absl::GetFlag(FLAGS_hog_max_pages)) {
    std::fprintf(stderr,
                 "seed_rstat: --hog_chunk_pages must be in 1..--hog_max_pages\n");
    return 2;
  }
  std::vector<cgacct::PolicySpec> policies;
  for (absl::string_view text :
       absl::StrSplit(absl::GetFlag(FLAGS_policies), ',')) {
    const auto spec = cgacct::ParsePolicySpec(std::string(text));
    if (!spec.has_value()) {
      std::fprintf(stderr,
                   "seed_rstat: --policies: \"%s\" is not per_cpu, whole, "
                   "batch:N or adaptive, optionally with (none) or (full)\n",
                   std::string(text).c_str());
      return 2;
    }
    // The flags the engine checks (--cpus, --flush_hold_budget): a usage
    // error, not an abort in the middle of a run.
    if (const absl::Status valid =
            cgacct::SeedOptions(*spec, nullptr).Validate();
        !valid.ok()) {
      std::fprintf(stderr, "seed_rstat: %s\n", valid.ToString().c_str());
      return 2;
    }
    policies.push_back(*spec);
  }
  std::vector<Row> rows;
  std::printf(
      "seed_rstat: cpus=%d readers=%d hogs=%d hog_cpus=%s hog_chunk_pages=%d "
      "adaptive_budget=%s duration=%s reads=%s (%s)\n",
      nr_cpus, absl::GetFlag(FLAGS_readers), absl::GetFlag(FLAGS_hogs),
      absl::GetFlag(FLAGS_hog_cpus).c_str(),
      static_cast<int>(absl::GetFlag(FLAGS_hog_chunk_pages)),
      absl::FormatDuration(absl::GetFlag(FLAGS_flush_hold_budget)).c_str(),
      absl::FormatDuration(absl::GetFlag(FLAGS_duration)).c_str(),
      flush.c_str(),
      mode == cgacct::FlushMode::kExact
          ? "every read flushes its subtree"
          : "the kernel's 64 x nr_cpus threshold");
  std::printf(
      "%-12s %-13s %9s %8s %8s %7s %11s %9s %9s %8s %11s %12s %11s %9s %7s "
      "%7s\n",
      "policy", "scenario", "reads", "p50_us", "p99_us", "mode_us",
      "hold_max_us", "hold_cpus", "hold_ents", "max_ents", "hold_p99_us",
      "hold_p999_us", "wall_max_us", "holds", "preempt", "seconds");
  auto print = [](const Row& r) {
    std::printf(
        "%-12s %-13s %9llu %8.1f %8.1f %7lld %11.1f %9d %9d %8d %11.2f "
        "%12.2f %11.1f %9llu %7llu %7.2f\n",
        r.policy.c_str(), r.scenario.c_str(),
        static_cast<unsigned long long>(r.reads), r.p50_us, r.p99_us,
        static_cast<long long>(r.mode_us), r.hold_max_us, r.hold_cpus,
        r.hold_entries, r.max_entries, r.hold_p99_us, r.hold_p999_us,
        r.hold_wall_max_us,
        static_cast<unsigned long long>(r.holds),
        static_cast<unsigned long long>(r.preempted_flushes), r.seconds);
    std::fflush(stdout);
  };
  for (const cgacct::PolicySpec& policy : policies) {
    for (bool hogs : {false, true}) {
      rows.push_back(cgacct::RunSeed1(policy, hogs, mode));
      print(rows.back());
    }
  }
  for (const cgacct::PolicySpec& policy : policies) {
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
          "\"hog_cpus\": \"%s\", \"adaptive_budget_us\": %.3f, "
          "\"reads\": %d, "
          "\"p50_us\": %.2f, \"p99_us\": %.2f, \"mode_us\": %d, "
          "\"hold_max_us\": %.2f, \"hold_cpus\": %d, \"hold_entries\": %d, "
          "\"max_entries\": %d, "
          "\"hold_wall_max_us\": %.2f, \"hold_p99_us\": %.3f, "
          "\"hold_p999_us\": %.3f, \"holds\": %d, "
          "\"preempted_flushes\": %d, \"charges\": %d, \"ooms\": %d, "
          "\"seconds\": %.3f, "
          "\"pow2_counts\": [%s]}%s\n",
          r.policy, r.scenario, flush, absl::GetFlag(FLAGS_hog_cpus),
          absl::ToDoubleMicroseconds(absl::GetFlag(FLAGS_flush_hold_budget)),
          r.reads,
          r.p50_us, r.p99_us, r.mode_us, r.hold_max_us, r.hold_cpus,
          r.hold_entries, r.max_entries, r.hold_wall_max_us, r.hold_p99_us,
          r.hold_p999_us, r.holds, r.preempted_flushes, r.charges, r.ooms, r.seconds,
          absl::StrJoin(r.pow2_counts, ", "), i + 1 < rows.size() ? "," : "");
    }
    out << "]\n";
  }
  return 0;
}
