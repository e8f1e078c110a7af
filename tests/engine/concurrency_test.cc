// Multi-threaded conservation tests: nothing lost, nothing doubled, after a
// final drain and flush. Run under ThreadSanitizer by the test command.
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

uint64_t Stat(const GroupStats& stats, const std::string& name) {
  for (const StatEntry& e : stats.stat)
    if (e.name == name) return e.value;
  return ~0ull;
}

// An engine on `nr_cpus` CPU slots without the periodic flusher, with /p
// under a memory.max of `max_pages`.
std::unique_ptr<Engine> EngineWithParent(int nr_cpus, uint64_t max_pages) {
  EngineOptions options;
  options.nr_cpus = nr_cpus;
  options.periodic_flush_interval = absl::ZeroDuration();
  auto engine = std::move(*Engine::Create(options));
  LimitsUpdate limits;
  limits.max_pages = max_pages;
  EXPECT_TRUE(engine->CreateGroup("/p", limits).ok());
  return engine;
}

// A flush-lock policy and, for kAdaptive, its hold budget (zero: one CPU
// with updates per hold; else holds across CPUs that drop for a waiter).
struct PolicyParam {
  FlushLockPolicy policy;
  absl::Duration hold_budget = absl::ZeroDuration();
};

class ConcurrencyTest : public ::testing::TestWithParam<PolicyParam> {};

EngineOptions Options(PolicyParam param, int nr_cpus) {
  EngineOptions options;
  options.nr_cpus = nr_cpus;
  options.flush_lock_policy = param.policy;
  options.flush_hold_budget = param.hold_budget;
  options.flush_batch_cpus = 3;
  options.periodic_flush_interval = absl::Milliseconds(5);  // races the readers
  return options;
}

// The body of the conservation tests: 4 threads charge and uncharge in
// `kChildren` children of a tight /p from random CPU slots while readers
// flush and a churner creates and deletes siblings. `ops_per_thread`
// charges or uncharges per thread.
void CheckConservation(const EngineOptions& options, const int kChildren,
                       int ops_per_thread = 3000) {
  auto engine = std::move(*Engine::Create(options));
  LimitsUpdate parent_limits;
  parent_limits.max_pages = 2000;  // tight enough to force OOMs and drains
  parent_limits.min_pages = 300;
  parent_limits.low_pages = 600;
  ASSERT_TRUE(engine->CreateGroup("/p", parent_limits).ok());
  constexpr int kThreads = 4;
  for (int c = 0; c < kChildren; ++c)
    ASSERT_TRUE(engine->CreateGroup(absl::StrCat("/p/c", c), {}).ok());

  // Each thread keeps its own ledger of what it holds per child and kind
  // (FILE: charged minus uncharged; reclaim takes some, counted in pgsteal).
  struct Ledger {
    explicit Ledger(int n) : anon(n), file(n) {}
    std::vector<int64_t> anon;
    std::vector<int64_t> file;
    uint64_t failed = 0;  // RESOURCE_EXHAUSTED
    uint64_t ooms = 0;    // ... of at most 8 pages (costlier ones: no OOM)
  };
  std::vector<Ledger> ledgers(kThreads, Ledger(kChildren));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      Ledger& ledger = ledgers[t];
      for (int i = 0; i < ops_per_thread; ++i) {
        const int child = rng() % kChildren;
        const std::string path = absl::StrCat("/p/c", child);
        const int cpu = rng() % options.nr_cpus;
        const bool anon = rng() % 2;
        const PageKind kind = anon ? PageKind::kAnon : PageKind::kFile;
        int64_t& held = anon ? ledger.anon[child] : ledger.file[child];
        const uint64_t n = 1 + rng() % 40;
        if (rng() % 3 != 0 || held < static_cast<int64_t>(n)) {
          auto r = engine->Charge(path, n, kind, cpu);
          if (r.ok()) {
            held += n;
          } else {
            ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
                << r.status();
            ++ledger.failed;
            if (n <= kCostlyChargePages) ++ledger.ooms;
          }
        } else {
          auto r = engine->Uncharge(path, n, kind, cpu);
          ASSERT_TRUE(r.ok()) << r.status();
          // FILE pages may have been reclaimed at the limit: what is left.
          if (anon) {
            ASSERT_EQ(r->nr_pages, n);
          }
          ASSERT_LE(r->nr_pages, n);
          held -= r->nr_pages;
        }
      }
    });
  }
  // Readers flush overlapping subtrees concurrently.
  std::vector<std::thread> readers;
  for (const char* path : {"/", "/p", "/p/c0", "/p/c1"}) {
    readers.emplace_back([&, path] {
      while (!stop.load()) {
        auto s = engine->GetStats(path);
        ASSERT_TRUE(s.ok());
        ASSERT_LE(Stat(*s, "anon"), uint64_t{1} << 40);  // never "negative"
      }
    });
  }
  // A churner creates and deletes siblings, draining and reparenting.
  std::atomic<uint64_t> churner_ooms{0};
  std::thread churner([&] {
    for (int i = 0; !stop.load() && i < 200; ++i) {
      std::string path = absl::StrCat("/p/tmp", i % 3);
      if (engine->CreateGroup(path, {}).ok()) {
        auto charged =
            engine->Charge(path, 1, PageKind::kAnon, i % options.nr_cpus);
        if (charged.ok()) {
          ASSERT_TRUE(engine->Uncharge(path, 1, PageKind::kAnon, 0).ok());
        } else {
          ASSERT_EQ(charged.status().code(),
                    absl::StatusCode::kResourceExhausted);
          ++churner_ooms;
        }
        auto rep = engine->DeleteGroup(path);
        ASSERT_TRUE(rep.ok());
        EXPECT_EQ(*rep, 0u) << path;
      }
    }
  });
  for (auto& t : threads) t.join();
  stop = true;
  for (auto& t : readers) t.join();
  churner.join();

  engine->DrainAllStock();
  int64_t total = 0;
  for (int c = 0; c < kChildren; ++c) {
    int64_t anon = 0, file = 0;
    for (const Ledger& l : ledgers) {
      anon += l.anon[c];
      file += l.file[c];
    }
    auto s = engine->GetStats(absl::StrCat("/p/c", c));
    ASSERT_TRUE(s.ok());
    file -= static_cast<int64_t>(Stat(*s, "pgsteal"));
    EXPECT_EQ(s->memory_current_pages, static_cast<uint64_t>(anon + file)) << c;
    EXPECT_EQ(Stat(*s, "anon"), static_cast<uint64_t>(anon) * 4096) << c;
    EXPECT_EQ(Stat(*s, "file"), static_cast<uint64_t>(file) * 4096) << c;
    total += anon + file;
  }
  auto p = engine->GetStats("/p");
  auto root = engine->GetStats("/");
  EXPECT_EQ(p->memory_current_pages, static_cast<uint64_t>(total));
  EXPECT_EQ(root->memory_current_pages, static_cast<uint64_t>(total));
  EXPECT_LE(p->memory_peak_pages, 2000u + 0u);
  uint64_t ooms = churner_ooms.load(), failed = churner_ooms.load();
  for (const Ledger& l : ledgers) {
    ooms += l.ooms;
    failed += l.failed;
  }
  EXPECT_EQ(p->events.oom, ooms);
  EXPECT_EQ(engine->GetCounters().charges_oom, ooms);
  EXPECT_EQ(engine->GetCounters().charges_refused, failed - ooms);
}

TEST_P(ConcurrencyTest, ChargesUnchargesAndFlushesConserveEveryPage) {
  CheckConservation(Options(GetParam(), 8), 3);
}

// The same with the stock's additions on: 10 children on 8 CPU slots (more
// than the 7 stock slots, so evicted slots move to the victim table), a
// 2-set table (so its sets overflow and evict to the pool), the pool, and
// uncharges through the stock. One policy: the stock does not depend on it.
TEST(StockVictimConcurrencyTest, ConserveEveryPageWithTheAdditions) {
  EngineOptions options = Options({FlushLockPolicy::kPerCpu}, 8);
  options.stock_victim_sets = 2;
  options.stock_pool_buckets = 1024;
  options.uncharge_refills_stock = true;
  CheckConservation(options, 10, /*ops_per_thread=*/1000);
}

// Dying groups under concurrency: each thread charges into its own child
// /p/tT/c, deletes it now and then (its pages stay on the dying group) and
// re-creates it, and returns pages through the heir (UnchargeAtMost with a
// handle of the deleted instance, answered by /p/tT from its dying
// children); a reclaimer scrapes /p (dying groups included, at their floor)
// while a reader opens, reads, resets and closes memory.peak watermarks.
// At the end every ANON page charged was uncharged, every FILE page is
// uncharged, reclaimed or left, and the dying groups, all empty, are freed.
TEST(DyingGroupConcurrencyTest, UnchargesThroughTheHeirRaceReclaimSafely) {
  constexpr int kThreads = 3;
  auto engine = EngineWithParent(4, 3000);
  for (int t = 0; t < kThreads; ++t)
    ASSERT_TRUE(engine->CreateGroup(absl::StrCat("/p/t", t), {}).ok());
  std::atomic<uint64_t> file_charged{0}, file_uncharged{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(7 + t);
      const std::string path = absl::StrCat("/p/t", t, "/c");
      uint64_t anon_held = 0;  // in /p/tT's subtree, dying groups included
      GroupHandle live;    // the instance at `path`; empty while deleted
      GroupHandle holder;  // what uncharges name: live, or a deleted one
      for (int i = 0; i < 1500; ++i) {
        if (live.empty()) {
          ASSERT_TRUE(engine->CreateGroup(path, {}).ok());
          live = *engine->ResolveGroup(path);
          if (holder.empty() || rng() % 2) holder = live;
        }
        const uint64_t n = 1 + rng() % 8;
        const int cpu = rng() % 4;
        switch (rng() % 5) {
          case 0:
          case 1:
            if (engine->Charge(live, n, PageKind::kAnon, cpu).ok())
              anon_held += n;
            break;
          case 2:
            if (engine->Charge(live, n, PageKind::kFile, cpu).ok())
              file_charged += n;
            break;
          case 3: {
            // The holder's group may be deleted: the heir answers.
            const PageKind kind = rng() % 2 ? PageKind::kAnon : PageKind::kFile;
            auto u = engine->UnchargeAtMost(holder, path, n, kind);
            ASSERT_TRUE(u.ok()) << u.status();
            if (kind == PageKind::kAnon) {
              ASSERT_LE(u->nr_pages, anon_held);
              anon_held -= u->nr_pages;
            } else {
              file_uncharged += u->nr_pages;
            }
            break;
          }
          default:
            if (rng() % 4 == 0) {
              ASSERT_TRUE(engine->DeleteGroup(path).ok());
              live = GroupHandle();
            }
            break;
        }
      }
      // Delete the child and return every ANON page held through the heir,
      // from its dying children.
      if (!live.empty()) {
        ASSERT_TRUE(engine->DeleteGroup(path).ok());
      }
      const std::string heir = absl::StrCat("/p/t", t);
      if (anon_held > 0) {
        auto u = engine->Uncharge(heir, anon_held, PageKind::kAnon, t);
        ASSERT_TRUE(u.ok()) << u.status();
      }
    });
  }
  std::thread reclaimer([&] {
    while (!stop.load()) {
      auto r = engine->Reclaim("/p", 32);
      ASSERT_TRUE(r.ok() || r.status().code() == absl::StatusCode::kUnavailable)
          << r.status();
    }
  });
  std::thread peaks([&] {
    while (!stop.load()) {
      auto w = engine->OpenPeakWatermark("/p");
      ASSERT_TRUE(w.ok()) << w.status();
      auto before = engine->ReadPeakWatermark("/p", *w);
      ASSERT_TRUE(before.ok());
      ASSERT_TRUE(engine->ResetPeakWatermark("/p", *w).ok());
      auto after = engine->ReadPeakWatermark("/p", *w);
      ASSERT_TRUE(after.ok());
      ASSERT_LE(*after, 3000u + 4 * kChargeBatchPages);
      ASSERT_TRUE(engine->ClosePeakWatermark("/p", *w).ok());
    }
  });
  for (auto& t : threads) t.join();
  stop = true;
  reclaimer.join();
  peaks.join();

  engine->DrainAllStock();
  const GroupStats p = *engine->GetStats("/p");
  EXPECT_EQ(Stat(p, "anon"), 0u);
  const uint64_t file_left = Stat(p, "file") / 4096;
  EXPECT_EQ(file_charged.load(),
            file_uncharged.load() + file_left + Stat(p, "pgsteal"));
  EXPECT_EQ(p.memory_current_pages, file_left);
  // Reclaim the rest: every dying group is then empty and freed.
  for (int t = 0; t < kThreads; ++t) {
    auto u = engine->Uncharge(absl::StrCat("/p/t", t), 1 << 20,
                              PageKind::kFile, 0);
    ASSERT_TRUE(u.ok()) << u.status();
  }
  EXPECT_EQ(engine->GetStats("/p")->memory_current_pages, 0u);
  ASSERT_TRUE(engine->CreateGroup("/p/last", {}).ok());
  EXPECT_EQ(engine->GetInfo().nr_dying_groups, 0u);
}

// Exact reads: every charge acknowledged before a GetStats(kExact) began is
// in it, whichever flushes (overlapping subtrees, the periodic flusher,
// kAdaptive's lock-free skips) run at the same time.
TEST_P(ConcurrencyTest, ExactReadsSeeEverythingAcknowledgedBefore) {
  auto engine = std::move(*Engine::Create(Options(GetParam(), 16)));
  ASSERT_TRUE(engine->CreateGroup("/a", {}).ok());
  for (int c = 0; c < 4; ++c)
    ASSERT_TRUE(engine->CreateGroup(absl::StrCat("/a/c", c), {}).ok());
  constexpr int kWriters = 3;
  std::atomic<uint64_t> acked[kWriters] = {};
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937 rng(w);
      for (int i = 0; i < 4000; ++i) {
        ASSERT_TRUE(engine
                        ->Charge(absl::StrCat("/a/c", rng() % 4), 1,
                                 PageKind::kFile, static_cast<int>(rng() % 16))
                        .ok());
        acked[w].fetch_add(1, std::memory_order_release);
      }
    });
  }
  std::vector<std::thread> readers;
  for (const char* path : {"/", "/a", "/a", "/a/c1"}) {
    readers.emplace_back([&, path] {
      while (!stop.load()) {
        uint64_t before = 0;
        for (auto& a : acked) before += a.load(std::memory_order_acquire);
        auto s = engine->GetStats(path, FlushMode::kExact);
        ASSERT_TRUE(s.ok());
        if (std::string(path) != "/a/c1") {
          // One FILE page per acknowledged charge; nothing reclaims here.
          ASSERT_GE(Stat(*s, "file"), before * 4096) << path;
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  stop = true;
  for (auto& t : readers) t.join();
  auto s = engine->GetStats("/", FlushMode::kExact);
  EXPECT_EQ(Stat(*s, "file"), uint64_t{kWriters} * 4000 * 4096);
}

// A charge that fits once the stocks are drained never fails, even while
// another group's OOMs keep a drain running: the charge path waits for that
// drain instead of skipping its own (the kernel's drain_all_stock() is a
// trylock). /p's 40 children park pages in the slots of CPUs 0..3; /q's
// children hit /q's max from CPUs 4..7 over and over.
TEST(StockDrainConcurrencyTest, NoOomWhileAnotherGroupDrains) {
  auto engine = EngineWithParent(8, 1000);
  LimitsUpdate limits;
  limits.max_pages = 50;
  ASSERT_TRUE(engine->CreateGroup("/q", limits).ok());
  constexpr int kChildren = 40;
  for (int i = 0; i < kChildren; ++i) {
    ASSERT_TRUE(engine->CreateGroup(absl::StrCat("/p/g", i), {}).ok());
    ASSERT_TRUE(engine->CreateGroup(absl::StrCat("/q/g", i), {}).ok());
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> hammers;
  for (int t = 0; t < 2; ++t) {
    hammers.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::vector<uint64_t> held(kChildren);
      while (!stop.load()) {
        const int g = rng() % kChildren;
        const std::string path = absl::StrCat("/q/g", g);
        const int cpu = 4 + rng() % 4;
        if (held[g] > 0 && rng() % 2) {
          ASSERT_TRUE(engine->Uncharge(path, held[g], PageKind::kAnon, cpu).ok());
          held[g] = 0;
        } else if (engine->Charge(path, 10, PageKind::kAnon, cpu).ok()) {
          held[g] += 10;
        }
      }
    });
  }
  std::vector<uint64_t> held(kChildren);
  uint64_t total = 0;
  std::mt19937 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const int g = rng() % kChildren;
    const std::string path = absl::StrCat("/p/g", g);
    const int cpu = rng() % 4;
    const uint64_t n = 1 + rng() % 20;
    if (total + n > 990 || (rng() % 2 == 0 && held[g] >= n)) {
      if (held[g] >= n) {
        ASSERT_TRUE(engine->Uncharge(path, n, PageKind::kAnon, cpu).ok());
        held[g] -= n;
        total -= n;
      }
      continue;
    }
    auto charged = engine->Charge(path, n, PageKind::kAnon, cpu);
    ASSERT_TRUE(charged.ok()) << "holding " << total << " of 1000 pages, +"
                              << n << ": " << charged.status();
    held[g] += n;
    total += n;
  }
  stop = true;
  for (auto& t : hammers) t.join();
  engine->DrainAllStock();
  auto p = engine->GetStats("/p");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->memory_current_pages, total);
  EXPECT_EQ(p->events.oom, 0u);
}

INSTANTIATE_TEST_SUITE_P(Policies, ConcurrencyTest,
                         ::testing::Values(
                             PolicyParam{FlushLockPolicy::kPerCpu},
                             PolicyParam{FlushLockPolicy::kWhole},
                             PolicyParam{FlushLockPolicy::kBatch},
                             PolicyParam{FlushLockPolicy::kAdaptive},
                             PolicyParam{FlushLockPolicy::kAdaptive,
                                         absl::Microseconds(50)}),
                         [](const auto& info) {
                           return absl::StrCat(
                               FlushLockPolicyName(info.param.policy),
                               info.param.hold_budget > absl::ZeroDuration()
                                   ? "_budget"
                                   : "");
                         });

}  // namespace
}  // namespace cgacct
