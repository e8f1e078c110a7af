// StateStore: where cgacctd keeps what must survive a restart (docs/DESIGN.md
// §4.12): the groups with their limits, and the two de-duplication windows
// (the answers of calls that carried a request_id or an idempotency_key).
// Usage is not kept: it restarts at zero (README "State and restarts").
//
// The interface is small on purpose so that another backend (a replicated or
// distributed one) can implement it: SqliteStateStore
// (server/idempotency/sqlite_state_store.h) is the embedded default under
// --state_dir; MemoryStateStore (below) keeps nothing across restarts and is
// what cgacctd uses without --state_dir.
//
// Contract every implementation keeps:
//  - a mutating call returns OK only once the change is durable (a later Load()
//    of the same store, after a crash of the process, sees it); the service
//    answers its client only after that, so "acknowledged" means "stored";
//  - calls are applied in the order they are made (the service serialises
//    the group calls so that the store's order is the engine's);
//  - Load() returns the groups in creation order (a parent before its
//    children; siblings in the order they were created, which reclaim walks).
//
// Units: limits in pages (the engine's unit); Open-time page size recorded by
// the implementation. Times: wall clock, nanoseconds since the Unix epoch.
//
// Thread safety: implementations are thread-safe.
#ifndef CGACCT_SERVER_IDEMPOTENCY_STATE_STORE_H_
#define CGACCT_SERVER_IDEMPOTENCY_STATE_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/types.h"
#include "server/idempotency/dedup_cache.h"

namespace cgacct {

// One group as stored: its path, its four limits (pages), its
// memory.oom.group, and its generation, a store-wide number that is never
// reused (a group deleted and created again under the same path gets a new
// one), stable across restarts.
struct StoredGroup {
  std::string path;
  Limits limits;
  uint64_t generation = 0;
  bool oom_group = false;  // memory.oom.group (schema 3)
  // The tenant identity that created it, counted against its
  // --max_groups_per_identity; empty for an admin's (schema 4; empty for
  // groups stored before it).
  std::string creator;
};

// The two persisted de-duplication windows (docs/DESIGN.md §4.4): each is
// bounded on its own, so one kind cannot push the other's entries out.
enum class RequestWindow : int {
  kRequestIds = 0,      // Charge/Uncharge request_id answers
  kIdempotencyKeys = 1  // ChargeBatch/ChargeStream idempotency_key answers
};
inline constexpr int kNrRequestWindows = 2;

// One answered call of a request-id or idempotency-key window.
struct StoredRequest {
  // The caller's identity ("" = anonymous) and the client's request_id or
  // idempotency_key: together with `scope`, the key of the entry.
  std::string identity;
  std::string request_id;
  // What the id is scoped to: for Charge/Uncharge the group generation (0:
  // the group did not exist), for ChargeBatch/ChargeStream a digest of the
  // generations of the groups the ops name.
  uint64_t scope = 0;
  // The fingerprint a retry must repeat (see RequestDedupCache): method
  // (DedupFingerprint::Method), path, nr_pages, kind, cpu (-1 = absent);
  // batches: the number of ops in nr_pages, their digest in `digest`, and
  // the digest of their groups' generations in `scope`.
  int method = 0;
  std::string path;
  uint64_t nr_pages = 0;
  int kind = 0;
  int64_t cpu = -1;
  // kBatch: the StableDigest of the request's ops.
  uint64_t digest = 0;
  // The answer: absl::StatusCode, message, and the response fields (batches:
  // the serialized ChargeBatchResponse in `body`).
  int code = 0;
  std::string message;
  uint64_t answer_nr_pages = 0;
  uint64_t throttle_us = 0;
  std::string body;
  // When the first arrival was applied (wall clock, ns since the epoch).
  int64_t arrived_unix_ns = 0;

  // The window the entry belongs to: its method's (kBatch: idempotency keys).
  RequestWindow window() const {
    return method == static_cast<int>(DedupFingerprint::Method::kBatch)
               ? RequestWindow::kIdempotencyKeys
               : RequestWindow::kRequestIds;
  }
  // The bytes of its variable-length fields (identity, request_id, path,
  // message, body): what a window's byte bound counts.
  size_t stored_bytes() const {
    return identity.size() + request_id.size() + path.size() + message.size() +
           body.size();
  }
};

// What PutRequest keeps of the entry's window: the entries that arrived at or
// after `expire_before_unix_ns`, and of each caller identity's entries
// (StoredRequest::identity) at most the newest `capacity` and at most
// `max_bytes` of their stored_bytes() (the newest entry is kept whatever its
// size), as the in-memory window partitions them (RequestDedupCache): one
// identity's traffic never drops another's entries. 0 = no bound for
// capacity and max_bytes.
struct WindowBounds {
  int64_t expire_before_unix_ns = 0;
  size_t capacity = 0;
  size_t max_bytes = 0;
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  struct Snapshot {
    std::vector<StoredGroup> groups;      // creation order
    std::vector<StoredRequest> requests;  // oldest first
  };

  // Everything stored: the groups, and the requests that arrived at or after
  // `requests_since_unix_ns` (older ones are dropped from the store).
  // Errors: the backend's (INTERNAL, DATA_LOSS for a corrupt store).
  virtual absl::StatusOr<Snapshot> Load(int64_t requests_since_unix_ns) = 0;

  // Records a new group (the engine has created it) with its limits,
  // memory.oom.group and creator (StoredGroup::creator; empty: an admin's);
  // returns its generation. Errors: ALREADY_EXISTS if the path is stored;
  // the backend's.
  virtual absl::StatusOr<uint64_t> CreateGroup(absl::string_view path,
                                               const Limits& limits,
                                               bool oom_group,
                                               absl::string_view creator) = 0;
  // An admin's group (no creator).
  absl::StatusOr<uint64_t> CreateGroup(absl::string_view path,
                                       const Limits& limits, bool oom_group) {
    return CreateGroup(path, limits, oom_group, absl::string_view());
  }
  // Replaces the stored limits and memory.oom.group of `path`, in one
  // write. Errors: NOT_FOUND; the backend's.
  virtual absl::Status SetLimits(absl::string_view path, const Limits& limits,
                                 bool oom_group) = 0;
  // Forgets `path`. Errors: NOT_FOUND; the backend's.
  virtual absl::Status DeleteGroup(absl::string_view path) = 0;

  // Records an answered call (replacing an entry with the same key), and
  // drops the entries of its window (request.window()) and identity beyond
  // `bounds` (amortised: an identity's partition may exceed its capacity by
  // a few hundred entries between two prunings, never its byte bound by
  // more than one entry), and its window's entries older than the window;
  // other identities' entries are dropped only by age, the other window's
  // not at all. Durable against a crash of the process; a
  // backend may trade durability against power loss for speed here
  // (SqliteStateStore: synchronous=NORMAL), since the usage the window
  // protects does not survive a restart either. Errors: the backend's (the
  // entry is then not stored: a retry after a restart is a new request).
  virtual absl::Status PutRequest(const StoredRequest& request,
                                  const WindowBounds& bounds) = 0;
};

// Keeps everything in memory: generations are unique for the process's life,
// Load() returns what this object holds (nothing on a fresh start).
class MemoryStateStore final : public StateStore {
 public:
  absl::StatusOr<Snapshot> Load(int64_t requests_since_unix_ns) override
      ABSL_LOCKS_EXCLUDED(mu_);
  using StateStore::CreateGroup;
  absl::StatusOr<uint64_t> CreateGroup(absl::string_view path,
                                       const Limits& limits, bool oom_group,
                                       absl::string_view creator) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetLimits(absl::string_view path, const Limits& limits,
                         bool oom_group) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DeleteGroup(absl::string_view path) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps no requests (the in-memory window is the service's own).
  absl::Status PutRequest(const StoredRequest& request,
                          const WindowBounds& bounds) override {
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  // path -> (creation sequence, group); the sequence orders Load().
  absl::flat_hash_map<std::string, std::pair<uint64_t, StoredGroup>> groups_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_IDEMPOTENCY_STATE_STORE_H_
