#include "server/pipeline/turn_pool.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace cgacct {

TurnPool::TurnPool(size_t max_threads, const char* thread_name)
    : max_threads_(std::max<size_t>(1, max_threads)),
      thread_name_(thread_name) {}

TurnPool::~TurnPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  // Each thread takes tasks until none is left, then returns.
  for (std::thread& t : threads) t.join();
}

void TurnPool::Run(absl::string_view key, Task task) {
  absl::MutexLock l(&mu_);
  std::deque<Task>& queue = queues_[key];
  if (queue.empty()) turns_.emplace_back(key);
  queue.push_back(std::move(task));
  ++queued_;
  ++tasks_;
  // Every queued task beyond the idle threads wants a thread of its own.
  if (queued_ > idle_ && threads_.size() < max_threads_) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), thread_name_);
      Loop();
    });
  }
}

void TurnPool::Loop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    ++idle_;
    mu_.Await(absl::Condition(this, &TurnPool::HasWorkOrStopping));
    --idle_;
    if (turns_.empty()) return;  // stopping, nothing left
    // The key whose turn it is runs its oldest task and, if it has more,
    // goes to the back of the line.
    std::string key = std::move(turns_.front());
    turns_.pop_front();
    auto it = queues_.find(key);
    Task task = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) {
      queues_.erase(it);
    } else {
      turns_.push_back(std::move(key));
    }
    --queued_;
    mu_.Unlock();
    std::move(task)();
    mu_.Lock();
  }
}

size_t TurnPool::threads() const {
  absl::MutexLock l(&mu_);
  return threads_.size();
}

size_t TurnPool::queued() const {
  absl::MutexLock l(&mu_);
  return queued_;
}

uint64_t TurnPool::tasks() const {
  absl::MutexLock l(&mu_);
  return tasks_;
}

}  // namespace cgacct
