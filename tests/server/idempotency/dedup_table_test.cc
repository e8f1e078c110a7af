// DedupTable (server/idempotency/dedup_table.h): a key's checks, the verdicts
// as answers, and an answered entry stored before it completes.
#include "server/idempotency/dedup_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/clock.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

// A store that keeps what it is given and fails when told to.
class RecordingStore final : public StateStore {
 public:
  absl::StatusOr<Snapshot> Load(int64_t) override { return Snapshot(); }
  absl::StatusOr<uint64_t> CreateGroup(absl::string_view, const Limits&,
                                       bool, absl::string_view) override {
    return 1;
  }
  absl::Status SetLimits(absl::string_view, const Limits&, bool) override {
    return absl::OkStatus();
  }
  absl::Status DeleteGroup(absl::string_view) override {
    return absl::OkStatus();
  }
  absl::Status PutRequest(const StoredRequest& request,
                          const WindowBounds& bounds) override {
    if (fail) return absl::InternalError("disk full");
    put.push_back(request);
    last_bounds = bounds;
    return absl::OkStatus();
  }
  bool fail = false;
  std::vector<StoredRequest> put;
  WindowBounds last_bounds;
};

DedupTable::Options TableOptions(const Clock* clock) {
  DedupTable::Options o;
  o.cache.capacity = 8;
  o.cache.clock = clock;
  o.field = "request_id";
  o.mismatch_detail = "(method, path, ... differ)";
  return o;
}

DedupFingerprint Fp(uint64_t nr_pages) {
  return DedupFingerprint::Of(DedupFingerprint::Method::kCharge, "/a", nr_pages,
                              1, std::nullopt);
}

TEST(DedupTableTest, KeysAreCheckedNamingTheField) {
  RecordingStore store;
  DedupTable table(TableOptions(nullptr), store);
  EXPECT_TRUE(table.ValidateKey("k").ok());
  absl::Status empty = table.ValidateKey("");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.message()),
              HasSubstr("request_id must not be empty"));
  absl::Status long_key =
      table.ValidateKey(std::string(kMaxRequestIdBytes + 1, 'x'));
  EXPECT_THAT(std::string(long_key.message()),
              HasSubstr("request_id is 129 bytes; at most 128"));
}

TEST(DedupTableTest, AnAnsweredKeyIsStoredThenReplayed) {
  ManualClock clock;
  RecordingStore store;
  DedupTable table(TableOptions(&clock), store);
  DedupTable::Entry entry;
  std::optional<DedupAnswer> replay;
  ASSERT_TRUE(
      table.Begin(DedupKey("alice", 7, "k"), Fp(5), "k", &entry, &replay).ok());
  EXPECT_FALSE(replay.has_value());
  // A retry while the first is applied: in flight.
  DedupTable::Entry second;
  absl::Status in_flight =
      table.Begin(DedupKey("alice", 7, "k"), Fp(5), "k", &second, &replay);
  EXPECT_EQ(in_flight.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(in_flight.message()),
              HasSubstr("request_id \"k\" is in flight"));
  StoredRequest stored;
  stored.identity = "alice";
  stored.request_id = "k";
  DedupAnswer answer;
  answer.nr_pages = 5;
  EXPECT_TRUE(table.Complete(entry, stored, answer).ok());
  ASSERT_EQ(store.put.size(), 1u);
  EXPECT_GT(store.put[0].arrived_unix_ns, 0);
  // Bounded like the in-memory window: its age, its capacity, and the
  // stored bytes' bound (64 MiB by default).
  EXPECT_EQ(store.last_bounds.capacity, 8u);
  EXPECT_EQ(store.last_bounds.max_bytes, size_t{64} << 20);
  EXPECT_EQ(
      store.last_bounds.expire_before_unix_ns,
      store.put[0].arrived_unix_ns - absl::ToInt64Nanoseconds(table.window()));
  ASSERT_TRUE(
      table.Begin(DedupKey("alice", 7, "k"), Fp(5), "k", &second, &replay)
          .ok());
  ASSERT_TRUE(replay.has_value());
  EXPECT_EQ(replay->nr_pages, 5u);
  // Another request under the same key: refused, naming what differs.
  replay.reset();
  absl::Status mismatch =
      table.Begin(DedupKey("alice", 7, "k"), Fp(6), "k", &second, &replay);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mismatch.message()),
              HasSubstr("was already used for a different request (method"));
  // The same client key of another identity or scope is another entry.
  ASSERT_TRUE(
      table.Begin(DedupKey("bob", 7, "k"), Fp(6), "k", &second, &replay).ok());
  EXPECT_FALSE(replay.has_value());
}

TEST(DedupTableTest, AFailedStoreWriteIsReportedAndTheAnswerStillReplays) {
  RecordingStore store;
  store.fail = true;
  DedupTable table(TableOptions(nullptr), store);
  DedupTable::Entry entry;
  std::optional<DedupAnswer> replay;
  ASSERT_TRUE(table.Begin("key", Fp(1), "k", &entry, &replay).ok());
  DedupAnswer answer;
  answer.nr_pages = 1;
  EXPECT_EQ(table.Complete(entry, StoredRequest(), answer).code(),
            absl::StatusCode::kInternal);
  ASSERT_TRUE(table.Begin("key", Fp(1), "k", &entry, &replay).ok());
  EXPECT_TRUE(replay.has_value());
}

TEST(DedupTableTest, AnAbandonedEntryIsANewArrival) {
  RecordingStore store;
  DedupTable table(TableOptions(nullptr), store);
  DedupTable::Entry entry;
  std::optional<DedupAnswer> replay;
  ASSERT_TRUE(table.Begin("key", Fp(1), "k", &entry, &replay).ok());
  table.Abandon(entry);
  DedupTable::Entry again;
  ASSERT_TRUE(table.Begin("key", Fp(1), "k", &again, &replay).ok());
  EXPECT_FALSE(replay.has_value());
  EXPECT_NE(again.ticket, 0u);
}

}  // namespace
}  // namespace cgacct
