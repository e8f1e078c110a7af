#include "engine/rstat.h"

#include <sys/resource.h>

#include <algorithm>
#include <cassert>
#include <new>
#include <thread>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/cycle_clock.h"

namespace cgacct {

std::string FlushLockConfigName(const FlushLockConfig& config) {
  if (config.policy == FlushLockPolicy::kBatch)
    return absl::StrCat("batch:", config.batch_cpus);
  return FlushLockPolicyName(config.policy);
}

RstatGroup::RstatGroup(Rstat* rstat, RstatGroup* parent, absl::string_view path)
    : rstat_(rstat), parent_(parent), path_(path) {}

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

void RstatGroup::AssertFlushLocked(const Rstat* rstat) const {
  assert(rstat == rstat_);
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

Rstat::Rstat(int nr_cpus, const FlushLockConfig& config,
             EngineObserver* observer, const Clock& clock)
    : nr_cpus_(nr_cpus),
      config_(config),
      config_name_(FlushLockConfigName(config)),
      // Zero: every hold ends after its first CPU (ShouldDropFlushLock).
      hold_budget_ticks_(
          config.hold_budget <= absl::ZeroDuration()
              ? 0
              : std::max<int64_t>(1, clock.NsToCycles(absl::ToInt64Nanoseconds(
                                         config.hold_budget)))),
      observer_(observer),
      clock_(clock),
      cpu_locks_(new CpuLock[nr_cpus]),
      cpu_blocks_(nr_cpus, sizeof(RstatGroup::Cpu)) {}

void Rstat::UpdatedLocked(RstatGroup* group, int cpu) {
  // css_rstat_updated(): link group and every ancestor not yet on this
  // CPU's tree, each at the head of its parent's updated_children list.
  // Unlike the kernel, which links bottom-up, the topmost missing ancestor
  // is linked first: several threads may share a CPU slot here, and one that
  // sees its group already linked returns at once, so a linked group must
  // never have an unlinked ancestor (kAdaptive's skip test reads only the
  // flush root's link).
  absl::InlinedVector<RstatGroup*, 16> missing;
  for (RstatGroup* g = group; g != nullptr; g = g->parent_) {
    if (g->GetOrCreateCpu(cpu)->updated_next.load(std::memory_order_relaxed) !=
        nullptr)
      break;
    missing.push_back(g);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    RstatGroup* g = *it;
    RstatGroup::Cpu* gc = g->GetCpu(cpu);
    RstatGroup* parent = g->parent_;
    // Release: a thread that sees this link (acquire in Update()) also sees
    // the ancestors' links made before it.
    if (parent == nullptr) {
      gc->updated_next.store(g, std::memory_order_release);
      continue;
    }
    RstatGroup::Cpu* pc = parent->GetCpu(cpu);
    gc->updated_next.store(pc->updated_children, std::memory_order_release);
    pc->updated_children = g;
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
  // Acquire: pairs with the release in UpdatedLocked().
  if (c->updated_next.load(std::memory_order_acquire) == nullptr) {
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
  root->AssertFlushLocked(this);
  root->flush_next_ = nullptr;
  RstatGroup* tail = root;
  for (RstatGroup* pos = root; pos != nullptr; pos = pos->flush_next_) {
    pos->AssertFlushLocked(this);
    RstatGroup::Cpu* pc = pos->GetCpu(cpu);
    RstatGroup* child = pc->updated_children;
    pc->updated_children = pos;
    while (child != pos) {
      child->AssertFlushLocked(this);
      tail->AssertFlushLocked(this);
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
    pos->AssertFlushLocked(this);
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
  g->AssertFlushLocked(this);
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
      if (parent != nullptr) {
        parent->AssertFlushLocked(this);
        parent->pending_[i] += delta;
      }
    }
  }
  c->stats_updates.store(0, std::memory_order_relaxed);
  if (g->stats_updates_.load(std::memory_order_relaxed) != 0)
    g->stats_updates_.store(0, std::memory_order_relaxed);
}

int Rstat::FlushCpuLocked(RstatGroup* root, int cpu) {
  CpuLock& cl = cpu_locks_[cpu];
  // Seqcount write side around unlink + fold (see CpuIsClean()). Only
  // flushers write it, and they hold the flush lock.
  const uint32_t seq = cl.flush_seq.load(std::memory_order_relaxed);
  cl.flush_seq.store(seq + 1, std::memory_order_relaxed);
  // Memory ordering: orders the odd count before the unlink and fold below.
  std::atomic_thread_fence(std::memory_order_release);
  RstatGroup* list;
  {
    MutexLock l(&cpu_locks_[cpu].mu);
    list = UpdatedListLocked(root, cpu);
  }
  // Memory ordering: pairs with the fence in Update() (see header).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  int groups = 0;
  for (RstatGroup* pos = list; pos != nullptr; pos = pos->flush_next_) {
    pos->AssertFlushLocked(this);
    FlushOneLocked(pos, cpu);
    ++groups;
  }
  // Release: a reader that sees the even count sees the unlink and the fold.
  cl.flush_seq.store(seq + 2, std::memory_order_release);
  return groups;
}

// Skipping clean CPUs (kAdaptive). A reader may pass CPU k without the lock
// when `root` is not on k's updated tree and no flush of k ran while it
// looked. Why nothing acknowledged before the flush is missed: an update
// acknowledged earlier either linked its group (and so `root`, an ancestor)
// into k's tree, which the reader then sees, or found it already linked; then
// whoever unlinked it read its counter after unlinking (the fences in
// Update() and FlushCpuLocked()) and folded it before making flush_seq even
// again, and the reader's acquire load of that even count makes the fold
// visible. If the unlinking flush had a root strictly below `root`, its
// parent stayed linked on k with the delta pending, so `root` is still on k's
// tree and the reader does not skip.
bool Rstat::CpuIsClean(const RstatGroup* root, int cpu) const {
  const CpuLock& cl = cpu_locks_[cpu];
  const uint32_t seq = cl.flush_seq.load(std::memory_order_acquire);
  if (seq & 1) return false;
  const RstatGroup::Cpu* rc = root->GetCpu(cpu);
  if (rc != nullptr &&
      rc->updated_next.load(std::memory_order_relaxed) != nullptr)
    return false;
  // Memory ordering: the loads above complete before the re-check.
  std::atomic_thread_fence(std::memory_order_acquire);
  return cl.flush_seq.load(std::memory_order_relaxed) == seq;
}

namespace {

void StoreMax(std::atomic<int64_t>& max, int64_t value) {
  int64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen &&
         !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// Context switches of the calling thread so far: involuntary (preempted)
// and voluntary (blocked, e.g. on a per-CPU tree lock whose holder was
// preempted: a wait a kernel holder spinning with IRQs off never has).
int64_t Preemptions() {
  rusage usage;
  if (getrusage(RUSAGE_THREAD, &usage) != 0) return -1;
  return usage.ru_nivcsw + usage.ru_nvcsw;
}

}  // namespace

Rstat::FlushHold::FlushHold(Rstat* rstat, LongestHold* longest)
    : rstat_(rstat), longest_(longest) {
  // Count ourselves as a waiter only when the lock is taken, so a holder
  // under the kWhole policy yields exactly when someone is spinning on it
  // (the kernel's spin_needbreak()). Uncontended: one timestamp.
  if (rstat_->flush_mu_.TryLock()) {
    acquired_ = rstat_->clock_.NowCycles();
    return;
  }
  const int64_t before = rstat_->clock_.NowCycles();
  rstat_->flush_waiters_.fetch_add(1, std::memory_order_relaxed);
  rstat_->flush_mu_.Lock();
  rstat_->flush_waiters_.fetch_sub(1, std::memory_order_relaxed);
  acquired_ = rstat_->clock_.NowCycles();
  wait_ticks_ = acquired_ - before;
}

Rstat::FlushHold::~FlushHold() {
  // The hold ends where the lock is released: read the clock first. An
  // Unlock() with waiters also wakes one (a futex syscall, on a VM maybe an
  // IPI exit) after the lock word is free; a kernel spin_unlock_irq() is a
  // store, so that wake-up is no part of the irqs-off time.
  const Clock& clock = rstat_->clock_;
  const int64_t released = clock.NowCycles();
  rstat_->flush_mu_.Unlock();
  const int64_t hold_ns = clock.CyclesToNs(released - acquired_);
  StoreMax(rstat_->hold_wall_max_ns_, hold_ns);
  if (rstat_->observer_ != nullptr) {
    FlushLockHold hold;
    hold.policy = rstat_->config_.policy;
    hold.wait = absl::Nanoseconds(clock.CyclesToNs(wait_ticks_));
    hold.hold = absl::Nanoseconds(hold_ns);
    hold.cpus_walked = cpus_;
    hold.groups_folded = groups_;
    rstat_->observer_->OnFlushLockHold(hold);
  }
  longest_->most_cpus = std::max(longest_->most_cpus, cpus_);
  longest_->most_groups = std::max(longest_->most_groups, groups_);
  if (hold_ns > longest_->hold_ns) {
    longest_->hold_ns = hold_ns;
    longest_->cpus = cpus_;
    longest_->groups = groups_;
  }
}

int64_t Rstat::FlushHold::held_ticks() const {
  return rstat_->clock_.NowCycles() - acquired_;
}

void Rstat::RecordHold(const RstatGroup* root, int64_t hold_ns, int cpus,
                       int groups) {
  MutexLock l(&holds_mu_);
  if (static_cast<int>(longest_holds_.size()) == kNrLongestHolds) {
    if (hold_ns <= absl::ToInt64Nanoseconds(longest_holds_.back().hold)) return;
    longest_holds_.pop_back();
  }
  FlushHoldRecord record;
  record.policy = config_name_;
  record.preempt_model = config_.preempt_model;
  record.root_path = std::string(root->path());
  record.cpus_walked = cpus;
  record.groups_folded = groups;
  record.hold = absl::Nanoseconds(hold_ns);
  record.when = clock_.WallNow();
  auto pos = std::upper_bound(
      longest_holds_.begin(), longest_holds_.end(), record.hold,
      [](absl::Duration d, const FlushHoldRecord& r) { return d > r.hold; });
  longest_holds_.insert(pos, std::move(record));
  if (static_cast<int>(longest_holds_.size()) == kNrLongestHolds) {
    hold_record_floor_ns_.store(
        absl::ToInt64Nanoseconds(longest_holds_.back().hold),
        std::memory_order_relaxed);
  }
}

std::vector<FlushHoldRecord> Rstat::LongestHolds() const {
  MutexLock l(&holds_mu_);
  return longest_holds_;
}

int Rstat::NextCpuToFlush(const RstatGroup* root, int cpu) const {
  if (config_.policy == FlushLockPolicy::kAdaptive) {
    while (cpu < nr_cpus_ && CpuIsClean(root, cpu)) ++cpu;
  }
  return cpu;
}

bool Rstat::ShouldDropFlushLock(const FlushHold& hold, bool* yield) const {
  switch (config_.policy) {
    case FlushLockPolicy::kPerCpu:
      return true;  // the kernel then does cond_resched() or cpu_relax()
    case FlushLockPolicy::kBatch:
      return hold.cpus() >= config_.batch_cpus;
    case FlushLockPolicy::kWhole:
      // Without CONFIG_PREEMPTION spin_needbreak() is 0: never drop mid-loop.
      if (config_.preempt_model == FlushPreemptModel::kNone) return false;
      // spin_needbreak(): someone is waiting for the lock.
      *yield = flush_waiters_.load(std::memory_order_relaxed) > 0;
      return *yield;
    case FlushLockPolicy::kAdaptive:
      *yield = flush_waiters_.load(std::memory_order_relaxed) > 0;
      // No budget: one CPU per hold, whatever the clock reads.
      return *yield || hold_budget_ticks_ == 0 ||
             hold.held_ticks() >= hold_budget_ticks_;
  }
  return true;
}

void Rstat::Flush(RstatGroup* root) {
  const int64_t start_ns = clock_.NowNs();
  int total_groups = 0;
  int cpus_walked = 0;  // CPUs whose updated tree this flush locked
  // The longest hold of this flush, and whether this thread was preempted
  // while flushing (see "Holds and preemption" in rstat.h).
  int64_t preemptions_at_start = -1;
  LongestHold longest;
  // Each pass of the outer loop is one hold of the flush lock: from the next
  // CPU that needs it to the policy's drop point (ShouldDropFlushLock()) or
  // the last CPU. kAdaptive passes clean CPUs without taking the lock, and
  // a flush of an all-clean subtree takes it not at all.
  int cpu = 0;
  while ((cpu = NextCpuToFlush(root, cpu)) < nr_cpus_) {
    if (preemptions_at_start < 0) preemptions_at_start = Preemptions();
    bool yield = false;
    {
      FlushHold hold(this, &longest);
      do {
        const int groups = FlushCpuLocked(root, cpu++);
        hold.AddCpu(groups);
        ++cpus_walked;
        total_groups += groups;
        if (cpu == nr_cpus_ || ShouldDropFlushLock(hold, &yield)) break;
      } while ((cpu = NextCpuToFlush(root, cpu)) < nr_cpus_);
    }
    if (yield) std::this_thread::yield();
  }
  if (longest.most_cpus > 0) {  // this flush took the lock
    StoreMax(hold_max_cpus_, longest.most_cpus);
    StoreMax(hold_max_groups_, longest.most_groups);
  }
  if (preemptions_at_start >= 0 && Preemptions() == preemptions_at_start) {
    // Not preempted: every hold of this flush was on-CPU time, the
    // irqs-off tracer's view.
    StoreMax(hold_max_ns_, longest.hold_ns);
    if (longest.hold_ns > hold_record_floor_ns_.load(std::memory_order_relaxed))
      RecordHold(root, longest.hold_ns, longest.cpus, longest.groups);
  } else if (preemptions_at_start >= 0) {
    preempted_flushes_.fetch_add(1, std::memory_order_relaxed);
  }
  const int64_t end_ns = clock_.NowNs();
  root->last_flush_ns_.store(end_ns, std::memory_order_relaxed);
  flushes_.fetch_add(1, std::memory_order_relaxed);
  flush_cpus_.fetch_add(cpus_walked, std::memory_order_relaxed);
  if (observer_ != nullptr)
    observer_->OnFlushDone(absl::Nanoseconds(end_ns - start_ns), cpus_walked,
                           total_groups);
}

bool Rstat::NeedsFlush(const RstatGroup* group) const {
  return group->pending_updates() > uint64_t{kChargeBatchPages} * nr_cpus_;
}

}  // namespace cgacct
