// The stock's shared pool (engine/stock.h): slot drains park pages in the
// group's bucket instead of walking the page_counters, stock misses take them
// back, and every drain path returns them to the counters.
#include <climits>
#include <memory>
#include <vector>

#include "engine/stock.h"
#include "gtest/gtest.h"
#include "tests/engine/stock_test_util.h"

namespace cgacct {
namespace {

constexpr uint64_t kMax = static_cast<uint64_t>(LONG_MAX) / 4096;

class StockPoolTest : public ::testing::Test {
 protected:
  PageCounter root_{nullptr, kMax};
  MemcgStock stock_{4, kChargeBatchPages, /*pool_buckets=*/64};
};

TEST_F(StockPoolTest, OverflowDrainGoesToThePoolAndBack) {
  PageCounter a(&root_, kMax);
  a.Charge(100);
  stock_.Refill(1, &a, 60);
  stock_.Refill(1, &a, 10);  // 70 > 64: the slot is drained, into the pool
  EXPECT_EQ(stock_.StockedPages(1, &a), 0u);
  EXPECT_EQ(stock_.PooledPages(&a), 70u);
  EXPECT_EQ(a.Read(), 100u);  // still charged: no walk happened
  EXPECT_EQ(stock_.drains(), 1u);

  // A miss on another CPU takes up to a batch from the pool.
  EXPECT_EQ(stock_.TakePooled(&a, 3), 64u);
  EXPECT_EQ(stock_.PooledPages(&a), 6u);
  EXPECT_EQ(stock_.TakePooled(&a, 7), 0u);   // too few pooled
  EXPECT_EQ(stock_.TakePooled(&a, 65), 0u);  // over batch
  EXPECT_EQ(stock_.TakePooled(&a, 6), 6u);
  EXPECT_EQ(stock_.pool_hits(), 2u);
  EXPECT_EQ(a.Read(), 100u);
}

TEST_F(StockPoolTest, EvictionGoesToThePool) {
  std::vector<std::unique_ptr<PageCounter>> groups;
  for (int i = 0; i <= kNrStockSlots; ++i) {
    groups.push_back(std::make_unique<PageCounter>(&root_, kMax));
    groups.back()->Charge(5);
    stock_.Refill(0, groups.back().get(), 5);
  }
  // The 8th evicted a slot: its group's pages are pooled, not uncharged.
  const std::vector<int> evicted = NotInSlots(stock_, 0, groups, kNrStockSlots);
  ASSERT_EQ(evicted.size(), 1u);
  const PageCounter* victim = groups[evicted[0]].get();
  EXPECT_EQ(stock_.StockedPages(0, victim), 0u);
  EXPECT_EQ(stock_.PooledPages(victim), 5u);
  EXPECT_EQ(victim->Read(), 5u);
}

TEST_F(StockPoolTest, BucketCapAndCollisionsUnchargeTheRest) {
  MemcgStock one_bucket(2, kChargeBatchPages, /*pool_buckets=*/1);
  PageCounter a(&root_, kMax), b(&root_, kMax);
  a.Charge(300);
  b.Charge(10);
  for (int i = 0; i < 3; ++i) {
    one_bucket.Refill(0, &a, 60);
    one_bucket.Refill(0, &a, 10);  // 70 pooled per round, capped at 128
  }
  EXPECT_EQ(one_bucket.PooledPages(&a), 2 * uint64_t{kChargeBatchPages});
  EXPECT_EQ(a.Read(), 128u + 90u);  // 210 pooled, 82 over the cap went back
  // b's drain lands in the same (only) bucket: a is evicted, uncharged.
  one_bucket.Refill(1, &b, 60);
  one_bucket.Refill(1, &b, 10);
  EXPECT_EQ(one_bucket.PooledPages(&a), 0u);
  EXPECT_EQ(a.Read(), 90u);
  EXPECT_EQ(one_bucket.PooledPages(&b), 70u);
}

TEST_F(StockPoolTest, DrainAllAndDrainOwnerEmptyThePool) {
  PageCounter p(&root_, kMax), c(&p, kMax), other(&root_, kMax);
  c.Charge(70);
  other.Charge(70);
  for (PageCounter* g : {&c, &other}) {
    stock_.Refill(2, g, 60);
    stock_.Refill(2, g, 10);
  }
  ASSERT_EQ(stock_.PooledPages(&c), 70u);
  ASSERT_TRUE(stock_.DrainAll(&p));
  EXPECT_EQ(stock_.PooledPages(&c), 0u);
  EXPECT_EQ(p.Read(), 0u);
  EXPECT_EQ(stock_.PooledPages(&other), 70u);  // not under p
  stock_.DrainOwner(&other);
  EXPECT_EQ(stock_.PooledPages(&other), 0u);
  EXPECT_EQ(root_.Read(), 0u);
}

TEST_F(StockPoolTest, NoPoolIsTheKernelStock) {
  MemcgStock kernel(2);
  PageCounter a(&root_, kMax);
  a.Charge(70);
  kernel.Refill(0, &a, 60);
  kernel.Refill(0, &a, 10);
  EXPECT_EQ(a.Read(), 0u);
  EXPECT_EQ(kernel.TakePooled(&a, 1), 0u);
}

}  // namespace
}  // namespace cgacct
