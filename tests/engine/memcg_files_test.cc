// Three cgroup v2 behaviours the engine could not express before issue 25,
// through its public API:
//   - memory.peak written through an open file (Linux 6.12+): that file's
//     own watermark from then on (memory_peak_write()/memory_peak_show()),
//     the group-wide peak unchanged;
//   - memory.oom.group: an OOM kills the whole group, the highest with the
//     flag set between the victim's group and the OOM domain
//     (mem_cgroup_get_oom_group()), counted once in its oom_group_kill
//     (memcg_memory_event(MEMCG_OOM_GROUP_KILL)) and reported to the front
//     end, which ends every holder of the group's pages;
//   - the memory_localevents mount option: memory.events counts a group's
//     own events only.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/observer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::unique_ptr<Engine> MakeEngine(EngineOptions options = EngineOptions()) {
  options.nr_cpus = 2;
  options.periodic_flush_interval = absl::ZeroDuration();
  auto engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

LimitsUpdate Max(uint64_t pages) {
  LimitsUpdate l;
  l.max_pages = pages;
  return l;
}

// --- memory.peak per open file ------------------------------------------------

class PeakWatermarkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = MakeEngine();
    ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  }
  // 64-page charges are exactly one batch: nothing is stocked.
  void Charge(uint64_t n) {
    ASSERT_TRUE(engine_->Charge("/g", n, PageKind::kAnon, 0).ok());
  }
  void Uncharge(uint64_t n) {
    ASSERT_TRUE(engine_->Uncharge("/g", n, PageKind::kAnon, 0).ok());
  }
  uint64_t Read(uint64_t id) {
    auto peak = engine_->ReadPeakWatermark("/g", id);
    EXPECT_TRUE(peak.ok()) << peak.status();
    return peak.ok() ? *peak : ~uint64_t{0};
  }
  uint64_t GroupPeak() { return engine_->GetStats("/g")->memory_peak_pages; }

  std::unique_ptr<Engine> engine_;
};

TEST_F(PeakWatermarkTest, AWriterGetsItsOwnWatermark) {
  Charge(128);
  Uncharge(128);
  ASSERT_EQ(GroupPeak(), 128u);
  // Open + write: this file's peak starts at usage, 0.
  auto w1 = engine_->OpenPeakWatermark("/g");
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(Read(*w1), 0u);
  EXPECT_EQ(GroupPeak(), 128u);  // the group-wide peak is unchanged
  Charge(64);
  EXPECT_EQ(Read(*w1), 64u);
  // A second writer at usage 64: w1 keeps what it saw.
  auto w2 = engine_->OpenPeakWatermark("/g");
  ASSERT_TRUE(w2.ok());
  EXPECT_NE(*w2, *w1);
  Uncharge(64);
  EXPECT_EQ(Read(*w1), 64u);
  EXPECT_EQ(Read(*w2), 64u);
  // w2 written again at usage 0: its peak restarts; w1 still keeps 64
  // although the group's local watermark went back to 0.
  auto reset = engine_->ResetPeakWatermark("/g", *w2);
  ASSERT_TRUE(reset.ok());
  EXPECT_EQ(*reset, 0u);
  EXPECT_EQ(Read(*w2), 0u);
  EXPECT_EQ(Read(*w1), 64u);
  Charge(64);
  Charge(64);
  EXPECT_EQ(Read(*w1), 128u);
  EXPECT_EQ(Read(*w2), 128u);
  EXPECT_EQ(GroupPeak(), 128u);
  Charge(64);
  EXPECT_EQ(Read(*w1), 192u);
  EXPECT_EQ(GroupPeak(), 192u);
  // Closed: the id is gone.
  ASSERT_TRUE(engine_->ClosePeakWatermark("/g", *w1).ok());
  EXPECT_EQ(engine_->ReadPeakWatermark("/g", *w1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->ClosePeakWatermark("/g", *w1).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Read(*w2), 192u);
}

TEST_F(PeakWatermarkTest, WatermarksBelongToTheGroupInstance) {
  auto w = engine_->OpenPeakWatermark("/g");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(engine_->CreateGroup("/h", {}).ok());
  EXPECT_EQ(engine_->ReadPeakWatermark("/h", *w).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(engine_->DeleteGroup("/g").ok());
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  auto read = engine_->ReadPeakWatermark("/g", *w);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("watermark"));
  EXPECT_EQ(engine_->OpenPeakWatermark("/nope").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->OpenPeakWatermark("bad").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- memory.oom.group ----------------------------------------------------------

class KillRecorder : public EngineObserver {
 public:
  void OnFlushLockHold(const FlushLockHold&) override {}
  void OnFlushDone(absl::Duration, int, int) override {}
  void OnOomGroupKill(uint64_t group_id, absl::string_view path) override {
    kills.emplace_back(group_id, std::string(path));
  }
  // Written by the test's own thread only (the charges run on it).
  std::vector<std::pair<uint64_t, std::string>> kills;
};

class OomGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.observer = &recorder_;
    engine_ = MakeEngine(options);
    p_ = *engine_->CreateGroup("/p", Max(128));
    ASSERT_TRUE(engine_->CreateGroup("/p/a", {}).ok());
    ASSERT_TRUE(engine_->CreateGroup("/p/a/x", {}).ok());
    ASSERT_TRUE(engine_->Charge("/p/a/x", 128, PageKind::kAnon, 0).ok());
  }
  MemoryEvents Events(const std::string& path) {
    return engine_->GetStats(path)->events;
  }
  MemoryEvents Local(const std::string& path) {
    return engine_->GetStats(path)->events_local;
  }

  KillRecorder recorder_;
  std::unique_ptr<Engine> engine_;
  GroupInfo p_;
};

TEST_F(OomGroupTest, TheHighestGroupUpToTheOomDomainIsKilled) {
  ASSERT_TRUE(engine_->SetOomGroup("/p", true).ok());
  ASSERT_TRUE(engine_->SetOomGroup("/p/a", true).ok());
  EXPECT_TRUE(engine_->GetStats("/p/a")->oom_group);
  auto r = engine_->Charge("/p/a/x", 1, PageKind::kAnon, 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(OomGroupKillPath(r.status()), "/p");
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("memory.oom.group of /p"));
  EXPECT_THAT(recorder_.kills, ElementsAre(Pair(p_.id, "/p")));
  // oom on the OOM domain, oom_kill on the victim's group, oom_group_kill
  // once, on the killed group.
  EXPECT_EQ(Local("/p").oom, 1u);
  EXPECT_EQ(Local("/p/a/x").oom_kill, 1u);
  EXPECT_EQ(Local("/p").oom_group_kill, 1u);
  EXPECT_EQ(Events("/p").oom_group_kill, 1u);
  EXPECT_EQ(Events("/p/a").oom_group_kill, 0u);
  EXPECT_EQ(Events("/p/a/x").oom_group_kill, 0u);
}

TEST_F(OomGroupTest, AGroupBelowTheDomainIsKilledAlone) {
  ASSERT_TRUE(engine_->SetOomGroup("/p/a", true).ok());
  auto r = engine_->Charge("/p/a/x", 1, PageKind::kAnon, 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(OomGroupKillPath(r.status()), "/p/a");
  ASSERT_EQ(recorder_.kills.size(), 1u);
  EXPECT_EQ(recorder_.kills[0].second, "/p/a");
  EXPECT_EQ(Local("/p/a").oom_group_kill, 1u);
  EXPECT_EQ(Events("/p").oom_group_kill, 1u);  // hierarchical
  EXPECT_EQ(Local("/p").oom_group_kill, 0u);
}

TEST_F(OomGroupTest, NoKillAboveTheDomainForCostlyChargesOrWithoutTheFlag) {
  // Without the flag: a plain OOM.
  auto r = engine_->Charge("/p/a/x", 1, PageKind::kAnon, 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(OomGroupKillPath(r.status()), std::nullopt);
  // The flag above the OOM domain (/p/a's own max fails): not considered.
  ASSERT_TRUE(engine_->SetOomGroup("/p", true).ok());
  ASSERT_TRUE(engine_->SetLimits("/p/a", Max(128)).ok());
  r = engine_->Charge("/p/a/x", 1, PageKind::kAnon, 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("memory.max of /p/a"));
  EXPECT_EQ(OomGroupKillPath(r.status()), std::nullopt);
  // A costly charge fails without OOM, so without a kill.
  ASSERT_TRUE(engine_->SetOomGroup("/p/a", true).ok());
  r = engine_->Charge("/p/a/x", 9, PageKind::kAnon, 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(OomGroupKillPath(r.status()), std::nullopt);
  EXPECT_TRUE(recorder_.kills.empty());
  EXPECT_EQ(Events("/p").oom_group_kill, 0u);
  // Cleared again: no kill.
  ASSERT_TRUE(engine_->SetOomGroup("/p/a", false).ok());
  EXPECT_FALSE(engine_->GetStats("/p/a")->oom_group);
  r = engine_->Charge("/p/a/x", 1, PageKind::kAnon, 1);
  EXPECT_EQ(OomGroupKillPath(r.status()), std::nullopt);
  // The root has no memory.oom.group.
  EXPECT_EQ(engine_->SetOomGroup("/", true).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->SetOomGroup("/nope", true).code(),
            absl::StatusCode::kNotFound);
}

// --- memory_localevents --------------------------------------------------------

class NotifyRecorder : public EngineObserver {
 public:
  void OnFlushLockHold(const FlushLockHold&) override {}
  void OnFlushDone(absl::Duration, int, int) override {}
  void OnMemoryEvents(uint64_t group_id) override {
    notified.push_back(group_id);
  }
  std::vector<uint64_t> notified;  // the test's thread only
};

TEST(LocalEventsTest, MemoryEventsCountsTheGroupsOwnEventsOnly) {
  for (bool local : {false, true}) {
    SCOPED_TRACE(local ? "memory_localevents" : "default");
    NotifyRecorder recorder;
    EngineOptions options;
    options.memory_localevents = local;
    options.observer = &recorder;
    auto engine = MakeEngine(options);
    EXPECT_EQ(engine->GetInfo().memory_localevents, local);
    const GroupInfo p = *engine->CreateGroup("/p", {});
    const GroupInfo a = *engine->CreateGroup("/p/a", Max(64));
    ASSERT_TRUE(engine->Charge("/p/a", 64, PageKind::kAnon, 0).ok());
    recorder.notified.clear();
    ASSERT_FALSE(engine->Charge("/p/a", 1, PageKind::kAnon, 0).ok());  // OOM
    const MemoryEvents pe = engine->GetStats("/p")->events;
    const MemoryEvents ae = engine->GetStats("/p/a")->events;
    const MemoryEvents al = engine->GetStats("/p/a")->events_local;
    EXPECT_EQ(ae.oom, 1u);
    EXPECT_EQ(al.oom, 1u);
    EXPECT_EQ(ae.max, al.max);
    EXPECT_GE(ae.max, 1u);
    if (local) {
      EXPECT_EQ(pe.oom, 0u);
      EXPECT_EQ(pe.max, 0u);
      for (uint64_t id : recorder.notified) EXPECT_EQ(id, a.id);
    } else {
      EXPECT_EQ(pe.oom, 1u);
      EXPECT_EQ(pe.max, ae.max);
      EXPECT_THAT(recorder.notified, ::testing::Contains(p.id));
    }
  }
}

}  // namespace
}  // namespace cgacct
