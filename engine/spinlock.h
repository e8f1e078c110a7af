// SpinLock: a test-and-set lock for short critical sections on the charge
// path, the userspace stand-in for the kernel's local_lock/local_trylock.
//
// Why not engine/mutex.h: absl::Mutex costs two atomic read-modify-writes
// plus its bookkeeping per lock/unlock pair; here TryLock is one exchange
// (after a plain load, so a failing TryLock does not steal the line from
// the holder) and Unlock is a plain release store. Lock() spins, then
// yields: holders never block and never hold it for more than a few
// page_counter walks.
//
// Memory ordering: TryLock's exchange is acquire, Unlock's store is release,
// so everything written under the lock happens-before the next holder's
// critical section (ThreadSanitizer sees this through the atomics).
//
// Thread safety: thread-safe.
#ifndef CGACCT_ENGINE_SPINLOCK_H_
#define CGACCT_ENGINE_SPINLOCK_H_

#include <atomic>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace cgacct {

class ABSL_LOCKABLE SpinLock {
 public:
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    if (locked_.load(std::memory_order_relaxed)) return false;
    return !locked_.exchange(true, std::memory_order_acquire);
  }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    for (int spins = 0; !TryLock(); ++spins) {
      if (spins >= 64) std::this_thread::yield();
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    locked_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> locked_{false};
};

// RAII holder of a SpinLock.
class ABSL_SCOPED_LOCKABLE SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock* lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock)
      : lock_(lock) {
    lock_->Lock();
  }
  ~SpinLockHolder() ABSL_UNLOCK_FUNCTION() { lock_->Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock* const lock_;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_SPINLOCK_H_
