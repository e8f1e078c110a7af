// DrainWaitPool: the threads on which charges that wait for sessions' drain
// answers run (docs/DESIGN.md §4.14, "Waiting charges").
//
// gRPC runs the service's handlers on a small callback pool (about one
// thread per core). A charge that must wait for clients to return their
// stock (drain_all_stock() over the network, engine/remote_stock.h) would
// hold one of those threads for up to --session_drain_timeout_ms, and every
// other call of the server would queue behind it. So the handlers charge
// inside a RemoteDrainDeferral::Scope: a charge that would wait comes back
// deferred, and the handler hands the rest of the call to this pool, whose
// threads may block. Each deferred call gets a thread of its own while
// fewer than `max_threads` are busy, so N calls waiting on a silent client
// each wait the bound once, side by side; past `max_threads`, calls queue
// (in arrival order).
//
// Threads are started on demand and kept until the pool is destroyed
// (a deferred charge means a group at its max with sessions holding stock:
// more are likely to follow); they are named "cgacct-drainwt".
//
// Thread safety: thread-safe. The destructor runs every task already
// handed in, then joins the threads; no Run() may race with it.
#ifndef CGACCT_SERVER_PIPELINE_DRAIN_WAIT_POOL_H_
#define CGACCT_SERVER_PIPELINE_DRAIN_WAIT_POOL_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "server/pipeline/turn_pool.h"

namespace cgacct {

class DrainWaitPool {
 public:
  // The default `max_threads` (--session_drain_wait_threads): waiting
  // threads cost a stack each and nothing else while they sleep.
  static constexpr int kDefaultMaxThreads = 256;

  explicit DrainWaitPool(int max_threads = kDefaultMaxThreads)
      : pool_(static_cast<size_t>(max_threads < 1 ? 1 : max_threads),
              "cgacct-drainwt") {}

  // Runs `task` on a pool thread: an idle one, a new one if none is idle
  // and fewer than max_threads exist, else the first to become free
  // (arrival order: one key of the TurnPool).
  void Run(absl::AnyInvocable<void() &&> task) {
    pool_.Run(absl::string_view(), std::move(task));
  }

  // Threads started so far; tasks handed in so far.
  size_t threads() const { return pool_.threads(); }
  uint64_t tasks() const { return pool_.tasks(); }

 private:
  TurnPool pool_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_DRAIN_WAIT_POOL_H_
