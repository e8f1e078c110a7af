// Engine locks: absl::Mutex, made visible to ThreadSanitizer.
//
// Debian's Abseil (20220623) is not built with ThreadSanitizer, so the
// happens-before edges absl::Mutex creates are invisible to TSan and every
// access it protects would be reported as a race. These wrappers keep
// absl::Mutex (adaptive spinning, then parking; Abseil's thread-safety
// annotations checked by clang's -Wthread-safety) and add the dynamic
// lock annotations (ABSL_ANNOTATE_RWLOCK_*, empty outside TSan builds) that
// tell TSan about each acquire and release.
//
// Thread safety: thread-safe, as absl::Mutex.
#ifndef CGACCT_ENGINE_MUTEX_H_
#define CGACCT_ENGINE_MUTEX_H_

#include "absl/base/dynamic_annotations.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cgacct {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.Lock();
    ABSL_ANNOTATE_RWLOCK_ACQUIRED(this, 1);
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    ABSL_ANNOTATE_RWLOCK_RELEASED(this, 1);
    mu_.Unlock();
  }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    if (!mu_.TryLock()) return false;
    ABSL_ANNOTATE_RWLOCK_ACQUIRED(this, 1);
    return true;
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() {
    mu_.ReaderLock();
    ABSL_ANNOTATE_RWLOCK_ACQUIRED(this, 0);
  }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() {
    ABSL_ANNOTATE_RWLOCK_RELEASED(this, 0);
    mu_.ReaderUnlock();
  }

 private:
  absl::Mutex mu_;
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
