// The per-CPU stock's victim table (engine/stock.h), an opt-in addition: a
// slot a full stock gives up keeps its pages on the CPU in its owner's way,
// so more than 7 groups on one CPU stay stock hits; every drain path empties
// it.
#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/stock.h"
#include "gtest/gtest.h"
#include "tests/engine/stock_test_util.h"

namespace cgacct {
namespace {

constexpr uint64_t kMax = static_cast<uint64_t>(LONG_MAX) / 4096;

class StockVictimTest : public ::testing::Test {
 protected:
  std::vector<std::unique_ptr<PageCounter>> Groups(PageCounter* parent, int n,
                                                   uint64_t charged) {
    std::vector<std::unique_ptr<PageCounter>> groups;
    for (int i = 0; i < n; ++i) {
      groups.push_back(std::make_unique<PageCounter>(parent, kMax));
      groups.back()->Charge(charged);
    }
    return groups;
  }

  PageCounter root_{nullptr, kMax};
};

TEST_F(StockVictimTest, EvictedSlotMovesToTheVictimTable) {
  MemcgStock stock(2, kChargeBatchPages, /*pool_buckets=*/0,
                   /*victim_sets=*/64);
  auto groups = Groups(&root_, kNrStockSlots + 1, 5);
  for (auto& g : groups) stock.Refill(0, g.get(), 5);
  // The 8th group took a slot; its group's pages stayed on CPU 0, charged.
  const std::vector<int> evicted = NotInSlots(stock, 0, groups, kNrStockSlots);
  ASSERT_EQ(evicted.size(), 1u);
  PageCounter* const victim = groups[evicted[0]].get();
  EXPECT_EQ(stock.StockedPages(0, victim), 5u);
  EXPECT_EQ(stock.VictimPages(0, victim), 5u);
  EXPECT_EQ(stock.VictimPages(0, groups[7].get()), 0u);
  EXPECT_EQ(stock.StockedPages(0, groups[7].get()), 5u);
  EXPECT_EQ(victim->Read(), 5u);
  EXPECT_EQ(stock.drains(), 0u);
  EXPECT_EQ(root_.Read(), 5u * (kNrStockSlots + 1));

  // The victim is served from its way, not from another CPU's.
  EXPECT_FALSE(stock.Consume(1, victim, 3));
  EXPECT_TRUE(stock.Consume(0, victim, 3));
  EXPECT_EQ(stock.victim_hits(), 1u);
  EXPECT_EQ(stock.hits(), 0u);
  EXPECT_FALSE(stock.Consume(0, victim, 3));  // 2 left
  // A refill for a group in the table goes to its way: no slot is taken.
  victim->Charge(10);
  stock.Refill(0, victim, 10);
  EXPECT_EQ(stock.VictimPages(0, victim), 12u);
  for (int i = 0; i <= kNrStockSlots; ++i) {
    if (i == evicted[0]) continue;
    EXPECT_EQ(stock.VictimPages(0, groups[i].get()), 0u) << i;
  }
  EXPECT_TRUE(stock.Consume(0, groups[7].get(), 5));
  EXPECT_EQ(stock.hits(), 1u);
  EXPECT_EQ(root_.Read(), 5u * (kNrStockSlots + 1) + 10u);  // hits move no counter
}

TEST_F(StockVictimTest, WayOverBatchIsDrainedWhole) {
  MemcgStock stock(1, kChargeBatchPages, /*pool_buckets=*/0,
                   /*victim_sets=*/8);
  auto groups = Groups(&root_, kNrStockSlots + 1, 100);
  for (auto& g : groups) stock.Refill(0, g.get(), 60);
  const std::vector<int> evicted = NotInSlots(stock, 0, groups, kNrStockSlots);
  ASSERT_EQ(evicted.size(), 1u);
  PageCounter* const victim = groups[evicted[0]].get();
  ASSERT_EQ(stock.VictimPages(0, victim), 60u);
  stock.Refill(0, victim, 10);  // 70 > 64: the way goes back whole
  EXPECT_EQ(stock.StockedPages(0, victim), 0u);
  EXPECT_EQ(victim->Read(), 30u);
  EXPECT_EQ(stock.drains(), 1u);
}

TEST_F(StockVictimTest, FullSetEvictsRoundRobinToThePoolOrTheCounters) {
  // One set of 4 ways: the fifth eviction finds the set full.
  for (uint32_t pool : {0u, 64u}) {
    SCOPED_TRACE(absl::StrCat("pool_buckets ", pool));
    PageCounter root(nullptr, kMax);
    MemcgStock stock(1, kChargeBatchPages, pool, /*victim_sets=*/1);
    std::vector<std::unique_ptr<PageCounter>> groups;
    // The groups each refill evicted from a slot, in order.
    std::vector<int> evicted;
    for (int i = 0; i < kNrStockSlots + 5; ++i) {
      groups.push_back(std::make_unique<PageCounter>(&root, kMax));
      groups.back()->Charge(5);
      std::vector<bool> was_in_slot;
      for (int j = 0; j < i; ++j)
        was_in_slot.push_back(InSlot(stock, 0, groups[j].get()));
      stock.Refill(0, groups.back().get(), 5);
      for (int j = 0; j < i; ++j)
        if (was_in_slot[j] && !InSlot(stock, 0, groups[j].get()))
          evicted.push_back(j);
    }
    ASSERT_EQ(evicted.size(), 5u);
    // The set holds the last 4 evicted; the first (way 0, the set's
    // round-robin choice) left the CPU.
    EXPECT_EQ(stock.StockedPages(0, groups[evicted[0]].get()), 0u);
    for (int k = 1; k <= 4; ++k)
      EXPECT_EQ(stock.VictimPages(0, groups[evicted[k]].get()), 5u) << k;
    EXPECT_EQ(stock.drains(), 1u);
    if (pool == 0) {
      EXPECT_EQ(groups[evicted[0]]->Read(), 0u);
    } else {
      EXPECT_EQ(groups[evicted[0]]->Read(), 5u);
      EXPECT_EQ(stock.PooledPages(groups[evicted[0]].get()), 5u);
    }
    ASSERT_TRUE(stock.DrainAll(nullptr));
    EXPECT_EQ(root.Read(), 0u);
  }
}

TEST_F(StockVictimTest, DrainAllAndDrainOwnerEmptyTheTable) {
  MemcgStock stock(2, kChargeBatchPages, /*pool_buckets=*/0,
                   /*victim_sets=*/64);
  PageCounter p(&root_, kMax), other(&root_, kMax);
  // 10 groups on CPU 1: 3 of them are evicted into the table.
  auto children = Groups(&p, kNrStockSlots + 3, 5);
  for (auto& g : children) stock.Refill(1, g.get(), 5);
  ASSERT_EQ(NotInSlots(stock, 1, children, kNrStockSlots + 3).size(), 3u);
  ASSERT_EQ(root_.Read(), 5u * (kNrStockSlots + 3));
  // DrainOwner returns a group's pages wherever they are, slot or way.
  for (auto& g : children) {
    stock.DrainOwner(g.get());
    EXPECT_EQ(stock.StockedPages(1, g.get()), 0u);
    EXPECT_EQ(g->Read(), 0u);
  }

  // A CPU holding any of p's pages is drained whole, table included, and
  // `other`'s pages with it.
  other.Charge(5);
  stock.Refill(1, &other, 5);
  for (auto& g : children) {
    g->Charge(5);
    stock.Refill(1, g.get(), 5);
  }
  ASSERT_EQ(NotInSlots(stock, 1, children, kNrStockSlots + 3).size() +
                (InSlot(stock, 1, &other) ? 0 : 1),
            4u);
  ASSERT_TRUE(stock.DrainAll(&p));
  EXPECT_EQ(p.Read(), 0u);
  EXPECT_EQ(other.Read(), 0u);
  EXPECT_EQ(root_.Read(), 0u);
}

TEST_F(StockVictimTest, NoTableIsTheKernelStock) {
  MemcgStock kernel(1);
  auto groups = Groups(&root_, kNrStockSlots + 1, 5);
  for (auto& g : groups) kernel.Refill(0, g.get(), 5);
  const std::vector<int> evicted = NotInSlots(kernel, 0, groups, kNrStockSlots);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(kernel.StockedPages(0, groups[evicted[0]].get()), 0u);
  EXPECT_EQ(groups[evicted[0]]->Read(), 0u);  // evicted: uncharged
  EXPECT_EQ(kernel.drains(), 1u);
}

// Engine level: 64 groups charging and uncharging (through the stock)
// round-robin on one CPU stay stock hits with the victim table, and all but
// never hit with the kernel's 7 slots alone (a group keeps its slot through
// 63 random evictions with probability (6/7)^63, under 1e-4).
TEST(StockVictimEngineTest, SixtyFourGroupsOnOneCpuStayHits) {
  for (uint32_t sets : {64u, 0u}) {
    SCOPED_TRACE(absl::StrCat("stock_victim_sets ", sets));
    EngineOptions options;
    options.nr_cpus = 1;
    options.stock_pool_buckets = 0;
    options.stock_victim_sets = sets;
    options.uncharge_refills_stock = true;
    options.stock_eviction_seed = 25;
    options.periodic_flush_interval = absl::ZeroDuration();
    auto engine = std::move(*Engine::Create(options));
    std::vector<GroupHandle> groups;
    ASSERT_TRUE(engine->CreateGroup("/rr", {}).ok());
    for (int i = 0; i < 64; ++i) {
      const std::string path = absl::StrCat("/rr/g", i);
      ASSERT_TRUE(engine->CreateGroup(path, {}).ok());
      groups.push_back(*engine->ResolveGroup(path));
    }
    auto round = [&] {
      for (const GroupHandle& h : groups) {
        ASSERT_TRUE(engine->Charge(h, 3, PageKind::kAnon, 0).ok());
        ASSERT_TRUE(engine->Uncharge(h, 3, PageKind::kAnon, 0).ok());
      }
    };
    round();  // warm-up: every group's first charge walks
    const EngineCounters before = engine->GetCounters();
    for (int r = 0; r < 20; ++r) round();
    const EngineCounters after = engine->GetCounters();
    const uint64_t charges = after.charges_ok - before.charges_ok;
    const uint64_t slot = after.stock_hits - before.stock_hits;
    const uint64_t victim = after.stock_victim_hits - before.stock_victim_hits;
    ASSERT_EQ(charges, 20u * 64u);
    if (sets > 0) {
      // Hash collisions may overflow a 4-way set now and then; the rest hit.
      EXPECT_GE(slot + victim, charges * 95 / 100);
      EXPECT_GT(victim, charges / 2);
    } else {
      EXPECT_LE(slot, charges / 100);
      EXPECT_EQ(victim, 0u);
    }
    // Stocked pages are charged pages; draining returns every one.
    engine->DrainAllStock();
    auto stats = engine->GetStats("/rr");
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->memory_current_pages, 0u);
  }
}

TEST(StockVictimEngineTest, DeleteGroupDrainsTheWholeCpu) {
  EngineOptions options;
  options.nr_cpus = 1;
  options.stock_victim_sets = 64;
  options.uncharge_refills_stock = true;
  options.periodic_flush_interval = absl::ZeroDuration();
  auto engine = std::move(*Engine::Create(options));
  for (int i = 0; i <= kNrStockSlots; ++i) {
    const std::string path = absl::StrCat("/g", i);
    ASSERT_TRUE(engine->CreateGroup(path, {}).ok());
    ASSERT_TRUE(engine->Charge(path, 3, PageKind::kAnon, 0).ok());
    ASSERT_TRUE(engine->Uncharge(path, 3, PageKind::kAnon, 0).ok());
  }
  // Every group's 64 pages are stocked on CPU 0, one group's in the victim
  // table (/g7 evicted a slot).
  auto root = engine->GetStats("/");
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->memory_current_pages, 64u * (kNrStockSlots + 1));
  // drain_all_stock(/g0) drains the CPU holding /g0's pages whole: every
  // slot and the table, whoever owns them.
  auto dying = engine->DeleteGroup("/g0");
  ASSERT_TRUE(dying.ok());
  EXPECT_EQ(*dying, 0u);
  root = engine->GetStats("/");
  EXPECT_EQ(root->memory_current_pages, 0u);
}

TEST(StockVictimEngineTest, BadSetCountIsRejected) {
  for (uint32_t sets : {3u, 2048u}) {
    EngineOptions options;
    options.stock_victim_sets = sets;
    auto engine = Engine::Create(options);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(engine.status().message().find("stock_victim_sets"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace cgacct
