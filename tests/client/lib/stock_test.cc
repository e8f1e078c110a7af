// The client library's remote per-CPU stock (client/lib/stock.h) on its
// own: consume, refill and its cap, LRU eviction, the adaptive batch,
// drains of a subtree, and the whole-stock operations of Reopen, Reconcile
// and Close. One slot, so every call lands on it whatever CPU runs it.
#include "client/lib/stock.h"

#include <vector>

#include "gtest/gtest.h"

namespace cgacct::client::internal {
namespace {

constexpr int kAnon = 1;
constexpr int kFile = 2;

// One slot, 3 groups a slot, first batch 64, cap 256.
Stock OneSlot(uint64_t batch_pages = 64) {
  return Stock(1, 3, batch_pages, 256);
}

TEST(ClientStockTest, EmptyStockMissesWithTheFirstBatch) {
  Stock stock = OneSlot();
  uint64_t batch = 0;
  EXPECT_FALSE(stock.Consume("/a", kAnon, 1, &batch));
  EXPECT_EQ(batch, 64u);
  EXPECT_EQ(stock.pages(), 0u);
}

TEST(ClientStockTest, RefillThenConsumeHitsAndCounts) {
  Stock stock = OneSlot();
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 10, &excess);
  EXPECT_TRUE(excess.empty());
  uint64_t batch = 0;
  EXPECT_TRUE(stock.Consume("/a", kAnon, 4, &batch));
  EXPECT_TRUE(stock.Consume("/a", kAnon, 6, &batch));
  EXPECT_EQ(stock.pages(), 0u);
  // Another kind of the same group is another entry.
  stock.Refill("/a", kFile, 5, &excess);
  EXPECT_FALSE(stock.Consume("/a", kAnon, 1, &batch));
  stock.CountCharge();
  uint64_t charges = 0, hits = 0;
  stock.CountCharges(&charges, &hits);
  EXPECT_EQ(charges, 3u);
  EXPECT_EQ(hits, 2u);
  EXPECT_EQ(stock.pages(), 5u);
}

// refill_stock() drains the whole stock once it passes the batch
// (drain_stock()): here the entry, once it passes the cap.
TEST(ClientStockTest, RefillPastTheCapReturnsTheWholeEntry) {
  Stock stock = OneSlot();
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 300, &excess);
  ASSERT_EQ(excess.size(), 1u);
  EXPECT_EQ(excess[0].path, "/a");
  EXPECT_EQ(excess[0].kind, kAnon);
  EXPECT_EQ(excess[0].nr_pages, 300u);
  EXPECT_EQ(stock.pages(), 0u);
  // A shrinking application: 3-page frees fill the entry to the cap with
  // no return, the one that passes it returns all, and the next ones
  // accumulate again: 1 return per 86 frees, not one per free past the cap.
  excess.clear();
  int returns = 0;
  for (int i = 0; i < 860; ++i) {
    stock.Refill("/a", kAnon, 3, &excess);
    if (!excess.empty()) {
      ++returns;
      EXPECT_EQ(excess[0].nr_pages, 258u) << i;
      excess.clear();
    }
  }
  EXPECT_EQ(returns, 10);
  EXPECT_EQ(stock.pages(), 0u);
  // Exactly at the cap is kept.
  stock.Refill("/a", kAnon, 256, &excess);
  EXPECT_TRUE(excess.empty());
  EXPECT_EQ(stock.pages(), 256u);
}

TEST(ClientStockTest, NoBatchKeepsNothing) {
  Stock stock = OneSlot(/*batch_pages=*/0);
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 7, &excess);
  ASSERT_EQ(excess.size(), 1u);
  EXPECT_EQ(excess[0].nr_pages, 7u);
  EXPECT_EQ(stock.pages(), 0u);
}

TEST(ClientStockTest, AFullSlotEvictsItsLeastRecentlyUsedEntry) {
  Stock stock = OneSlot();
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 1, &excess);
  stock.Refill("/b", kAnon, 2, &excess);
  stock.Refill("/c", kAnon, 3, &excess);
  uint64_t batch = 0;
  ASSERT_TRUE(stock.Consume("/a", kAnon, 1, &batch));  // /b is now oldest
  stock.Refill("/d", kAnon, 4, &excess);
  ASSERT_EQ(excess.size(), 1u);
  EXPECT_EQ(excess[0].path, "/b");
  EXPECT_EQ(excess[0].nr_pages, 2u);
  EXPECT_EQ(stock.pages(), 3u + 4u);
}

TEST(ClientStockTest, TheBatchDoublesOnQuickMissesUpToTheCap) {
  Stock stock = OneSlot();
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 1, &excess);
  uint64_t batch = 0;
  // The first miss of an entry never refilled by a miss: more than 1 s
  // since, so the batch halves down to the first batch.
  EXPECT_FALSE(stock.Consume("/a", kAnon, 2, &batch));
  EXPECT_EQ(batch, 64u);
  // Misses within 100 ms of each other double it, up to max_batch_pages.
  EXPECT_FALSE(stock.Consume("/a", kAnon, 2, &batch));
  EXPECT_EQ(batch, 128u);
  EXPECT_FALSE(stock.Consume("/a", kAnon, 2, &batch));
  EXPECT_EQ(batch, 256u);
  EXPECT_FALSE(stock.Consume("/a", kAnon, 2, &batch));
  EXPECT_EQ(batch, 256u);
}

TEST(ClientStockTest, TakeDrainsASubtreeAtSegmentBoundaries) {
  Stock stock(2, 7, 64, 256);
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 1, &excess);
  stock.Refill("/a/x", kAnon, 2, &excess);
  stock.Refill("/a/x", kFile, 3, &excess);
  stock.Refill("/ab", kAnon, 4, &excess);
  stock.Refill("/b", kAnon, 5, &excess);
  std::vector<Returned> taken = stock.Take("/a");
  ASSERT_EQ(taken.size(), 3u);  // sorted by (path, kind)
  EXPECT_EQ(taken[0].path, "/a");
  EXPECT_EQ(taken[0].nr_pages, 1u);
  EXPECT_EQ(taken[1].path, "/a/x");
  EXPECT_EQ(taken[1].kind, kAnon);
  EXPECT_EQ(taken[2].path, "/a/x");
  EXPECT_EQ(taken[2].kind, kFile);
  EXPECT_EQ(stock.pages(), 4u + 5u);  // "/ab" is not below "/a"
  EXPECT_TRUE(stock.Take("/a").empty());
  std::vector<Returned> all = stock.Take("/");
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(stock.pages(), 0u);
}

TEST(ClientStockTest, TakeAllEmptiesEverySlot) {
  Stock stock(2, 7, 64, 256);
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 3, &excess);
  stock.Refill("/a", kAnon, 4, &excess);
  stock.Refill("/b", kFile, 5, &excess);
  std::map<HeldKey, uint64_t> all = stock.TakeAll();
  EXPECT_EQ((all[{"/a", kAnon}]), 7u);
  EXPECT_EQ((all[{"/b", kFile}]), 5u);
  EXPECT_EQ(stock.pages(), 0u);
}

TEST(ClientStockTest, RemoveTakesWhatItCanAndSaysWhatWasMissing) {
  Stock stock = OneSlot();
  std::vector<Returned> excess;
  stock.Refill("/a", kAnon, 10, &excess);
  EXPECT_EQ(stock.Remove({"/a", kAnon}, 4), 0u);
  EXPECT_EQ(stock.pages(), 6u);
  EXPECT_EQ(stock.Remove({"/a", kAnon}, 9), 3u);
  EXPECT_EQ(stock.pages(), 0u);
  EXPECT_EQ(stock.Remove({"/b", kAnon}, 2), 2u);
}

}  // namespace
}  // namespace cgacct::client::internal
