// SqliteStateStore (server/idempotency/sqlite_state_store.h) on its own:
// order, reopen, page size, damage, the request window.
#include "server/idempotency/sqlite_state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;

std::string MakeTempDir() {
  const char* base = getenv("TMPDIR");
  std::string templ =
      absl::StrCat(base != nullptr ? base : "/tmp", "/cgacct-store-XXXXXX");
  return mkdtemp(templ.data()) != nullptr ? templ : "";
}

void RemoveDir(const std::string& dir) {
  if (dir.empty()) return;
  const std::string command = absl::StrCat("rm -rf '", dir, "'");
  if (std::system(command.c_str()) != 0) std::fprintf(stderr, "rm failed\n");
}

Limits MakeLimits(uint64_t max, uint64_t high, uint64_t min, uint64_t low) {
  Limits l;
  l.max_pages = max;
  l.high_pages = high;
  l.min_pages = min;
  l.low_pages = low;
  return l;
}

class SqliteStateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { RemoveDir(dir_); }
  std::unique_ptr<SqliteStateStore> Open(uint64_t page_size = kPage) {
    absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
        SqliteStateStore::Open(dir_, page_size);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  std::string dir_;
};

TEST_F(SqliteStateStoreTest, GroupsComeBackInCreationOrderWithTheirLimits) {
  uint64_t gen_a = 0;
  {
    std::unique_ptr<SqliteStateStore> store = Open();
    ASSERT_NE(store, nullptr);
    absl::StatusOr<uint64_t> a =
        store->CreateGroup("/a", MakeLimits(9, 8, 1, 2));
    ASSERT_TRUE(a.ok());
    gen_a = *a;
    ASSERT_TRUE(store->CreateGroup("/z", MakeLimits(1, 1, 0, 0)).ok());
    ASSERT_TRUE(store->CreateGroup("/a/b", MakeLimits(5, 5, 0, 0)).ok());
    EXPECT_EQ(store->CreateGroup("/z", MakeLimits(1, 1, 0, 0)).status().code(),
              absl::StatusCode::kAlreadyExists);
    ASSERT_TRUE(store->SetLimits("/a/b", MakeLimits(7, 6, 3, 4)).ok());
    EXPECT_EQ(store->SetLimits("/nope", MakeLimits(1, 1, 1, 1)).code(),
              absl::StatusCode::kNotFound);
    ASSERT_TRUE(store->DeleteGroup("/z").ok());
    EXPECT_EQ(store->DeleteGroup("/z").code(), absl::StatusCode::kNotFound);
    // Re-created: a new generation, after /a/b in creation order.
    ASSERT_TRUE(store->CreateGroup("/z", MakeLimits(2, 2, 0, 0)).ok());
  }
  std::unique_ptr<SqliteStateStore> store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StateStore::Snapshot> snap = store->Load(0);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->groups.size(), 3u);
  EXPECT_EQ(snap->groups[0].path, "/a");
  EXPECT_EQ(snap->groups[0].generation, gen_a);
  EXPECT_EQ(snap->groups[0].limits.max_pages, 9u);
  EXPECT_EQ(snap->groups[0].limits.high_pages, 8u);
  EXPECT_EQ(snap->groups[0].limits.min_pages, 1u);
  EXPECT_EQ(snap->groups[0].limits.low_pages, 2u);
  EXPECT_EQ(snap->groups[1].path, "/a/b");
  EXPECT_EQ(snap->groups[1].limits.max_pages, 7u);
  EXPECT_EQ(snap->groups[1].limits.low_pages, 4u);
  EXPECT_EQ(snap->groups[2].path, "/z");
  EXPECT_GT(snap->groups[2].generation, snap->groups[1].generation);
  EXPECT_EQ(snap->groups[2].limits.max_pages, 2u);
}

TEST_F(SqliteStateStoreTest, AnotherPageSizeIsRefused) {
  ASSERT_NE(Open(4096), nullptr);
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> other =
      SqliteStateStore::Open(dir_, 8192);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("page_size=4096"));
}

TEST_F(SqliteStateStoreTest, CorruptFileIsRefusedAsDataLoss) {
  {
    FILE* f = std::fopen((dir_ + "/cgacct.db").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("this is not a database, not even close to one.........", f);
    std::fclose(f);
  }
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
      SqliteStateStore::Open(dir_, kPage);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(store.status().message(), HasSubstr("cgacct.db"));
}

TEST_F(SqliteStateStoreTest, RequestsExpireByAgeAndReplaceByKey) {
  {
    std::unique_ptr<SqliteStateStore> store = Open();
    StoredRequest r;
    r.identity = "alice";
    r.request_id = "old";
    r.scope = 7;
    r.path = "/g";
    r.arrived_unix_ns = 1000;
    ASSERT_TRUE(store->PutRequest(r, 0, 100).ok());
    r.request_id = "new";
    r.arrived_unix_ns = 5000;
    r.code = 8;
    r.message = "first";
    ASSERT_TRUE(store->PutRequest(r, 0, 100).ok());
    r.message = "second";  // same key: replaced
    ASSERT_TRUE(store->PutRequest(r, 0, 100).ok());
  }
  std::unique_ptr<SqliteStateStore> store = Open();
  absl::StatusOr<StateStore::Snapshot> snap = store->Load(2000);
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->requests.size(), 1u);
  EXPECT_EQ(snap->requests[0].request_id, "new");
  EXPECT_EQ(snap->requests[0].identity, "alice");
  EXPECT_EQ(snap->requests[0].scope, 7u);
  EXPECT_EQ(snap->requests[0].code, 8);
  EXPECT_EQ(snap->requests[0].message, "second");
}

// A service over a store in a directory; Restart() drops engine, service
// and store and builds them again on the same directory.
}  // namespace
}  // namespace cgacct
