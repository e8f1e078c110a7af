#include "server/daemon/memory_trim.h"

#include <malloc.h>

namespace cgacct {

MemoryTrimmer::MemoryTrimmer(Options options)
    : options_(options), thread_([this] { Run(); }) {}

MemoryTrimmer::~MemoryTrimmer() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

size_t MemoryTrimmer::FreeHeapBytes() { return mallinfo2().fordblks; }

bool MemoryTrimmer::TrimNow() { return malloc_trim(0) != 0; }

void MemoryTrimmer::Run() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.interval))
        return;
    }
    if (FreeHeapBytes() >= options_.min_free_bytes) {
      TrimNow();
      trims_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace cgacct
