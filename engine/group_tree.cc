#include "engine/group_tree.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/group_path.h"

namespace cgacct {

GroupTree::GroupTree(int nr_cpus, Rstat* rstat, uint64_t page_counter_max)
    : nr_cpus_(nr_cpus),
      rstat_(rstat),
      page_counter_max_(page_counter_max),
      lock_(nr_cpus) {
  auto root = std::make_unique<Group>("/", next_id_++, nullptr, rstat_,
                                      page_counter_max_);
  root_ = root.get();
  AddHandleSlotLocked(root_);
  groups_.emplace("/", std::move(root));
  nr_groups_.store(1, std::memory_order_relaxed);
}

Group* GroupTree::Lookup(absl::string_view path) const {
  auto it = groups_.find(path);
  return it == groups_.end() ? nullptr : it->second.get();
}

absl::StatusOr<Group*> GroupTree::Find(absl::string_view path) const {
  if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
  Group* g = Lookup(path);
  if (g == nullptr)
    return absl::NotFoundError(
        absl::StrCat("path ", QuotePath(path), ": no such group"));
  return g;
}

absl::Status GroupTree::HandleNotFound(GroupHandle handle) {
  return absl::NotFoundError(
      absl::StrCat("group id ", handle.id_,
                   ": no such group (deleted, or an empty handle)"));
}

absl::StatusOr<GroupHandle> GroupTree::Resolve(absl::string_view path) const {
  PercpuReaderLock l(&lock_, CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> g = Find(path);
  if (!g.ok()) return g.status();
  return GroupHandle((*g)->handle_slot_, (*g)->id());
}

absl::StatusOr<std::vector<std::string>> GroupTree::ListGroups(
    absl::string_view path, bool recursive) const {
  PercpuReaderLock l(&lock_, CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> g = Find(path);
  if (!g.ok()) return g.status();
  std::vector<std::string> paths;
  std::vector<const Group*> stack = {*g};
  while (!stack.empty()) {
    const Group* pos = stack.back();
    stack.pop_back();
    for (const Group* child = pos->first_child(); child != nullptr;
         child = child->next_sibling()) {
      if (!child->online()) continue;  // dying: no longer in cgroupfs
      paths.push_back(child->path());
      if (recursive) stack.push_back(child);
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

absl::StatusOr<Group*> GroupTree::Add(absl::string_view path) {
  if (Lookup(path) != nullptr)
    return absl::AlreadyExistsError(
        absl::StrCat("path ", QuotePath(path), " already exists"));
  Group* parent = Lookup(ParentPath(path));
  if (parent == nullptr)
    return absl::NotFoundError(absl::StrCat("path ", QuotePath(path),
                                            ": parent \"", ParentPath(path),
                                            "\" does not exist"));
  auto group = std::make_unique<Group>(std::string(path), next_id_++, parent,
                                       rstat_, page_counter_max_);
  Group* g = group.get();
  AddHandleSlotLocked(g);
  parent->LinkChild(g);  // appended: siblings stay in creation order
  groups_.emplace(std::string(path), std::move(group));
  nr_groups_.fetch_add(1, std::memory_order_relaxed);
  return g;
}

void GroupTree::Offline(Group* group) {
  auto it = groups_.find(group->path());
  dying_.push_back(std::move(it->second));
  groups_.erase(it);
  RemoveHandleSlotLocked(group);
  group->MarkOffline();
  nr_groups_.fetch_sub(1, std::memory_order_relaxed);
  nr_dying_groups_.fetch_add(1, std::memory_order_relaxed);
}

void GroupTree::Remove(Group* group) {
  if (group->online()) Offline(group);
  group->UnlinkFromParent();
  auto it = std::find_if(
      dying_.begin(), dying_.end(),
      [group](const std::unique_ptr<Group>& g) { return g.get() == group; });
  dying_.erase(it);
  nr_dying_groups_.fetch_sub(1, std::memory_order_relaxed);
}

std::vector<Group*> GroupTree::DyingGroups() const {
  std::vector<Group*> out;
  out.reserve(dying_.size());
  for (const std::unique_ptr<Group>& g : dying_) out.push_back(g.get());
  return out;
}

void GroupTree::AddHandleSlotLocked(Group* g) {
  if (free_handle_slots_.empty()) {
    g->handle_slot_ = static_cast<uint32_t>(handle_slots_.size());
    handle_slots_.push_back(g);
  } else {
    g->handle_slot_ = free_handle_slots_.back();
    free_handle_slots_.pop_back();
    handle_slots_[g->handle_slot_] = g;
  }
}

void GroupTree::RemoveHandleSlotLocked(Group* g) {
  handle_slots_[g->handle_slot_] = nullptr;
  free_handle_slots_.push_back(g->handle_slot_);
}

}  // namespace cgacct
