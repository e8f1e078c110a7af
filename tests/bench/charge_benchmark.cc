// The charge path at full speed (issue 4): the shape of the netperf benchmark
// behind "memcg: optimize charge codepath" (2022), in the engine.
//
// Every benchmark here runs its baseline in the same binary; RESULTS.md
// reports each as a ratio to it (medians of --benchmark_repetitions).
//
// BM_EngineChargeUncharge  threads charge 3 ANON pages (a 10K send) and
//     uncharge them again, through GroupHandles, in
//       hier:0  (a) /a, a group directly under the root, or
//       hier:1  (b) /t/m/leaf, three levels down, with memory.min and
//               memory.low on /t (below the group's resident usage, so
//               protection is configured and usage is above it: the common
//               case part (A) of the series targets).
//     pattern:0 "local": each thread charges and uncharges on its own CPU
//               slot, so the stock serves both sides;
//     pattern:1 "split": thread t charges on slot 2t and uncharges on slot
//               2t+1, as a sender and a receiver on different CPUs do
//               (netperf): the charging slot runs dry every ~batch/3 sends
//               and refills from the page_counters, the uncharging slot
//               overflows and drains to them.
//     batch: EngineOptions::charge_batch_pages, 64 (today's
//               MEMCG_CHARGE_BATCH), 32 (before part (C)) or 1 (no stock).
//     additions: 0 the kernel's stock (the engine's default: 7 slots, a
//               random victim slot, uncharges straight to the counters) or
//               1 the engine's opt-in additions on (uncharges through the
//               stock, victim table, shared pool: cgacctd
//               --uncharge_refills_stock --stock_victim_sets=64
//               --stock_pool_buckets=1024).
//     Goal: (b)/(a) >= 0.95 at 2 threads. Part (C) is batch 64 vs 32 vs 1.
// BM_EngineChargeUnchargePath  the same through the path overloads
//     (per-call validation and hash lookup): the handle's gain.
// BM_PageCounterChain  the page_counter walk alone (try_charge + uncharge of
//     3 pages at the leaf of root/t/m/leaf, min/low on t), i.e. what every
//     charge costs without a stock:
//       layout:0 the engine's PageCounter (CacheLinePaddedLayout),
//       layout:1 the same code over the pre-2022 PackedLayout
//       (BasicPageCounter in engine/page_counter.h);
//       rbx:1 read before xchg (part (A)), rbx:0 the pre-2022 always-xchg.
//     Part (A): layout:0 rbx:1 vs rbx:0. Part (B): layout:0 vs layout:1.
// BM_Paired*  every comparison above again, paired inside one benchmark
//     (see "Paired benchmarks" below): the ratios RESULTS.md reports.
// BM_StockWalks  not a timing: page_counter walks per 1000 charge/uncharge
//     pairs of the split pattern (one CPU charges, another uncharges), on a
//     4-level chain: stock:0 the kernel's (uncharges walk), 1 uncharges
//     through the stock, 2 through the stock and the pool.
// BM_StockRoundRobin  one thread on one CPU slot charging and uncharging 3
//     pages in groups:1, 7, 8 or 64 groups, round-robin: hit rate of the
//     7 slots, of the victim table behind them and of the pool, and
//     throughput (baseline: groups:1, same stock setting); stock:0 the
//     kernel's 7 slots (the default), 1 uncharges through them, 2 also the
//     pool, 3 also the victim table (every addition on).
#include <atomic>
#include <climits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "engine/cycle_clock.h"
#include "engine/engine.h"
#include "engine/page_counter.h"
#include "engine/stock.h"

namespace cgacct {
namespace {

constexpr uint64_t kSendPages = 3;          // a 10K send
constexpr uint64_t kResidentPages = 1024;   // the group's resident usage
constexpr uint64_t kProtectionPages = 512;  // memory.min = memory.low on /t
constexpr int kEngineCpus = 4;              // slots 2t, 2t+1 for threads 0, 1

// The stock configurations compared here, by argument "stock": 0 = the
// kernel's 7 slots, uncharges straight to the counters (the engine's
// default); 1 = uncharges through the stock (--uncharge_refills_stock);
// 2 = that and the shared pool (--stock_pool_buckets=1024); 3 = that and the
// victim table (--stock_victim_sets=64): every addition on. The other
// benchmarks' argument "additions" is 0 (stock mode 0) or 1 (stock mode 3).
// With at most two groups per CPU slot, as in those, the victim table is
// never used.
constexpr int64_t kAllAdditions = 3;
void SetStockMode(EngineOptions& options, int64_t mode) {
  options.uncharge_refills_stock = mode >= 1;
  options.stock_pool_buckets = mode >= 2 ? 1024 : 0;
  options.stock_victim_sets = mode >= 3 ? 64 : 0;
}
void SetAdditions(EngineOptions& options, int64_t additions) {
  SetStockMode(options, additions != 0 ? kAllAdditions : 0);
}
const char* StockModeName(int64_t mode) {
  static constexpr const char* kNames[] = {
      "slots (kernel)", "slots+uncharges", "slots+uncharges+pool",
      "slots+uncharges+pool+victim (all additions)"};
  return kNames[mode];
}

// ---------------------------------------------------------------------------
// Engine

struct EngineFixture {
  std::unique_ptr<Engine> engine;
  GroupHandle group;
  std::string path;
};
EngineFixture* fixture = nullptr;  // built by Setup before threads start

void SetupEngine(const benchmark::State& state) {
  const bool deep = state.range(0) != 0;
  EngineOptions options;
  options.nr_cpus = kEngineCpus;
  options.charge_batch_pages = static_cast<uint32_t>(state.range(2));
  SetAdditions(options, state.range(3));
  fixture = new EngineFixture;
  fixture->engine = std::move(*Engine::Create(options));
  Engine& e = *fixture->engine;
  if (deep) {
    LimitsUpdate protect;
    protect.min_pages = kProtectionPages;
    protect.low_pages = kProtectionPages;
    (void)e.CreateGroup("/t", protect);
    (void)e.CreateGroup("/t/m", {});
    (void)e.CreateGroup("/t/m/leaf", {});
    fixture->path = "/t/m/leaf";
  } else {
    (void)e.CreateGroup("/a", {});
    fixture->path = "/a";
  }
  fixture->group = *e.ResolveGroup(fixture->path);
  // Resident usage above the protection, charged outside the slots the
  // threads use.
  (void)e.Charge(fixture->group, kResidentPages, PageKind::kAnon,
                 kEngineCpus - 1);
}

void TeardownEngine(const benchmark::State&) {
  delete fixture;
  fixture = nullptr;
}

void Label(benchmark::State& state) {
  state.SetLabel(absl::StrCat(
      state.range(0) ? "deep" : "root", "/", state.range(1) ? "split" : "local",
      "/batch", state.range(2), state.range(3) ? "/additions" : "/kernel"));
}

void BM_EngineChargeUncharge(benchmark::State& state) {
  Engine& e = *fixture->engine;
  const GroupHandle h = fixture->group;
  const int charge_cpu = 2 * state.thread_index();
  const int uncharge_cpu = charge_cpu + (state.range(1) != 0 ? 1 : 0);
  const EngineCounters before =
      state.thread_index() == 0 ? e.GetCounters() : EngineCounters{};
  const uint64_t hits_before = before.stock_hits;
  const uint64_t pool_hits_before = before.stock_pool_hits;
  for (auto _ : state) {
    auto c = e.Charge(h, kSendPages, PageKind::kAnon, charge_cpu);
    auto u = e.Uncharge(h, kSendPages, PageKind::kAnon, uncharge_cpu);
    if (!c.ok() || !u.ok()) {
      state.SkipWithError("charge or uncharge failed");
      break;
    }
  }
  state.SetItemsProcessed(2 * state.iterations());
  if (state.thread_index() == 0) {
    Label(state);
    const EngineCounters after = e.GetCounters();
    const double charges =
        static_cast<double>(state.iterations() * state.threads());
    state.counters["stock_hit"] =
        static_cast<double>(after.stock_hits - hits_before) / charges;
    state.counters["pool_hit"] =
        static_cast<double>(after.stock_pool_hits - pool_hits_before) / charges;
  }
}

void BM_EngineChargeUnchargePath(benchmark::State& state) {
  Engine& e = *fixture->engine;
  const std::string path = fixture->path;
  const int charge_cpu = 2 * state.thread_index();
  const int uncharge_cpu = charge_cpu + (state.range(1) != 0 ? 1 : 0);
  for (auto _ : state) {
    auto c = e.Charge(path, kSendPages, PageKind::kAnon, charge_cpu);
    auto u = e.Uncharge(path, kSendPages, PageKind::kAnon, uncharge_cpu);
    if (!c.ok() || !u.ok()) {
      state.SkipWithError("charge or uncharge failed");
      break;
    }
  }
  state.SetItemsProcessed(2 * state.iterations());
  if (state.thread_index() == 0) Label(state);
}

void EngineArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hier", "pattern", "batch", "additions"});
  for (int pattern : {0, 1})
    for (int hier : {0, 1}) {
      for (int batch : {64, 32, 1}) b->Args({hier, pattern, batch, 0});
      b->Args({hier, pattern, 64, 1});
      b->Args({hier, pattern, 32, 1});
    }
}

void PathArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"hier", "pattern", "batch", "additions"});
  for (int pattern : {0, 1})
    for (int hier : {0, 1}) b->Args({hier, pattern, 64, 0});
}

BENCHMARK(BM_EngineChargeUncharge)
    ->Apply(EngineArgs)
    ->Setup(SetupEngine)
    ->Teardown(TeardownEngine)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_EngineChargeUnchargePath)
    ->Apply(PathArgs)
    ->Setup(SetupEngine)
    ->Teardown(TeardownEngine)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// ---------------------------------------------------------------------------
// Walks of the split pattern, counted

void BM_StockWalks(benchmark::State& state) {
  constexpr uint64_t kMaxPages = static_cast<uint64_t>(LONG_MAX) / 4096;
  constexpr int kPairs = 1000000;
  const uint64_t batch = kChargeBatchPages;
  const int64_t mode = state.range(0);  // SetStockMode's 0..2
  PageCounter root(nullptr, kMaxPages), t(&root, kMaxPages), m(&t, kMaxPages),
      leaf(&m, kMaxPages);
  MemcgStock stock(2, kChargeBatchPages, mode >= 2 ? 1024 : 0);
  int64_t walks = 0;
  for (auto _ : state) {
    for (int i = 0; i < kPairs; ++i) {
      // try_charge_memcg()'s order: stock, pool, then the counters.
      if (!stock.Consume(0, &leaf, kSendPages)) {
        const uint64_t pooled = stock.TakePooled(&leaf, kSendPages);
        if (pooled > 0) {
          if (pooled > kSendPages) stock.Refill(0, &leaf, pooled - kSendPages);
        } else {
          PageCounter* fail = nullptr;
          leaf.TryCharge(batch, &fail);
          stock.Refill(0, &leaf, batch - kSendPages);
          ++walks;
        }
      }
      if (mode == 0) {
        leaf.Uncharge(kSendPages);  // uncharge_batch(): always a walk
        ++walks;
        continue;
      }
      const uint64_t before = leaf.Read();
      stock.Refill(1, &leaf, kSendPages);
      if (leaf.Read() != before) ++walks;  // a drain walked the counters
    }
  }
  state.counters["walks_per_1000_pairs"] =
      1000.0 * static_cast<double>(walks) /
      (static_cast<double>(kPairs) * static_cast<double>(state.iterations()));
  state.SetLabel(StockModeName(mode));
}

BENCHMARK(BM_StockWalks)->ArgName("stock")->DenseRange(0, 2)->Iterations(1);

// ---------------------------------------------------------------------------
// page_counter walk: parts (A) and (B)

constexpr uint64_t kCounterMax = uint64_t{1} << 40;

// root <- t (min/low) <- m <- leaf, with the resident usage at the leaf.
template <class Counter>
struct Chain {
  Counter root{nullptr, kCounterMax};
  Counter t{&root, kCounterMax};
  Counter m{&t, kCounterMax};
  Counter leaf{&m, kCounterMax};

  explicit Chain(bool read_before_xchg) {
    for (Counter* c : {&root, &t, &m, &leaf})
      c->set_read_before_xchg(read_before_xchg);
    t.SetMin(kProtectionPages);
    t.SetLow(kProtectionPages);
    leaf.TryCharge(kResidentPages);
  }
};

// The engine's page counter code over one layout, with a TryCharge that
// needs no failure out-parameter.
template <template <class> class Layout>
struct ChainCounter : BasicPageCounter<Layout> {
  ChainCounter(ChainCounter* parent, uint64_t max)
      : BasicPageCounter<Layout>(parent, max) {}
  bool TryCharge(uint64_t n) {
    BasicPageCounter<Layout>* fail = nullptr;
    return BasicPageCounter<Layout>::TryCharge(n, &fail);
  }
};
using EngineCounter = ChainCounter<CacheLinePaddedLayout>;  // = PageCounter
using PackedCounter = ChainCounter<PackedLayout>;

Chain<EngineCounter>* engine_chain = nullptr;
Chain<PackedCounter>* packed_chain = nullptr;

void SetupChain(const benchmark::State& state) {
  const bool rbx = state.range(1) != 0;
  if (state.range(0) == 0) {
    engine_chain = new Chain<EngineCounter>(rbx);
  } else {
    packed_chain = new Chain<PackedCounter>(rbx);
  }
}

void TeardownChain(const benchmark::State&) {
  delete engine_chain;
  delete packed_chain;
  engine_chain = nullptr;
  packed_chain = nullptr;
}

template <class Counter>
void RunChain(benchmark::State& state, Chain<Counter>& chain) {
  for (auto _ : state) {
    if (!chain.leaf.TryCharge(kSendPages)) {
      state.SkipWithError("try_charge failed");
      break;
    }
    chain.leaf.Uncharge(kSendPages);
  }
}

void BM_PageCounterChain(benchmark::State& state) {
  if (state.range(0) == 0) {
    RunChain(state, *engine_chain);
  } else {
    RunChain(state, *packed_chain);
  }
  state.SetItemsProcessed(2 * state.iterations());
  if (state.thread_index() == 0) {
    state.SetLabel(absl::StrCat(state.range(0) == 0 ? "padded" : "packed", "/",
                                state.range(1) ? "read-before-xchg" : "xchg"));
  }
}

BENCHMARK(BM_PageCounterChain)
    ->ArgNames({"layout", "rbx"})
    ->ArgsProduct({{0, 1}, {1, 0}})
    ->Setup(SetupChain)
    ->Teardown(TeardownChain)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// ---------------------------------------------------------------------------
// Stock scalability: many groups on one CPU

struct RoundRobinFixture {
  std::unique_ptr<Engine> engine;
  std::vector<GroupHandle> groups;
};
RoundRobinFixture* rr = nullptr;

void SetupRoundRobin(const benchmark::State& state) {
  EngineOptions options;
  options.nr_cpus = 1;
  SetStockMode(options, state.range(1));
  rr = new RoundRobinFixture;
  rr->engine = std::move(*Engine::Create(options));
  (void)rr->engine->CreateGroup("/rr", {});
  for (int i = 0; i < state.range(0); ++i) {
    const std::string path = absl::StrCat("/rr/g", i);
    (void)rr->engine->CreateGroup(path, {});
    rr->groups.push_back(*rr->engine->ResolveGroup(path));
  }
}

void TeardownRoundRobin(const benchmark::State&) {
  delete rr;
  rr = nullptr;
}

void BM_StockRoundRobin(benchmark::State& state) {
  Engine& e = *rr->engine;
  const size_t n = rr->groups.size();
  const EngineCounters before = e.GetCounters();
  size_t i = 0;
  for (auto _ : state) {
    const GroupHandle h = rr->groups[i];
    if (++i == n) i = 0;
    auto c = e.Charge(h, kSendPages, PageKind::kAnon, 0);
    auto u = e.Uncharge(h, kSendPages, PageKind::kAnon, 0);
    if (!c.ok() || !u.ok()) {
      state.SkipWithError("charge or uncharge failed");
      break;
    }
  }
  const EngineCounters after = e.GetCounters();
  const double charges = static_cast<double>(state.iterations());
  state.SetItemsProcessed(2 * state.iterations());
  state.counters["stock_hit"] =
      static_cast<double>(after.stock_hits - before.stock_hits) / charges;
  state.counters["victim_hit"] =
      static_cast<double>(after.stock_victim_hits - before.stock_victim_hits) /
      charges;
  state.counters["pool_hit"] =
      static_cast<double>(after.stock_pool_hits - before.stock_pool_hits) /
      charges;
  state.counters["drains_per_op"] =
      static_cast<double>(after.stock_drains - before.stock_drains) /
      (2 * charges);
}

BENCHMARK(BM_StockRoundRobin)
    ->ArgNames({"groups", "stock"})
    ->ArgsProduct({{1, 7, 8, 64}, {0, 1, 2, 3}})
    ->Setup(SetupRoundRobin)
    ->Teardown(TeardownRoundRobin)
    ->UseRealTime();

// ---------------------------------------------------------------------------
// Paired benchmarks: the ratios of RESULTS.md
//
// On a shared 2-core machine the load of other processes drifts over seconds
// and two separately run benchmarks differ by 10-25% for no reason of their
// own. So every comparison also runs paired: both sides exist at once, every
// thread runs a slice of one side then a slice of the other (the order
// alternates), all threads switching together at a barrier, and the cycles
// of each side are summed separately. Drift hits both sides alike.
//   ratio         time(baseline) / time(variant) = throughput(variant) /
//                 throughput(baseline), averaged over threads;
//   base_Mops, variant_Mops  ops per second of each side, summed over
//                 threads, while that side ran.

// Sense-counting spin barrier.
class Barrier {
 public:
  void Wait(int nr_threads) {
    const int gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == nr_threads) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == gen)
      std::this_thread::yield();
  }

 private:
  std::atomic<int> arrived_{0};
  std::atomic<int> generation_{0};
};

class Paired {
 public:
  virtual ~Paired() = default;
  // One slice of side `half` (0 baseline, 1 variant) on thread `thread`;
  // false if an op failed.
  virtual bool Slice(int half, int thread) = 0;
  // Ops (charges + uncharges) in one slice.
  virtual int64_t ops_per_slice() const = 0;
  virtual std::string Label() const = 0;
  Barrier barrier;
};
Paired* paired = nullptr;

void TeardownPaired(const benchmark::State&) {
  delete paired;
  paired = nullptr;
}

void BM_Paired(benchmark::State& state) {
  Paired& p = *paired;
  int64_t ticks[2] = {0, 0};
  int64_t n = 0;
  bool failed = false;
  for (auto _ : state) {
    for (int k = 0; k < 2; ++k) {
      const int half = static_cast<int>((n + k) % 2);
      p.barrier.Wait(state.threads());
      const int64_t t0 = CycleClock::Now();
      failed |= !p.Slice(half, state.thread_index());
      ticks[half] += CycleClock::Now() - t0;
    }
    ++n;
  }
  if (failed) state.SkipWithError("an op failed");
  const double ops = static_cast<double>(p.ops_per_slice() * n);
  state.SetItemsProcessed(2 * p.ops_per_slice() * state.iterations());
  state.counters["ratio"] = benchmark::Counter(
      static_cast<double>(ticks[0]) / static_cast<double>(ticks[1]),
      benchmark::Counter::kAvgThreads);
  state.counters["base_Mops"] =
      ops / (static_cast<double>(CycleClock::ToNs(ticks[0])) / 1e9) / 1e6;
  state.counters["variant_Mops"] =
      ops / (static_cast<double>(CycleClock::ToNs(ticks[1])) / 1e9) / 1e6;
  if (state.thread_index() == 0) state.SetLabel(p.Label());
}

constexpr int kSlicePairs = 2000;

// One engine slice: kSlicePairs charges and uncharges of 3 pages.
bool EngineSlice(Engine& e, GroupHandle h, int thread, bool split) {
  const int charge_cpu = 2 * thread;
  const int uncharge_cpu = charge_cpu + (split ? 1 : 0);
  bool ok = true;
  for (int i = 0; i < kSlicePairs; ++i) {
    ok &= e.Charge(h, kSendPages, PageKind::kAnon, charge_cpu).ok();
    ok &= e.Uncharge(h, kSendPages, PageKind::kAnon, uncharge_cpu).ok();
  }
  return ok;
}

// Creates `deep` ? /t/m/leaf (min/low on /t) : /a, with its resident pages.
GroupHandle MakeGroup(Engine& e, bool deep) {
  std::string path = "/a";
  if (deep) {
    LimitsUpdate protect;
    protect.min_pages = kProtectionPages;
    protect.low_pages = kProtectionPages;
    (void)e.CreateGroup("/t", protect);
    (void)e.CreateGroup("/t/m", {});
    path = "/t/m/leaf";
  }
  (void)e.CreateGroup(path, {});
  const GroupHandle h = *e.ResolveGroup(path);
  (void)e.Charge(h, kResidentPages, PageKind::kAnon, kEngineCpus - 1);
  return h;
}

std::unique_ptr<Engine> MakeEngine(uint32_t batch, int64_t additions) {
  EngineOptions options;
  options.nr_cpus = kEngineCpus;
  options.charge_batch_pages = batch;
  SetAdditions(options, additions);
  return std::move(*Engine::Create(options));
}

// (a) vs (b) in one engine: args pattern, additions.
class HierarchyPair final : public Paired {
 public:
  explicit HierarchyPair(const benchmark::State& state)
      : split_(state.range(0) != 0),
        additions_(state.range(1)),
        engine_(MakeEngine(kChargeBatchPages, additions_)),
        groups_{MakeGroup(*engine_, false), MakeGroup(*engine_, true)} {}
  bool Slice(int half, int thread) override {
    return EngineSlice(*engine_, groups_[half], thread, split_);
  }
  int64_t ops_per_slice() const override { return 2 * kSlicePairs; }
  std::string Label() const override {
    return absl::StrCat("(b)/(a) ", split_ ? "split" : "local",
                        additions_ ? " additions" : " kernel");
  }

 private:
  const bool split_;
  const int64_t additions_;
  std::unique_ptr<Engine> engine_;
  GroupHandle groups_[2];
};

// Two engines that differ in options, same group shape: args hier, pattern,
// then baseline and variant (batch, additions) pairs.
class EnginesPair final : public Paired {
 public:
  EnginesPair(const benchmark::State& state, std::string what)
      : split_(state.range(1) != 0), what_(std::move(what)) {
    const bool deep = state.range(0) != 0;
    for (int half = 0; half < 2; ++half) {
      engines_[half] =
          MakeEngine(static_cast<uint32_t>(state.range(2 + 2 * half)),
                     state.range(3 + 2 * half));
      groups_[half] = MakeGroup(*engines_[half], deep);
    }
    label_ = absl::StrCat(what_, " ", deep ? "deep " : "root ",
                          split_ ? "split" : "local", " batch ", state.range(2),
                          "/additions ", state.range(3), " -> ", state.range(4),
                          "/", state.range(5));
  }
  bool Slice(int half, int thread) override {
    return EngineSlice(*engines_[half], groups_[half], thread, split_);
  }
  int64_t ops_per_slice() const override { return 2 * kSlicePairs; }
  std::string Label() const override { return label_; }

 private:
  const bool split_;
  const std::string what_;
  std::string label_;
  std::unique_ptr<Engine> engines_[2];
  GroupHandle groups_[2];
};

// Path overloads (baseline) vs GroupHandle overloads, one engine: args hier,
// pattern.
class HandlePair final : public Paired {
 public:
  explicit HandlePair(const benchmark::State& state)
      : deep_(state.range(0) != 0),
        split_(state.range(1) != 0),
        engine_(MakeEngine(kChargeBatchPages, 0)),
        handle_(MakeGroup(*engine_, deep_)),
        path_(deep_ ? "/t/m/leaf" : "/a") {}
  bool Slice(int half, int thread) override {
    if (half == 1) return EngineSlice(*engine_, handle_, thread, split_);
    const int charge_cpu = 2 * thread;
    const int uncharge_cpu = charge_cpu + (split_ ? 1 : 0);
    bool ok = true;
    for (int i = 0; i < kSlicePairs; ++i) {
      ok &=
          engine_->Charge(path_, kSendPages, PageKind::kAnon, charge_cpu).ok();
      ok &= engine_->Uncharge(path_, kSendPages, PageKind::kAnon, uncharge_cpu)
                .ok();
    }
    return ok;
  }
  int64_t ops_per_slice() const override { return 2 * kSlicePairs; }
  std::string Label() const override {
    return absl::StrCat("handle/path ", deep_ ? "deep " : "root ",
                        split_ ? "split" : "local");
  }

 private:
  const bool deep_;
  const bool split_;
  std::unique_ptr<Engine> engine_;
  const GroupHandle handle_;
  const std::string path_;
};

// Two page_counter chains: the walk alone.
template <class Base, class Variant>
class ChainPair final : public Paired {
 public:
  ChainPair(bool base_rbx, bool variant_rbx, std::string label)
      : base_(base_rbx), variant_(variant_rbx), label_(std::move(label)) {}
  bool Slice(int half, int thread) override {
    return half == 0 ? Run(base_) : Run(variant_);
  }
  int64_t ops_per_slice() const override { return 2 * kSlicePairs; }
  std::string Label() const override { return label_; }

 private:
  template <class Counter>
  static bool Run(Chain<Counter>& chain) {
    bool ok = true;
    for (int i = 0; i < kSlicePairs; ++i) {
      ok &= chain.leaf.TryCharge(kSendPages);
      chain.leaf.Uncharge(kSendPages);
    }
    return ok;
  }
  Chain<Base> base_;
  Chain<Variant> variant_;
  const std::string label_;
};

// One CPU slot: 1 group (baseline) vs N groups round-robin: args groups,
// stock (SetStockMode).
class RoundRobinPair final : public Paired {
 public:
  explicit RoundRobinPair(const benchmark::State& state)
      : mode_(state.range(1)) {
    for (int half = 0; half < 2; ++half) {
      EngineOptions options;
      options.nr_cpus = 1;
      SetStockMode(options, mode_);
      engines_[half] = std::move(*Engine::Create(options));
      const int n = half == 0 ? 1 : static_cast<int>(state.range(0));
      for (int i = 0; i < n; ++i) {
        const std::string path = absl::StrCat("/g", i);
        (void)engines_[half]->CreateGroup(path, {});
        groups_[half].push_back(*engines_[half]->ResolveGroup(path));
      }
    }
    label_ = absl::StrCat(state.range(0), " groups vs 1, ",
                          StockModeName(mode_));
  }
  bool Slice(int half, int thread) override {
    Engine& e = *engines_[half];
    const std::vector<GroupHandle>& groups = groups_[half];
    size_t& next = next_[half];
    bool ok = true;
    for (int i = 0; i < kSlicePairs; ++i) {
      const GroupHandle h = groups[next];
      if (++next == groups.size()) next = 0;
      ok &= e.Charge(h, kSendPages, PageKind::kAnon, 0).ok();
      ok &= e.Uncharge(h, kSendPages, PageKind::kAnon, 0).ok();
    }
    return ok;
  }
  int64_t ops_per_slice() const override { return 2 * kSlicePairs; }
  std::string Label() const override { return label_; }

 private:
  const int64_t mode_;
  std::string label_;
  std::unique_ptr<Engine> engines_[2];
  std::vector<GroupHandle> groups_[2];
  size_t next_[2] = {0, 0};
};

void SetupHierarchyPair(const benchmark::State& state) {
  paired = new HierarchyPair(state);
}
void SetupBatchPair(const benchmark::State& state) {
  paired = new EnginesPair(state, "batch");
}
void SetupAdditionsPair(const benchmark::State& state) {
  paired = new EnginesPair(state, "additions");
}
void SetupHandlePair(const benchmark::State& state) {
  paired = new HandlePair(state);
}
void SetupReadBeforeXchgPair(const benchmark::State& state) {
  paired = new ChainPair<EngineCounter, EngineCounter>(
      false, true, "(A) engine PageCounter: always xchg -> read before xchg");
}
void SetupLayoutPair(const benchmark::State& state) {
  const bool rbx = state.range(0) != 0;
  paired = new ChainPair<PackedCounter, EngineCounter>(
      rbx, rbx,
      absl::StrCat("(B) packed -> padded, ",
                   rbx ? "read before xchg" : "always xchg"));
}
void SetupRoundRobinPair(const benchmark::State& state) {
  paired = new RoundRobinPair(state);
}

// BM_Paired under `name`, built by `setup`: real time, 1 and (unless
// one_thread) 2 threads. The caller adds the arguments.
benchmark::internal::Benchmark* Paired(const char* name,
                                       void (*setup)(const benchmark::State&),
                                       bool one_thread = false) {
  benchmark::internal::Benchmark* b =
      benchmark::RegisterBenchmark(name, BM_Paired)
          ->Setup(setup)
          ->Teardown(TeardownPaired)
          ->UseRealTime()
          ->Threads(1);
  return one_thread ? b : b->Threads(2);
}

void RegisterPairedBenchmarks() {
  Paired("BM_PairedHierarchy", SetupHierarchyPair)
      ->ArgNames({"pattern", "additions"})
      ->ArgsProduct({{0, 1}, {0, 1}});
  // Part (C): batch 32 -> 64 and 1 -> 64, on the 3-level leaf.
  Paired("BM_PairedBatch", SetupBatchPair)
      ->ArgNames({"hier", "pattern", "batch0", "add0", "batch1", "add1"})
      ->Args({1, 0, 32, 0, 64, 0})
      ->Args({1, 1, 32, 0, 64, 0})
      ->Args({1, 0, 32, 1, 64, 1})
      ->Args({1, 1, 32, 1, 64, 1})
      ->Args({1, 0, 1, 0, 64, 0})
      ->Args({1, 1, 1, 0, 64, 0});
  // The additions: the kernel's stock -> every addition on.
  Paired("BM_PairedAdditions", SetupAdditionsPair)
      ->ArgNames({"hier", "pattern", "batch0", "add0", "batch1", "add1"})
      ->Args({0, 0, 64, 0, 64, 1})
      ->Args({0, 1, 64, 0, 64, 1})
      ->Args({1, 0, 64, 0, 64, 1})
      ->Args({1, 1, 64, 0, 64, 1});
  Paired("BM_PairedHandle", SetupHandlePair)
      ->ArgNames({"hier", "pattern"})
      ->ArgsProduct({{0, 1}, {0, 1}});
  // Part (A).
  Paired("BM_PairedReadBeforeXchg", SetupReadBeforeXchgPair);
  // Part (B).
  Paired("BM_PairedLayout", SetupLayoutPair)->ArgName("rbx")->Arg(1)->Arg(0);
  Paired("BM_PairedRoundRobin", SetupRoundRobinPair, /*one_thread=*/true)
      ->ArgNames({"groups", "stock"})
      ->ArgsProduct({{7, 8, 64}, {0, 1, 2, 3}});
}

}  // namespace
}  // namespace cgacct

int main(int argc, char** argv) {
  // As cgacctd does (server/daemon/main.cc): Debian's Abseil keeps the lock-order
  // graph on, which costs several times a nested lock pair.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  cgacct::RegisterPairedBenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
