// GroupTree: the engine's registry of groups (the cgroup hierarchy): path ->
// online group, the GroupHandle table, group ids, the dying (offline) groups
// still linked, and the per-CPU reader/writer lock that protects them all
// (the role cgroup_mutex plus RCU play for the kernel's css tree).
//
// Invariants:
//   - The root "/" exists from construction to destruction; every other
//     group's parent is in the tree. `groups_`, `sorted_paths_` and the
//     handle table name the online groups; `dying_` owns the offline ones,
//     in the order they went offline (a child before its parent); the
//     parents' children lists (creation order, Group::LinkChild) link both,
//     so reclaim walks visit dying groups as the kernel's css iterators
//     visit a removed cgroup until it is released.
//   - Ids start at 1 and are never reused; a handle slot holds a live group
//     or null (free), so (slot, id) names one group instance for ever
//     (engine/group_handle.h).
//   - Everything here changes only under the writer side of lock(); any
//     reader slot sees it stable, and a group stays alive while a reader
//     slot is held.
//
// Thread safety: thread-safe. Lookups require a reader slot of lock() (or
// the writer side); Add/Remove require the writer side; ListGroups and
// Resolve take a reader slot themselves. Clang's -Wthread-safety checks it.
#ifndef CGACCT_ENGINE_GROUP_TREE_H_
#define CGACCT_ENGINE_GROUP_TREE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/group.h"
#include "engine/group_handle.h"
#include "engine/percpu.h"
#include "engine/rstat.h"

namespace cgacct {

class GroupTree {
 public:
  // Creates the root. `rstat` must outlive the tree.
  GroupTree(int nr_cpus, Rstat* rstat, uint64_t page_counter_max);
  GroupTree(const GroupTree&) = delete;
  GroupTree& operator=(const GroupTree&) = delete;

  // The tree lock: a reader slot for every operation, the writer side for
  // create and delete.
  PercpuRwLock* lock() const ABSL_LOCK_RETURNED(lock_) { return &lock_; }

  Group* root() const { return root_; }  // constant
  // Online groups, the root included.
  uint64_t nr_groups() const {
    return nr_groups_.load(std::memory_order_relaxed);
  }
  // Offline groups not yet freed (cgroup.stat nr_dying_descendants of the
  // root).
  uint64_t nr_dying_groups() const {
    return nr_dying_groups_.load(std::memory_order_relaxed);
  }

  // The group at `path` (unvalidated), or null.
  Group* Lookup(absl::string_view path) const ABSL_SHARED_LOCKS_REQUIRED(lock_);
  // Validates `path` (INVALID_ARGUMENT), then the group or NOT_FOUND.
  absl::StatusOr<Group*> Find(absl::string_view path) const
      ABSL_SHARED_LOCKS_REQUIRED(lock_);
  // The live group `handle` names, or NOT_FOUND (deleted, or empty). Inline:
  // on every handle charge. The id check makes a reused slot harmless: ids
  // are never reused.
  absl::StatusOr<Group*> Find(GroupHandle handle) const
      ABSL_SHARED_LOCKS_REQUIRED(lock_) {
    Group* g = handle.slot_ < handle_slots_.size() ? handle_slots_[handle.slot_]
                                                   : nullptr;
    if (ABSL_PREDICT_TRUE(g != nullptr && g->id() == handle.id_)) return g;
    return HandleNotFound(handle);
  }

  // The handle of `group` (live or not: a handle to an offline group finds
  // nothing).
  static GroupHandle HandleOf(const Group& group);
  // Engine::DyingGroupIds(): the ids of the offline groups not yet freed.
  // Takes a reader slot.
  std::vector<uint64_t> DyingGroupIds() const;
  // Engine::ResolveGroup(): the handle of the group at `path`.
  absl::StatusOr<GroupHandle> Resolve(absl::string_view path) const
      ABSL_LOCKS_EXCLUDED(lock_);
  // Engine::ListGroups(): online paths below `path`, sorted.
  absl::StatusOr<std::vector<std::string>> ListGroups(absl::string_view path,
                                                      bool recursive) const
      ABSL_LOCKS_EXCLUDED(lock_);
  // Engine::ListGroupsPage(): a page of that listing, found by seeking in
  // sorted_paths_: O((page + |within|) log n) under one reader slot, never
  // a walk of the whole subtree.
  absl::StatusOr<GroupPage> ListGroupsPage(absl::string_view path,
                                           const GroupListing& listing) const
      ABSL_LOCKS_EXCLUDED(lock_);

  // Adds a group at the valid non-root `path` under its existing parent,
  // with a fresh id and handle slot. ALREADY_EXISTS; NOT_FOUND (parent).
  absl::StatusOr<Group*> Add(absl::string_view path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // css offline: `group`, a non-root online group without online children,
  // leaves the path map and the handle table (its path and every handle to
  // it are NOT_FOUND from now on; the path may be created again) and stays
  // linked, offline, among its parent's children until Remove.
  void Offline(Group* group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // Unlinks and destroys `group`, a non-root group without linked children
  // (online: it leaves the path map and handle table too; offline: the
  // dying list).
  void Remove(Group* group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  // The offline groups, in the order they went offline.
  std::vector<Group*> DyingGroups() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);

 private:
  // Find(handle)'s NOT_FOUND, built out of line.
  static absl::Status HandleNotFound(GroupHandle handle);
  void AddHandleSlotLocked(Group* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);
  void RemoveHandleSlotLocked(Group* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lock_);

  const int nr_cpus_;
  Rstat* const rstat_;
  const uint64_t page_counter_max_;

  mutable PercpuRwLock lock_;
  absl::flat_hash_map<std::string, std::unique_ptr<Group>> groups_
      ABSL_GUARDED_BY(lock_);
  // The paths of groups_ in byte order (views of each Group's path, which
  // never moves): where a listing page seeks.
  absl::btree_set<absl::string_view> sorted_paths_ ABSL_GUARDED_BY(lock_);
  Group* root_;  // constant after construction
  uint64_t next_id_ ABSL_GUARDED_BY(lock_) = 1;
  // GroupHandle slot -> live group (null: free). A vector that grows is
  // fine: no reader is inside while the writer holds the lock.
  std::vector<Group*> handle_slots_ ABSL_GUARDED_BY(lock_);
  std::vector<uint32_t> free_handle_slots_ ABSL_GUARDED_BY(lock_);
  // Offline groups, oldest first (a dying group goes offline after its
  // children, so freeing in this order frees children first).
  std::vector<std::unique_ptr<Group>> dying_ ABSL_GUARDED_BY(lock_);
  std::atomic<uint64_t> nr_groups_{0};
  std::atomic<uint64_t> nr_dying_groups_{0};
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_GROUP_TREE_H_
