// rstat flush cost under the two flush-lock policies (docs/DESIGN.md §9).
//
// BM_Flush: one reader flushes the root after `updates` stat updates spread
// over `nr_cpus` CPUs, the shape of a memory.stat read on a big machine. The
// per_cpu policy pays one lock round trip per CPU; whole pays one per flush.
// Baseline: the same flush under the other policy, same binary, same run.
// With ->Threads(2) two readers flush the same tree at once. `preempt` is the
// flush preempt model (0 none, 1 full; EngineOptions::flush_preempt_model):
// whole runs under both, since with two readers only full drops the lock for
// the waiting one.
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "engine/engine.h"

namespace cgacct {
namespace {

std::unique_ptr<Engine> MakeEngine(FlushLockPolicy policy,
                                   FlushPreemptModel model, int nr_cpus,
                                   int nr_groups) {
  EngineOptions options;
  options.nr_cpus = nr_cpus;
  options.flush_lock_policy = policy;
  options.flush_preempt_model = model;
  auto engine = std::move(*Engine::Create(options));
  (void)engine->CreateGroup("/bench", {});
  for (int i = 0; i < nr_groups; ++i)
    (void)engine->CreateGroup("/bench/g" + std::to_string(i), {});
  return engine;
}

std::unique_ptr<Engine> engine;  // built by Setup before the threads start

void Setup(const benchmark::State& state) {
  engine = MakeEngine(static_cast<FlushLockPolicy>(state.range(0)),
                      static_cast<FlushPreemptModel>(state.range(3)),
                      static_cast<int>(state.range(1)), 16);
}
void Teardown(const benchmark::State&) { engine.reset(); }

void BM_Flush(benchmark::State& state) {
  const auto policy = static_cast<FlushLockPolicy>(state.range(0));
  const int nr_cpus = static_cast<int>(state.range(1));
  const int updates = static_cast<int>(state.range(2));
  std::mt19937 rng(state.thread_index());
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < updates; ++i) {
      const std::string path = "/bench/g" + std::to_string(rng() % 16);
      (void)engine->Charge(path, 1, PageKind::kAnon,
                           static_cast<int>(rng() % nr_cpus));
    }
    state.ResumeTiming();
    auto stats = engine->GetStats("/bench", FlushMode::kExact);
    benchmark::DoNotOptimize(stats);
  }
  state.SetLabel(
      policy == FlushLockPolicy::kWhole
          ? absl::StrCat(FlushLockPolicyName(policy), "(",
                         FlushPreemptModelName(static_cast<FlushPreemptModel>(
                             state.range(3))),
                         ")")
          : std::string(FlushLockPolicyName(policy)));
  if (state.thread_index() == 0) {
    state.counters["hold_max_us"] =
        absl::ToDoubleMicroseconds(engine->GetInfo().flush_lock_hold_max);
  }
}

void Args(benchmark::internal::Benchmark* b) {
  const int per_cpu = static_cast<int>(FlushLockPolicy::kPerCpu);
  const int whole = static_cast<int>(FlushLockPolicy::kWhole);
  const int none = static_cast<int>(FlushPreemptModel::kNone);
  const int full = static_cast<int>(FlushPreemptModel::kFull);
  for (auto [policy, preempt] : {std::pair{per_cpu, none}, std::pair{whole, none},
                                 std::pair{whole, full}})
    for (int cpus : {2, 64, 400})
      for (int updates : {0, 256}) b->Args({policy, cpus, updates, preempt});
  b->ArgNames({"policy", "cpus", "updates", "preempt"});
}

BENCHMARK(BM_Flush)
    ->Apply(Args)
    ->Setup(Setup)
    ->Teardown(Teardown)
    ->UseRealTime();
BENCHMARK(BM_Flush)
    ->Apply(Args)
    ->Setup(Setup)
    ->Teardown(Teardown)
    ->Threads(2)
    ->UseRealTime();

}  // namespace
}  // namespace cgacct

BENCHMARK_MAIN();
