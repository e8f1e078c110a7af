#include "server/pipeline/large_request_pool.h"

#include <sched.h>

#include <algorithm>
#include <thread>

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
    : pool_(ThreadsFor(threads), "cgacct-large") {}

}  // namespace cgacct
