// LargeRequestPool: the threads on which large requests are decoded and run,
// each identity in turn (docs/DESIGN.md §7.1, "Large-request threads").
//
// gRPC 1.51 serves the callback API from a handful of threads (two on a
// 2-core machine: its "nexting" threads, about one per core), which both
// poll the sockets and run the handlers. A request of 4 MiB takes
// milliseconds to decode and run (a ChargeBatch of 4096 ops), so one tenant
// keeping a few of them in flight kept those threads busy, and every other
// tenant's calls, however small, queued behind them: issue 22's re-attack,
// row 11a, another tenant's GetStats went from 1 ms to 19 ms p50 under one
// tenant's 200 concurrent 4 MB ChargeBatches, while against a second
// daemon on the same cores it stayed at 0.8 ms. So a request at least
// kLargeRequestBytes long is handed here once read (server/rpc/unary.h,
// server/rpc/charge_stream.cc), and gRPC's threads stay free to read and
// run everyone's small calls.
//
// Fairness: tasks queue per identity, and the threads take the identities
// in turn, one task each (round robin over the identities with work), so
// one tenant's queue never delays another tenant's task by more than one
// task per thread. How many tasks an identity can have queued is bounded
// upstream: its read slots (CallLimiter::BeginRead) and its open streams.
//
// Threads are started on demand, up to `threads`, and kept until the pool
// is destroyed; they are named "cgacct-large" (top -H). The mechanism is a
// TurnPool keyed by identity.
//
// Thread safety: thread-safe. The destructor runs every task already
// handed in, then joins the threads; no Run() may race with it.
#ifndef CGACCT_SERVER_PIPELINE_LARGE_REQUEST_POOL_H_
#define CGACCT_SERVER_PIPELINE_LARGE_REQUEST_POOL_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "server/pipeline/turn_pool.h"

namespace cgacct {

// Requests at least this long (encoded) are decoded and run on the
// LargeRequestPool, and keep their caller's read slot until answered
// (server/rpc/unary.h). At 256 KiB, a tenant's requests just under it
// (264 ops) still took another tenant's GetStats from 1.3 to 4.4 ms p50 on
// gRPC's threads; at 16 KiB, requests just under it do no measurable harm
// (1.2-1.3 ms against 1.1-1.2 on a second daemon), at a cost of 0.90x for
// one identity's 55 KB batches (tests/bench/RESULTS.md, "Large-request
// threads").
inline constexpr size_t kLargeRequestBytes = 16 * 1024;

class LargeRequestPool {
 public:
  // `threads` < 1: one per CPU this process may run on
  // (sched_getaffinity), the --large_request_threads default.
  explicit LargeRequestPool(int threads = 0);

  // Runs `task` on a pool thread, after the tasks of `identity` handed in
  // before it, taking turns with the other identities' tasks.
  void Run(absl::string_view identity, absl::AnyInvocable<void() &&> task) {
    pool_.Run(identity, std::move(task));
  }

  // The most threads it starts; threads started so far; tasks waiting for a
  // thread now; tasks handed in so far.
  size_t max_threads() const { return pool_.max_threads(); }
  size_t threads() const { return pool_.threads(); }
  size_t queued() const { return pool_.queued(); }
  uint64_t tasks() const { return pool_.tasks(); }

 private:
  TurnPool pool_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_LARGE_REQUEST_POOL_H_
