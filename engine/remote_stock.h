// RemoteStockDrainer: drain_all_stock() beyond the engine's own per-CPU
// stocks (docs/DESIGN.md §4.14, issue 13 item 3).
//
// A front end whose clients keep pages they charged but have not handed out
// yet (a client library's stock, charged through a session) installs one
// (Engine::SetRemoteStockDrainer). When a charge fails at a group's
// memory.max, reclaim did not make room and the local stocks were drained
// (the point where try_charge_memcg() calls drain_all_stock()), the engine
// asks the drainer, once per charge, to collect the pages clients hold at or
// below the limiting group; the engine uncharges what comes back (through the
// normal uncharge path: stats and the stock see it) and retries the charge.
// The engine has no notion of the network: the drainer bounds its own wait
// (a client that does not answer in time is skipped, as the kernel's
// drain_all_stock() skips a CPU whose stock lock is busy).
//
// Waiting threads. The drainer's wait is a network round trip; a front end
// whose charging threads must not block (gRPC callback threads: a blocked
// one delays every other call of the server) opens a
// RemoteDrainDeferral::Scope around the charge. Inside one, a charge that
// reaches the drain point while the drainer would wait
// (RemoteDrainWouldWait) returns RemoteDrainDeferredError() instead:
// nothing charged, no oom event, only what the kernel's loop does before
// drain_all_stock() (a `max` event, reclaim, the local drain). The caller
// then runs the charge again, from the start, on a thread of its own that
// may wait (no Scope there). The kernel's charge never waits for the
// drain work it queues; this is the closest a charge that must see the
// pages back before it fails can come.
//
// Thread safety: implementations must be thread-safe: any charging thread
// calls them, concurrently.
#ifndef CGACCT_ENGINE_REMOTE_STOCK_H_
#define CGACCT_ENGINE_REMOTE_STOCK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/group_handle.h"
#include "engine/types.h"

namespace cgacct {

// Pages a remote holder gave back: `nr_pages` of `kind` charged to the group
// `group` names (at `path` when they were charged: if that group instance
// is gone, the engine uncharges them from the nearest live ancestor path,
// where DeleteGroup reparented them).
struct RemoteStockReturn {
  GroupHandle group;
  std::string path;
  PageKind kind = PageKind::kAnon;
  uint64_t nr_pages = 0;
};

class RemoteStockDrainer {
 public:
  virtual ~RemoteStockDrainer() = default;

  // Asks the holders of pages charged at or below the group `over_path`
  // (id `over_id`) to give them back, waiting at most the drainer's own
  // bound, and returns what they gave back before it passed; the engine
  // uncharges it. `nr_pages` is the room the charge needs at that group
  // (its usage + the charge - its max: more than the charge when usage is
  // above a lowered max): once the holders gave back at least that much,
  // the drainer may stop waiting for the others (their answers still
  // return their pages, later). Called on the charging thread, which gives
  // up its group-tree reader slot for the call (a CreateGroup/DeleteGroup
  // may run meanwhile; the engine finds its groups again after) and takes
  // it back to uncharge what comes back: it may wait, should return at once
  // (empty) when nobody holds anything, and must not call into the engine.
  virtual std::vector<RemoteStockReturn> DrainRemoteStock(
      uint64_t over_id, absl::string_view over_path, uint64_t nr_pages) = 0;

  // Called on the same charging thread once the engine uncharged what a
  // DrainRemoteStock(over_id, over_path) call returned (non-empty) and
  // drained it from the local stocks, so the pages are room in the
  // counters now. A drainer lets concurrent charges at the same limiting
  // group join the drain in flight (as the kernel's percpu_charge_mutex
  // trylock makes a second drainer skip) and wake them here to retry.
  // Called with the reader slot held again: it must not call into the
  // engine, nor wait.
  virtual void RemoteStockReturned(uint64_t over_id,
                                   absl::string_view over_path) {
    (void)over_id;
    (void)over_path;
  }

  // Whether DrainRemoteStock(over_id, over_path) would wait now: a holder
  // to ask, or a drain in flight to join. Asked (before DrainRemoteStock)
  // only inside a RemoteDrainDeferral::Scope; a false answer lets the
  // charge go on at once. Called with the reader slot held: must not call
  // into the engine, nor block. The default: never.
  virtual bool RemoteDrainWouldWait(uint64_t over_id,
                                    absl::string_view over_path) {
    (void)over_id;
    (void)over_path;
    return false;
  }
};

// Two thread-local marks for the charges made inside their scopes (see
// "Waiting threads" above). Scopes nest. Thread-compatible: each thread has
// its own flags.
class RemoteDrainDeferral {
 private:
  // Sets `*flag` (a thread_local) for its life, unless `enabled` is false,
  // and restores it after.
  class FlagScope {
   public:
    FlagScope(bool* flag, bool enabled) : flag_(flag), previous_(*flag) {
      *flag_ = previous_ || enabled;
    }
    ~FlagScope() { *flag_ = previous_; }
    FlagScope(const FlagScope&) = delete;
    FlagScope& operator=(const FlagScope&) = delete;

   private:
    bool* const flag_;
    const bool previous_;
  };

 public:
  // The calling thread must not wait for a remote drain: a charge that
  // would is deferred. `enabled` false: a no-op (for a caller that
  // sometimes may wait).
  class Scope : FlagScope {
   public:
    explicit Scope(bool enabled = true) : FlagScope(&active_, enabled) {}
  };
  // Whether the calling thread is inside a Scope.
  static bool Active() { return active_; }

  // The charges made inside it are the rerun of a deferred one: the first
  // time such a charge fails it goes straight to the drain, without the
  // `max` event and reclaim its deferred turn already did, so a deferred
  // charge counts the events the same charge waiting in place would. Open
  // it around the rerun of the deferred charge only (not around later
  // charges of the same batch).
  class Resume : FlagScope {
   public:
    explicit Resume(bool enabled = true) : FlagScope(&resuming_, enabled) {}
  };
  // Whether the calling thread is inside a Resume.
  static bool Resuming() { return resuming_; }

 private:
  static thread_local bool active_;
  static thread_local bool resuming_;
};

// The status of a charge deferred inside a RemoteDrainDeferral::Scope:
// UNAVAILABLE with a payload that marks it (never an answer to a client:
// the caller runs the charge again where it may wait). `over_path` names
// the limiting group in the message.
absl::Status RemoteDrainDeferredError(absl::string_view over_path);
// Whether `status` is RemoteDrainDeferredError(...).
bool IsRemoteDrainDeferred(const absl::Status& status);

}  // namespace cgacct

#endif  // CGACCT_ENGINE_REMOTE_STOCK_H_
