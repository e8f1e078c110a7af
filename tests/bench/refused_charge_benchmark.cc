// A charge refused at memory.max when the limiting group's subtree holds N
// empty groups and no cache: what each such refusal costs (issue 22, the
// attack round's row 11g: a tenant's 10,000 empty groups made each of its
// refused charges cost ~60 ms of the server's CPU, and slowed every other
// tenant's calls).
//
// /t has memory.max 64 pages, all charged as ANON to /t/busy (nothing is
// reclaimable); /t also holds N empty children. Each iteration charges one
// page to /t/busy, which is refused after the kernel's retries (reclaim
// cycles, the stock drain, an OOM). The baseline is N = 0 in the same run:
// the cost a refusal has whatever the tree holds. Compare builds by running
// this file against each (tests/bench/RESULTS.md, "Refused charges over many
// empty groups").
//
// Not part of the test run. Usage:
//   refused_charge_benchmark --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "engine/engine.h"

namespace cgacct {
namespace {

std::unique_ptr<Engine> MakeEngine(int children) {
  EngineOptions options;
  options.nr_cpus = 2;
  auto engine = Engine::Create(options);
  if (!engine.ok()) return nullptr;
  LimitsUpdate limits;
  limits.max_pages = 64;
  if (!(*engine)->CreateGroup("/t", limits).ok()) return nullptr;
  for (int i = 0; i < children; ++i)
    if (!(*engine)->CreateGroup(absl::StrCat("/t/c", i), {}).ok())
      return nullptr;
  if (!(*engine)->CreateGroup("/t/busy", {}).ok()) return nullptr;
  if (!(*engine)->Charge("/t/busy", 64, PageKind::kAnon, 0).ok())
    return nullptr;
  return std::move(*engine);
}

void BM_RefusedChargeAtMax(benchmark::State& state) {
  const int children = static_cast<int>(state.range(0));
  std::unique_ptr<Engine> engine = MakeEngine(children);
  if (engine == nullptr) {
    state.SkipWithError("set-up failed");
    return;
  }
  int64_t refused = 0;
  for (auto _ : state) {
    auto r = engine->Charge("/t/busy", 1, PageKind::kAnon, 0);
    if (!r.ok()) ++refused;
  }
  if (refused != static_cast<int64_t>(state.iterations()))
    state.SkipWithError("a charge was not refused");
  state.counters["groups"] = children;
}
BENCHMARK(BM_RefusedChargeAtMax)
    ->Arg(0)
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace cgacct

BENCHMARK_MAIN();
