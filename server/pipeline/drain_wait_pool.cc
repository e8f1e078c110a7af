#include "server/pipeline/drain_wait_pool.h"

#include <algorithm>
#include <utility>

namespace cgacct {

DrainWaitPool::DrainWaitPool(int max_threads)
    : max_threads_(static_cast<size_t>(std::max(1, max_threads))) {}

DrainWaitPool::~DrainWaitPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  // Each thread takes tasks until the queue is empty, then returns.
  for (std::thread& t : threads) t.join();
}

void DrainWaitPool::Run(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock l(&mu_);
  queue_.push_back(std::move(task));
  ++tasks_;
  // Every queued task beyond the idle threads wants a thread of its own.
  if (queue_.size() > idle_ && threads_.size() < max_threads_)
    threads_.emplace_back([this] { Loop(); });
}

void DrainWaitPool::Loop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    ++idle_;
    mu_.Await(absl::Condition(this, &DrainWaitPool::HasWorkOrStopping));
    --idle_;
    if (queue_.empty()) return;  // stopping, nothing left
    absl::AnyInvocable<void()&&> task = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    std::move(task)();
    mu_.Lock();
  }
}

size_t DrainWaitPool::threads() const {
  absl::MutexLock l(&mu_);
  return threads_.size();
}

uint64_t DrainWaitPool::tasks() const {
  absl::MutexLock l(&mu_);
  return tasks_;
}

}  // namespace cgacct
