// Engine locks: thin, annotated wrappers around the C++ library's mutexes.
//
// Why not absl::Mutex: Debian's Abseil (20220623) is not built with
// ThreadSanitizer, so absl::Mutex's synchronisation is invisible to TSan and
// every access it protects is reported as a race; the concurrency tests must
// run under TSan (pthread locks are intercepted by it). These wrappers keep
// Abseil's thread-safety annotations (ABSL_GUARDED_BY, checked by clang's
// -Wthread-safety) on the pthread-based std::mutex/std::shared_mutex.
//
// Thread safety: thread-safe, as the wrapped types.
#ifndef CGACCT_ENGINE_MUTEX_H_
#define CGACCT_ENGINE_MUTEX_H_

#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace cgacct {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }

 private:
  std::mutex mu_;
};

class ABSL_LOCKABLE SharedMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// RAII exclusive lock (absl::MutexLock's shape: MutexLock l(&mu_)).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_MUTEX_H_
