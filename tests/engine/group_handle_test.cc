// GroupHandle (engine/group_handle.h) and EngineOptions::charge_batch_pages:
// the handle overloads account exactly like the path ones, a handle to a
// deleted group is NOT_FOUND and changes nothing (also when its table slot is
// reused or the path re-created), and the batch option sizes the stock.
#include "engine/group_handle.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Engine> MakeEngine(uint32_t batch = kChargeBatchPages,
                                   int nr_cpus = 4) {
  EngineOptions options;
  options.nr_cpus = nr_cpus;
  options.charge_batch_pages = batch;
  auto engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

uint64_t Current(Engine& engine, const std::string& path) {
  auto stats = engine.GetStats(path, FlushMode::kExact);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? stats->memory_current_pages : 0;
}

uint64_t Anon(Engine& engine, const std::string& path) {
  auto stats = engine.GetStats(path, FlushMode::kExact);
  EXPECT_TRUE(stats.ok()) << stats.status();
  for (const StatEntry& e : stats->stat)
    if (e.name == "anon") return e.value / engine.page_size_bytes();
  ADD_FAILURE() << "no anon stat";
  return 0;
}

TEST(GroupHandleTest, ResolveErrors) {
  auto engine = MakeEngine();
  EXPECT_EQ(engine->ResolveGroup("a").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->ResolveGroup("/missing").status().code(),
            absl::StatusCode::kNotFound);
  auto root = engine->ResolveGroup("/");
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->id(), 1u);
}

TEST(GroupHandleTest, HandleChargesAccountLikePaths) {
  auto engine = MakeEngine();
  auto info = engine->CreateGroup("/a", {});
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(engine->CreateGroup("/a/b", {}).ok());
  auto h = engine->ResolveGroup("/a/b");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_FALSE(h->empty());
  auto charged = engine->Charge(*h, 5, PageKind::kAnon, 1);
  ASSERT_TRUE(charged.ok()) << charged.status();
  EXPECT_EQ(charged->nr_pages, 5u);
  ASSERT_TRUE(engine->Charge("/a/b", 2, PageKind::kAnon, 2).ok());
  EXPECT_EQ(Anon(*engine, "/a/b"), 7u);
  // More ANON than held: refused, like the path overload.
  auto too_much = engine->Uncharge(*h, 8, PageKind::kAnon, 1);
  EXPECT_EQ(too_much.status().code(), absl::StatusCode::kFailedPrecondition);
  auto uncharged = engine->Uncharge(*h, 7, PageKind::kAnon, 3);
  ASSERT_TRUE(uncharged.ok());
  EXPECT_EQ(uncharged->nr_pages, 7u);
  engine->DrainAllStock();
  EXPECT_EQ(Current(*engine, "/a"), 0u);
  // Bad arguments are checked before the group.
  EXPECT_EQ(engine->Charge(*h, 0, PageKind::kAnon).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Charge(*h, 1, PageKind::kAnon, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GroupHandleTest, EmptyHandleIsNotFound) {
  auto engine = MakeEngine();
  GroupHandle empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(engine->Charge(empty, 1, PageKind::kAnon).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->Uncharge(empty, 1, PageKind::kAnon).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->GetCounters().charges_ok, 0u);
}

TEST(GroupHandleTest, DeletedGroupIsNotFoundEvenAfterSlotReuseOrRecreate) {
  auto engine = MakeEngine();
  ASSERT_TRUE(engine->CreateGroup("/a", {}).ok());
  auto a = engine->ResolveGroup("/a");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(engine->DeleteGroup("/a").ok());
  auto gone = engine->Charge(*a, 1, PageKind::kAnon, 0);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr(absl::StrCat(a->id())));

  // /b takes the freed table slot; /a's handle must not reach it.
  ASSERT_TRUE(engine->CreateGroup("/b", {}).ok());
  EXPECT_EQ(engine->Charge(*a, 1, PageKind::kAnon, 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->Uncharge(*a, 1, PageKind::kFile, 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Current(*engine, "/b"), 0u);

  // A re-created /a is a new instance: new id, old handle still NOT_FOUND.
  ASSERT_TRUE(engine->CreateGroup("/a", {}).ok());
  auto a2 = engine->ResolveGroup("/a");
  ASSERT_TRUE(a2.ok());
  EXPECT_NE(a2->id(), a->id());
  EXPECT_NE(*a2, *a);
  EXPECT_EQ(engine->Charge(*a, 1, PageKind::kAnon, 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(engine->Charge(*a2, 1, PageKind::kAnon, 0).ok());
  EXPECT_EQ(engine->GetCounters().charges_ok, 1u);
}

TEST(ChargeBatchPagesTest, RejectsOutOfRange) {
  EngineOptions options;
  options.nr_cpus = 2;
  for (uint32_t bad : {0u, 128u}) {
    options.charge_batch_pages = bad;
    auto engine = Engine::Create(options);
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(engine.status().message(), HasSubstr("charge_batch_pages"));
  }
}

TEST(ChargeBatchPagesTest, BatchSizesTheStock) {
  for (uint32_t batch : {1u, 32u, 64u}) {
    SCOPED_TRACE(batch);
    auto engine = MakeEngine(batch);
    EXPECT_EQ(engine->GetInfo().charge_batch_pages, batch);
    ASSERT_TRUE(engine->CreateGroup("/a", {}).ok());
    ASSERT_TRUE(engine->Charge("/a", 3, PageKind::kAnon, 0).ok());
    // memory.current includes the surplus parked in the stock.
    EXPECT_EQ(Current(*engine, "/a"), std::max<uint64_t>(batch, 3));
    ASSERT_TRUE(engine->Uncharge("/a", 3, PageKind::kAnon, 0).ok());
    // The uncharge went straight to the counters (uncharge_batch()); the
    // charge's surplus stays stocked.
    EXPECT_EQ(Current(*engine, "/a"), std::max<uint64_t>(batch, 3) - 3);
    engine->DrainAllStock();
    EXPECT_EQ(Current(*engine, "/a"), 0u);
  }
}

// Handles used while their group is deleted and re-created: every call either
// applies to the live instance or is NOT_FOUND; nothing leaks into another
// group and nothing is lost.
TEST(GroupHandleTest, ConcurrentDeleteIsSafe) {
  auto engine = MakeEngine(kChargeBatchPages, 4);
  ASSERT_TRUE(engine->CreateGroup("/p", {}).ok());
  ASSERT_TRUE(engine->CreateGroup("/p/keep", {}).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> not_found{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load(std::memory_order_relaxed)) {
        auto h = engine->ResolveGroup("/p/churn");
        if (!h.ok()) {
          std::this_thread::yield();
          continue;
        }
        for (int i = 0; i < 50; ++i) {
          auto c = engine->Charge(*h, 2, PageKind::kFile, t);
          if (!c.ok()) {
            EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
            not_found.fetch_add(1, std::memory_order_relaxed);
            break;
          }
          (void)engine->Uncharge(*h, 1, PageKind::kFile, t + 2);
        }
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(engine->CreateGroup("/p/churn", {}).ok());
    std::this_thread::yield();
    ASSERT_TRUE(engine->DeleteGroup("/p/churn").ok());
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  // What the churned instances still held stays on them, dying under /p
  // (counted in /p); /p/keep was never touched.
  engine->DrainAllStock();
  EXPECT_EQ(Current(*engine, "/p/keep"), 0u);
  auto p = engine->GetStats("/p", FlushMode::kExact);
  ASSERT_TRUE(p.ok());
  uint64_t file = 0;
  for (const StatEntry& e : p->stat)
    if (e.name == "file") file = e.value / engine->page_size_bytes();
  EXPECT_EQ(p->memory_current_pages, file);
}

}  // namespace
}  // namespace cgacct
