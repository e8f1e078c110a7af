// The WatchEvents fan-out: who watches which group's memory.events, and the
// thread that tells them it changed.
//
// The engine announces every change of a group's memory.events or
// memory.events.local through EngineObserver::OnMemoryEvents (its
// cgroup_file_notify(), mm/memcontrol.c) and every deletion through
// OnGroupDeleted, from inside its charge, reclaim, limit-write and delete
// paths, where nothing may call back into the engine. EventsHub is that
// observer: it only notes the group id (a set insert under its mutex, and
// nothing but one relaxed atomic load while nobody watches), and its notifier
// thread then calls each watcher of a noted group outside every engine lock.
// A watcher reads the counts itself (Engine::GetEvents), so repeated changes
// before it runs coalesce into one read of the latest counts: the kernel's
// poll() on memory.events behaves the same way (a wakeup, then a read of the
// whole file), and nothing queues per change or per watcher.
//
// The hub is also a pass-through: flush and reclaim reports go on to the
// observer it wraps (the metrics' RstatFlushObserver), so it can stand as the
// engine's one observer.
//
// Thread safety: thread-safe. Watcher callbacks run on the notifier thread,
// one at a time, never under the hub's mutex or an engine lock; Unsubscribe()
// waits for a callback to that watcher that is running on another thread, so
// a watcher may be destroyed once Unsubscribe() returns.
#ifndef CGACCT_SERVER_EVENTS_EVENTS_HUB_H_
#define CGACCT_SERVER_EVENTS_EVENTS_HUB_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "engine/observer.h"

namespace cgacct {

class EventsHub final : public EngineObserver {
 public:
  // One subscriber (a WatchEvents stream). Called on the notifier thread.
  class Watcher {
   public:
    virtual ~Watcher() = default;
    // The group's memory.events or memory.events.local changed since the
    // last call (or since Subscribe): read the latest counts.
    virtual void OnEventsChanged() = 0;
    // The group was deleted. No further calls follow.
    virtual void OnGroupDeleted() = 0;
    // The server is shutting down (Shutdown()). No further calls follow.
    virtual void OnShutdown() = 0;
  };

  // `next`: where flush and reclaim reports go on to; may be null; must
  // outlive the hub. Starts the notifier thread.
  explicit EventsHub(EngineObserver* next = nullptr);
  // Stops the notifier thread (Shutdown() first if not called).
  ~EventsHub() override;
  EventsHub(const EventsHub&) = delete;
  EventsHub& operator=(const EventsHub&) = delete;

  // Registers `watcher` for the group with id `group_id` (GroupInfo::id).
  // Returns false (and registers nothing) after Shutdown(). A change that
  // happens after Subscribe() returns reaches the watcher; the subscriber
  // reads the current counts itself after subscribing, so none is missed.
  bool Subscribe(uint64_t group_id, Watcher* watcher) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes `watcher`; once it returns no callback to `watcher` runs or will
  // run (a callback running on another thread is waited for; from inside a
  // callback to `watcher` itself it does not wait). Idempotent.
  void Unsubscribe(uint64_t group_id, Watcher* watcher)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every watcher gets OnEventsChanged() soon (on the notifier thread), as
  // if its group's counts changed: after an access control reload, so each
  // stream checks its caller's access again.
  void NotifyAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Server shutdown: every watcher gets OnShutdown() (on the notifier
  // thread) and is removed; later Subscribe() calls fail. Returns once every
  // OnShutdown() has run. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Where OnOomGroupKill() goes on to (memory.oom.group kills: the sessions'
  // registry, SessionRegistry::oom_group_kill_observer(), installed by the
  // service); null: nowhere. Called on the charge path under a group-tree
  // reader slot, so `listener` must only queue. It must outlive every charge
  // that may report a kill: set it back to null only once no charge runs
  // (the gRPC server stopped). Thread-safe.
  void SetOomGroupKillListener(EngineObserver* listener) {
    oom_group_kill_listener_.store(listener, std::memory_order_release);
  }

  // Watchers registered now (a gauge).
  int64_t nr_watchers() const {
    return nr_watchers_.load(std::memory_order_relaxed);
  }

  // EngineObserver.
  void OnMemoryEvents(uint64_t group_id) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnGroupDeleted(uint64_t group_id) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnFlushLockHold(const FlushLockHold& hold) override;
  void OnFlushDone(absl::Duration duration, int cpus_walked,
                   int groups_folded) override;
  void OnReclaimDone(absl::Duration cycle, uint64_t scanned, uint64_t stolen,
                     bool full_walk) override;
  // To the listener (SetOomGroupKillListener), if any; then to `next`.
  void OnOomGroupKill(uint64_t group_id, absl::string_view path) override;

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  EngineObserver* const next_;  // constant; may be null
  // SetOomGroupKillListener(); atomic, no lock (read on the charge path).
  std::atomic<EngineObserver*> oom_group_kill_listener_{nullptr};

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::vector<Watcher*>> watchers_
      ABSL_GUARDED_BY(mu_);
  // Groups noted by OnMemoryEvents/OnGroupDeleted, not yet told.
  absl::flat_hash_set<uint64_t> changed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> deleted_ ABSL_GUARDED_BY(mu_);
  // The watcher a callback is running for right now (null: none), so that
  // Unsubscribe() can wait for it.
  Watcher* calling_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Mirrors watchers_.size() (groups watched) for OnMemoryEvents' lock-free
  // "nobody watches" test; written under mu_, read relaxed.
  std::atomic<int64_t> nr_watched_groups_{0};
  // Watchers registered; written under mu_, read relaxed (nr_watchers()).
  std::atomic<int64_t> nr_watchers_{0};
  std::thread
      notifier_;  // started in the constructor, joined in the destructor
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_EVENTS_EVENTS_HUB_H_
