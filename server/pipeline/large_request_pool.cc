#include "server/pipeline/large_request_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <utility>

namespace cgacct {
namespace {

size_t ThreadsFor(int threads) {
  if (threads >= 1) return static_cast<size_t>(threads);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return static_cast<size_t>(std::max(1, CPU_COUNT(&set)));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

LargeRequestPool::LargeRequestPool(int threads)
    : max_threads_(ThreadsFor(threads)) {}

LargeRequestPool::~LargeRequestPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  // Each thread takes tasks until none is left, then returns.
  for (std::thread& t : threads) t.join();
}

void LargeRequestPool::Run(absl::string_view identity, Task task) {
  absl::MutexLock l(&mu_);
  std::deque<Task>& queue = queues_[identity];
  if (queue.empty()) turns_.emplace_back(identity);
  queue.push_back(std::move(task));
  ++queued_;
  ++tasks_;
  if (queued_ > idle_ && threads_.size() < max_threads_) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "cgacct-large");
      Loop();
    });
  }
}

void LargeRequestPool::Loop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    ++idle_;
    mu_.Await(absl::Condition(this, &LargeRequestPool::HasWorkOrStopping));
    --idle_;
    if (turns_.empty()) return;  // stopping, nothing left
    // The identity whose turn it is runs its oldest task and, if it has
    // more, goes to the back of the line.
    std::string identity = std::move(turns_.front());
    turns_.pop_front();
    auto it = queues_.find(identity);
    Task task = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) {
      queues_.erase(it);
    } else {
      turns_.push_back(std::move(identity));
    }
    --queued_;
    mu_.Unlock();
    std::move(task)();
    mu_.Lock();
  }
}

size_t LargeRequestPool::threads() const {
  absl::MutexLock l(&mu_);
  return threads_.size();
}

size_t LargeRequestPool::queued() const {
  absl::MutexLock l(&mu_);
  return queued_;
}

uint64_t LargeRequestPool::tasks() const {
  absl::MutexLock l(&mu_);
  return tasks_;
}

}  // namespace cgacct
