#include "engine/rstat.h"

#include <atomic>
#include <functional>
#include <map>
#include <thread>
#include <utility>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/clock.h"
#include "engine/mutex.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

class RecordingObserver : public EngineObserver {
 public:
  void OnFlushLockHold(const FlushLockHold& hold) override {
    ++holds;
    cpus += hold.cpus_walked;
  }
  void OnFlushDone(absl::Duration, int cpus_walked,
                   int groups_folded) override {
    ++flushes;
    flush_cpus += cpus_walked;
    folded += groups_folded;
  }
  int holds = 0, cpus = 0, flushes = 0, flush_cpus = 0, folded = 0;
};

// A tree of RstatGroups (node: parent): 1:0 2:0 3:1 4:1 5:2 6:4.
class HoldObserver : public EngineObserver {
 public:
  void OnFlushLockHold(const FlushLockHold& hold) override {
    holds.push_back(hold);
  }
  void OnFlushDone(absl::Duration, int, int) override {}
  std::vector<FlushLockHold> holds;
};

struct Tree {
  explicit Tree(Rstat* rstat) {
    const int parent[] = {-1, 0, 0, 1, 1, 2, 4};
    for (int p : parent)
      nodes.push_back(std::make_unique<RstatGroup>(
          rstat, p < 0 ? nullptr : nodes[p].get()));
    parents.assign(std::begin(parent), std::end(parent));
  }
  bool InSubtree(int node, int root) const {
    for (int n = node; n >= 0; n = parents[n])
      if (n == root) return true;
    return false;
  }
  std::vector<std::unique_ptr<RstatGroup>> nodes;
  std::vector<int> parents;
};

class RstatTest : public ::testing::TestWithParam<FlushLockConfig> {};

// A clock whose cycle counter moves 1 us per read, so hold timing is exact.
class TickingClock final : public Clock {
 public:
  int64_t NowNs() const override { return ns_.load(); }
  int64_t NowCycles() const override { return ns_.fetch_add(1000); }
  absl::Time WallNow() const override {
    return absl::UnixEpoch() + absl::Nanoseconds(NowNs());
  }

 private:
  mutable std::atomic<int64_t> ns_{1'000'000'000};
};

}  // namespace

// Names the parameter in test output (instead of its bytes).
void PrintTo(const FlushLockConfig& config, std::ostream* os) {
  *os << FlushLockConfigName(config) << "("
      << FlushPreemptModelName(config.preempt_model) << ")";
}

void PrintTo(FlushPreemptModel model, std::ostream* os) {
  *os << FlushPreemptModelName(model);
}

namespace {

std::vector<FlushLockConfig> AllPolicies() {
  FlushLockConfig batch;
  batch.policy = FlushLockPolicy::kBatch;
  batch.batch_cpus = 3;
  FlushLockConfig adaptive;  // one CPU with updates per hold (no budget)
  adaptive.policy = FlushLockPolicy::kAdaptive;
  FlushLockConfig adaptive_budget = adaptive;  // holds across CPUs
  adaptive_budget.hold_budget = absl::Microseconds(50);
  FlushLockConfig whole_full;
  whole_full.policy = FlushLockPolicy::kWhole;
  whole_full.preempt_model = FlushPreemptModel::kFull;
  return {FlushLockConfig{FlushLockPolicy::kPerCpu},
          FlushLockConfig{FlushLockPolicy::kWhole}, whole_full, batch,
          adaptive, adaptive_budget};
}

TEST_P(RstatTest, AfterAFlushEveryAncestorEqualsItsSubtreeSum) {
  constexpr int kCpus = 16;
  RecordingObserver observer;
  Rstat rstat(kCpus, GetParam(), &observer);
  Tree tree(&rstat);
  std::mt19937 rng(42);
  std::vector<int64_t> own(tree.nodes.size(), 0);  // per node, kStatAnon
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 500; ++i) {
      int node = rng() % tree.nodes.size();
      int cpu = rng() % kCpus;
      int64_t delta = static_cast<int64_t>(rng() % 100) - 30;
      int64_t deltas[kNrStatItems] = {};
      deltas[kStatAnon] = delta;
      deltas[kStatPgscanDirect] = 1;
      rstat.Update(tree.nodes[node].get(), cpu, deltas, 1);
      own[node] += delta;
    }
    // Flush a random subtree first (partial flushes must not break totals),
    // then the root.
    rstat.Flush(tree.nodes[rng() % tree.nodes.size()].get());
    rstat.Flush(tree.nodes[0].get());
    for (size_t root = 0; root < tree.nodes.size(); ++root) {
      int64_t sum = 0;
      for (size_t n = 0; n < tree.nodes.size(); ++n)
        if (tree.InSubtree(n, root)) sum += own[n];
      EXPECT_EQ(tree.nodes[root]->total(kStatAnon), std::max<int64_t>(sum, 0))
          << "node " << root << " round " << round;
    }
  }
  EXPECT_EQ(tree.nodes[0]->total(kStatPgscanDirect), 2500);
  EXPECT_EQ(observer.flushes, 10);
  switch (GetParam().policy) {
    case FlushLockPolicy::kPerCpu:
      EXPECT_EQ(observer.holds, 10 * kCpus);  // one hold per CPU
      EXPECT_EQ(observer.cpus, 10 * kCpus);
      break;
    case FlushLockPolicy::kWhole:
      EXPECT_EQ(observer.holds, 10);  // uncontended: one hold per flush
      EXPECT_EQ(observer.cpus, 10 * kCpus);
      break;
    case FlushLockPolicy::kBatch:
      EXPECT_EQ(observer.holds, 10 * ((kCpus + 2) / 3));  // 3 CPUs per hold
      EXPECT_EQ(observer.cpus, 10 * kCpus);
      break;
    case FlushLockPolicy::kAdaptive:
      // Clean CPUs are passed without the lock; dirty ones inside holds
      // bounded by the budget.
      EXPECT_GE(observer.holds, 1);
      EXPECT_LE(observer.cpus, 10 * kCpus);
      break;
  }
}

TEST_P(RstatTest, LongestHoldsAreRecordedLongestFirst) {
  Rstat rstat(8, GetParam(), nullptr);
  RstatGroup root(&rstat, nullptr, "/");
  RstatGroup child(&rstat, &root, "/child");
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  for (int i = 0; i < 40; ++i) {
    rstat.Update(&child, i % 8, d, 1);
    rstat.Flush(i % 2 ? &root : &child);
  }
  std::vector<FlushHoldRecord> holds = rstat.LongestHolds();
  ASSERT_FALSE(holds.empty());
  EXPECT_LE(holds.size(), static_cast<size_t>(Rstat::kNrLongestHolds));
  for (size_t i = 1; i < holds.size(); ++i)
    EXPECT_GE(holds[i - 1].hold, holds[i].hold);
  EXPECT_EQ(holds[0].hold, rstat.hold_max());
  EXPECT_EQ(holds[0].policy, FlushLockConfigName(GetParam()));
  for (const FlushHoldRecord& h : holds) {
    EXPECT_TRUE(h.root_path == "/" || h.root_path == "/child") << h.root_path;
    EXPECT_GE(h.cpus_walked, 1);
    EXPECT_LE(absl::Now() - h.when, absl::Minutes(1));
  }
}

TEST_P(RstatTest, FlushOfASubtreeLeavesOthersPendingUntilTheirFlush) {
  Rstat rstat(4, GetParam(), nullptr);
  Tree tree(&rstat);
  int64_t d[kNrStatItems] = {};
  d[kStatFile] = 7;
  rstat.Update(tree.nodes[3].get(), 1, d, 7);
  rstat.Update(tree.nodes[5].get(), 2, d, 7);
  rstat.Flush(tree.nodes[1].get());
  EXPECT_EQ(tree.nodes[3]->total(kStatFile), 7);
  EXPECT_EQ(tree.nodes[1]->total(kStatFile), 7);
  EXPECT_EQ(tree.nodes[5]->total(kStatFile), 0);  // not flushed yet
  EXPECT_EQ(tree.nodes[0]->total(kStatFile), 0);  // pending in the root
  rstat.Flush(tree.nodes[0].get());
  EXPECT_EQ(tree.nodes[5]->total(kStatFile), 7);
  EXPECT_EQ(tree.nodes[2]->total(kStatFile), 7);
  EXPECT_EQ(tree.nodes[0]->total(kStatFile), 14);
}

// Each hold of the flush lock is one scoped object: one OnFlushLockHold per
// hold, every CPU the flush walks inside exactly one hold, and the lock free
// again after every flush (a leaked hold would hang the next Flush()).
TEST_P(RstatTest, HoldsFollowThePolicyAndAlwaysEnd) {
  constexpr int kCpus = 8;
  RecordingObserver observer;
  Rstat rstat(kCpus, GetParam(), &observer);
  Tree tree(&rstat);
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  rstat.Update(tree.nodes[3].get(), 2, d, 1);
  rstat.Update(tree.nodes[6].get(), 5, d, 1);
  rstat.Flush(tree.nodes[0].get());
  EXPECT_EQ(tree.nodes[0]->total(kStatAnon), 2);
  switch (GetParam().policy) {
    case FlushLockPolicy::kPerCpu:
      EXPECT_EQ(observer.holds, kCpus);
      EXPECT_EQ(observer.cpus, kCpus);
      break;
    case FlushLockPolicy::kWhole:
      EXPECT_EQ(observer.holds, 1);
      EXPECT_EQ(observer.cpus, kCpus);
      break;
    case FlushLockPolicy::kBatch:  // batch:3
      EXPECT_EQ(observer.holds, 3);
      EXPECT_EQ(observer.cpus, kCpus);
      break;
    case FlushLockPolicy::kAdaptive:
      // Only the two dirty CPUs are walked: one hold, or two if the budget
      // ran out between them.
      EXPECT_GE(observer.holds, 1);
      EXPECT_LE(observer.holds, 2);
      EXPECT_EQ(observer.cpus, 2);
      break;
  }
  // Nothing updated since: kAdaptive takes no hold at all.
  const int holds_before = observer.holds;
  rstat.Flush(tree.nodes[0].get());
  if (GetParam().policy == FlushLockPolicy::kAdaptive) {
    EXPECT_EQ(observer.holds, holds_before);
  }
  rstat.Update(tree.nodes[6].get(), kCpus - 1, d, 1);
  rstat.Flush(tree.nodes[4].get());
  rstat.Flush(tree.nodes[0].get());
  EXPECT_EQ(tree.nodes[0]->total(kStatAnon), 3);
  EXPECT_EQ(observer.flushes, 4);
}

TEST_P(RstatTest, NegativeTotalsReadAsZero) {
  Rstat rstat(2, GetParam(), nullptr);
  Tree tree(&rstat);
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = -5;
  rstat.Update(tree.nodes[1].get(), 0, d, 5);
  rstat.Flush(tree.nodes[0].get());
  EXPECT_EQ(tree.nodes[1]->total(kStatAnon), 0);
}

TEST_P(RstatTest, ThresholdCountsPendingUpdateMagnitude) {
  constexpr int kCpus = 2;
  Rstat rstat(kCpus, GetParam(), nullptr);
  Tree tree(&rstat);
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  // 64 x 2 = 128 pages of magnitude are needed before a flush is due.
  for (int i = 0; i < 128; ++i)
    rstat.Update(tree.nodes[6].get(), i % kCpus, d, 1);
  EXPECT_FALSE(rstat.NeedsFlush(tree.nodes[6].get()));
  for (int i = 0; i < 64; ++i) rstat.Update(tree.nodes[6].get(), 0, d, 1);
  EXPECT_TRUE(rstat.NeedsFlush(tree.nodes[6].get()));
  EXPECT_TRUE(rstat.NeedsFlush(tree.nodes[0].get()));  // ancestors too
  rstat.Flush(tree.nodes[0].get());
  EXPECT_FALSE(rstat.NeedsFlush(tree.nodes[6].get()));
  EXPECT_FALSE(rstat.NeedsFlush(tree.nodes[0].get()));
}

// flush_cpus counts the CPUs a flush walked: every CPU under the lock-holding
// policies, only the dirty ones under kAdaptive.
TEST_P(RstatTest, FlushCpusCountsCpusWalked) {
  constexpr int kCpus = 64;
  RecordingObserver observer;
  Rstat rstat(kCpus, GetParam(), &observer);
  Tree tree(&rstat);
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  // A mostly idle tree: updates on 2 CPUs of 64.
  rstat.Update(tree.nodes[3].get(), 5, d, 1);
  rstat.Update(tree.nodes[6].get(), 40, d, 1);
  rstat.Flush(tree.nodes[0].get());
  const bool adaptive = GetParam().policy == FlushLockPolicy::kAdaptive;
  EXPECT_EQ(rstat.flush_cpus(), adaptive ? 2u : uint64_t{kCpus});
  EXPECT_EQ(observer.flush_cpus, adaptive ? 2 : kCpus);
  EXPECT_EQ(observer.cpus, observer.flush_cpus);  // the holds' CPUs add up
  EXPECT_EQ(tree.nodes[0]->total(kStatAnon), 2);
  // Nothing updated since: kAdaptive walks no CPU at all.
  rstat.Flush(tree.nodes[0].get());
  EXPECT_EQ(rstat.flush_cpus(), adaptive ? 2u : uint64_t{2 * kCpus});
  EXPECT_EQ(rstat.flushes(), 2u);
}

// Hold timing, the adaptive budget and flush bookkeeping read the injected
// clock and nothing else.
TEST(RstatClockTest, HoldsAndTheAdaptiveBudgetAreTimedOnTheInjectedClock) {
  constexpr int kCpus = 64;
  TickingClock clock;
  HoldObserver observer;
  FlushLockConfig config;
  config.policy = FlushLockPolicy::kAdaptive;
  config.hold_budget = absl::Microseconds(50);
  Rstat rstat(kCpus, config, &observer, clock);
  RstatGroup root(&rstat, nullptr, "/");
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  for (int cpu = 0; cpu < kCpus; ++cpu) rstat.Update(&root, cpu, d, 1);
  rstat.Flush(&root);
  // One clock read after each CPU but the last: the 50th read reaches the
  // budget, so the first hold walks 50 CPUs and the second the other 14.
  ASSERT_EQ(observer.holds.size(), 2u);
  EXPECT_EQ(observer.holds[0].cpus_walked, 50);
  EXPECT_EQ(observer.holds[0].hold, absl::Microseconds(51));
  EXPECT_EQ(observer.holds[1].cpus_walked, 14);
  EXPECT_EQ(rstat.hold_max_cpus_walked(), 50);  // the most work of one hold
  EXPECT_EQ(rstat.hold_max_groups_folded(), 50);
  EXPECT_EQ(rstat.hold_wall_max(), absl::Microseconds(51));
  EXPECT_EQ(root.last_flush_ns(), clock.NowNs());
  EXPECT_EQ(root.total(kStatAnon), kCpus);
  for (const FlushHoldRecord& h : rstat.LongestHolds())
    EXPECT_LT(h.when, absl::UnixEpoch() + absl::Hours(1));  // clock's wall time
}

// adaptive's default (no budget) holds the lock around one CPU with updates
// at a time, per_cpu's longest hold, and passes clean CPUs without it: on
// the same clock a budget of 50 µs would fold 50 CPUs in its first hold.
TEST(RstatClockTest, AdaptiveWithoutABudgetHoldsOneCpuWithUpdatesAtATime) {
  constexpr int kCpus = 64;
  TickingClock clock;
  HoldObserver observer;
  FlushLockConfig config;
  config.policy = FlushLockPolicy::kAdaptive;
  ASSERT_EQ(config.hold_budget, absl::ZeroDuration());  // the default
  Rstat rstat(kCpus, config, &observer, clock);
  RstatGroup root(&rstat, nullptr, "/");
  RstatGroup child(&rstat, &root, "/a");
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  for (int cpu = 0; cpu < kCpus; cpu += 2) rstat.Update(&child, cpu, d, 1);
  rstat.Flush(&root);
  ASSERT_EQ(observer.holds.size(), static_cast<size_t>(kCpus / 2));
  for (const FlushLockHold& hold : observer.holds) {
    EXPECT_EQ(hold.cpus_walked, 1);
    EXPECT_EQ(hold.groups_folded, 2);  // the child and the root
  }
  EXPECT_EQ(root.total(kStatAnon), kCpus / 2);
  for (const FlushHoldRecord& h : rstat.LongestHolds())
    EXPECT_EQ(h.cpus_walked, 1);
  EXPECT_EQ(rstat.hold_max_cpus_walked(), 1);
  EXPECT_EQ(rstat.hold_max_groups_folded(), 2);
}

// Without a budget the hold ends after one CPU whatever the clock reads,
// even a cycle counter that steps back (a TSC out of step between cores).
TEST(RstatClockTest, AdaptiveWithoutABudgetIgnoresAClockThatStepsBack) {
  class BackwardsClock final : public Clock {
   public:
    int64_t NowNs() const override { return 1'000'000'000; }
    int64_t NowCycles() const override { return cycles_.fetch_sub(1000); }

   private:
    mutable std::atomic<int64_t> cycles_{1'000'000'000};
  };
  constexpr int kCpus = 16;
  BackwardsClock clock;
  HoldObserver observer;
  FlushLockConfig config;
  config.policy = FlushLockPolicy::kAdaptive;
  Rstat rstat(kCpus, config, &observer, clock);
  RstatGroup root(&rstat, nullptr, "/");
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  for (int cpu = 0; cpu < kCpus; ++cpu) rstat.Update(&root, cpu, d, 1);
  rstat.Flush(&root);
  ASSERT_EQ(observer.holds.size(), static_cast<size_t>(kCpus));
  for (const FlushLockHold& hold : observer.holds)
    EXPECT_EQ(hold.cpus_walked, 1);
  EXPECT_EQ(root.total(kStatAnon), kCpus);
}

INSTANTIATE_TEST_SUITE_P(Policies, RstatTest,
                         ::testing::ValuesIn(AllPolicies()),
                         [](const auto& info) {
                           return absl::StrCat(
                               FlushLockPolicyName(info.param.policy), "_",
                               FlushPreemptModelName(info.param.preempt_model),
                               info.param.hold_budget > absl::ZeroDuration()
                                   ? "_budget"
                                   : "");
                         });

// A clock whose first cycle read (the flush lock just taken, in the first
// FlushHold) runs `on_first_hold` on the holder's thread; then real time.
class HookClock final : public Clock {
 public:
  explicit HookClock(std::function<void()> on_first_hold)
      : on_first_hold_(std::move(on_first_hold)) {}
  int64_t NowNs() const override { return Clock::Real().NowNs(); }
  int64_t NowCycles() const override {
    if (!fired_.exchange(true)) on_first_hold_();
    return NowNs();
  }

 private:
  const std::function<void()> on_first_hold_;
  mutable std::atomic<bool> fired_{false};
};

// Seed 000: under FlushPreemptModel::kNone a kWhole flush holds the lock
// across every CPU even while another flusher waits (spin_needbreak() is 0
// without CONFIG_PREEMPTION); under kFull it drops the lock for the waiter
// after the CPU it is on. The waiter is made to block while the first hold
// is in progress, before the holder walks its first CPU.
class RstatPreemptModelTest
    : public ::testing::TestWithParam<FlushPreemptModel> {};

TEST_P(RstatPreemptModelTest, WholeDropsTheLockForAWaiterOnlyUnderFull) {
  constexpr int kCpus = 64;
  struct ThreadHolds final : public EngineObserver {
    void OnFlushLockHold(const FlushLockHold& hold) override {
      MutexLock l(&mu);
      holds.emplace_back(std::this_thread::get_id(), hold);
    }
    void OnFlushDone(absl::Duration, int, int) override {}
    Mutex mu;  // engine/mutex.h: visible to TSan, unlike absl::Mutex here
    std::vector<std::pair<std::thread::id, FlushLockHold>> holds
        ABSL_GUARDED_BY(mu);
  } observer;
  Rstat* rstat_ptr = nullptr;
  RstatGroup* other_ptr = nullptr;
  std::thread waiter;
  HookClock clock([&] {
    waiter = std::thread([&] { rstat_ptr->Flush(other_ptr); });
    while (rstat_ptr->flush_waiters() == 0) std::this_thread::yield();
  });
  FlushLockConfig config;
  config.policy = FlushLockPolicy::kWhole;
  config.preempt_model = GetParam();
  Rstat rstat(kCpus, config, &observer, clock);
  rstat_ptr = &rstat;
  RstatGroup root(&rstat, nullptr, "/");
  RstatGroup child(&rstat, &root, "/a");
  RstatGroup other(&rstat, &root, "/b");
  other_ptr = &other;
  int64_t d[kNrStatItems] = {};
  d[kStatAnon] = 1;
  for (int cpu = 0; cpu < kCpus; ++cpu) rstat.Update(&child, cpu, d, 1);
  rstat.Flush(&root);
  waiter.join();
  EXPECT_EQ(root.total(kStatAnon), kCpus);
  const std::thread::id me = std::this_thread::get_id();
  MutexLock l(&observer.mu);
  std::vector<FlushLockHold> mine;
  for (const auto& [tid, hold] : observer.holds)
    if (tid == me) mine.push_back(hold);
  ASSERT_FALSE(mine.empty());
  int cpus = 0, folded = 0;
  for (const FlushLockHold& h : mine) {
    cpus += h.cpus_walked;
    folded += h.groups_folded;
  }
  EXPECT_EQ(cpus, kCpus);
  EXPECT_EQ(folded, 2 * kCpus);  // child and root on every CPU
  if (GetParam() == FlushPreemptModel::kNone) {
    // One hold covers every CPU although a flusher waited all along.
    ASSERT_EQ(mine.size(), 1u);
    EXPECT_EQ(mine[0].cpus_walked, kCpus);
    EXPECT_EQ(mine[0].groups_folded, 2 * kCpus);
  } else {
    // The waiter was there before the first CPU: the first hold ends after
    // one CPU and the flush goes on in further holds.
    EXPECT_EQ(mine[0].cpus_walked, 1);
    EXPECT_GE(mine.size(), 2u);
  }
  // The waiter's flush took the lock and walked every CPU too.
  int waiter_cpus = 0;
  for (const auto& [tid, hold] : observer.holds)
    if (tid != me) waiter_cpus += hold.cpus_walked;
  EXPECT_EQ(waiter_cpus, kCpus);
}

INSTANTIATE_TEST_SUITE_P(Models, RstatPreemptModelTest,
                         ::testing::Values(FlushPreemptModel::kNone,
                                           FlushPreemptModel::kFull),
                         [](const auto& info) {
                           return std::string(
                               FlushPreemptModelName(info.param));
                         });

TEST(FlushPreemptModelTest, ParsesNames) {
  EXPECT_EQ(ParseFlushPreemptModel("none"), FlushPreemptModel::kNone);
  EXPECT_EQ(ParseFlushPreemptModel("full"), FlushPreemptModel::kFull);
  for (const char* bad : {"", "NONE", "voluntary", "full "})
    EXPECT_EQ(ParseFlushPreemptModel(bad), std::nullopt) << bad;
  EXPECT_STREQ(FlushPreemptModelName(FlushPreemptModel::kNone), "none");
  EXPECT_STREQ(FlushPreemptModelName(FlushPreemptModel::kFull), "full");
}

TEST(FlushLockPolicyTest, ParsesNamesAndBatchSizes) {
  int n = 0;
  EXPECT_EQ(ParseFlushLockPolicy("per_cpu"), FlushLockPolicy::kPerCpu);
  EXPECT_EQ(ParseFlushLockPolicy("whole"), FlushLockPolicy::kWhole);
  EXPECT_EQ(ParseFlushLockPolicy("adaptive"), FlushLockPolicy::kAdaptive);
  EXPECT_EQ(ParseFlushLockPolicy("batch:8", &n), FlushLockPolicy::kBatch);
  EXPECT_EQ(n, 8);
  for (const char* bad : {"", "batch", "batch:", "batch:0", "batch:-1",
                          "batch:x", "batch:4097", "PER_CPU", "wholes"})
    EXPECT_FALSE(ParseFlushLockPolicy(bad).has_value()) << bad;
  FlushLockConfig config;
  config.policy = FlushLockPolicy::kBatch;
  config.batch_cpus = 16;
  EXPECT_EQ(FlushLockConfigName(config), "batch:16");
}

}  // namespace
}  // namespace cgacct
