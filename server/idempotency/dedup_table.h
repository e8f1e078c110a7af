// DedupTable: one de-duplication window as the pipeline uses it
// (docs/DESIGN.md §4.4, §4.12): the in-memory table (RequestDedupCache) and
// its persisted copy (StateStore). The one place where a client key is
// checked, where a verdict becomes an answer, and where an answered entry is
// stored and completed. The pipeline has two: request ids (Charge,
// Uncharge) and idempotency keys (ChargeBatch, ChargeStream).
//
// Thread safety: thread-safe (the cache and the store are).
#ifndef CGACCT_SERVER_IDEMPOTENCY_DEDUP_TABLE_H_
#define CGACCT_SERVER_IDEMPOTENCY_DEDUP_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/idempotency/dedup_cache.h"
#include "server/idempotency/state_store.h"

namespace cgacct {

// Longest accepted request_id or idempotency_key, in bytes (bounds the
// tables' memory).
inline constexpr size_t kMaxRequestIdBytes = 128;

class DedupTable {
 public:
  struct Options {
    RequestDedupCache::Options cache;
    // The request field the keys come from ("request_id",
    // "idempotency_key"), named in every message.
    std::string field = "request_id";
    // What differs when a key is reused for another request, for the
    // mismatch message: "(method, path, ...)".
    std::string mismatch_detail;
    // Bound on the bytes this window keeps in the state store
    // (StoredRequest::stored_bytes() of its entries; WindowBounds), whatever
    // the in-memory table's own bounds: 64 MiB, the batch window's
    // in-memory bound, for both windows. 0 = no bound.
    size_t max_stored_bytes = size_t{64} << 20;
  };

  // `store` must outlive the table.
  DedupTable(Options options, StateStore& store);
  DedupTable(const DedupTable&) = delete;
  DedupTable& operator=(const DedupTable&) = delete;

  // A client key's own checks: present keys are not empty and at most
  // kMaxRequestIdBytes. INVALID_ARGUMENT naming the field.
  absl::Status ValidateKey(absl::string_view key) const;

  // An entry a call owns between Begin() and Complete()/Abandon().
  struct Entry {
    std::string key;  // the table key (DedupKey)
    uint64_t ticket = 0;
  };

  // Looks `key` (a DedupKey of `client_key`) up. OK with *entry set: apply
  // the request, then Complete(). OK with *replay set: answer it, apply
  // nothing. INVALID_ARGUMENT: the client key was used for another request
  // (`fingerprint` differs). ABORTED: its first arrival is still being
  // applied (retry).
  absl::Status Begin(std::string key, const DedupFingerprint& fingerprint,
                     absl::string_view client_key, Entry* entry,
                     std::optional<DedupAnswer>* replay);

  // The end of an entry Begin() let proceed: `stored` (its arrival time set
  // here) goes to the state store first, bounded like the in-memory window
  // (its window, capacity and max_stored_bytes: WindowBounds), so that an
  // acknowledged key survives a restart, then `answer` completes the
  // in-memory entry. Returns the store's status: the answer is kept in
  // memory and given to the client whatever it says (the caller counts a
  // failure; the store reports it to the operator).
  absl::Status Complete(const Entry& entry, StoredRequest stored,
                        DedupAnswer answer);

  // Forgets an entry that ends without an answer and will Begin() again (a
  // charge deferred to a drain-wait thread whose group was re-created).
  void Abandon(const Entry& entry) { cache_.Abandon(entry.key, entry.ticket); }

  // Restart: puts back an answered entry of age `age` (RequestDedupCache::
  // Restore).
  void Restore(const std::string& key, const DedupFingerprint& fingerprint,
               DedupAnswer answer, absl::Duration age) {
    cache_.Restore(key, fingerprint, std::move(answer), age);
  }

  absl::Duration window() const { return cache_.window(); }
  size_t capacity() const { return cache_.capacity(); }
  size_t size() const { return cache_.size(); }

 private:
  const std::string field_;
  const std::string mismatch_detail_;
  const size_t max_stored_bytes_;
  RequestDedupCache cache_;
  StateStore& store_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_IDEMPOTENCY_DEDUP_TABLE_H_
