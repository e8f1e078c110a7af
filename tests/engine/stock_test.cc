#include "engine/stock.h"

#include <climits>
#include <memory>
#include <vector>

#include "tests/engine/stock_test_util.h"

#include "gtest/gtest.h"

namespace cgacct {
namespace {

constexpr uint64_t kMax = static_cast<uint64_t>(LONG_MAX) / 4096;

class StockTest : public ::testing::Test {
 protected:
  PageCounter root_{nullptr, kMax};
  MemcgStock stock_{4};
};

TEST_F(StockTest, ConsumeHitsOnlyTheOwnerWithEnoughPages) {
  PageCounter a(&root_, kMax), b(&root_, kMax);
  a.Charge(10);
  stock_.Refill(0, &a, 10);
  EXPECT_EQ(stock_.StockedPages(0, &a), 10u);
  EXPECT_TRUE(stock_.Consume(0, &a, 4));
  EXPECT_EQ(stock_.StockedPages(0, &a), 6u);
  EXPECT_FALSE(stock_.Consume(0, &a, 7));   // too few
  EXPECT_FALSE(stock_.Consume(1, &a, 1));   // other CPU
  EXPECT_FALSE(stock_.Consume(0, &b, 1));   // other owner
  EXPECT_FALSE(stock_.Consume(0, &a, 65));  // over batch
  EXPECT_EQ(stock_.hits(), 1u);
  EXPECT_EQ(a.Read(), 10u);  // consuming moves no counter
}

TEST_F(StockTest, RefillPastBatchDrainsTheWholeSlot) {
  PageCounter a(&root_, kMax);
  a.Charge(100);
  stock_.Refill(0, &a, 60);
  EXPECT_EQ(a.Read(), 100u);
  stock_.Refill(0, &a, 10);  // 70 > 64: all 70 go back
  EXPECT_EQ(stock_.StockedPages(0, &a), 0u);
  EXPECT_EQ(a.Read(), 30u);
  EXPECT_EQ(root_.Read(), 30u);
  EXPECT_EQ(stock_.drains(), 1u);
}

TEST_F(StockTest, RefillOverBatchUnchargesDirectly) {
  PageCounter a(&root_, kMax);
  a.Charge(100);
  stock_.Refill(0, &a, 65);
  EXPECT_EQ(stock_.StockedPages(0, &a), 0u);
  EXPECT_EQ(a.Read(), 35u);
}

TEST_F(StockTest, EighthGroupEvictsOneSlot) {
  std::vector<std::unique_ptr<PageCounter>> groups;
  for (int i = 0; i < kNrStockSlots + 1; ++i) {
    groups.push_back(std::make_unique<PageCounter>(&root_, kMax));
    groups.back()->Charge(5);
  }
  for (int i = 0; i < kNrStockSlots; ++i) stock_.Refill(0, groups[i].get(), 5);
  for (int i = 0; i < kNrStockSlots; ++i)
    EXPECT_EQ(stock_.StockedPages(0, groups[i].get()), 5u);
  // The 8th takes one slot (a random one): its group's pages are uncharged.
  stock_.Refill(0, groups[7].get(), 5);
  const std::vector<int> evicted =
      NotInSlots(stock_, 0, groups, kNrStockSlots);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(groups[evicted[0]]->Read(), 0u);
  EXPECT_EQ(stock_.StockedPages(0, groups[7].get()), 5u);
  EXPECT_EQ(stock_.drains(), 1u);
  EXPECT_EQ(root_.Read(), 5u * kNrStockSlots);
}

TEST_F(StockTest, DrainAllDrainsOnlyCpusHoldingTheSubtree) {
  PageCounter p(&root_, kMax), c(&p, kMax), other(&root_, kMax);
  c.Charge(8);
  other.Charge(8);
  stock_.Refill(1, &c, 8);
  stock_.Refill(2, &other, 8);
  ASSERT_TRUE(stock_.DrainAll(&p));
  EXPECT_EQ(stock_.StockedPages(1, &c), 0u);
  EXPECT_EQ(c.Read(), 0u);
  EXPECT_EQ(p.Read(), 0u);
  EXPECT_EQ(stock_.StockedPages(2, &other), 8u);  // not under p
  ASSERT_TRUE(stock_.DrainAll(nullptr));
  EXPECT_EQ(other.Read(), 0u);
  EXPECT_EQ(root_.Read(), 0u);
}

TEST_F(StockTest, DrainOwnerEmptiesEveryCpu) {
  PageCounter a(&root_, kMax);
  a.Charge(12);
  for (int cpu = 0; cpu < 4; ++cpu) stock_.Refill(cpu, &a, 3);
  stock_.DrainOwner(&a);
  for (int cpu = 0; cpu < 4; ++cpu) EXPECT_EQ(stock_.StockedPages(cpu, &a), 0u);
  EXPECT_EQ(a.Read(), 0u);
}

}  // namespace
}  // namespace cgacct
