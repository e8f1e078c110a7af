#include "engine/percpu.h"

#include <sched.h>

namespace cgacct {
namespace {
thread_local int cpu_override = -1;
}  // namespace

int CurrentCpu(int nr_cpus) {
  int cpu = cpu_override;
  if (cpu < 0) {
    cpu = sched_getcpu();
    if (cpu < 0) cpu = 0;
  }
  return cpu % nr_cpus;
}

ScopedCpuOverride::ScopedCpuOverride(int cpu) : previous_(cpu_override) {
  cpu_override = cpu;
}

ScopedCpuOverride::~ScopedCpuOverride() { cpu_override = previous_; }

PercpuRwLock::PercpuRwLock(int nr_cpus)
    : nr_cpus_(nr_cpus), slots_(new Slot[nr_cpus]) {}

void PercpuRwLock::WriterLock() {
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) slots_[cpu].mu.Lock();
  writes_.fetch_add(1, std::memory_order_relaxed);
}

void PercpuRwLock::WriterUnlock() {
  for (int cpu = nr_cpus_ - 1; cpu >= 0; --cpu) slots_[cpu].mu.Unlock();
}

}  // namespace cgacct
