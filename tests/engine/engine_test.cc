#include "engine/engine.h"

#include "engine/percpu.h"

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

uint64_t Stat(const GroupStats& stats, const std::string& name) {
  for (const StatEntry& e : stats.stat)
    if (e.name == name) return e.value;
  ADD_FAILURE() << "no stat " << name;
  return 0;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 4;
    auto engine = Engine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  GroupStats Stats(const std::string& path) {
    auto stats = engine_->GetStats(path);
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? *stats : GroupStats{};
  }
  LimitsUpdate Max(uint64_t pages) {
    LimitsUpdate l;
    l.max_pages = pages;
    return l;
  }
  std::unique_ptr<Engine> engine_;
};

TEST(EngineCreateTest, RejectsBadOptions) {
  EngineOptions options;
  options.nr_cpus = -1;
  EXPECT_EQ(Engine::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.nr_cpus = 2;
  options.page_size_bytes = 1000;
  EXPECT_THAT(Engine::Create(options).status().message(),
              HasSubstr("page_size_bytes"));
  options.page_size_bytes = 4096;
  options.nr_cpus = 0;  // online CPUs
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok());
  EXPECT_GE((*engine)->nr_cpus(), 1);
}

TEST(PathTest, ValidatesCgroupPaths) {
  EXPECT_TRUE(ValidateGroupPath("/").ok());
  EXPECT_TRUE(ValidateGroupPath("/a/b.c/d-e_F9").ok());
  for (const char* bad :
       {"", "a", "/a/", "//", "/a//b", "/.", "/a/..", "/a b", "/a*"})
    EXPECT_EQ(ValidateGroupPath(bad).code(), absl::StatusCode::kInvalidArgument)
        << bad;
  EXPECT_FALSE(ValidateGroupPath("/" + std::string(256, 'x')).ok());
  EXPECT_TRUE(ValidateGroupPath("/" + std::string(255, 'x')).ok());
  EXPECT_THAT(std::string(ValidateGroupPath("x", "parent").message()),
              HasSubstr("parent"));
}

TEST_F(EngineTest, CreateListDelete) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a/b", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a/c", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a-z", {}).ok());
  EXPECT_EQ(engine_->CreateGroup("/a", {}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine_->CreateGroup("/x/y", {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->CreateGroup("/", {}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(*engine_->ListGroups("/", false), ElementsAre("/a", "/a-z"));
  EXPECT_THAT(*engine_->ListGroups("/", true),
              ElementsAre("/a", "/a-z", "/a/b", "/a/c"));
  EXPECT_THAT(*engine_->ListGroups("/a", false), ElementsAre("/a/b", "/a/c"));
  EXPECT_EQ(engine_->ListGroups("/nope", false).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->DeleteGroup("/a").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_->DeleteGroup("/").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->DeleteGroup("/q").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*engine_->DeleteGroup("/a/b"), 0u);
  EXPECT_THAT(*engine_->ListGroups("/a", false), ElementsAre("/a/c"));
  EXPECT_EQ(engine_->GetInfo().nr_groups, 4u);
}

TEST_F(EngineTest, LimitsDefaultToMaxAndClamp) {
  auto info = engine_->CreateGroup("/g", {});
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->limits.max_pages, engine_->page_counter_max());
  EXPECT_EQ(info->limits.high_pages, engine_->page_counter_max());
  EXPECT_EQ(info->limits.min_pages, 0u);
  LimitsUpdate l;
  l.max_pages = UINT64_MAX;
  l.low_pages = 7;
  auto set = engine_->SetLimits("/g", l);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->limits.max_pages, engine_->page_counter_max());
  EXPECT_EQ(set->limits.low_pages, 7u);
  EXPECT_EQ(engine_->SetLimits("/", l).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->SetLimits("/zz", l).status().code(),
            absl::StatusCode::kNotFound);
}

// Engine::DrainStock(group): drain_all_stock(memcg) of one subtree. The
// group's and its descendants' stocked pages (on any CPU) go back to the
// counters; another subtree's stock stays; a deleted group is NOT_FOUND.
TEST_F(EngineTest, DrainStockDrainsOneSubtreeOnEveryCpu) {
  ASSERT_TRUE(engine_->CreateGroup("/p", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/p/c", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/q", {}).ok());
  ASSERT_TRUE(engine_->Charge("/p", 1, PageKind::kAnon, 0).ok());
  ASSERT_TRUE(engine_->Charge("/p/c", 2, PageKind::kAnon, 1).ok());
  // On a CPU with no page of /p (a drain empties a whole CPU's stock).
  ASSERT_TRUE(engine_->Charge("/q", 3, PageKind::kAnon, 2).ok());
  EXPECT_EQ(Stats("/p").memory_current_pages, 128u);  // 2 batches stocked
  EXPECT_EQ(Stats("/q").memory_current_pages, 64u);
  absl::StatusOr<GroupHandle> p = engine_->ResolveGroup("/p");
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(engine_->DrainStock(*p).ok());
  EXPECT_EQ(Stats("/p").memory_current_pages, 3u);
  EXPECT_EQ(Stats("/p/c").memory_current_pages, 2u);
  EXPECT_EQ(Stats("/q").memory_current_pages, 64u);  // not its subtree
  absl::StatusOr<GroupHandle> q = engine_->ResolveGroup("/q");
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(engine_->Uncharge("/q", 3, PageKind::kAnon, 2).ok());
  ASSERT_TRUE(engine_->DeleteGroup("/q").ok());
  EXPECT_EQ(engine_->DrainStock(*q).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->DrainStock(GroupHandle()).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, ChargeReservesABatchInTheStock) {
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  ASSERT_TRUE(engine_->Charge("/g", 1, PageKind::kAnon, 0).ok());
  GroupStats s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 64u);  // memory.current includes the stock
  EXPECT_EQ(Stat(s, "anon"), 4096u);
  // The next 63 pages come from the stock: no counter moves.
  ASSERT_TRUE(engine_->Charge("/g", 63, PageKind::kAnon, 0).ok());
  EXPECT_EQ(Stats("/g").memory_current_pages, 64u);
  EXPECT_EQ(engine_->GetCounters().stock_hits, 1u);
  engine_->DrainAllStock();
  EXPECT_EQ(Stats("/g").memory_current_pages, 64u);
  ASSERT_TRUE(engine_->Uncharge("/g", 64, PageKind::kAnon, 1).ok());
  engine_->DrainAllStock();
  s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 0u);
  EXPECT_EQ(Stat(s, "anon"), 0u);
  EXPECT_EQ(Stat(s, "inactive_anon"), 0u);
  EXPECT_EQ(Stats("/").memory_current_pages, 0u);
}

TEST_F(EngineTest, ExactChargeWhenTheBatchDoesNotFit) {
  ASSERT_TRUE(engine_->CreateGroup("/g", Max(10)).ok());
  ASSERT_TRUE(engine_->Charge("/g", 10, PageKind::kAnon, 0).ok());
  GroupStats s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 10u);
  EXPECT_EQ(s.events.max, 0u);  // the exact retry succeeded: no event
  EXPECT_EQ(s.failcnt, 1u);     // the batch attempt failed once
}

TEST_F(EngineTest, OomNamesTheLimitingAncestorAndRaisesEvents) {
  ASSERT_TRUE(engine_->CreateGroup("/p", Max(10)).ok());
  ASSERT_TRUE(engine_->CreateGroup("/p/c", {}).ok());
  ASSERT_TRUE(engine_->Charge("/p/c", 8, PageKind::kAnon, 0).ok());
  auto r = engine_->Charge("/p/c", 3, PageKind::kAnon, 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("memory.max of /p reached"));
  GroupStats p = Stats("/p"), c = Stats("/p/c");
  EXPECT_EQ(p.memory_current_pages, 8u);  // nothing charged
  EXPECT_EQ(Stat(c, "anon"), 8u * 4096);
  EXPECT_GE(p.events.max, 1u);
  EXPECT_EQ(p.events.oom, 1u);
  EXPECT_EQ(p.events_local.oom, 1u);
  EXPECT_EQ(c.events.oom, 0u);       // raised on the limiting group
  EXPECT_EQ(c.events.oom_kill, 1u);  // the victim is the charging group
  EXPECT_EQ(p.events.oom_kill, 1u);  // hierarchical
  EXPECT_EQ(p.events_local.oom_kill, 0u);
  EXPECT_EQ(Stats("/").events.oom, 0u);  // never counted on the root
  EXPECT_EQ(engine_->GetCounters().charges_oom, 1u);
  EXPECT_EQ(engine_->GetCounters().charges_refused, 0u);
  // The stock drain before OOM made the pages parked on CPU 0 available.
  EXPECT_TRUE(engine_->Charge("/p/c", 2, PageKind::kAnon, 1).ok());
}

TEST_F(EngineTest, DrainBeforeOomFreesPagesStockedOnOtherCpus) {
  ASSERT_TRUE(engine_->CreateGroup("/p", Max(128)).ok());
  ASSERT_TRUE(engine_->CreateGroup("/p/a", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/p/b", {}).ok());
  ASSERT_TRUE(
      engine_->Charge("/p/a", 1, PageKind::kAnon, 0).ok());  // 63 stocked on 0
  ASSERT_TRUE(
      engine_->Charge("/p/b", 1, PageKind::kAnon, 1).ok());  // 63 stocked on 1
  // 126 pages are charged but only 2 used: this charge needs a drain.
  EXPECT_TRUE(engine_->Charge("/p/b", 100, PageKind::kFile, 2).ok());
  EXPECT_EQ(Stats("/p").events.oom, 0u);
  EXPECT_EQ(Stats("/p").memory_current_pages, 102u);
}

TEST_F(EngineTest, BadInputChangesNothing) {
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  ASSERT_TRUE(engine_->Charge("/g", 5, PageKind::kAnon, 0).ok());
  engine_->DrainAllStock();
  EXPECT_EQ(engine_->Charge("/g", 0, PageKind::kAnon).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Charge("/g", 1, static_cast<PageKind>(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      std::string(
          engine_->Charge("/g", 1, PageKind::kAnon, 4).status().message()),
      HasSubstr("cpu 4 out of range [0, 4)"));
  EXPECT_EQ(engine_->Charge("/none", 1, PageKind::kAnon).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Charge("bad", 1, PageKind::kAnon).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto over = engine_->Uncharge("/g", 6, PageKind::kAnon, 0);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(over.status().message()),
              HasSubstr("holds only 5 ANON pages"));
  EXPECT_EQ(engine_->Uncharge("/g", 1, PageKind::kAnon, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  engine_->DrainAllStock();
  GroupStats s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 5u);
  EXPECT_EQ(Stat(s, "anon"), 5u * 4096);
  EXPECT_EQ(Stat(s, "inactive_anon"), 5u * 4096);
  EXPECT_EQ(s.events.max, 0u);
}

TEST_F(EngineTest, FileUnchargeReturnsWhatIsLeft) {
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  ASSERT_TRUE(engine_->Charge("/g", 5, PageKind::kFile, 0).ok());
  auto r = engine_->Uncharge("/g", 9, PageKind::kFile, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->nr_pages, 5u);
  EXPECT_EQ(engine_->Uncharge("/g", 1, PageKind::kFile, 0)->nr_pages, 0u);
}

TEST_F(EngineTest, DeleteReparentsChargeAndKeepsEvents) {
  ASSERT_TRUE(engine_->CreateGroup("/p", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/p/c", Max(4)).ok());
  ASSERT_TRUE(engine_->Charge("/p/c", 3, PageKind::kAnon, 2).ok());
  EXPECT_FALSE(engine_->Charge("/p/c", 2, PageKind::kAnon, 3).ok());  // OOM
  // (After the OOM: reclaim would have taken this page to make room.)
  ASSERT_TRUE(engine_->Charge("/p/c", 1, PageKind::kFile, 3).ok());
  auto reparented = engine_->DeleteGroup("/p/c");
  ASSERT_TRUE(reparented.ok());
  EXPECT_EQ(*reparented, 4u);
  GroupStats p = Stats("/p");
  EXPECT_EQ(p.memory_current_pages, 4u);
  EXPECT_EQ(Stat(p, "anon"), 3u * 4096);
  EXPECT_EQ(Stat(p, "file"), 1u * 4096);
  EXPECT_EQ(p.events.oom, 1u);  // stays in the ancestors' totals
  // The parent now owns the pages.
  EXPECT_TRUE(engine_->Uncharge("/p", 3, PageKind::kAnon, 0).ok());
  EXPECT_EQ(engine_->Uncharge("/p", 1, PageKind::kAnon, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A re-created path starts from zero.
  ASSERT_TRUE(engine_->CreateGroup("/p/c", {}).ok());
  GroupStats c = Stats("/p/c");
  EXPECT_EQ(c.memory_current_pages, 0u);
  EXPECT_EQ(c.events.oom, 0u);
  EXPECT_EQ(Stat(c, "anon"), 0u);
}

TEST_F(EngineTest, DeleteDrainsStocksHoldingTheGroup) {
  ASSERT_TRUE(engine_->CreateGroup("/p", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/p/c", {}).ok());
  ASSERT_TRUE(engine_->Charge("/p/c", 1, PageKind::kAnon, 0).ok());
  ASSERT_TRUE(engine_->Charge("/p/c", 1, PageKind::kAnon, 1).ok());
  EXPECT_EQ(Stats("/p").memory_current_pages, 128u);
  EXPECT_EQ(*engine_->DeleteGroup("/p/c"), 2u);
  EXPECT_EQ(Stats("/p").memory_current_pages, 2u);
  EXPECT_EQ(Stats("/").memory_current_pages, 2u);
}

TEST_F(EngineTest, LoweringMaxBelowUsageDrainsThenRaisesOom) {
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  ASSERT_TRUE(
      engine_->Charge("/g", 10, PageKind::kAnon, 0).ok());  // 64 charged
  ASSERT_TRUE(engine_->SetLimits("/g", Max(20)).ok());
  GroupStats s = Stats("/g");
  EXPECT_EQ(s.memory_current_pages, 10u);  // the stock was drained
  EXPECT_EQ(s.events.oom, 0u);
  ASSERT_TRUE(engine_->SetLimits("/g", Max(5)).ok());  // accepted, as in v2
  s = Stats("/g");
  EXPECT_EQ(s.limits.max_pages, 5u);
  EXPECT_EQ(s.events.oom, 1u);  // nothing reclaimable: oom
  EXPECT_EQ(engine_->Charge("/g", 1, PageKind::kAnon, 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Raising it takes effect at once.
  ASSERT_TRUE(engine_->SetLimits("/g", Max(100)).ok());
  EXPECT_TRUE(engine_->Charge("/g", 1, PageKind::kAnon, 0).ok());
}

TEST_F(EngineTest, PeakAndProtectionAreReported) {
  LimitsUpdate l;
  l.min_pages = 3;
  ASSERT_TRUE(engine_->CreateGroup("/g", l).ok());
  ASSERT_TRUE(engine_->Charge("/g", 100, PageKind::kAnon, 0).ok());
  ASSERT_TRUE(engine_->Uncharge("/g", 100, PageKind::kAnon, 0).ok());
  engine_->DrainAllStock();
  GroupStats s = Stats("/g");
  EXPECT_EQ(s.memory_peak_pages, 100u);
  EXPECT_EQ(s.memory_current_pages, 0u);
  EXPECT_EQ(s.limits.min_pages, 3u);
}

TEST_F(EngineTest, FlushModes) {
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  ASSERT_TRUE(engine_->Charge("/g", 2, PageKind::kAnon, 0).ok());
  auto none = engine_->GetStats("/g", FlushMode::kNone);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->flushed);
  EXPECT_EQ(Stat(*none, "anon"), 0u);  // never flushed
  auto threshold = engine_->GetStats("/g", FlushMode::kThreshold);
  EXPECT_FALSE(threshold->flushed);  // 3 of 256 pending
  auto exact = engine_->GetStats("/g", FlushMode::kExact);
  EXPECT_TRUE(exact->flushed);
  EXPECT_EQ(exact->max_staleness, absl::ZeroDuration());
  EXPECT_EQ(Stat(*exact, "anon"), 8192u);
  auto later = engine_->GetStats("/g", FlushMode::kNone);
  EXPECT_EQ(Stat(*later, "anon"), 8192u);
  EXPECT_LT(later->max_staleness, absl::Seconds(10));
  // Past 64 x 4 pending pages a threshold read flushes.
  ASSERT_TRUE(engine_->Charge("/g", 300, PageKind::kFile, 1).ok());
  EXPECT_TRUE(engine_->GetStats("/g", FlushMode::kThreshold)->flushed);
}

TEST_F(EngineTest, RootIsChargedOnlyThroughItsChildren) {
  // As the kernel's try_charge() for the root memcg (fidelity_test.cc has
  // the details).
  EXPECT_EQ(engine_->Charge("/", 7, PageKind::kAnon, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  ASSERT_TRUE(engine_->Charge("/g", 7, PageKind::kAnon, 0).ok());
  engine_->DrainAllStock();
  EXPECT_EQ(Stats("/").memory_current_pages, 7u);
}

TEST_F(EngineTest, ScopedCpuOverridePicksTheSlot) {
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  {
    ScopedCpuOverride cpu(3);
    ASSERT_TRUE(engine_->Charge("/g", 1, PageKind::kAnon).ok());
    ASSERT_TRUE(engine_->Charge("/g", 1, PageKind::kAnon).ok());
  }
  EXPECT_EQ(engine_->GetCounters().stock_hits, 1u);
  // On CPU 2 the stock of CPU 3 is not visible.
  ASSERT_TRUE(engine_->Charge("/g", 1, PageKind::kAnon, 2).ok());
  EXPECT_EQ(engine_->GetCounters().stock_hits, 1u);
}

}  // namespace
}  // namespace cgacct

namespace cgacct {
namespace {

class PeriodicFlushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 4;
    options.clock = &clock_;
    options.periodic_flush_interval = absl::Seconds(2);
    engine_ = std::move(*Engine::Create(options));
    ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  }
  uint64_t AnonNoFlush() {
    auto s = engine_->GetStats("/g", FlushMode::kNone);
    return Stat(*s, "anon");
  }
  ManualClock clock_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(PeriodicFlushTest, FlushesTheWholeTreeEveryInterval) {
  ASSERT_TRUE(engine_->Charge("/g", 3, PageKind::kAnon, 1).ok());
  auto s = engine_->GetStats("/g", FlushMode::kNone);
  EXPECT_EQ(Stat(*s, "anon"), 0u);
  EXPECT_FALSE(s->flushed);
  EXPECT_EQ(s->max_staleness, absl::ZeroDuration());  // the clock has not moved
  clock_.Advance(absl::Milliseconds(1500));
  EXPECT_FALSE(engine_->MaybePeriodicFlush());  // not due yet
  EXPECT_EQ(engine_->GetStats("/g", FlushMode::kNone)->max_staleness,
            absl::Milliseconds(1500));
  EXPECT_EQ(AnonNoFlush(), 0u);
  clock_.Advance(absl::Milliseconds(500));
  // Due: this call or the engine's flusher thread (which polls the clock
  // every 100 ms) flushes it, exactly once for this interval.
  engine_->MaybePeriodicFlush();
  EXPECT_EQ(AnonNoFlush(), 3u * 4096);
  EXPECT_EQ(engine_->GetStats("/g", FlushMode::kNone)->max_staleness,
            absl::ZeroDuration());
  EXPECT_FALSE(engine_->MaybePeriodicFlush());
  clock_.Advance(absl::Milliseconds(700));
  EXPECT_EQ(engine_->GetStats("/g", FlushMode::kNone)->max_staleness,
            absl::Milliseconds(700));
}

TEST_F(PeriodicFlushTest, TheFlusherThreadRunsOnItsOwn) {
  ASSERT_TRUE(engine_->Charge("/g", 2, PageKind::kFile, 0).ok());
  clock_.Advance(absl::Seconds(2));
  // No call from the test: the thread notices within its 100 ms tick.
  for (int i = 0; i < 300; ++i) {
    if (Stat(*engine_->GetStats("/g", FlushMode::kNone), "file") == 2u * 4096)
      break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Stat(*engine_->GetStats("/g", FlushMode::kNone), "file"),
            2u * 4096);
  EXPECT_FALSE(engine_->MaybePeriodicFlush());  // the thread took this interval
}

TEST_F(PeriodicFlushTest,
       ThresholdReadsSkipUntilPendingUpdatesReachTheThreshold) {
  // 64 x 4 CPUs = 256 pages of pending update magnitude.
  ASSERT_TRUE(engine_->Charge("/g", 100, PageKind::kAnon, 0).ok());
  auto s = engine_->GetStats("/g", FlushMode::kThreshold);
  EXPECT_FALSE(s->flushed);
  EXPECT_EQ(Stat(*s, "anon"), 0u);
  clock_.Advance(absl::Milliseconds(30));
  EXPECT_EQ(engine_->GetStats("/g", FlushMode::kThreshold)->max_staleness,
            absl::Milliseconds(30));
  ASSERT_TRUE(engine_->Charge("/g", 200, PageKind::kAnon, 2).ok());
  s = engine_->GetStats("/g", FlushMode::kThreshold);
  EXPECT_TRUE(s->flushed);
  EXPECT_EQ(Stat(*s, "anon"), 300u * 4096);
  EXPECT_EQ(s->max_staleness, absl::ZeroDuration());
  // Right after a flush the count starts again.
  ASSERT_TRUE(engine_->Charge("/g", 1, PageKind::kAnon, 2).ok());
  EXPECT_FALSE(engine_->GetStats("/g", FlushMode::kThreshold)->flushed);
}

TEST(EngineOptionsTest, RejectsBadFlushOptions) {
  EngineOptions options;
  options.nr_cpus = 2;
  options.flush_batch_cpus = 0;
  EXPECT_EQ(Engine::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.flush_batch_cpus = 8;
  options.flush_hold_budget = -absl::Microseconds(1);
  EXPECT_EQ(Engine::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.flush_hold_budget = absl::Seconds(2);
  EXPECT_EQ(Engine::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.flush_hold_budget = absl::ZeroDuration();  // one CPU per hold
  EXPECT_TRUE(Engine::Create(options).ok());
  options.flush_hold_budget = absl::Microseconds(50);
  options.periodic_flush_interval = -absl::Seconds(1);
  EXPECT_EQ(Engine::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.periodic_flush_interval = absl::Seconds(2);
  options.flush_preempt_model = static_cast<FlushPreemptModel>(7);
  const absl::Status bad_model = Engine::Create(options).status();
  EXPECT_EQ(bad_model.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_model.message()),
              ::testing::HasSubstr("flush_preempt_model"));
}

// The preempt model is `none` unless set, and GetInfo and every hold record
// say which; a `whole` flush's record carries the CPUs it walked and the
// (group, CPU) entries it folded.
TEST(EngineInfoTest, ReportsThePreemptModelAndTheWorkOfEachHold) {
  EXPECT_EQ(EngineOptions().flush_preempt_model, FlushPreemptModel::kNone);
  for (FlushPreemptModel model :
       {FlushPreemptModel::kNone, FlushPreemptModel::kFull}) {
    EngineOptions options;
    options.nr_cpus = 4;
    options.flush_lock_policy = FlushLockPolicy::kWhole;
    options.flush_preempt_model = model;
    options.periodic_flush_interval = absl::ZeroDuration();
    auto engine = std::move(*Engine::Create(options));
    ASSERT_TRUE(engine->CreateGroup("/g", {}).ok());
    ASSERT_TRUE(engine->CreateGroup("/g/h", {}).ok());
    EXPECT_EQ(engine->GetInfo().flush_preempt_model, model);
    for (int i = 0; i < 50 && engine->GetInfo().longest_flush_holds.empty();
         ++i) {
      for (int cpu = 0; cpu < 4; ++cpu)
        ASSERT_TRUE(engine->Charge("/g/h", 1, PageKind::kAnon, cpu).ok());
      ASSERT_TRUE(engine->GetStats("/g").ok());
    }
    const EngineInfo info = engine->GetInfo();
    ASSERT_FALSE(info.longest_flush_holds.empty());
    for (const FlushHoldRecord& r : info.longest_flush_holds) {
      EXPECT_EQ(r.preempt_model, model);
      EXPECT_EQ(r.policy, "whole");
      EXPECT_EQ(r.root_path, "/g");
      EXPECT_EQ(r.cpus_walked, 4);      // one uncontended hold, every CPU
      EXPECT_EQ(r.groups_folded, 2 * 4);  // /g/h and /g on each CPU
    }
  }
}

TEST(EngineInfoTest, ReportsPolicyNameAndLongestHolds) {
  EngineOptions options;
  options.nr_cpus = 4;
  options.flush_lock_policy = FlushLockPolicy::kBatch;
  options.flush_batch_cpus = 2;
  auto engine = std::move(*Engine::Create(options));
  ASSERT_TRUE(engine->CreateGroup("/g", {}).ok());
  // A flush whose thread is preempted does not count towards the longest
  // holds; a few flushes make one that was not.
  for (int i = 0; i < 50 && engine->GetInfo().longest_flush_holds.empty();
       ++i) {
    ASSERT_TRUE(engine->Charge("/g", 1, PageKind::kAnon, 3).ok());
    ASSERT_TRUE(engine->GetStats("/g").ok());
  }
  EngineInfo info = engine->GetInfo();
  EXPECT_GE(info.flush_lock_hold_wall_max, info.flush_lock_hold_max);
  EXPECT_EQ(info.flush_lock_policy, FlushLockPolicy::kBatch);
  EXPECT_EQ(info.flush_lock_policy_name, "batch:2");
  ASSERT_FALSE(info.longest_flush_holds.empty());
  EXPECT_EQ(info.longest_flush_holds[0].hold, info.flush_lock_hold_max);
  EXPECT_LE(info.longest_flush_holds[0].cpus_walked, 2);
}

// Counts reclaim cycles; `during_first` runs inside the first one.
class ReclaimCycleCounter final : public EngineObserver {
 public:
  void OnFlushLockHold(const FlushLockHold&) override {}
  void OnFlushDone(absl::Duration, int, int) override {}
  void OnReclaimDone(absl::Duration, uint64_t, uint64_t, bool) override {
    if (cycles.fetch_add(1) == 0 && during_first) during_first();
  }
  std::atomic<int> cycles{0};
  std::function<void()> during_first;
};

// Issue 22's re-attacks, row 11g: a refused charge at a max whose subtree
// holds many groups and no FILE page walked them in each of its 17 reclaim
// cycles, and every refusal did so again. A cycle that saw the whole
// subtree without a FILE page now stands for later cycles at that group,
// this charge's and others', until a FILE page is charged somewhere; every
// retry still raises its `max` event.
TEST(RefusedChargeTest, WalksAFileFreeSubtreeOnce) {
  ReclaimCycleCounter counter;
  EngineOptions options;
  options.nr_cpus = 2;
  options.observer = &counter;
  std::unique_ptr<Engine> engine = std::move(*Engine::Create(options));
  LimitsUpdate max64;
  max64.max_pages = 64;
  ASSERT_TRUE(engine->CreateGroup("/p", max64).ok());
  ASSERT_TRUE(engine->CreateGroup("/q", LimitsUpdate()).ok());
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE(engine->CreateGroup(absl::StrCat("/p/c", i), LimitsUpdate()).ok());
  ASSERT_TRUE(engine->Charge("/p/c0", 64, PageKind::kAnon, 0).ok());
  GroupHandle p = *engine->ResolveGroup("/p");
  const uint64_t max_events0 = engine->GetEvents(p)->events.max;
  absl::StatusOr<ChargeResult> refused =
      engine->Charge("/p/c1", 1, PageKind::kAnon, 0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(counter.cycles.load(), 1);
  // try_charge_memcg()'s `max` events: the first try, the retry after
  // drain_all_stock(), then MAX_RECLAIM_RETRIES more.
  EXPECT_EQ(engine->GetEvents(p)->events.max - max_events0,
            static_cast<uint64_t>(kMaxReclaimRetries + 2));
  // The walk is remembered at the group: the next refusal there walks
  // nothing while no FILE page was charged anywhere.
  counter.cycles = 0;
  EXPECT_FALSE(engine->Charge("/p/c1", 1, PageKind::kAnon, 0).ok());
  EXPECT_EQ(counter.cycles.load(), 0);
  // A FILE page charged elsewhere: the next refusal walks again, once.
  ASSERT_TRUE(engine->Charge("/q", 1, PageKind::kFile, 1).ok());
  EXPECT_FALSE(engine->Charge("/p/c1", 1, PageKind::kAnon, 0).ok());
  EXPECT_EQ(counter.cycles.load(), 1);
  // A FILE page charged (from another CPU slot) while the first cycle
  // runs: the next retry walks again, then stands for the rest.
  ASSERT_TRUE(engine->Charge("/q", 1, PageKind::kFile, 1).ok());
  counter.cycles = 0;
  counter.during_first = [&] {
    std::thread other([&] {
      EXPECT_TRUE(engine->Charge("/q", 1, PageKind::kFile, 1).ok());
    });
    other.join();
  };
  EXPECT_FALSE(engine->Charge("/p/c1", 1, PageKind::kAnon, 0).ok());
  EXPECT_EQ(counter.cycles.load(), 2);
  // FILE pages in the subtree: every retry walks (and here reclaims them).
  counter.during_first = nullptr;
  ASSERT_TRUE(engine->Uncharge("/p/c0", 8, PageKind::kAnon, 0).ok());
  ASSERT_TRUE(engine->Charge("/p/c2", 8, PageKind::kFile, 0).ok());
  counter.cycles = 0;
  EXPECT_TRUE(engine->Charge("/p/c1", 8, PageKind::kAnon, 0).ok());
  EXPECT_GE(counter.cycles.load(), 1);
  EXPECT_EQ(engine->GetStats("/p")->memory_current_pages, 64u);
}

}  // namespace
}  // namespace cgacct
