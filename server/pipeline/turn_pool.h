// TurnPool: threads started on demand, up to a cap, that run tasks queued
// per key, the keys taking turns (one task each, round robin over the keys
// with work). The machinery of the DrainWaitPool (one key: arrival order)
// and the LargeRequestPool (a key per caller identity).
//
// A task handed in gets a thread of its own while fewer than `max_threads`
// exist and none is idle; past the cap, tasks queue. Threads are kept until
// the pool is destroyed.
//
// Thread safety: thread-safe. The destructor runs every task already
// handed in, then joins the threads; no Run() may race with it.
#ifndef CGACCT_SERVER_PIPELINE_TURN_POOL_H_
#define CGACCT_SERVER_PIPELINE_TURN_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace cgacct {

class TurnPool {
 public:
  // `max_threads` >= 1 (less is taken as 1); `thread_name`: what the
  // threads are called (pthread_setname_np: at most 15 characters; top -H),
  // a literal.
  TurnPool(size_t max_threads, const char* thread_name);
  ~TurnPool();
  TurnPool(const TurnPool&) = delete;
  TurnPool& operator=(const TurnPool&) = delete;

  // Runs `task` on a pool thread, after the tasks of `key` handed in before
  // it, taking turns with the other keys' tasks.
  void Run(absl::string_view key, absl::AnyInvocable<void() &&> task)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The most threads it starts; threads started so far; tasks waiting for a
  // thread now; tasks handed in so far.
  size_t max_threads() const { return max_threads_; }
  size_t threads() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t tasks() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Task = absl::AnyInvocable<void() &&>;
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !turns_.empty() || stopping_;
  }

  const size_t max_threads_;
  const char* const thread_name_;
  mutable absl::Mutex mu_;
  // The keys with queued tasks, in the order they take their turn.
  std::deque<std::string> turns_ ABSL_GUARDED_BY(mu_);
  // Each of those keys' tasks, oldest first (never empty).
  absl::flat_hash_map<std::string, std::deque<Task>> queues_
      ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;  // threads waiting for a task
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t tasks_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_TURN_POOL_H_
