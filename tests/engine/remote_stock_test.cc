// The engine's RemoteStockDrainer hook (engine/remote_stock.h): where the
// charge path calls it (after reclaim and the local drain left no room, once
// per charge), and what the engine does with what it returns (uncharged
// through the normal path, then the charge retries). Runs under TSan in
// stage 1 of deploy/test.sh like every engine test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/mutex.h"
#include "engine/engine.h"
#include "engine/remote_stock.h"

namespace cgacct {
namespace {

// Gives back `pages` of `group` (at `path`) on its first call, nothing after.
class FakeDrainer final : public RemoteStockDrainer {
 public:
  std::vector<RemoteStockReturn> DrainRemoteStock(
      uint64_t over_id, absl::string_view over_path,
      uint64_t nr_pages) override {
    (void)nr_pages;
    MutexLock l(&mu_);
    calls_.push_back(std::string(over_path));
    over_ids_.push_back(over_id);
    std::vector<RemoteStockReturn> out;
    if (give_.nr_pages > 0) {
      out.push_back(give_);
      give_.nr_pages = 0;
    }
    return out;
  }
  void Give(GroupHandle group, std::string path, uint64_t pages) {
    MutexLock l(&mu_);
    give_ = RemoteStockReturn{group, std::move(path), PageKind::kAnon, pages};
  }
  std::vector<std::string> calls() {
    MutexLock l(&mu_);
    return calls_;
  }
  std::vector<uint64_t> over_ids() {
    MutexLock l(&mu_);
    return over_ids_;
  }
  bool RemoteDrainWouldWait(uint64_t over_id,
                            absl::string_view over_path) override {
    (void)over_id;
    MutexLock l(&mu_);
    would_wait_asked_.push_back(std::string(over_path));
    return would_wait_;
  }
  void SetWouldWait(bool would_wait) {
    MutexLock l(&mu_);
    would_wait_ = would_wait;
  }
  std::vector<std::string> would_wait_asked() {
    MutexLock l(&mu_);
    return would_wait_asked_;
  }

 private:
  Mutex mu_;  // engine/mutex.h: visible to TSan
  RemoteStockReturn give_;
  std::vector<std::string> calls_;
  std::vector<uint64_t> over_ids_;
  bool would_wait_ = false;
  std::vector<std::string> would_wait_asked_;
};

class RemoteStockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 2;
    engine_ = std::move(*Engine::Create(options));
    LimitsUpdate limits;
    limits.max_pages = 128;
    d_ = *engine_->CreateGroup("/d", limits);
    ASSERT_TRUE(engine_->CreateGroup("/d/s", {}).ok());
    ASSERT_TRUE(engine_->CreateGroup("/d/c", {}).ok());
    engine_->SetRemoteStockDrainer(&drainer_);
  }
  void TearDown() override { engine_->SetRemoteStockDrainer(nullptr); }

  uint64_t Current(const std::string& path) {
    return engine_->GetStats(path, FlushMode::kExact)->memory_current_pages;
  }

  FakeDrainer drainer_;
  std::unique_ptr<Engine> engine_;
  GroupInfo d_;
};

TEST_F(RemoteStockTest, NotAskedWhileTheLocalStockOrTheCounterHasRoom) {
  ASSERT_TRUE(engine_->Charge("/d/s", 60, PageKind::kAnon, 0).ok());
  // Fits under max: never asked.
  ASSERT_TRUE(engine_->Charge("/d/c", 20, PageKind::kAnon, 1).ok());
  EXPECT_TRUE(drainer_.calls().empty());
  // The local stocks hold the rest of 128 (4 + 44 of the 64-page batches):
  // a charge that the local drain satisfies does not ask either.
  ASSERT_EQ(Current("/d"), 128u);
  ASSERT_TRUE(engine_->Charge("/d/c", 46, PageKind::kAnon, 1).ok());
  EXPECT_GE(engine_->GetStats("/d", FlushMode::kExact)->events.max, 1u);
  EXPECT_TRUE(drainer_.calls().empty());
}

TEST_F(RemoteStockTest, ReturnedPagesAreUnchargedAndTheChargeSucceeds) {
  GroupHandle s = *engine_->ResolveGroup("/d/s");
  ASSERT_TRUE(engine_->Charge(s, 125, PageKind::kAnon, 0).ok());
  drainer_.Give(s, "/d/s", 125);
  absl::StatusOr<ChargeResult> r =
      engine_->Charge("/d/c", 8, PageKind::kAnon, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(drainer_.calls(), ::testing::ElementsAre("/d"));
  EXPECT_THAT(drainer_.over_ids(), ::testing::ElementsAre(d_.id));
  engine_->DrainAllStock();
  EXPECT_EQ(Current("/d"), 8u);
  EXPECT_EQ(Current("/d/s"), 0u);
  absl::StatusOr<GroupStats> stats = engine_->GetStats("/d/s", FlushMode::kExact);
  for (const StatEntry& e : stats->stat)
    if (e.name == "anon") {
      EXPECT_EQ(e.value, 0u);
    }
  EXPECT_EQ(engine_->GetStats("/d", FlushMode::kExact)->events.oom, 0u);
}

TEST_F(RemoteStockTest, AskedOncePerChargeThenOom) {
  ASSERT_TRUE(engine_->Charge("/d/s", 125, PageKind::kAnon, 0).ok());
  // Nothing comes back: the charge goes on to its retries and OOMs, having
  // asked once.
  absl::StatusOr<ChargeResult> r =
      engine_->Charge("/d/c", 8, PageKind::kAnon, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(drainer_.calls().size(), 1u);
  EXPECT_EQ(engine_->GetStats("/d", FlushMode::kExact)->events.oom, 1u);
}

// Inside a RemoteDrainDeferral::Scope, a charge that would wait for the
// drainer is handed back (deferred) with nothing charged and no OOM, and
// the drainer is not asked; run again outside the Scope, it waits and
// succeeds. A drainer that would not wait lets the charge go on at once.
TEST_F(RemoteStockTest, DeferredInsideAScopeWhenTheDrainerWouldWait) {
  GroupHandle s = *engine_->ResolveGroup("/d/s");
  ASSERT_TRUE(engine_->Charge(s, 125, PageKind::kAnon, 0).ok());
  drainer_.Give(s, "/d/s", 125);
  drainer_.SetWouldWait(true);
  absl::StatusOr<ChargeResult> r;
  {
    RemoteDrainDeferral::Scope no_wait;
    EXPECT_TRUE(RemoteDrainDeferral::Active());
    r = engine_->Charge("/d/c", 8, PageKind::kAnon, 1);
  }
  EXPECT_FALSE(RemoteDrainDeferral::Active());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsRemoteDrainDeferred(r.status())) << r.status();
  EXPECT_THAT(drainer_.would_wait_asked(), ::testing::ElementsAre("/d"));
  EXPECT_TRUE(drainer_.calls().empty());
  absl::StatusOr<GroupStats> d = engine_->GetStats("/d", FlushMode::kExact);
  EXPECT_EQ(d->events.oom, 0u);
  EXPECT_EQ(d->events.max, 1u);  // the loop's turn before the drain
  EXPECT_EQ(engine_->GetStats("/d/c", FlushMode::kExact)->events.oom_kill, 0u);
  EXPECT_EQ(engine_->GetCounters().charges_oom, 0u);
  engine_->DrainAllStock();
  EXPECT_EQ(Current("/d"), 125u);  // nothing of the deferred charge
  // The rerun, outside a Scope: not asked whether it would wait; waits,
  // succeeds. Resuming the deferred turn, it raises no second `max`: the
  // events are those of the same charge waiting in place.
  {
    RemoteDrainDeferral::Resume resume;
    EXPECT_TRUE(RemoteDrainDeferral::Resuming());
    r = engine_->Charge("/d/c", 8, PageKind::kAnon, 1);
  }
  EXPECT_FALSE(RemoteDrainDeferral::Resuming());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(drainer_.would_wait_asked().size(), 1u);
  EXPECT_THAT(drainer_.calls(), ::testing::ElementsAre("/d"));
  d = engine_->GetStats("/d", FlushMode::kExact);
  EXPECT_EQ(d->events.max, 1u);
  EXPECT_EQ(d->events.oom, 0u);
  // The same charge waiting in place, on a twin engine: the same max
  // events and page_counter failures (the 64-page batch, then 8 pages).
  EngineOptions options;
  options.nr_cpus = 2;
  std::unique_ptr<Engine> twin = std::move(*Engine::Create(options));
  LimitsUpdate limits;
  limits.max_pages = 128;
  ASSERT_TRUE(twin->CreateGroup("/d", limits).ok());
  ASSERT_TRUE(twin->CreateGroup("/d/s", {}).ok());
  ASSERT_TRUE(twin->CreateGroup("/d/c", {}).ok());
  FakeDrainer twin_drainer;
  twin->SetRemoteStockDrainer(&twin_drainer);
  GroupHandle ts = *twin->ResolveGroup("/d/s");
  ASSERT_TRUE(twin->Charge(ts, 125, PageKind::kAnon, 0).ok());
  twin_drainer.Give(ts, "/d/s", 125);
  ASSERT_TRUE(twin->Charge("/d/c", 8, PageKind::kAnon, 1).ok());
  absl::StatusOr<GroupStats> t = twin->GetStats("/d", FlushMode::kExact);
  EXPECT_EQ(t->events.max, d->events.max);
  EXPECT_EQ(t->failcnt, d->failcnt);
  EXPECT_EQ(t->failcnt, 2u);
  twin->SetRemoteStockDrainer(nullptr);
}

TEST_F(RemoteStockTest, NotDeferredWhenTheDrainerWouldNotWait) {
  ASSERT_TRUE(engine_->Charge("/d/s", 125, PageKind::kAnon, 0).ok());
  RemoteDrainDeferral::Scope no_wait;
  absl::StatusOr<ChargeResult> r =
      engine_->Charge("/d/c", 8, PageKind::kAnon, 1);
  // Nobody to wait for: asked, nothing back, the charge OOMs as before.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(IsRemoteDrainDeferred(r.status()));
  EXPECT_EQ(drainer_.calls().size(), 1u);
  EXPECT_EQ(engine_->GetStats("/d", FlushMode::kExact)->events.oom, 1u);
  // An ordinary UNAVAILABLE is not a deferral.
  EXPECT_FALSE(IsRemoteDrainDeferred(absl::UnavailableError("x")));
}

// Pages of a group deleted since they were charged are uncharged from the
// nearest live ancestor (DeleteGroup gave them to it).
TEST_F(RemoteStockTest, DeletedGroupsPagesComeBackFromTheParent) {
  ASSERT_TRUE(engine_->CreateGroup("/d/s/x", {}).ok());
  GroupHandle x = *engine_->ResolveGroup("/d/s/x");
  ASSERT_TRUE(engine_->Charge(x, 125, PageKind::kAnon, 0).ok());
  engine_->DrainAllStock();
  ASSERT_TRUE(engine_->DeleteGroup("/d/s/x").ok());
  EXPECT_EQ(Current("/d/s"), 125u);
  drainer_.Give(x, "/d/s/x", 125);
  ASSERT_TRUE(engine_->Charge("/d/c", 8, PageKind::kAnon, 1).ok());
  engine_->DrainAllStock();
  EXPECT_EQ(Current("/d/s"), 0u);
  EXPECT_EQ(Current("/d"), 8u);
}

// Many charging threads at max while the drainer hands pages back: the
// counts stay exact (TSan: the hook runs under a reader slot, concurrently).
TEST_F(RemoteStockTest, ConcurrentChargesAtMax) {
  GroupHandle s = *engine_->ResolveGroup("/d/s");
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        if (engine_->Charge(s, 60, PageKind::kAnon, t % 2).ok()) {
          drainer_.Give(s, "/d/s", 60);
          ++ok;
        }
        (void)engine_->Charge("/d/c", 1, PageKind::kAnon, t % 2);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(ok.load(), 0);
  engine_->DrainAllStock();
  const uint64_t s_pages = Current("/d/s");
  const uint64_t c_pages = Current("/d/c");
  EXPECT_EQ(Current("/d"), s_pages + c_pages);
  EXPECT_LE(Current("/d"), 128u);
}

}  // namespace
}  // namespace cgacct
