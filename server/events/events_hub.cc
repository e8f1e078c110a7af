#include "server/events/events_hub.h"

#include <algorithm>
#include <utility>

namespace cgacct {

EventsHub::EventsHub(EngineObserver* next)
    : next_(next), notifier_([this] { Run(); }) {}

EventsHub::~EventsHub() {
  Shutdown();
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  notifier_.join();
}

bool EventsHub::Subscribe(uint64_t group_id, Watcher* watcher) {
  absl::MutexLock l(&mu_);
  if (shutting_down_) return false;
  std::vector<Watcher*>& list = watchers_[group_id];
  if (list.empty())
    nr_watched_groups_.store(static_cast<int64_t>(watchers_.size()),
                             std::memory_order_relaxed);
  list.push_back(watcher);
  nr_watchers_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void EventsHub::Unsubscribe(uint64_t group_id, Watcher* watcher) {
  absl::MutexLock l(&mu_);
  auto it = watchers_.find(group_id);
  if (it != watchers_.end()) {
    std::vector<Watcher*>& list = it->second;
    auto pos = std::find(list.begin(), list.end(), watcher);
    if (pos != list.end()) {
      list.erase(pos);
      nr_watchers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (list.empty()) {
      watchers_.erase(it);
      nr_watched_groups_.store(static_cast<int64_t>(watchers_.size()),
                               std::memory_order_relaxed);
    }
  }
  // Wait out a callback to `watcher` running on the notifier thread, unless
  // this is that callback.
  if (std::this_thread::get_id() == notifier_.get_id()) return;
  auto not_calling = [this, watcher]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return calling_ != watcher;
  };
  mu_.Await(absl::Condition(&not_calling));
}

void EventsHub::Shutdown() {
  absl::MutexLock l(&mu_);
  shutting_down_ = true;
  auto done = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_done_; };
  mu_.Await(absl::Condition(&done));
}

void EventsHub::NotifyAll() {
  absl::MutexLock l(&mu_);
  for (const auto& [id, list] : watchers_) changed_.insert(id);
}

void EventsHub::OnMemoryEvents(uint64_t group_id) {
  // Nobody watches anything: the common case costs one load.
  if (nr_watched_groups_.load(std::memory_order_relaxed) == 0) return;
  absl::MutexLock l(&mu_);
  if (watchers_.contains(group_id)) changed_.insert(group_id);
}

void EventsHub::OnGroupDeleted(uint64_t group_id) {
  if (nr_watched_groups_.load(std::memory_order_relaxed) == 0) return;
  absl::MutexLock l(&mu_);
  if (watchers_.contains(group_id)) deleted_.insert(group_id);
}

void EventsHub::OnFlushLockHold(const FlushLockHold& hold) {
  if (next_ != nullptr) next_->OnFlushLockHold(hold);
}

void EventsHub::OnFlushDone(absl::Duration duration, int cpus_walked,
                            int groups_folded) {
  if (next_ != nullptr)
    next_->OnFlushDone(duration, cpus_walked, groups_folded);
}

void EventsHub::OnReclaimDone(absl::Duration cycle, uint64_t scanned,
                              uint64_t stolen, bool full_walk) {
  if (next_ != nullptr) next_->OnReclaimDone(cycle, scanned, stolen, full_walk);
}

void EventsHub::OnOomGroupKill(uint64_t group_id, absl::string_view path) {
  EngineObserver* const listener =
      oom_group_kill_listener_.load(std::memory_order_acquire);
  if (listener != nullptr) listener->OnOomGroupKill(group_id, path);
  if (next_ != nullptr) next_->OnOomGroupKill(group_id, path);
}

bool EventsHub::HasWork() const {
  return stop_ || !changed_.empty() || !deleted_.empty() ||
         (shutting_down_ && !shutdown_done_);
}

void EventsHub::Run() {
  absl::MutexLock l(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &EventsHub::HasWork));
    if (shutting_down_ && !shutdown_done_) {
      // Every watcher is told once and removed; then Shutdown() returns.
      while (!watchers_.empty()) {
        auto it = watchers_.begin();
        Watcher* w = it->second.back();
        it->second.pop_back();
        nr_watchers_.fetch_sub(1, std::memory_order_relaxed);
        if (it->second.empty()) watchers_.erase(it);
        calling_ = w;
        mu_.Unlock();
        w->OnShutdown();
        mu_.Lock();
        calling_ = nullptr;
      }
      nr_watched_groups_.store(0, std::memory_order_relaxed);
      changed_.clear();
      deleted_.clear();
      shutdown_done_ = true;
      continue;
    }
    if (stop_) return;
    // Deletions first: a deleted group's watchers end, they do not read.
    for (const bool deleted : {true, false}) {
      absl::flat_hash_set<uint64_t> ids;
      ids.swap(deleted ? deleted_ : changed_);
      for (uint64_t id : ids) {
        auto it = watchers_.find(id);
        if (it == watchers_.end()) continue;
        // A copy: the callbacks run unlocked and may (un)subscribe.
        const std::vector<Watcher*> list = it->second;
        for (Watcher* w : list) {
          if (shutting_down_ || stop_) break;
          // Still registered? (It may have unsubscribed while another
          // watcher's callback ran.) Checked, and for a deletion removed,
          // under the same hold that sets calling_, so Unsubscribe() either
          // finds it gone or waits for this call.
          auto now = watchers_.find(id);
          if (now == watchers_.end()) break;
          auto pos = std::find(now->second.begin(), now->second.end(), w);
          if (pos == now->second.end()) continue;
          if (deleted) {
            now->second.erase(pos);
            nr_watchers_.fetch_sub(1, std::memory_order_relaxed);
            if (now->second.empty()) {
              watchers_.erase(now);
              nr_watched_groups_.store(static_cast<int64_t>(watchers_.size()),
                                       std::memory_order_relaxed);
            }
          }
          calling_ = w;
          mu_.Unlock();
          if (deleted) {
            w->OnGroupDeleted();
          } else {
            w->OnEventsChanged();
          }
          mu_.Lock();
          calling_ = nullptr;
        }
      }
    }
  }
}

}  // namespace cgacct
