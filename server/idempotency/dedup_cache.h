// RequestDedupCache: the in-memory de-duplication window behind request_id
// (Charge, Uncharge) and idempotency_key (ChargeBatch, ChargeStream)
// (docs/DESIGN.md §4.4): a retry carrying the same key inside the window is
// answered from the first result and applied once. server/idempotency/
// dedup_table.h puts it together with its persisted copy.
//
// Thread safety: RequestDedupCache is thread-safe; one absl::Mutex guards the
// whole table. Calls without a request_id never reach it, so the lock is off
// the path of clients that do not ask for de-duplication.
#ifndef CGACCT_SERVER_IDEMPOTENCY_DEDUP_CACHE_H_
#define CGACCT_SERVER_IDEMPOTENCY_DEDUP_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/clock.h"

namespace cgacct {

// What a retry must repeat exactly for the stored answer to apply to it.
struct DedupFingerprint {
  // Sets path_hash and path_bytes.
  void SetPath(absl::string_view path) {
    path_hash = absl::Hash<absl::string_view>{}(path);
    path_bytes = path.size();
  }

  // kBatch: a ChargeBatch request or ChargeStream message with an
  // idempotency_key; path_hash is then the digest of its ops (path_bytes 0)
  // and nr_pages the number of ops.
  enum class Method : uint8_t { kCharge, kUncharge, kBatch };

  // A Charge's or Uncharge's fingerprint.
  static DedupFingerprint Of(Method method, absl::string_view path,
                             uint64_t nr_pages, int kind,
                             std::optional<uint32_t> cpu) {
    DedupFingerprint fingerprint;
    fingerprint.method = method;
    fingerprint.SetPath(path);
    fingerprint.nr_pages = nr_pages;
    fingerprint.kind = kind;
    fingerprint.cpu = cpu;
    return fingerprint;
  }

  Method method = Method::kCharge;
  // The path is kept as a hash and a length, not a copy: an entry stays
  // small whatever the client sent (a 64-bit hash collision between two
  // requests reusing one request_id is the accepted risk).
  uint64_t path_hash = 0;
  size_t path_bytes = 0;
  uint64_t nr_pages = 0;
  int kind = 0;  // cgacct.v1.PageKind wire value
  std::optional<uint32_t> cpu;

  friend bool operator==(const DedupFingerprint& a, const DedupFingerprint& b) {
    return a.method == b.method && a.nr_pages == b.nr_pages &&
           a.kind == b.kind && a.cpu == b.cpu && a.path_hash == b.path_hash &&
           a.path_bytes == b.path_bytes;
  }
  friend bool operator!=(const DedupFingerprint& a, const DedupFingerprint& b) {
    return !(a == b);
  }
};

// The final answer of a de-duplicated call: its status (converted to gRPC
// once, when the call is answered) and the fields of its response
// (ChargeResponse uses both, UnchargeResponse only nr_pages).
struct DedupAnswer {
  absl::Status status;
  uint64_t nr_pages = 0;
  uint64_t throttle_us = 0;
  // kBatch: the serialized ChargeBatchResponse. Counted against
  // Options::max_bytes.
  std::string body;
};

// A bounded table request_id -> (fingerprint, answer), partitioned by the
// caller identity each key starts with (DedupKey). Entries live for `window`
// after their first arrival, and each identity's partition keeps at most
// `capacity` of them and `max_bytes` of answer bodies: past that the
// partition's oldest entry is forgotten early (a retry of it would be
// applied again; the capacity is sized so that this needs more than
// capacity / window distinct ids per second). One identity's traffic never
// evicts another's entries. Memory is bounded by the identities with live
// entries times the per-identity bounds; a partition goes when its last
// entry does.
//
// Every stored answer is final, errors included: a retry of a charge that hit
// OOM gets the same RESOURCE_EXHAUSTED. A client that wants a fresh attempt
// uses a fresh request_id.
class RequestDedupCache {
 public:
  struct Options {
    // Entries per identity.
    size_t capacity = 65536;
    absl::Duration window = absl::Seconds(60);
    // Bound on the answers' bodies one identity holds (bytes); past it its
    // oldest entries are forgotten early. 0 = no bound (Charge/Uncharge
    // answers have none).
    size_t max_bytes = 0;
    // Monotonic time source; tests inject a ManualClock. Null: the steady
    // clock (Clock::Real()). Not owned; must outlive the cache.
    const Clock* clock = nullptr;
  };

  enum class Verdict {
    kProceed,   // first arrival: apply it, then call Complete(ticket)
    kReplay,    // answered before: return `answer`, apply nothing
    kMismatch,  // id already used by a different request
    kInFlight,  // the first arrival is still being applied
  };

  struct BeginResult {
    Verdict verdict = Verdict::kProceed;
    uint64_t ticket = 0;  // kProceed: pass to Complete()
    DedupAnswer answer;   // kReplay: the stored answer
  };

  RequestDedupCache() : RequestDedupCache(Options()) {}
  explicit RequestDedupCache(Options options);
  RequestDedupCache(const RequestDedupCache&) = delete;
  RequestDedupCache& operator=(const RequestDedupCache&) = delete;

  // Looks `request_id` up. kProceed records the call as in flight under the
  // returned ticket. Never fails; the verdict says what the caller must do.
  BeginResult Begin(const std::string& request_id,
                    const DedupFingerprint& fingerprint)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stores the final answer of the call Begin() let proceed with `ticket`.
  // A no-op if that entry has been evicted meanwhile.
  void Complete(const std::string& request_id, uint64_t ticket,
                DedupAnswer answer) ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets the in-flight entry of the call Begin() let proceed with
  // `ticket`, which ended without an answer and will Begin() again (a
  // charge deferred to a waiting thread, server/drain_wait_pool.h). A no-op
  // if that entry is gone or answered.
  void Abandon(const std::string& request_id, uint64_t ticket)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Entries currently held (in flight or answered, not yet expired), in
  // all, and of `identity`'s partition.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size_of(absl::string_view identity) const ABSL_LOCKS_EXCLUDED(mu_);

  // Puts back an answered entry that arrived `age` ago (a restart reloading
  // the persisted window): a later Begin() with the same id and fingerprint
  // replays `answer`. Ignored if `age` is outside the window or the id is
  // present. Entries must be restored oldest first.
  void Restore(const std::string& request_id,
               const DedupFingerprint& fingerprint, DedupAnswer answer,
               absl::Duration age) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Duration window() const { return absl::Nanoseconds(window_ns_); }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    DedupFingerprint fingerprint;
    uint64_t ticket = 0;
    int64_t arrived_ns = 0;  // clock_.NowNs() at the first arrival
    bool in_flight = true;
    DedupAnswer answer;
  };
  struct Arrival {
    std::string request_id;
    uint64_t ticket = 0;
    int64_t arrived_ns = 0;
  };
  // One identity's entries: their arrival order, oldest first (it may hold
  // stale records of entries already replaced or abandoned: their ticket no
  // longer matches), their count and the bytes of their bodies.
  struct Partition {
    std::deque<Arrival> arrivals;
    size_t entries = 0;
    size_t bytes = 0;
  };
  using Partitions = absl::flat_hash_map<std::string, Partition>;

  // Whether an entry that arrived at `arrived_ns` is still inside the window
  // at `now_ns`.
  bool LiveAt(int64_t arrived_ns, int64_t now_ns) const {
    return now_ns - arrived_ns < window_ns_;
  }
  // The partition of the identity `request_id` (a DedupKey) starts with,
  // made if absent.
  Partition& PartitionOfLocked(absl::string_view request_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `p`'s entries older than the window, then its oldest ones until
  // fewer than `capacity_` arrivals remain.
  void EvictLocked(Partition& p, int64_t now_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `p`'s oldest entries while its bodies exceed max_bytes_ (keeps
  // the newest one).
  void EvictBytesLocked(Partition& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pops `p`'s oldest arrival, and its entry if the arrival is its own.
  void PopOldestLocked(Partition& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `it` of partition `p`, keeping the counts exact.
  void EraseLocked(Partition& p,
                   absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every so many Begin()s: forgets every partition's expired entries and
  // drops the partitions left empty, so identities that went quiet do not
  // keep their windows (amortised: one pass per kSweepEvery arrivals).
  void SweepLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr int kSweepEvery = 1024;

  // Constant after construction.
  const size_t capacity_;
  const size_t max_bytes_;
  const int64_t window_ns_;
  const Clock& clock_;

  // State below is protected by mu_.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Identity -> its partition (only identities with entries or arrivals).
  Partitions partitions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  int until_sweep_ ABSL_GUARDED_BY(mu_) = kSweepEvery;
};

// The identity a DedupKey starts with.
absl::string_view DedupKeyIdentity(absl::string_view key);

// The table key of a client id: the caller's identity, a scope (a group
// generation, or a batch's generations digest) and the id, length-prefixed
// so that no two triples share a key.
std::string DedupKey(absl::string_view identity, uint64_t scope,
                     absl::string_view request_id);

// FNV-1a, 64-bit: a digest that is the same in every process (absl::Hash is
// seeded per process), for fingerprints that are persisted. `seed` chains
// digests.
uint64_t StableDigest(absl::string_view bytes,
                      uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace cgacct

#endif  // CGACCT_SERVER_IDEMPOTENCY_DEDUP_CACHE_H_
