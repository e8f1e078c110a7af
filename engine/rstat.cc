#include "engine/rstat.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <thread>

#include "engine/cycle_clock.h"

namespace cgacct {

int64_t MonotonicNowNs() { return CycleClock::SteadyNowNs(); }

RstatGroup::RstatGroup(Rstat* rstat, RstatGroup* parent)
    : rstat_(rstat), parent_(parent) {}

RstatGroup::~RstatGroup() {
  std::atomic<Cpu*>* pcpu = pcpu_.load(std::memory_order_relaxed);
  if (pcpu == nullptr) return;
  for (int cpu = 0; cpu < rstat_->nr_cpus(); ++cpu) {
    if (Cpu* block = pcpu[cpu].load(std::memory_order_relaxed)) {
      block->~Cpu();
      rstat_->FreeCpuBlock(cpu, block);
    }
  }
  delete[] pcpu;
}

int64_t RstatGroup::total(StatItem item) const {
  return std::max<int64_t>(0, totals_[item].load(std::memory_order_relaxed));
}

RstatGroup::Cpu* RstatGroup::GetOrCreateCpu(int cpu) {
  // Acquire pairs with the release of the CASes below: a reader of a pointer
  // sees the array or block initialised.
  std::atomic<Cpu*>* pcpu = pcpu_.load(std::memory_order_acquire);
  if (pcpu == nullptr) {
    const int nr_cpus = rstat_->nr_cpus();
    auto* fresh = new std::atomic<Cpu*>[nr_cpus];
    for (int i = 0; i < nr_cpus; ++i)
      fresh[i].store(nullptr, std::memory_order_relaxed);
    if (pcpu_.compare_exchange_strong(pcpu, fresh, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      pcpu = fresh;
    } else {
      delete[] fresh;
    }
  }
  Cpu* block = pcpu[cpu].load(std::memory_order_acquire);
  if (block != nullptr) return block;
  Cpu* fresh = new (rstat_->AllocCpuBlock(cpu)) Cpu;
  fresh->updated_children = this;  // empty list: points to its owner
  if (pcpu[cpu].compare_exchange_strong(block, fresh, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
    return fresh;
  }
  fresh->~Cpu();
  rstat_->FreeCpuBlock(cpu, fresh);
  return block;
}

Rstat::Rstat(int nr_cpus, FlushLockPolicy policy, EngineObserver* observer)
    : nr_cpus_(nr_cpus),
      policy_(policy),
      observer_(observer),
      cpu_locks_(new CpuLock[nr_cpus]),
      cpu_blocks_(nr_cpus, sizeof(RstatGroup::Cpu)) {}

void Rstat::UpdatedLocked(RstatGroup* group, int cpu) {
  // css_rstat_updated(): link group and every ancestor not yet on this
  // CPU's tree, each at the head of its parent's updated_children list.
  for (RstatGroup* g = group;;) {
    RstatGroup::Cpu* gc = g->GetOrCreateCpu(cpu);
    if (gc->updated_next.load(std::memory_order_relaxed) != nullptr) break;
    RstatGroup* parent = g->parent_;
    if (parent == nullptr) {
      gc->updated_next.store(g, std::memory_order_relaxed);
      break;
    }
    RstatGroup::Cpu* pc = parent->GetOrCreateCpu(cpu);
    gc->updated_next.store(pc->updated_children, std::memory_order_relaxed);
    pc->updated_children = g;
    g = parent;
  }
}

void Rstat::Update(RstatGroup* group, int cpu,
                   const int64_t (&deltas)[kNrStatItems], uint64_t magnitude) {
  RstatGroup::Cpu* c = group->GetOrCreateCpu(cpu);
  for (int i = 0; i < kNrStatItems; ++i)
    if (deltas[i] != 0)
      c->state[i].fetch_add(deltas[i], std::memory_order_relaxed);
  // Memory ordering: pairs with the fence in FlushCpuLocked() (see header).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (c->updated_next.load(std::memory_order_relaxed) == nullptr) {
    MutexLock l(&cpu_locks_[cpu].mu);
    UpdatedLocked(group, cpu);
  }

  // memcg_rstat_updated(): account the update magnitude per CPU and move it
  // to the group's atomic in batches; stop at the first level that is
  // already over the flush threshold (its ancestors are too).
  const uint64_t threshold = uint64_t{kChargeBatchPages} * nr_cpus_;
  for (RstatGroup* g = group; g != nullptr; g = g->parent_) {
    if (g->stats_updates_.load(std::memory_order_relaxed) > threshold) break;
    RstatGroup::Cpu* gc = g->GetOrCreateCpu(cpu);
    int64_t pending =
        gc->stats_updates.fetch_add(static_cast<int64_t>(magnitude),
                                    std::memory_order_relaxed) +
        static_cast<int64_t>(magnitude);
    if (pending < static_cast<int64_t>(kChargeBatchPages)) continue;
    pending = gc->stats_updates.exchange(0, std::memory_order_relaxed);
    if (pending > 0)
      g->stats_updates_.fetch_add(static_cast<uint64_t>(pending),
                                  std::memory_order_relaxed);
  }
}

RstatGroup* Rstat::UpdatedListLocked(RstatGroup* root, int cpu) {
  RstatGroup::Cpu* rc = root->GetCpu(cpu);
  if (rc == nullptr) return nullptr;
  RstatGroup* root_next = rc->updated_next.load(std::memory_order_relaxed);
  if (root_next == nullptr) return nullptr;

  // Unlink root from its parent's updated_children list.
  if (RstatGroup* parent = root->parent_; parent != nullptr) {
    RstatGroup::Cpu* pc = parent->GetCpu(cpu);
    RstatGroup* prev = nullptr;
    RstatGroup* cur = pc->updated_children;
    while (cur != root) {
      prev = cur;
      cur = cur->GetCpu(cpu)->updated_next.load(std::memory_order_relaxed);
    }
    if (prev == nullptr) {
      pc->updated_children = root_next;
    } else {
      prev->GetCpu(cpu)->updated_next.store(root_next,
                                            std::memory_order_relaxed);
    }
  }
  rc->updated_next.store(nullptr, std::memory_order_relaxed);

  // Breadth-first over the updated part of the subtree, appending to the
  // flush list (which doubles as the queue) and unlinking as we go; then
  // reverse it so that every child precedes its parent, as
  // css_rstat_updated_list() guarantees.
  root->flush_next_ = nullptr;
  RstatGroup* tail = root;
  for (RstatGroup* pos = root; pos != nullptr; pos = pos->flush_next_) {
    RstatGroup::Cpu* pc = pos->GetCpu(cpu);
    RstatGroup* child = pc->updated_children;
    pc->updated_children = pos;
    while (child != pos) {
      RstatGroup::Cpu* cc = child->GetCpu(cpu);
      RstatGroup* next = cc->updated_next.load(std::memory_order_relaxed);
      cc->updated_next.store(nullptr, std::memory_order_relaxed);
      child->flush_next_ = nullptr;
      tail->flush_next_ = child;
      tail = child;
      child = next;
    }
  }
  RstatGroup* head = nullptr;
  for (RstatGroup* pos = root; pos != nullptr;) {
    RstatGroup* next = pos->flush_next_;
    pos->flush_next_ = head;
    head = pos;
    pos = next;
  }
  return head;
}

void Rstat::FlushOneLocked(RstatGroup* g, int cpu) {
  // mem_cgroup_css_rstat_flush(): fold this CPU's delta and the children's
  // pending contributions into the totals, and pass them up.
  RstatGroup::Cpu* c = g->GetCpu(cpu);
  RstatGroup* parent = g->parent_;
  for (int i = 0; i < kNrStatItems; ++i) {
    int64_t delta = g->pending_[i];
    g->pending_[i] = 0;
    const int64_t v = c->state[i].load(std::memory_order_relaxed);
    const int64_t delta_cpu = v - c->prev[i];
    if (delta_cpu != 0) {
      c->prev[i] = v;
      g->local_[i] += delta_cpu;
      delta += delta_cpu;
    }
    if (delta != 0) {
      g->totals_[i].store(g->totals_[i].load(std::memory_order_relaxed) + delta,
                          std::memory_order_relaxed);
      if (parent != nullptr) parent->pending_[i] += delta;
    }
  }
  c->stats_updates.store(0, std::memory_order_relaxed);
  if (g->stats_updates_.load(std::memory_order_relaxed) != 0)
    g->stats_updates_.store(0, std::memory_order_relaxed);
}

int Rstat::FlushCpuLocked(RstatGroup* root, int cpu) {
  RstatGroup* list;
  {
    MutexLock l(&cpu_locks_[cpu].mu);
    list = UpdatedListLocked(root, cpu);
  }
  // Memory ordering: pairs with the fence in Update() (see header).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  int groups = 0;
  for (RstatGroup* pos = list; pos != nullptr; pos = pos->flush_next_) {
    FlushOneLocked(pos, cpu);
    ++groups;
  }
  return groups;
}

Rstat::HoldStart Rstat::LockFlush() {
  // Count ourselves as a waiter only when the lock is taken, so a holder
  // under the kWhole policy yields exactly when someone is spinning on it
  // (the kernel's spin_needbreak()). Uncontended: one timestamp.
  HoldStart start;
  if (flush_mu_.TryLock()) {
    start.acquired = CycleClock::Now();
    return start;
  }
  const int64_t before = CycleClock::Now();
  flush_waiters_.fetch_add(1, std::memory_order_relaxed);
  flush_mu_.Lock();
  flush_waiters_.fetch_sub(1, std::memory_order_relaxed);
  start.acquired = CycleClock::Now();
  start.wait_ticks = start.acquired - before;
  return start;
}

void Rstat::UnlockFlush(const HoldStart& start, int cpus, int groups) {
  flush_mu_.Unlock();
  const int64_t hold_ns = CycleClock::ToNs(CycleClock::Now() - start.acquired);
  int64_t seen = hold_max_ns_.load(std::memory_order_relaxed);
  while (hold_ns > seen && !hold_max_ns_.compare_exchange_weak(
                               seen, hold_ns, std::memory_order_relaxed)) {
  }
  if (observer_ != nullptr) {
    FlushLockHold hold;
    hold.policy = policy_;
    hold.wait = absl::Nanoseconds(CycleClock::ToNs(start.wait_ticks));
    hold.hold = absl::Nanoseconds(hold_ns);
    hold.cpus_walked = cpus;
    hold.groups_folded = groups;
    observer_->OnFlushLockHold(hold);
  }
}

void Rstat::Flush(RstatGroup* root) {
  const int64_t start_ns = MonotonicNowNs();
  int total_groups = 0;
  if (policy_ == FlushLockPolicy::kPerCpu) {
    for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
      const HoldStart hold = LockFlush();
      const int groups = FlushCpuLocked(root, cpu);
      UnlockFlush(hold, 1, groups);
      total_groups += groups;
    }
  } else {
    HoldStart hold = LockFlush();
    int hold_cpus = 0;
    int hold_groups = 0;
    for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
      const int groups = FlushCpuLocked(root, cpu);
      ++hold_cpus;
      hold_groups += groups;
      total_groups += groups;
      if (cpu + 1 < nr_cpus_ &&
          flush_waiters_.load(std::memory_order_relaxed) > 0) {
        UnlockFlush(hold, hold_cpus, hold_groups);
        std::this_thread::yield();
        hold = LockFlush();
        hold_cpus = 0;
        hold_groups = 0;
      }
    }
    UnlockFlush(hold, hold_cpus, hold_groups);
  }
  const int64_t end_ns = MonotonicNowNs();
  root->last_flush_ns_.store(end_ns, std::memory_order_relaxed);
  flushes_.fetch_add(1, std::memory_order_relaxed);
  flush_cpus_.fetch_add(nr_cpus_, std::memory_order_relaxed);
  if (observer_ != nullptr)
    observer_->OnFlushDone(absl::Nanoseconds(end_ns - start_ns), nr_cpus_,
                           total_groups);
}

bool Rstat::NeedsFlush(const RstatGroup* group) const {
  return group->pending_updates() > uint64_t{kChargeBatchPages} * nr_cpus_;
}

}  // namespace cgacct
