#include "engine/page_counter.h"

#include <climits>

#include "gtest/gtest.h"

namespace cgacct {
namespace {

constexpr uint64_t kMax = static_cast<uint64_t>(LONG_MAX) / 4096;

TEST(PageCounterTest, DefaultsAreMaxAndZero) {
  PageCounter c(nullptr, kMax);
  EXPECT_EQ(c.Read(), 0u);
  EXPECT_EQ(c.max(), kMax);
  EXPECT_EQ(c.high(), kMax);
  EXPECT_EQ(c.min(), 0u);
  EXPECT_EQ(c.low(), 0u);
  EXPECT_EQ(c.page_counter_max(), 2251799813685247u);  // 2^51 - 1
}

TEST(PageCounterTest, ChargeIsHierarchical) {
  PageCounter root(nullptr, kMax), a(&root, kMax), b(&a, kMax);
  b.Charge(10);
  a.Charge(5);
  EXPECT_EQ(b.Read(), 10u);
  EXPECT_EQ(a.Read(), 15u);
  EXPECT_EQ(root.Read(), 15u);
  b.Uncharge(4);
  EXPECT_EQ(b.Read(), 6u);
  EXPECT_EQ(a.Read(), 11u);
  EXPECT_EQ(root.Read(), 11u);
}

TEST(PageCounterTest, TryChargeAllowsUsageEqualToMax) {
  PageCounter root(nullptr, kMax), a(&root, kMax);
  a.SetMax(10);
  PageCounter* fail = nullptr;
  EXPECT_TRUE(a.TryCharge(10, &fail));
  EXPECT_EQ(a.Read(), 10u);
  EXPECT_FALSE(a.TryCharge(1, &fail));
  EXPECT_EQ(fail, &a);
  EXPECT_EQ(a.Read(), 10u);
  EXPECT_EQ(a.failcnt(), 1u);
}

TEST(PageCounterTest, TryChargeRollsBackLevelsBelowTheFailure) {
  PageCounter root(nullptr, kMax), a(&root, kMax), b(&a, kMax), c(&b, kMax);
  a.SetMax(100);
  c.Charge(90);
  PageCounter* fail = nullptr;
  ASSERT_FALSE(c.TryCharge(20, &fail));
  EXPECT_EQ(fail, &a);
  EXPECT_EQ(c.Read(), 90u);
  EXPECT_EQ(b.Read(), 90u);
  EXPECT_EQ(a.Read(), 90u);
  EXPECT_EQ(root.Read(), 90u);  // never reached
  EXPECT_EQ(a.failcnt(), 1u);
  EXPECT_EQ(b.failcnt(), 0u);
  EXPECT_EQ(c.failcnt(), 0u);
  // Peaks raised below the failing level stay, as in the kernel.
  EXPECT_EQ(c.watermark(), 110u);
  EXPECT_EQ(a.watermark(), 90u);
}

TEST(PageCounterTest, WatermarkTracksPeakAndResets) {
  PageCounter root(nullptr, kMax), a(&root, kMax);
  a.Charge(50);
  a.Uncharge(30);
  EXPECT_EQ(a.watermark(), 50u);
  EXPECT_EQ(a.local_watermark(), 50u);
  a.ResetWatermark();
  EXPECT_EQ(a.watermark(), 20u);
  EXPECT_EQ(a.local_watermark(), 20u);
  a.Charge(5);
  EXPECT_EQ(a.watermark(), 25u);
  EXPECT_LE(a.local_watermark(), a.watermark());
}

TEST(PageCounterTest, UnderflowClampsToZeroAndIsCounted) {
  PageCounter root(nullptr, kMax), a(&root, kMax);
  a.Charge(3);
  a.Cancel(5);
  EXPECT_EQ(a.Read(), 0u);
  EXPECT_EQ(a.underflows(), 1u);
}

TEST(PageCounterTest, LimitsClampToPageCounterMax) {
  PageCounter root(nullptr, kMax), a(&root, kMax);
  a.SetMax(UINT64_MAX);
  a.SetHigh(kMax + 7);
  EXPECT_EQ(a.max(), kMax);
  EXPECT_EQ(a.high(), kMax);
}

TEST(PageCounterTest, MarginIsMaxMinusUsageOrZero) {
  PageCounter root(nullptr, kMax), a(&root, kMax);
  a.SetMax(10);
  a.Charge(4);
  EXPECT_EQ(a.Margin(), 6u);
  a.Charge(10);  // forced past max
  EXPECT_EQ(a.Margin(), 0u);
}

// Invariants I2 and I3 of propagate_protected_usage().
void ExpectProtectedUsage(const PageCounter& parent, const PageCounter& c1,
                          const PageCounter& c2) {
  EXPECT_EQ(c1.min_usage(), std::min(c1.Read(), c1.min()));
  EXPECT_EQ(c1.low_usage(), std::min(c1.Read(), c1.low()));
  EXPECT_EQ(c2.min_usage(), std::min(c2.Read(), c2.min()));
  EXPECT_EQ(c2.low_usage(), std::min(c2.Read(), c2.low()));
  EXPECT_EQ(parent.children_min_usage(), c1.min_usage() + c2.min_usage());
  EXPECT_EQ(parent.children_low_usage(), c1.low_usage() + c2.low_usage());
}

class ProtectedUsageTest : public ::testing::TestWithParam<bool> {};

TEST_P(ProtectedUsageTest, PropagatesMinAndLowUsage) {
  PageCounter root(nullptr, kMax), p(&root, kMax), c1(&p, kMax), c2(&p, kMax);
  for (PageCounter* c : {&root, &p, &c1, &c2})
    c->set_read_before_xchg(GetParam());
  c1.SetMin(20);
  c1.SetLow(40);
  c2.SetLow(10);
  ExpectProtectedUsage(p, c1, c2);
  c1.Charge(15);
  ExpectProtectedUsage(p, c1, c2);
  EXPECT_EQ(p.children_min_usage(), 15u);
  c1.Charge(30);  // usage 45: above both
  c2.Charge(5);
  ExpectProtectedUsage(p, c1, c2);
  EXPECT_EQ(p.children_min_usage(), 20u);
  EXPECT_EQ(p.children_low_usage(), 45u);
  c1.Uncharge(40);  // usage 5
  ExpectProtectedUsage(p, c1, c2);
  EXPECT_EQ(p.children_low_usage(), 10u);
  // Setting protection propagates even without a charge.
  c2.SetMin(100);
  ExpectProtectedUsage(p, c1, c2);
  EXPECT_EQ(p.children_min_usage(), 10u);
  // A failed try-charge rolls protected usage back too.
  c1.SetMax(6);
  PageCounter* fail = nullptr;
  EXPECT_FALSE(c1.TryCharge(2, &fail));
  ExpectProtectedUsage(p, c1, c2);
  // The root never consumes protection.
  root.SetMin(50);
  EXPECT_EQ(root.min_usage(), 0u);
}

INSTANTIATE_TEST_SUITE_P(ReadBeforeXchg, ProtectedUsageTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? std::string("ReadFirst")
                                             : std::string("AlwaysXchg");
                         });

TEST(PageCounterTest, LayoutKeepsUsageAwayFromLimits) {
  // usage on line 0, limits on line 2 (static_assert checks the size).
  EXPECT_EQ(sizeof(PageCounter), 3 * kCacheLineBytes);
  EXPECT_EQ(alignof(PageCounter), kCacheLineBytes);
}

}  // namespace
}  // namespace cgacct
