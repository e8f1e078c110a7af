// Per-CPU slots: which slot an operation runs on, and the per-CPU
// reader/writer lock that protects the group tree.
//
// The engine models `nr_cpus` CPUs (possibly more than the machine has, to
// model a big machine). An operation names its slot or gets the calling
// thread's sched_getcpu() modulo nr_cpus; tests force it with
// ScopedCpuOverride (below).
//
// Invariants: a thread holds at most one reader slot of a PercpuRwLock at a
// time; a writer holds every slot, taken in slot order and released in
// reverse, so a writer excludes every reader and every other writer.
#ifndef CGACCT_ENGINE_PERCPU_H_
#define CGACCT_ENGINE_PERCPU_H_

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "engine/mutex.h"
#include "engine/types.h"

namespace cgacct {

// The slot for an operation that names none: the thread's override if set,
// else sched_getcpu() % nr_cpus. Thread-safe.
int CurrentCpu(int nr_cpus);

// Forces the CPU slot used by operations on this thread that name no cpu
// (tests; TCMalloc's ScopedFakeCpuId). Nests; restores on destruction.
// Thread-compatible: affects only the constructing thread.
class ScopedCpuOverride {
 public:
  explicit ScopedCpuOverride(int cpu);
  ~ScopedCpuOverride();
  ScopedCpuOverride(const ScopedCpuOverride&) = delete;
  ScopedCpuOverride& operator=(const ScopedCpuOverride&) = delete;

 private:
  int previous_;
};

// PercpuRwLock: a reader/writer lock with one reader lock per CPU slot, the
// userspace counterpart of percpu_rw_semaphore (kernel/locking/percpu-rwsem.c).
// Readers take only their slot's lock, so operations on different CPUs never
// share a cache line for it; a writer takes every slot's lock in order.
// Used for the group tree: every operation reads it, only create/delete
// write it.
//
// Thread safety: thread-safe. A thread must hold at most one reader slot at a
// time (a second one can deadlock against a waiting writer). For clang's
// thread-safety analysis the capability is the whole lock: ReaderLock(cpu)
// acquires it shared, WriterLock() exclusive.
class ABSL_LOCKABLE PercpuRwLock {
 public:
  explicit PercpuRwLock(int nr_cpus);
  void ReaderLock(int cpu) ABSL_SHARED_LOCK_FUNCTION() {
    slots_[cpu].mu.ReaderLock();
  }
  void ReaderUnlock(int cpu) ABSL_UNLOCK_FUNCTION() {
    slots_[cpu].mu.ReaderUnlock();
  }
  void WriterLock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void WriterUnlock() ABSL_UNLOCK_FUNCTION();
  // Writer sections so far. A reader that gave its slot up and took it
  // back sees the same count iff no writer ran in between (read with a
  // slot held; the slot's mutex orders it).
  uint64_t writes() const { return writes_.load(std::memory_order_relaxed); }

 private:
  struct alignas(kCacheLineBytes) Slot {
    Mutex mu;
  };
  static_assert(sizeof(Slot) == kCacheLineBytes, "one slot per cache line");
  const int nr_cpus_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> writes_{0};  // bumped with every slot held
};

// RAII reader side of PercpuRwLock on one slot.
class ABSL_SCOPED_LOCKABLE PercpuReaderLock {
 public:
  PercpuReaderLock(PercpuRwLock* lock, int cpu) ABSL_SHARED_LOCK_FUNCTION(lock)
      : lock_(lock), cpu_(cpu) {
    lock_->ReaderLock(cpu_);
  }
  ~PercpuReaderLock() ABSL_UNLOCK_FUNCTION() { lock_->ReaderUnlock(cpu_); }
  PercpuReaderLock(const PercpuReaderLock&) = delete;
  PercpuReaderLock& operator=(const PercpuReaderLock&) = delete;

 private:
  PercpuRwLock* const lock_;
  const int cpu_;
};

// RAII writer side of PercpuRwLock.
class ABSL_SCOPED_LOCKABLE PercpuWriterLock {
 public:
  explicit PercpuWriterLock(PercpuRwLock* lock)
      ABSL_EXCLUSIVE_LOCK_FUNCTION(lock)
      : lock_(lock) {
    lock_->WriterLock();
  }
  ~PercpuWriterLock() ABSL_UNLOCK_FUNCTION() { lock_->WriterUnlock(); }
  PercpuWriterLock(const PercpuWriterLock&) = delete;
  PercpuWriterLock& operator=(const PercpuWriterLock&) = delete;

 private:
  PercpuRwLock* const lock_;
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_PERCPU_H_
