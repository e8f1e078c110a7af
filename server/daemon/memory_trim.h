// MemoryTrimmer: gives the C library's free heap back to the kernel after a
// load ends (docs/DESIGN.md §7.1).
//
// glibc's malloc keeps freed memory in its arenas (one per thread that
// allocated, up to 8 x cores), and a large request raises its mmap threshold
// so later large buffers come from the arenas too: after 300 streams that
// each carried a 4 MB batch close, cgacctd held ~1.8 GB it no longer used.
// A background thread wakes every `interval`, asks malloc how many bytes sit
// free in its arenas (mallinfo2().fordblks), and when that exceeds
// `min_free_bytes` calls malloc_trim(0), which releases every whole free
// page of every arena (MADV_DONTNEED) and the top of the main heap.
//
// malloc_trim locks one arena at a time, so an allocating thread may wait
// for the walk of its arena; it runs only while the free heap is over
// `min_free_bytes`, i.e. after a load that left memory behind.
//
// Thread safety: Start/destructor from one thread; trims() from any.
#ifndef CGACCT_SERVER_DAEMON_MEMORY_TRIM_H_
#define CGACCT_SERVER_DAEMON_MEMORY_TRIM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cgacct {

class MemoryTrimmer {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(1);  // > 0
    // Trim only when at least this much is free in malloc's arenas.
    size_t min_free_bytes = size_t{4} << 20;
  };

  // Starts the thread.
  explicit MemoryTrimmer(Options options);
  // Stops and joins the thread (at most one trim's time).
  ~MemoryTrimmer();
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

  // malloc_trim calls made so far.
  uint64_t trims() const { return trims_.load(std::memory_order_relaxed); }

  // Free bytes in malloc's arenas now (mallinfo2().fordblks).
  static size_t FreeHeapBytes();
  // One trim, now: malloc_trim(0). Returns whether memory was released.
  static bool TrimNow();

 private:
  void Run();

  const Options options_;
  std::atomic<uint64_t> trims_{0};  // relaxed: a statistic
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_DAEMON_MEMORY_TRIM_H_
