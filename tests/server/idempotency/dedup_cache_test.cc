#include "server/idempotency/dedup_cache.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/clock.h"

namespace cgacct {
namespace {

using Verdict = RequestDedupCache::Verdict;

DedupFingerprint Fp(uint64_t nr_pages) {
  DedupFingerprint fp;
  fp.method = DedupFingerprint::Method::kCharge;
  fp.SetPath("/a");
  fp.nr_pages = nr_pages;
  fp.kind = 1;
  return fp;
}

DedupAnswer Ok(uint64_t nr_pages) {
  DedupAnswer answer;
  answer.nr_pages = nr_pages;
  return answer;
}

RequestDedupCache::Options OptionsWith(const ManualClock& clock,
                                       size_t capacity) {
  RequestDedupCache::Options options;
  options.capacity = capacity;
  options.window = absl::Seconds(60);
  options.clock = &clock;
  return options;
}

TEST(RequestDedupCacheTest, FirstProceedsThenInFlightThenReplay) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 16));
  const auto first = cache.Begin("r1", Fp(3));
  ASSERT_EQ(first.verdict, Verdict::kProceed);
  EXPECT_EQ(cache.Begin("r1", Fp(3)).verdict, Verdict::kInFlight);
  cache.Complete("r1", first.ticket, Ok(3));
  const auto again = cache.Begin("r1", Fp(3));
  ASSERT_EQ(again.verdict, Verdict::kReplay);
  EXPECT_TRUE(again.answer.status.ok());
  EXPECT_EQ(again.answer.nr_pages, 3u);
}

TEST(RequestDedupCacheTest, DifferentFingerprintIsMismatchEvenInFlight) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 16));
  const auto first = cache.Begin("r1", Fp(3));
  EXPECT_EQ(cache.Begin("r1", Fp(4)).verdict, Verdict::kMismatch);
  cache.Complete("r1", first.ticket, Ok(3));
  EXPECT_EQ(cache.Begin("r1", Fp(4)).verdict, Verdict::kMismatch);
  DedupFingerprint other_method = Fp(3);
  other_method.method = DedupFingerprint::Method::kUncharge;
  EXPECT_EQ(cache.Begin("r1", other_method).verdict, Verdict::kMismatch);
  DedupFingerprint other_cpu = Fp(3);
  other_cpu.cpu = 0;
  EXPECT_EQ(cache.Begin("r1", other_cpu).verdict, Verdict::kMismatch);
}

TEST(RequestDedupCacheTest, ErrorsAreStoredAndReplayed) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 16));
  const auto first = cache.Begin("r1", Fp(3));
  DedupAnswer oom;
  oom.status = absl::ResourceExhaustedError("oom in /p");
  cache.Complete("r1", first.ticket, oom);
  const auto again = cache.Begin("r1", Fp(3));
  ASSERT_EQ(again.verdict, Verdict::kReplay);
  EXPECT_EQ(again.answer.status, absl::ResourceExhaustedError("oom in /p"));
}

TEST(RequestDedupCacheTest, EntriesExpireAfterTheWindow) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 16));
  cache.Complete("r1", cache.Begin("r1", Fp(3)).ticket, Ok(3));
  clock.Advance(absl::Seconds(59));
  EXPECT_EQ(cache.Begin("r1", Fp(3)).verdict, Verdict::kReplay);
  clock.Advance(absl::Seconds(1));
  // Expired: a new first arrival, even with another fingerprint.
  EXPECT_EQ(cache.Begin("r1", Fp(4)).verdict, Verdict::kProceed);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(RequestDedupCacheTest, InFlightEntryAlsoExpires) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 16));
  const auto lost = cache.Begin("r1", Fp(3));
  clock.Advance(absl::Seconds(61));
  const auto fresh = cache.Begin("r1", Fp(3));
  ASSERT_EQ(fresh.verdict, Verdict::kProceed);
  // The stale completion must not overwrite the fresh entry.
  DedupAnswer stale;
  stale.status = absl::InternalError("stale");
  cache.Complete("r1", lost.ticket, stale);
  EXPECT_EQ(cache.Begin("r1", Fp(3)).verdict, Verdict::kInFlight);
  cache.Complete("r1", fresh.ticket, Ok(3));
  EXPECT_TRUE(cache.Begin("r1", Fp(3)).answer.status.ok());
}

TEST(RequestDedupCacheTest, CapacityEvictsTheOldest) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 3));
  for (const char* id : {"a", "b", "c", "d"}) {
    const auto begin = cache.Begin(id, Fp(1));
    ASSERT_EQ(begin.verdict, Verdict::kProceed) << id;
    cache.Complete(id, begin.ticket, Ok(1));
    clock.Advance(absl::Milliseconds(1));
  }
  EXPECT_LE(cache.size(), 3u);
  EXPECT_EQ(cache.Begin("d", Fp(1)).verdict, Verdict::kReplay);
  EXPECT_EQ(cache.Begin("c", Fp(1)).verdict, Verdict::kReplay);
  EXPECT_EQ(cache.Begin("a", Fp(1)).verdict, Verdict::kProceed);  // forgotten
}

TEST(RequestDedupCacheTest, SizeStaysBoundedUnderManyIds) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 100));
  for (int i = 0; i < 10000; ++i) {
    const std::string id = "id-" + std::to_string(i);
    cache.Complete(id, cache.Begin(id, Fp(1)).ticket, Ok(1));
  }
  EXPECT_LE(cache.size(), 100u);
}

// Request ids are scoped per identity and per scope (group generation): the
// same client id under another identity or generation is another key, and
// no (identity, scope, id) triple can forge another's key.
TEST(DedupKeyTest, IdentityAndScopeSeparateIds) {
  EXPECT_NE(DedupKey("alice", 1, "r1"), DedupKey("bob", 1, "r1"));
  EXPECT_NE(DedupKey("", 1, "r1"), DedupKey("alice", 1, "r1"));
  EXPECT_NE(DedupKey("alice", 1, "r1"), DedupKey("alice", 2, "r1"));
  EXPECT_EQ(DedupKey("alice", 1, "r1"), DedupKey("alice", 1, "r1"));
  // Length prefixes: an identity ending like a scope cannot collide.
  EXPECT_NE(DedupKey("a/1", 2, "x"), DedupKey("a", 1, "2/x"));
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 16));
  const auto alice = cache.Begin(DedupKey("alice", 1, "r1"), Fp(3));
  ASSERT_EQ(alice.verdict, Verdict::kProceed);
  cache.Complete(DedupKey("alice", 1, "r1"), alice.ticket, Ok(3));
  // Bob's first use of "r1" (another request) is his own, not a mismatch.
  EXPECT_EQ(cache.Begin(DedupKey("bob", 1, "r1"), Fp(4)).verdict,
            Verdict::kProceed);
}

// A restored entry replays; one older than the window is not restored.
TEST(RequestDedupCacheTest, RestoredEntriesReplayInsideTheWindowOnly) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 16));
  cache.Restore("old", Fp(1), Ok(1), absl::Seconds(61));
  cache.Restore("young", Fp(2), Ok(2), absl::Seconds(59));
  EXPECT_EQ(cache.size(), 1u);
  const auto young = cache.Begin("young", Fp(2));
  EXPECT_EQ(young.verdict, Verdict::kReplay);
  EXPECT_EQ(young.answer.nr_pages, 2u);
  EXPECT_EQ(cache.Begin("old", Fp(1)).verdict, Verdict::kProceed);
  // It expires at its original arrival + window.
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(cache.Begin("young", Fp(2)).verdict, Verdict::kProceed);
}

// Answers with bodies (batch responses) are bounded in bytes: the oldest go
// first, the newest always stays.
TEST(RequestDedupCacheTest, BodiesAreBoundedInBytes) {
  ManualClock clock;
  RequestDedupCache::Options options = OptionsWith(clock, 100);
  options.max_bytes = 250;
  RequestDedupCache cache(options);
  for (int i = 0; i < 5; ++i) {
    const std::string id = "b" + std::to_string(i);
    const auto begin = cache.Begin(id, Fp(1));
    ASSERT_EQ(begin.verdict, Verdict::kProceed);
    DedupAnswer answer;
    answer.body = std::string(100, 'x');
    cache.Complete(id, begin.ticket, answer);
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Begin("b4", Fp(1)).verdict, Verdict::kReplay);
  EXPECT_EQ(cache.Begin("b3", Fp(1)).verdict, Verdict::kReplay);
  EXPECT_EQ(cache.Begin("b0", Fp(1)).verdict, Verdict::kProceed);
}

// Each identity has its own partition (issue 22 item 1): one tenant's
// traffic evicts only its own entries. On main at 949c495 one table was
// shared: A's flood of ids forgot B's, and B's retry was applied again.
TEST(RequestDedupCacheTest, OneIdentitysFloodEvictsOnlyItsOwnEntries) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 4));
  const std::string b_key = DedupKey("token:b", 7, "b-1");
  cache.Complete(b_key, cache.Begin(b_key, Fp(1)).ticket, Ok(1));
  for (int i = 0; i < 1000; ++i) {
    const std::string key = DedupKey("token:a", 7, "a-" + std::to_string(i));
    cache.Complete(key, cache.Begin(key, Fp(1)).ticket, Ok(1));
    clock.Advance(absl::Milliseconds(1));
  }
  EXPECT_EQ(cache.size_of("token:a"), 4u);
  EXPECT_EQ(cache.size_of("token:b"), 1u);
  EXPECT_EQ(cache.Begin(b_key, Fp(1)).verdict, Verdict::kReplay);
  // A's oldest went, its newest stay.
  EXPECT_EQ(cache.Begin(DedupKey("token:a", 7, "a-0"), Fp(1)).verdict,
            Verdict::kProceed);
}

TEST(RequestDedupCacheTest, BodyBytesAreBoundedPerIdentity) {
  ManualClock clock;
  RequestDedupCache::Options options = OptionsWith(clock, 100);
  options.max_bytes = 1000;
  RequestDedupCache cache(options);
  DedupAnswer big;
  big.body = std::string(400, 'x');
  const std::string b_key = DedupKey("token:b", 1, "k");
  cache.Complete(b_key, cache.Begin(b_key, Fp(1)).ticket, big);
  for (int i = 0; i < 50; ++i) {
    const std::string key = DedupKey("token:a", 1, std::to_string(i));
    cache.Complete(key, cache.Begin(key, Fp(1)).ticket, big);
  }
  EXPECT_LE(cache.size_of("token:a"), 2u);
  EXPECT_EQ(cache.Begin(b_key, Fp(1)).verdict, Verdict::kReplay);
}

// Partitions of identities that went quiet are dropped once their entries
// expire (a sweep every so many arrivals), so memory follows the active
// identities.
TEST(RequestDedupCacheTest, QuietIdentitiesArePartitionsNoLonger) {
  ManualClock clock;
  RequestDedupCache cache(OptionsWith(clock, 10));
  for (int i = 0; i < 100; ++i) {
    const std::string key = DedupKey("id-" + std::to_string(i), 1, "k");
    cache.Complete(key, cache.Begin(key, Fp(1)).ticket, Ok(1));
  }
  EXPECT_EQ(cache.size(), 100u);
  clock.Advance(absl::Seconds(61));
  for (int i = 0; i < 2000; ++i) {
    const std::string key = DedupKey("busy", 1, std::to_string(i));
    cache.Complete(key, cache.Begin(key, Fp(1)).ticket, Ok(1));
  }
  EXPECT_EQ(cache.size(), 10u);
  EXPECT_EQ(cache.size_of("id-0"), 0u);
}

TEST(DedupKeyTest, TheIdentityIsReadBack) {
  EXPECT_EQ(DedupKeyIdentity(DedupKey("token:a", 3, "x:y/z")), "token:a");
  EXPECT_EQ(DedupKeyIdentity(DedupKey("", 3, "x")), "");
  EXPECT_EQ(DedupKeyIdentity("not a key"), "");
  EXPECT_EQ(DedupKeyIdentity("99:short"), "");
}

}  // namespace
}  // namespace cgacct
