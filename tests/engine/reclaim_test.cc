// Reclaim, protection and memory.high: the pure formulas (exact kernel
// numbers), the reclaim iterator on a hand-built tree, and the engine's
// behaviour through its public API.
#include "engine/reclaim.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/group.h"
#include "engine/group_tree.h"
#include "engine/percpu.h"
#include "engine/rstat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPageCounterMax = (uint64_t{1} << 63) / 4096 - 1;

// MB(x) in 4 KiB pages.
constexpr uint64_t MB(uint64_t x) { return x * 256; }

uint64_t Stat(const GroupStats& stats, const std::string& name) {
  for (const StatEntry& e : stats.stat)
    if (e.name == name) return e.value;
  ADD_FAILURE() << "no stat " << name;
  return 0;
}

// --- effective_protection() --------------------------------------------------

TEST(EffectiveProtectionTest, UndercommittedIsTheProtectedUsage) {
  // min(usage, setting) when the siblings fit in the parent's protection.
  EXPECT_EQ(EffectiveProtection(100, 300, 50, 200, 150, false), 50u);
  EXPECT_EQ(EffectiveProtection(40, 300, 50, 200, 150, false), 40u);
  EXPECT_EQ(EffectiveProtection(100, 300, 0, 200, 150, false), 0u);
}

TEST(EffectiveProtectionTest, OvercommitSplitsByUtilisedProtection) {
  // prot * parent_effective / siblings_protected, truncating.
  EXPECT_EQ(EffectiveProtection(MB(50), MB(150), MB(75), MB(50), MB(75), false),
            MB(50) * MB(50) / MB(75));
  EXPECT_EQ(EffectiveProtection(10, 30, 10, 10, 30, false), 3u);  // 3.33
  // The split applies with recursive protection too.
  EXPECT_EQ(EffectiveProtection(10, 30, 10, 10, 30, true), 3u);
}

TEST(EffectiveProtectionTest, RecursiveProtectionSharesTheUnclaimedPart) {
  // Parent eff 1000, siblings claim 200 of it; this child uses 600 of which
  // 100 is protected; parent usage 1400.
  // Not recursive: 100. Recursive: 100 + 800 * 500 / 1200 = 433.
  EXPECT_EQ(EffectiveProtection(600, 1400, 100, 1000, 200, false), 100u);
  EXPECT_EQ(EffectiveProtection(600, 1400, 100, 1000, 200, true), 433u);
  // Nothing unprotected in this child: nothing more.
  EXPECT_EQ(EffectiveProtection(100, 1400, 100, 1000, 200, true), 100u);
  // No parent usage beyond the protected siblings: nothing to share.
  EXPECT_EQ(EffectiveProtection(600, 200, 100, 1000, 200, true), 100u);
}

TEST(EffectiveProtectionTest, HugeValuesDoNotOverflow) {
  const uint64_t big = uint64_t{1} << 50;
  EXPECT_EQ(EffectiveProtection(big, 2 * big, big, big / 2, big, false),
            big / 2);
}

// --- apply_proportional_protection() ----------------------------------------

TEST(ProportionalProtectionTest, ScalesByUsageAboveProtection) {
  bool skipped = false;
  // No protection: untouched (even below SWAP_CLUSTER_MAX).
  EXPECT_EQ(ApplyProportionalProtection(10, 0, 0, 100, false, &skipped), 10u);
  EXPECT_FALSE(skipped);
  // low > min outside the low pass: scale by low, remember the skip.
  EXPECT_EQ(ApplyProportionalProtection(1000, 0, 500, 1000, false, &skipped),
            1000u - 1000u * 500 / 1001);
  EXPECT_TRUE(skipped);
  // In the low pass only min counts.
  skipped = false;
  EXPECT_EQ(ApplyProportionalProtection(1000, 200, 500, 1000, true, &skipped),
            1000u - 1000u * 200 / 1001);
  EXPECT_FALSE(skipped);
  // At least SWAP_CLUSTER_MAX once any protection applies.
  EXPECT_EQ(ApplyProportionalProtection(40, 39, 39, 40, false, &skipped), 32u);
  // Usage below protection (TOCTOU guard): size is raised to protection.
  EXPECT_EQ(ApplyProportionalProtection(4000, 3000, 3000, 100, true, &skipped),
            32u);  // 4000 - 4000 * 3000 / 3001 = 2, raised to 32
  // (Without the guard 100000 * 1000 / 501 would exceed the scan.)
  EXPECT_EQ(ApplyProportionalProtection(100000, 1000, 0, 500, false, &skipped),
            100000u - 100000u * 1000 / 1001);
}

// --- memory.high delay -------------------------------------------------------

TEST(HighDelayTest, KernelTableForOneBatchAtHigh100M) {
  // The table in the kernel's calculate_high_delay() comment (HZ=1000, one
  // MEMCG_CHARGE_BATCH charge, high = 100M): usage in MB -> ms.
  const std::map<uint64_t, uint64_t> table = {
      {100, 0},    {101, 6},    {102, 25},  {103, 57},   {104, 102},
      {105, 159},  {106, 230},  {107, 313}, {108, 409},  {109, 518},
      {110, 639},  {111, 774},  {112, 921}, {113, 1081}, {114, 1254},
      {115, 1439}, {116, 1638}, {117, 1849}};
  for (const auto& [usage_mb, ms] : table) {
    EXPECT_EQ(CalculateHighDelay(kChargeBatchPages,
                                 CalculateOverage(MB(usage_mb), MB(100))),
              ms)
        << usage_mb << "M";
  }
  // >= 118M: over the 2 s clamp the caller applies.
  EXPECT_GE(
      CalculateHighDelay(kChargeBatchPages, CalculateOverage(MB(118), MB(100))),
      kMemcgMaxHighDelayJiffies);
}

TEST(HighDelayTest, ScalesWithTheChargeSize) {
  const uint64_t overage = CalculateOverage(MB(110), MB(100));
  EXPECT_EQ(CalculateHighDelay(4 * kChargeBatchPages, overage), 4 * 639u);
  EXPECT_EQ(CalculateHighDelay(kChargeBatchPages / 2, overage), 319u);
  EXPECT_EQ(CalculateOverage(MB(100), MB(100)), 0u);
  // high 0 acts as 1 page.
  EXPECT_EQ(CalculateOverage(3, 0), uint64_t{2} << 20);
}

// --- A hand-built tree for the iterator and the protection formula ---------

class Tree {
 public:
  Tree()
      : rstat_(1, FlushLockConfig{}, nullptr),
        tree_(1, &rstat_, kPageCounterMax) {}
  Group* root() const { return tree_.root(); }
  Group* Add(const std::string& path) {
    PercpuWriterLock l(tree_.lock());
    return *tree_.Add(path);
  }
  Group* operator[](const std::string& path) const {
    PercpuReaderLock l(tree_.lock(), 0);
    return tree_.Lookup(path);
  }
  // What DeleteGroup does to the tree (under the writer lock there).
  void Remove(const std::string& path) {
    PercpuWriterLock l(tree_.lock());
    Group* g = tree_.Lookup(path);
    InvalidateReclaimIterators(g);
    tree_.Remove(g);
  }
  // Charges nr_pages of `kind` to g's page_counter hierarchy and its counts.
  void Charge(Group* g, PageKind kind, uint64_t nr_pages) {
    g->memory().Charge(nr_pages);
    g->Charged(kind, nr_pages);
  }
  Rstat* rstat() { return &rstat_; }
  PercpuRwLock* lock() const { return tree_.lock(); }

 private:
  Rstat rstat_;
  GroupTree tree_;
};

std::string PathOf(const Group* g) { return g == nullptr ? "null" : g->path(); }

TEST(MemCgroupIterTest, FullWalkIsPreOrderRootFirst) {
  Tree t;
  t.Add("/a");
  t.Add("/a/x");
  t.Add("/a/y");
  t.Add("/b");
  t.Add("/b/z");
  std::vector<std::string> seen;
  for (Group* g = MemCgroupIter(t.root(), nullptr, nullptr); g != nullptr;
       g = MemCgroupIter(t.root(), g, nullptr))
    seen.push_back(g->path());
  EXPECT_THAT(seen,
              ::testing::ElementsAre("/", "/a", "/a/x", "/a/y", "/b", "/b/z"));
  // A walk rooted lower stays in its subtree.
  seen.clear();
  for (Group* g = MemCgroupIter(t["/a"], nullptr, nullptr); g != nullptr;
       g = MemCgroupIter(t["/a"], g, nullptr))
    seen.push_back(g->path());
  EXPECT_THAT(seen, ::testing::ElementsAre("/a", "/a/x", "/a/y"));
}

TEST(MemCgroupIterTest, PartialWalksShareTheCursorAcrossWalkers) {
  Tree t;
  Group* p = t.Add("/p");
  t.Add("/p/a");
  t.Add("/p/b");
  t.Add("/p/c");
  // Walker 1 takes /p and /p/a, then stops (its goal met).
  ReclaimCookie w1;
  Group* g = MemCgroupIter(p, nullptr, &w1);
  EXPECT_EQ(PathOf(g), "/p");
  g = MemCgroupIter(p, g, &w1);
  EXPECT_EQ(PathOf(g), "/p/a");
  EXPECT_EQ(p->reclaim_iter().position.load(), t["/p/a"]);
  // Walker 2 goes on where walker 1 stopped, in the same round.
  ReclaimCookie w2;
  g = MemCgroupIter(p, nullptr, &w2);
  EXPECT_EQ(PathOf(g), "/p/b");
  EXPECT_EQ(w2.generation, w1.generation);
  // Walker 3 joins and finishes the round.
  ReclaimCookie w3;
  Group* g3 = MemCgroupIter(p, nullptr, &w3);
  EXPECT_EQ(PathOf(g3), "/p/c");
  EXPECT_EQ(MemCgroupIter(p, g3, &w3), nullptr);
  EXPECT_EQ(p->reclaim_iter().generation.load(), 1);
  // Walker 2's round was completed by someone else: it stops.
  EXPECT_EQ(MemCgroupIter(p, g, &w2), nullptr);
  // A new walker starts the next round at the root of the walk.
  ReclaimCookie w4;
  EXPECT_EQ(PathOf(MemCgroupIter(p, nullptr, &w4)), "/p");
  EXPECT_EQ(w4.generation, 1);
}

TEST(MemCgroupIterTest, AWalkerAloneFromTheRootSawTheWholeRound) {
  Tree t;
  Group* p = t.Add("/p");
  t.Add("/p/a");
  t.Add("/p/b");
  ReclaimCookie w1;
  int seen = 0;
  for (Group* g = MemCgroupIter(p, nullptr, &w1); g != nullptr;
       g = MemCgroupIter(p, g, &w1))
    ++seen;
  EXPECT_EQ(seen, 3);
  EXPECT_TRUE(w1.whole_round);
  // The next walker starts the next round at the root, alone: whole too.
  ReclaimCookie w2;
  Group* g = MemCgroupIter(p, nullptr, &w2);
  EXPECT_EQ(PathOf(g), "/p");
  EXPECT_TRUE(w2.whole_round);
  // Another walker takes a step in between: w2 no longer saw everything.
  ReclaimCookie w3;
  Group* g3 = MemCgroupIter(p, nullptr, &w3);
  EXPECT_EQ(PathOf(g3), "/p/a");
  EXPECT_FALSE(w3.whole_round);  // joined mid-round
  while (g != nullptr) g = MemCgroupIter(p, g, &w2);
  EXPECT_FALSE(w2.whole_round);
  // A walker whose round someone else completed did not see it whole.
  ReclaimCookie w4;
  Group* g4 = MemCgroupIter(p, nullptr, &w4);  // a new round, at the root
  ASSERT_TRUE(w4.whole_round);
  ReclaimCookie w5;
  for (Group* x = MemCgroupIter(p, nullptr, &w5); x != nullptr;
       x = MemCgroupIter(p, x, &w5)) {
  }
  EXPECT_EQ(MemCgroupIter(p, g4, &w4), nullptr);
  EXPECT_FALSE(w4.whole_round);
}

// A cycle with nothing to reclaim: one walk of the subtree where the kernel
// walks it at 13 priorities, then once more in full (issue 22, row 11g).
TEST(ReclaimerTest, NothingReclaimableEndsTheCycleAfterOneWholeWalk) {
  Tree t;
  Group* p = t.Add("/p");
  for (int i = 0; i < 100; ++i) t.Add(absl::StrCat("/p/c", i));
  Group* busy = t.Add("/p/busy");
  t.Charge(busy, PageKind::kAnon, 500);  // nothing reclaimable
  ManualClock clock;
  int low_events = 0;
  Reclaimer reclaimer(t.rstat(), nullptr, clock, false, false,
                      [&](Group*, MemoryEvent e, int) {
                        if (e == MemoryEvent::kLow) ++low_events;
                      });
  PercpuReaderLock l(t.lock(), 0);
  const int64_t gen0 = p->reclaim_iter().generation.load();
  EXPECT_EQ(reclaimer.TryToFreeMemCgroupPages(p, 32, ReclaimMode::kDirect, 0),
            0u);
  // One partial walk from the root completed one round (the old ladder: 13
  // rounds, then a full walk).
  EXPECT_EQ(p->reclaim_iter().generation.load() - gen0, 1);
  EXPECT_EQ(low_events, 0);
  // Again: the cursor is back at the start, one round again.
  EXPECT_EQ(reclaimer.TryToFreeMemCgroupPages(p, 32, ReclaimMode::kDirect, 0),
            0u);
  EXPECT_EQ(p->reclaim_iter().generation.load() - gen0, 2);
}

// The shortcut needs an empty list everywhere: a few FILE pages that only a
// low priority scans (10 >> 12 == 0) are still found and taken.
TEST(ReclaimerTest, ASmallListIsStillReachedAtALowPriority) {
  Tree t;
  Group* p = t.Add("/p");
  for (int i = 0; i < 50; ++i) t.Add(absl::StrCat("/p/c", i));
  Group* cache = t.Add("/p/cache");
  t.Charge(cache, PageKind::kFile, 10);
  ManualClock clock;
  Reclaimer reclaimer(t.rstat(), nullptr, clock, false, false,
                      [](Group*, MemoryEvent, int) {});
  PercpuReaderLock l(t.lock(), 0);
  EXPECT_EQ(reclaimer.TryToFreeMemCgroupPages(p, 32, ReclaimMode::kDirect, 0),
            10u);
  EXPECT_EQ(cache->nr_pages(PageKind::kFile), 0u);
  EXPECT_EQ(p->memory().Read(), 0u);
}

// Spared for memory.low in the first pass, breached in the low pass: the
// shortcut ends the first pass's priorities, not the ladder.
TEST(ReclaimerTest, ALowProtectedCacheIsBreachedAfterTheShortcut) {
  Tree t;
  Group* p = t.Add("/p");
  for (int i = 0; i < 20; ++i) t.Add(absl::StrCat("/p/c", i));
  Group* cache = t.Add("/p/cache");
  cache->memory().SetLow(1000);
  t.Charge(cache, PageKind::kFile, 100);
  ManualClock clock;
  std::vector<std::string> low_events;
  Reclaimer reclaimer(t.rstat(), nullptr, clock, false, false,
                      [&](Group* g, MemoryEvent e, int) {
                        if (e == MemoryEvent::kLow) low_events.push_back(g->path());
                      });
  PercpuReaderLock l(t.lock(), 0);
  EXPECT_GE(reclaimer.TryToFreeMemCgroupPages(p, 32, ReclaimMode::kDirect, 0),
            32u);
  EXPECT_THAT(low_events, ::testing::Contains("/p/cache"));
}

TEST(MemCgroupIterTest, AWalkerJoiningAtTheEndStartsANewRound) {
  Tree t;
  Group* p = t.Add("/p");
  t.Add("/p/a");
  ReclaimCookie w1;
  Group* g = MemCgroupIter(p, nullptr, &w1);
  g = MemCgroupIter(p, g, &w1);
  ASSERT_EQ(PathOf(g), "/p/a");  // cursor on the last group
  // A fresh walker finds the round over, bumps the generation and restarts
  // so it sees at least one group.
  ReclaimCookie w2;
  EXPECT_EQ(PathOf(MemCgroupIter(p, nullptr, &w2)), "/p");
  EXPECT_EQ(w2.generation, 1);
  EXPECT_EQ(MemCgroupIter(p, g, &w1), nullptr);  // w1's round is over
}

TEST(MemCgroupIterTest, DeletingTheCursorGroupGoesOnAtTheNextSibling) {
  Tree t;
  Group* p = t.Add("/p");
  t.Add("/p/a");
  t.Add("/p/a/x");
  t.Add("/p/b");
  t.Add("/p/c");
  // The cursors of /p and of / both point at /p/b.
  for (Group* root : {p, t.root()}) {
    ReclaimCookie w;
    Group* g = nullptr;
    while ((g = MemCgroupIter(root, g, &w)) != t["/p/b"]) ASSERT_NE(g, nullptr);
  }
  ASSERT_EQ(p->reclaim_iter().position.load(), t["/p/b"]);
  ASSERT_EQ(t.root()->reclaim_iter().position.load(), t["/p/b"]);
  t.Remove("/p/b");
  // Moved back to the pre-order predecessor (the last group under /p/a) ...
  EXPECT_EQ(p->reclaim_iter().position.load(), t["/p/a/x"]);
  // ... so both walks go on at the following sibling, in the same round.
  ReclaimCookie w;
  EXPECT_EQ(PathOf(MemCgroupIter(p, nullptr, &w)), "/p/c");
  EXPECT_EQ(w.generation, 0);
  ReclaimCookie w_root;
  EXPECT_EQ(PathOf(MemCgroupIter(t.root(), nullptr, &w_root)), "/p/c");

  // The first child: the predecessor is the parent.
  Tree t2;
  Group* q = t2.Add("/q");
  t2.Add("/q/a");
  t2.Add("/q/b");
  ReclaimCookie v;
  Group* g = MemCgroupIter(q, nullptr, &v);
  g = MemCgroupIter(q, g, &v);
  ASSERT_EQ(PathOf(g), "/q/a");
  t2.Remove("/q/a");
  EXPECT_EQ(q->reclaim_iter().position.load(), q);
  ReclaimCookie v2;
  EXPECT_EQ(PathOf(MemCgroupIter(q, nullptr, &v2)), "/q/b");
  // A cursor pointing elsewhere is left alone.
  t2.Add("/q/c");
  t2.Remove("/q/c");
  EXPECT_EQ(q->reclaim_iter().position.load(), t2["/q/b"]);
}

// --- mem_cgroup_calculate_protection()
// ------------------------------------------

// The worked example of docs/DESIGN.md §10.2: A is the reclaim target, B (low 50M, usage 150M)
// its child; C (low 75M, 50M), D (25M, 50M), E (0, 50M), F (500M, empty).
TEST(CalculateProtectionTest, WorkedExample) {
  Tree t;
  Group* a = t.Add("/A");
  Group* b = t.Add("/A/B");
  Group* c = t.Add("/A/B/C");
  Group* d = t.Add("/A/B/D");
  Group* e = t.Add("/A/B/E");
  Group* f = t.Add("/A/B/F");
  b->memory().SetLow(MB(50));
  c->memory().SetLow(MB(75));
  d->memory().SetLow(MB(25));
  f->memory().SetLow(MB(500));
  for (Group* g : {c, d, e}) g->memory().Charge(MB(50));
  f->memory().set_effective_protection(7, 7);  // stale, must stay
  ASSERT_EQ(b->memory().children_low_usage(), MB(75));
  for (Group* g = MemCgroupIter(a, nullptr, nullptr); g != nullptr;
       g = MemCgroupIter(a, g, nullptr))
    CalculateProtection(a, g, /*recursive_protection=*/false);
  EXPECT_EQ(b->memory().elow(), MB(50));  // first level: the setting
  EXPECT_EQ(c->memory().elow(), MB(50) * MB(50) / MB(75));  // 33.3M
  EXPECT_EQ(d->memory().elow(), MB(25) * MB(50) / MB(75));  // 16.7M
  EXPECT_EQ(e->memory().elow(), 0u);
  EXPECT_EQ(f->memory().elow(), 7u);  // empty: not updated
  EXPECT_EQ(a->memory().elow(), 0u);  // the target: not updated
  EXPECT_NEAR(static_cast<double>(c->memory().elow() * 4096) / (1 << 20), 33.3,
              0.05);
  EXPECT_NEAR(static_cast<double>(d->memory().elow() * 4096) / (1 << 20), 16.7,
              0.05);
  // Protection checks: the empty F is below min (0 >= 0), D below its low
  // only if its usage drops to 16.7M; the target never.
  EXPECT_TRUE(BelowMin(a, f));
  EXPECT_FALSE(BelowLow(a, d));
  EXPECT_FALSE(BelowMin(a, a));
  EXPECT_FALSE(BelowLow(a, a));
  EXPECT_FALSE(BelowMin(a, t.root()));
}

TEST(CalculateProtectionTest, RecursiveProtectionFlowsToUnprotectedChildren) {
  Tree t;
  Group* a = t.Add("/A");
  Group* b = t.Add("/A/B");
  Group* c = t.Add("/A/B/C");
  Group* d = t.Add("/A/B/D");
  b->memory().SetLow(1000);
  c->memory().Charge(1000);
  d->memory().Charge(3000);
  for (bool recursive : {false, true}) {
    for (Group* g = MemCgroupIter(a, nullptr, nullptr); g != nullptr;
         g = MemCgroupIter(a, g, nullptr))
      CalculateProtection(a, g, recursive);
    if (!recursive) {
      EXPECT_EQ(c->memory().elow(), 0u);
      EXPECT_EQ(d->memory().elow(), 0u);
    } else {
      // 1000 unclaimed, shared 1:3 by unprotected usage.
      EXPECT_EQ(c->memory().elow(), 250u);
      EXPECT_EQ(d->memory().elow(), 750u);
    }
  }
}

// --- The engine ----------------------------------------------------------

// Records reclaim cycles reported by the engine.
class CycleRecorder : public EngineObserver {
 public:
  struct Cycle {
    uint64_t scanned, stolen;
    bool full_walk;
  };
  void OnFlushLockHold(const FlushLockHold&) override {}
  void OnFlushDone(absl::Duration, int, int) override {}
  void OnReclaimDone(absl::Duration cycle, uint64_t scanned, uint64_t stolen,
                     bool full_walk) override {
    absl::MutexLock l(&mu_);
    cycles_.push_back({scanned, stolen, full_walk});
  }
  std::vector<Cycle> Take() {
    absl::MutexLock l(&mu_);
    return std::move(cycles_);
  }

 private:
  absl::Mutex mu_;
  std::vector<Cycle> cycles_;
};

class ReclaimEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(EngineOptions()); }
  void Start(EngineOptions options) {
    options.nr_cpus = 4;
    options.observer = &recorder_;
    auto engine = Engine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  GroupStats Stats(const std::string& path) {
    auto stats = engine_->GetStats(path);
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? *stats : GroupStats{};
  }
  void Create(const std::string& path, LimitsUpdate limits = {}) {
    ASSERT_TRUE(engine_->CreateGroup(path, limits).ok()) << path;
  }
  // Charges more than 64 pages at once: exact, nothing parked in stocks.
  void File(const std::string& path, uint64_t pages, int cpu = 0) {
    auto r = engine_->Charge(path, pages, PageKind::kFile, cpu);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status();
  }
  void Anon(const std::string& path, uint64_t pages, int cpu = 0) {
    auto r = engine_->Charge(path, pages, PageKind::kAnon, cpu);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status();
  }
  // FILE pages still held by the group itself (its LRU), by uncharging all.
  uint64_t TakeFile(const std::string& path) {
    auto r = engine_->Uncharge(path, kPageCounterMax, PageKind::kFile, 0);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->nr_pages : 0;
  }
  static LimitsUpdate Max(uint64_t pages) {
    LimitsUpdate l;
    l.max_pages = pages;
    return l;
  }
  static LimitsUpdate High(uint64_t pages) {
    LimitsUpdate l;
    l.high_pages = pages;
    return l;
  }
  static LimitsUpdate Low(uint64_t pages) {
    LimitsUpdate l;
    l.low_pages = pages;
    return l;
  }
  static LimitsUpdate Min(uint64_t pages) {
    LimitsUpdate l;
    l.min_pages = pages;
    return l;
  }

  CycleRecorder recorder_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(ReclaimEngineTest, ChargeAtMaxReclaimsCacheInsteadOfOom) {
  Create("/g", Max(1000));
  File("/g", 1000);
  auto r = engine_->Charge("/g", 10, PageKind::kAnon, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  const GroupStats s = Stats("/g");
  EXPECT_EQ(s.events.max, 1u);
  EXPECT_EQ(s.events.oom, 0u);
  const uint64_t stolen = Stat(s, "pgsteal_direct");
  EXPECT_GE(stolen, kSwapClusterMax);  // reclaim asks for at least 32
  EXPECT_LT(stolen, 100u);             // and stops soon after
  EXPECT_EQ(Stat(s, "pgscan_direct"), stolen);
  EXPECT_EQ(Stat(s, "pgsteal"), stolen);
  EXPECT_EQ(Stat(s, "pgscan_proactive"), 0u);
  EXPECT_EQ(Stat(s, "file"), (1000 - stolen) * 4096);
  EXPECT_EQ(s.memory_current_pages, 1000 - stolen + 10);
  // An Uncharge of FILE pages reclaim took returns only what is left.
  auto u = engine_->Uncharge("/g", 1000, PageKind::kFile, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->nr_pages, 1000 - stolen);
}

TEST_F(ReclaimEngineTest, AnonIsNeverReclaimed) {
  Create("/g", Max(200));
  Anon("/g", 150);
  File("/g", 50);
  // 50 FILE pages can go, 150 ANON cannot: 60 more does not fit.
  auto r = engine_->Charge("/g", 60, PageKind::kAnon, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  const GroupStats s = Stats("/g");
  EXPECT_EQ(Stat(s, "anon"), 150u * 4096);
  EXPECT_EQ(Stat(s, "file"), 0u);  // all of it reclaimed trying
  EXPECT_EQ(Stat(s, "pgsteal_direct"), 50u);
  // 60 pages is a costly charge (> 8 pages): ENOMEM with `max` only.
  EXPECT_GE(s.events.max, 1u);
  EXPECT_EQ(s.events.oom, 0u);
  // 50 does.
  EXPECT_TRUE(engine_->Charge("/g", 50, PageKind::kAnon, 0).ok());
}

TEST_F(ReclaimEngineTest, ReclaimsFromTheGroupWhoseLimitFailed) {
  Create("/p", Max(2000));
  Create("/p/a");
  Create("/p/b");
  File("/p/a", 1500);
  Anon("/p/b", 500);
  // /p/b's charge fails at /p: reclaim takes /p/a's cache.
  auto r = engine_->Charge("/p/b", 100, PageKind::kAnon, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Stats("/p").events.max, 1u);
  EXPECT_EQ(Stats("/p/b").events_local.max, 0u);
  EXPECT_GE(Stat(Stats("/p/a"), "pgsteal_direct"), 100u);
  EXPECT_EQ(Stat(Stats("/p"), "pgsteal_direct"),
            Stat(Stats("/p/a"), "pgsteal_direct"));  // hierarchical
}

TEST_F(ReclaimEngineTest, ReclaimApiFollowsMemoryReclaim) {
  Create("/g");
  File("/g", MB(50));
  auto r = engine_->Reclaim("/g", MB(20));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(*r, MB(20));
  EXPECT_LT(*r, MB(20) + 64);  // in 32-page chunks, batches of a quarter
  const GroupStats s = Stats("/g");
  EXPECT_EQ(Stat(s, "pgsteal_proactive"), *r);
  EXPECT_EQ(Stat(s, "pgscan_proactive"), *r);
  EXPECT_EQ(Stat(s, "pgsteal_direct"), 0u);
  EXPECT_EQ(s.memory_current_pages, MB(50) - *r);
  // Zero pages: nothing to do (writing "0" to memory.reclaim).
  EXPECT_EQ(*engine_->Reclaim("/g", 0), 0u);
  // More than there is: UNAVAILABLE, and what was taken stays taken.
  Anon("/g", 100);
  auto over = engine_->Reclaim("/g", MB(100));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("/g"));
  EXPECT_EQ(Stat(Stats("/g"), "file"), 0u);
  EXPECT_EQ(Stats("/g").memory_current_pages, 100u);
  EXPECT_EQ(engine_->Reclaim("/nope", 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Reclaim("bad", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The root accepts memory.reclaim too.
  Create("/h");
  File("/h", 500);
  EXPECT_TRUE(engine_->Reclaim("/", 100).ok());
}

TEST_F(ReclaimEngineTest, TargetsOwnProtectionIsIgnored) {
  Create("/p");
  Create("/p/c", Min(MB(100)));
  File("/p/c", MB(50));
  // From the parent: /p/c is below min and untouchable.
  EXPECT_EQ(engine_->Reclaim("/p", MB(10)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Stats("/p/c").emin_pages, MB(100));  // computed by that walk
  EXPECT_EQ(Stats("/p/c").memory_current_pages, MB(50));
  // memory.reclaim on /p/c itself ignores its min (and the stale emin).
  auto r = engine_->Reclaim("/p/c", MB(40));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LE(Stats("/p/c").memory_current_pages, MB(10));
}

TEST_F(ReclaimEngineTest, LowIsBreachedOnlyAfterAPassThatReclaimedNothing) {
  Create("/p", Max(MB(10)));
  Create("/p/protected", Low(MB(8)));
  Create("/p/free");
  File("/p/protected", MB(8));
  File("/p/free", 100);
  // Charges at the limit take /p/free's 100 pages first: no low event.
  Create("/p/anon");
  Anon("/p/anon", MB(2) - 100);  // fills /p exactly
  auto r = engine_->Charge("/p/anon", 50, PageKind::kAnon, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Stats("/p/protected").events.low, 0u);
  EXPECT_EQ(Stat(Stats("/p/protected"), "pgsteal"), 0u);
  EXPECT_GE(Stat(Stats("/p/free"), "pgsteal"), 50u);
  // Drain /p/free; then only the protected cache is left: breached, with
  // low events on the protected group (only).
  TakeFile("/p/free");
  engine_->DrainAllStock();
  const uint64_t used = Stats("/p").memory_current_pages;
  r = engine_->Charge("/p/anon", MB(10) - used + 40, PageKind::kAnon, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(Stats("/p/protected").events.low, 1u);
  EXPECT_GE(Stat(Stats("/p/protected"), "pgsteal"), 40u);
  EXPECT_EQ(Stats("/p/free").events.low, 0u);
  EXPECT_EQ(Stats("/p/anon").events.low, 0u);
  EXPECT_EQ(Stats("/p").events_local.low, 0u);  // the target: never
}

TEST_F(ReclaimEngineTest, MinIsNeverBreachedAndEmptyGroupsGetNoLowEvents) {
  Create("/p", Max(MB(10)));
  Create("/p/min", Min(MB(8)));
  Create("/p/empty", Low(MB(500)));
  Create("/p/anon");
  File("/p/min", MB(8));
  Anon("/p/anon", MB(2));
  auto r = engine_->Charge("/p/anon", 100, PageKind::kAnon, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Stat(Stats("/p/min"), "pgsteal"), 0u);
  EXPECT_EQ(Stats("/p/min").events.low, 0u);
  EXPECT_EQ(Stats("/p/empty").events.low, 0u);
  EXPECT_EQ(Stats("/p/empty").elow_pages, 0u);  // never computed: empty
  // A costly charge (> 8 pages): `max`, no `oom`; a small one OOMs.
  EXPECT_GE(Stats("/p").events.max, 1u);
  EXPECT_EQ(Stats("/p").events.oom, 0u);
  EXPECT_EQ(engine_->Charge("/p/anon", 1, PageKind::kAnon, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Stat(Stats("/p/min"), "pgsteal"), 0u);
  EXPECT_EQ(Stats("/p").events.oom, 1u);
}

// The worked example of docs/DESIGN.md §10.2, through the engine: the values computed by
// the walk of a 32-page reclaim of A (they move by a few pages as it goes).
TEST_F(ReclaimEngineTest, WorkedExampleEffectiveLow) {
  Create("/A", Max(MB(200)));
  Create("/A/B", Low(MB(50)));
  Create("/A/B/C", Low(MB(75)));
  Create("/A/B/D", Low(MB(25)));
  Create("/A/B/E", Low(0));
  Create("/A/B/F", Low(MB(500)));
  File("/A/B/C", MB(50));
  File("/A/B/D", MB(50));
  File("/A/B/E", MB(50));
  ASSERT_TRUE(engine_->Reclaim("/A", kSwapClusterMax).ok());
  EXPECT_EQ(Stats("/A/B").elow_pages, MB(50));
  EXPECT_NEAR(static_cast<double>(Stats("/A/B/C").elow_pages), MB(50) * 2 / 3.0,
              4);  // 33.3M
  EXPECT_NEAR(static_cast<double>(Stats("/A/B/D").elow_pages), MB(50) / 3.0,
              4);  // 16.7M
  EXPECT_EQ(Stats("/A/B/E").elow_pages, 0u);
  EXPECT_EQ(Stats("/A/B/F").elow_pages, 0u);
  EXPECT_EQ(Stats("/A").elow_pages, 0u);
  EXPECT_EQ(Stats("/A/B/F").events.low, 0u);
  // Pressure follows usage above protection: E (no protection) gave the
  // most, C (the best protected) the least.
  const uint64_t c = Stat(Stats("/A/B/C"), "pgsteal");
  const uint64_t d = Stat(Stats("/A/B/D"), "pgsteal");
  const uint64_t e = Stat(Stats("/A/B/E"), "pgsteal");
  EXPECT_LT(c, d);
  EXPECT_LT(d, e);
  EXPECT_GE(c + d + e, kSwapClusterMax);
}

TEST_F(ReclaimEngineTest, RecursiveProtectionOption) {
  for (bool recursive : {false, true}) {
    EngineOptions options;
    options.memory_recursiveprot = recursive;
    Start(options);
    Create("/A");
    Create("/A/B", Low(1000));
    Create("/A/B/C");
    Create("/A/B/D");
    File("/A/B/C", 1000);
    File("/A/B/D", 3000);
    ASSERT_TRUE(engine_->Reclaim("/A", 1).ok());
    EXPECT_NEAR(static_cast<double>(Stats("/A/B/C").elow_pages),
                recursive ? 250 : 0, 2)
        << recursive;
    EXPECT_NEAR(static_cast<double>(Stats("/A/B/D").elow_pages),
                recursive ? 750 : 0, 2)
        << recursive;
  }
}

// Enough FILE pages that a group gives 32 pages at priority 12 (>> 12) a
// few times over: one group alone meets a 32-page goal.
constexpr uint64_t kBigLru = (uint64_t{1} << 17) + 1024;

TEST_F(ReclaimEngineTest, SharedCursorRotatesThroughSiblings) {
  Create("/p");
  for (const char* c : {"/p/a", "/p/b", "/p/c"}) {
    Create(c);
    File(c, kBigLru);
  }
  std::vector<std::string> order;
  std::map<std::string, uint64_t> last;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(engine_->Reclaim("/p", kSwapClusterMax).ok());
    for (const char* c : {"/p/a", "/p/b", "/p/c"}) {
      const uint64_t stolen = Stat(Stats(c), "pgsteal");
      if (stolen != last[c]) order.push_back(c);
      last[c] = stolen;
    }
  }
  // a, b, c, then a new round starting at the root of the walk (/p, empty)
  // and going on to a again.
  EXPECT_THAT(order, ::testing::ElementsAre("/p/a", "/p/b", "/p/c", "/p/a"));
}

TEST_F(ReclaimEngineTest, DeletingTheCursorGroupGoesOnAtTheFollowingSibling) {
  Create("/p");
  for (const char* c : {"/p/a", "/p/b", "/p/c"}) {
    Create(c);
    File(c, kBigLru);
  }
  ASSERT_TRUE(engine_->Reclaim("/p", kSwapClusterMax).ok());  // /p, /p/a
  ASSERT_TRUE(engine_->Reclaim("/p", kSwapClusterMax).ok());  // /p/b
  ASSERT_EQ(Stat(Stats("/p/a"), "pgsteal"), 32u);
  ASSERT_EQ(Stat(Stats("/p/b"), "pgsteal"), 32u);
  ASSERT_EQ(Stat(Stats("/p/c"), "pgsteal"), 0u);
  // Delete the group the shared cursor points at: it stays in the walk,
  // dying, with its cache (the cursor stays on it).
  auto dying = engine_->DeleteGroup("/p/b");
  ASSERT_TRUE(dying.ok());
  EXPECT_EQ(*dying, kBigLru - 32);
  ASSERT_TRUE(engine_->Reclaim("/p", kSwapClusterMax).ok());
  // The walk went on at /p/c: not back to /p or a.
  EXPECT_EQ(Stat(Stats("/p/c"), "pgsteal"), 32u);
  EXPECT_EQ(Stat(Stats("/p/a"), "pgsteal"), 32u);
  // /p answers for the dying group's pages; once they are gone the group
  // is freed at the next create.
  EXPECT_EQ(TakeFile("/p"), kBigLru - 32);
  EXPECT_EQ(engine_->GetInfo().nr_dying_groups, 1u);
  Create("/p/d");
  EXPECT_EQ(engine_->GetInfo().nr_dying_groups, 0u);
}

TEST_F(ReclaimEngineTest, FullWalkRetryBeforeGivingUp) {
  Create("/g");
  File("/g", 1000);
  recorder_.Take();
  ASSERT_TRUE(engine_->Reclaim("/g", 32).ok());
  auto cycles = recorder_.Take();
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_FALSE(cycles[0].full_walk);  // met the goal with partial walks
  EXPECT_GE(cycles[0].stolen, 32u);
  EXPECT_EQ(cycles[0].scanned, cycles[0].stolen);
  // Nothing reclaimable: the cycle ends in a full walk, and memory.reclaim
  // gives up after 17 empty cycles.
  Create("/a");
  Anon("/a", 100);
  EXPECT_EQ(engine_->Reclaim("/a", 32).status().code(),
            absl::StatusCode::kUnavailable);
  cycles = recorder_.Take();
  ASSERT_EQ(cycles.size(), 17u);
  for (const auto& c : cycles) {
    EXPECT_TRUE(c.full_walk);
    EXPECT_EQ(c.stolen, 0u);
  }
  // The option forces full walks everywhere.
  EngineOptions options;
  options.memcg_full_walk = true;
  Start(options);
  Create("/g");
  File("/g", 1000);
  ASSERT_TRUE(engine_->Reclaim("/g", 32).ok());
  cycles = recorder_.Take();
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_TRUE(cycles[0].full_walk);
}

TEST_F(ReclaimEngineTest, DeletedGroupsCacheIsReclaimableFromTheParent) {
  Create("/p");
  Create("/p/c");
  File("/p/c", 500);
  ASSERT_TRUE(engine_->DeleteGroup("/p/c").ok());
  auto r = engine_->Reclaim("/p", 500);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 500u);
  EXPECT_EQ(Stats("/p").memory_current_pages, 0u);
}

// --- memory.high
// ---------------------------------------------------------------

TEST_F(ReclaimEngineTest, HighThrottleMatchesTheKernelTable) {
  // Nothing reclaimable: one BATCH-sized charge ending at 110M over a 100M
  // high is throttled 639 ms after 17 reclaim attempts.
  Create("/g");
  Anon("/g", MB(110) - kChargeBatchPages);
  ASSERT_TRUE(engine_->SetLimits("/g", High(MB(100))).ok());  // never OOM
  EXPECT_EQ(Stats("/g").events.oom, 0u);
  const uint64_t high_before = Stats("/g").events.high;
  auto r = engine_->Charge("/g", kChargeBatchPages, PageKind::kAnon, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->throttle, absl::Milliseconds(639));
  EXPECT_EQ(Stats("/g").events.high - high_before, 17u);
  EXPECT_EQ(Stats("/g").memory_current_pages, MB(110));

  // 102M: 25 ms. 101M: 6 ms, which is not worth sleeping (<= 10 ms): 0.
  for (auto [usage_mb, ms] : {std::pair<uint64_t, int>{102, 25}, {101, 0}}) {
    Start(EngineOptions());
    Create("/g");
    Anon("/g", MB(usage_mb) - kChargeBatchPages);
    ASSERT_TRUE(engine_->SetLimits("/g", High(MB(100))).ok());
    r = engine_->Charge("/g", kChargeBatchPages, PageKind::kAnon, 0);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->throttle, absl::Milliseconds(ms)) << usage_mb;
  }
  // Capped at 2 s.
  Start(EngineOptions());
  Create("/g");
  Anon("/g", MB(150));
  ASSERT_TRUE(engine_->SetLimits("/g", High(MB(100))).ok());
  r = engine_->Charge("/g", kChargeBatchPages, PageKind::kAnon, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->throttle, absl::Seconds(2));
}

TEST_F(ReclaimEngineTest, HighReclaimsCacheOnTheChargePath) {
  Create("/g", High(MB(30)));
  uint64_t throttled = 0;
  for (uint64_t i = 0; i < MB(50) / 32; ++i) {
    auto r = engine_->Charge("/g", 32, PageKind::kFile, i % 4);
    ASSERT_TRUE(r.ok());
    if (r->throttle > absl::ZeroDuration()) ++throttled;
  }
  const GroupStats s = Stats("/g");
  EXPECT_LE(s.memory_current_pages, MB(31));
  EXPECT_GE(s.memory_current_pages, MB(29));
  EXPECT_GT(s.events.high, 0u);
  EXPECT_EQ(s.events.max, 0u);
  EXPECT_EQ(throttled, 0u);  // reclaim kept up: no throttle
  EXPECT_GT(Stat(s, "pgsteal_direct"), MB(19));
}

TEST_F(ReclaimEngineTest, HighOfAnAncestorCounts) {
  Create("/p", High(MB(10)));
  Create("/p/c");
  Create("/p/d");
  File("/p/d", MB(10));
  auto r = engine_->Charge("/p/c", MB(1), PageKind::kAnon, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->throttle, absl::ZeroDuration());
  EXPECT_GT(Stats("/p").events_local.high, 0u);
  EXPECT_EQ(Stats("/p/c").events_local.high, 0u);
  EXPECT_LE(Stats("/p").memory_current_pages, MB(10));
  EXPECT_GT(Stat(Stats("/p/d"), "pgsteal_direct"), 0u);
}

// --- Limit writes
// --------------------------------------------------------------

TEST_F(ReclaimEngineTest, LoweringMaxReclaimsBeforeOom) {
  Create("/g");
  File("/g", 1000);
  Anon("/g", 100);
  ASSERT_TRUE(engine_->SetLimits("/g", Max(500)).ok());
  GroupStats s = Stats("/g");
  EXPECT_LE(s.memory_current_pages, 500u);
  EXPECT_EQ(s.events.oom, 0u);
  EXPECT_GE(Stat(s, "pgsteal_direct"), 500u);
  // Below the ANON: everything reclaimable goes, then `oom`.
  ASSERT_TRUE(engine_->SetLimits("/g", Max(50)).ok());
  s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 100u);
  EXPECT_EQ(Stat(s, "file"), 0u);
  EXPECT_EQ(s.events.oom, 1u);
  EXPECT_EQ(s.limits.max_pages, 50u);
  // Raising takes effect at once.
  ASSERT_TRUE(engine_->SetLimits("/g", Max(1000)).ok());
  EXPECT_TRUE(engine_->Charge("/g", 800, PageKind::kAnon, 0).ok());
}

TEST_F(ReclaimEngineTest, LoweringHighReclaimsAndNeverOoms) {
  Create("/g");
  File("/g", 1000);
  Anon("/g", 100);
  ASSERT_TRUE(engine_->SetLimits("/g", High(400)).ok());
  GroupStats s = Stats("/g");
  EXPECT_LE(s.memory_current_pages, 400u);
  ASSERT_TRUE(engine_->SetLimits("/g", High(10)).ok());
  s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 100u);  // only ANON left
  EXPECT_EQ(s.events.oom, 0u);
  EXPECT_EQ(s.events.high, 0u);  // the write itself raises no event
  // Raising it takes effect at once: no reclaim, no throttle.
  ASSERT_TRUE(engine_->SetLimits("/g", High(MB(100))).ok());
  auto r = engine_->Charge("/g", 500, PageKind::kFile, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->throttle, absl::ZeroDuration());
  EXPECT_EQ(Stats("/g").memory_current_pages, 600u);
}

// Found by tests/fuzz/engine_ops_fuzzer. Page counts here go up to
// PAGE_COUNTER_MAX, not to what RAM holds, and reclaim used to isolate FILE
// pages in a loop of 32-page chunks: memory.reclaim or a memory.max write
// on a group with 2^40 FILE pages looped 2^35 times (hours; on main@700b79d
// this test does not finish). Now one isolation per group per pass, with
// the loop's outcome.
TEST_F(ReclaimEngineTest, HugeFileCountsAreReclaimedInBoundedTime) {
  const uint64_t kHuge = uint64_t{1} << 40;
  Create("/g");
  File("/g", kHuge);
  const absl::Time start = absl::Now();
  auto r = engine_->Reclaim("/g", kHuge / 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(*r, kHuge / 2);
  GroupStats s = Stats("/g");
  EXPECT_EQ(Stat(s, "pgsteal_proactive"), *r);
  EXPECT_EQ(s.memory_current_pages, kHuge - *r);
  // memory_max_write(): reclaims all of it, then the charge path at max.
  ASSERT_TRUE(engine_->SetLimits("/g", Max(0)).ok());
  s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 0u);
  EXPECT_EQ(s.events.oom, 0u);
  ASSERT_TRUE(engine_->SetLimits("/g", Max(kHuge)).ok());
  File("/g", kHuge);
  auto charged = engine_->Charge("/g", kHuge / 2, PageKind::kFile, 0);
  ASSERT_TRUE(charged.ok()) << charged.status();
  EXPECT_LE(Stats("/g").memory_current_pages, kHuge);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace cgacct
