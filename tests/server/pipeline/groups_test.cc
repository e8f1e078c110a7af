// GroupOps (server/pipeline/groups.h) through the Pipeline, over a state
// store whose writes fail on demand: after a failed store write the engine
// and the store still agree (docs/DESIGN.md §4.12).
#include "server/pipeline/groups.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "server/idempotency/state_store.h"
#include "server/pipeline/pipeline.h"
#include "tests/server/forwarding_store.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;

// A MemoryStateStore whose group writes fail while `full` is set, as a
// full disk fails them.
class FullDiskStore final : public ForwardingStateStore {
 public:
  using StateStore::CreateGroup;
  absl::StatusOr<uint64_t> CreateGroup(absl::string_view path,
                                       const Limits& limits, bool oom_group,
                                       absl::string_view creator) override {
    if (full) return Full();
    return ForwardingStateStore::CreateGroup(path, limits, oom_group, creator);
  }
  absl::Status SetLimits(absl::string_view path, const Limits& limits,
                         bool oom_group) override {
    if (full) return Full();
    return ForwardingStateStore::SetLimits(path, limits, oom_group);
  }
  absl::Status DeleteGroup(absl::string_view path) override {
    if (full) return Full();
    return ForwardingStateStore::DeleteGroup(path);
  }
  absl::Status PutRequest(const StoredRequest& request,
                          const WindowBounds& bounds) override {
    if (full) return Full();
    return ForwardingStateStore::PutRequest(request, bounds);
  }

  bool full = false;

 private:
  static absl::Status Full() {
    return absl::UnavailableError("state store: database or disk is full");
  }
};

class GroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions engine_options;
    engine_options.nr_cpus = 2;
    engine_options.page_size_bytes = kPage;
    engine_ = std::move(*Engine::Create(engine_options));
    PipelineOptions options;
    options.store = &store_;
    pipeline_ = std::make_unique<Pipeline>(*engine_, metrics_, options);
  }

  CallContext Call(RpcMethod method) {
    Credentials anonymous;
    return pipeline_->BeginCall(
        method, std::chrono::system_clock::time_point::max(), &anonymous);
  }
  absl::Status Create(const std::string& path, uint64_t max_pages = 0) {
    CallContext call = Call(RpcMethod::kCreateGroup);
    v1::CreateGroupRequest request;
    request.set_path(path);
    if (max_pages != 0)
      request.mutable_limits()->set_max_bytes(max_pages * kPage);
    v1::Group group;
    return pipeline_->CreateGroup(call, request, &group);
  }
  absl::Status Delete(const std::string& path) {
    CallContext call = Call(RpcMethod::kDeleteGroup);
    v1::DeleteGroupRequest request;
    request.set_path(path);
    v1::DeleteGroupResponse response;
    return pipeline_->DeleteGroup(call, request, &response);
  }
  absl::Status SetMax(const std::string& path, uint64_t max_pages) {
    CallContext call = Call(RpcMethod::kSetLimits);
    v1::SetLimitsRequest request;
    request.set_path(path);
    request.mutable_limits()->set_max_bytes(max_pages * kPage);
    v1::Group group;
    return pipeline_->SetLimits(call, request, &group);
  }
  // The engine's memory.max of `path` in pages, 0 if it has no such group.
  uint64_t EngineMax(const std::string& path) {
    absl::StatusOr<GroupStats> stats =
        engine_->GetStats(path, FlushMode::kNone);
    return stats.ok() ? stats->limits.max_pages : 0;
  }
  // The store's memory.max of `path` in pages, 0 if it holds no such group.
  uint64_t StoredMax(const std::string& path) {
    absl::StatusOr<StateStore::Snapshot> snap = store_.Load(0);
    EXPECT_TRUE(snap.ok());
    for (const StoredGroup& g : snap->groups)
      if (g.path == path) return g.limits.max_pages;
    return 0;
  }

  FullDiskStore store_;
  RpcMetrics metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Pipeline> pipeline_;
};

// Issue 22 item 10: after a DeleteGroup answered INTERNAL on a full disk,
// re-creating the group failed ("/del is stored") until a restart brought
// /del back. The store now forgets the group first: a failed write deletes
// nothing, and the engine and the store agree throughout.
TEST_F(GroupsTest, ADeleteTheStoreCannotWriteDeletesNothing) {
  ASSERT_TRUE(Create("/del", 10).ok());
  store_.full = true;
  const absl::Status refused = Delete("/del");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("group /del not deleted: state store: database or "
                        "disk is full"));
  EXPECT_EQ(EngineMax("/del"), 10u);
  store_.full = false;
  EXPECT_EQ(StoredMax("/del"), 10u);
  // Both still have it: created again is ALREADY_EXISTS (not "is stored"),
  // deleted it is gone from both, and then it can be created again.
  EXPECT_EQ(Create("/del").code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(Delete("/del").ok());
  EXPECT_EQ(EngineMax("/del"), 0u);
  EXPECT_EQ(StoredMax("/del"), 0u);
  ASSERT_TRUE(Create("/del", 20).ok());
  EXPECT_EQ(EngineMax("/del"), 20u);
  EXPECT_EQ(StoredMax("/del"), 20u);
}

// The engine's refusals come first and are the engine's own, whatever the
// store says: a group with children, a missing one, the root.
TEST_F(GroupsTest, ADeleteTheEngineRefusesNeverReachesTheStore) {
  ASSERT_TRUE(Create("/p").ok());
  ASSERT_TRUE(Create("/p/c").ok());
  store_.full = true;
  EXPECT_EQ(Delete("/p").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Delete("/missing").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Delete("/").code(), absl::StatusCode::kInvalidArgument);
  store_.full = false;
  EXPECT_NE(StoredMax("/p"), 0u);
}

// SetLimits and CreateGroup whose store write fails are undone in the
// engine: its limits are the store's again, and no group is left behind.
TEST_F(GroupsTest, SetLimitsAndCreateTheStoreCannotWriteAreUndone) {
  ASSERT_TRUE(Create("/s", 10).ok());
  store_.full = true;
  const absl::Status refused = SetMax("/s", 30);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("limits of /s not changed"));
  EXPECT_EQ(EngineMax("/s"), 10u);
  EXPECT_EQ(Create("/new").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(EngineMax("/new"), 0u);
  store_.full = false;
  EXPECT_EQ(StoredMax("/s"), 10u);
  ASSERT_TRUE(SetMax("/s", 30).ok());
  EXPECT_EQ(EngineMax("/s"), 30u);
  EXPECT_EQ(StoredMax("/s"), 30u);
}

}  // namespace
}  // namespace cgacct
