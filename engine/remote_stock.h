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
// Thread safety: implementations must be thread-safe: any charging thread
// calls them, concurrently.
#ifndef CGACCT_ENGINE_REMOTE_STOCK_H_
#define CGACCT_ENGINE_REMOTE_STOCK_H_

#include <cstdint>
#include <string>
#include <vector>

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
  // uncharges it. Called on the charging thread while it holds a group-tree
  // reader slot: it must not call into the engine (a second reader slot on
  // the same thread can deadlock against a waiting CreateGroup/DeleteGroup),
  // and should return at once (empty) when nobody holds anything.
  virtual std::vector<RemoteStockReturn> DrainRemoteStock(
      uint64_t over_id, absl::string_view over_path) = 0;

  // Called on the same charging thread once the engine uncharged what a
  // DrainRemoteStock(over_id, over_path) call returned (non-empty) and
  // drained it from the local stocks, so the pages are room in the
  // counters now. A drainer lets concurrent charges at the same limiting
  // group join the drain in flight (as the kernel's percpu_charge_mutex
  // trylock makes a second drainer skip) and wake them here to retry. Same
  // restrictions as DrainRemoteStock.
  virtual void RemoteStockReturned(uint64_t over_id,
                                   absl::string_view over_path) {
    (void)over_id;
    (void)over_path;
  }
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_REMOTE_STOCK_H_
