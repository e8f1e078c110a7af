// GroupHandle: a pre-resolved reference to one group of an Engine, for the
// charge hot path (Envoy's stats model: resolve the name once, then use the
// handle; the kernel's equivalent is the memcg pointer a socket or page keeps).
//
// A handle names a group *instance*, not a path: it is (slot, id), where
// `slot` indexes the engine's table of live groups and `id` is the group's
// engine-unique id (never reused). Every use re-checks, under the engine's
// per-CPU group-tree reader lock, that the slot still holds a group with that
// id, so a handle stays safe after its group is deleted: the call answers
// NOT_FOUND and touches nothing. A group deleted and re-created under the same
// path is a new instance; old handles to the path stay NOT_FOUND (resolve the
// path again). The check costs one indexed load and one compare, no hashing
// and no string work.
//
// Thread safety: a plain value, thread-compatible; copy it freely. Handles of
// one Engine mean nothing to another Engine (a foreign handle can name an
// unrelated group there: do not mix engines).
#ifndef CGACCT_ENGINE_GROUP_HANDLE_H_
#define CGACCT_ENGINE_GROUP_HANDLE_H_

#include <cstdint>

namespace cgacct {

class GroupHandle {
 public:
  // An empty handle: every use is NOT_FOUND.
  GroupHandle() = default;

  // The group's engine-unique id (GroupInfo::id); 0 for an empty handle.
  uint64_t id() const { return id_; }
  bool empty() const { return id_ == 0; }

  friend bool operator==(const GroupHandle& a, const GroupHandle& b) {
    return a.slot_ == b.slot_ && a.id_ == b.id_;
  }
  friend bool operator!=(const GroupHandle& a, const GroupHandle& b) {
    return !(a == b);
  }

 private:
  friend class GroupTree;
  GroupHandle(uint32_t slot, uint64_t id) : slot_(slot), id_(id) {}

  uint32_t slot_ = 0;
  uint64_t id_ = 0;  // ids start at 1, so 0 never matches a live group
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_GROUP_HANDLE_H_
