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
  sorted_paths_.insert(root_->path());
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

GroupHandle GroupTree::HandleOf(const Group& group) {
  return GroupHandle(group.handle_slot_, group.id());
}

absl::StatusOr<GroupHandle> GroupTree::Resolve(absl::string_view path) const {
  PercpuReaderLock l(&lock_, CurrentCpu(nr_cpus_));
  absl::StatusOr<Group*> g = Find(path);
  if (!g.ok()) return g.status();
  return GroupHandle((*g)->handle_slot_, (*g)->id());
}

absl::StatusOr<std::vector<std::string>> GroupTree::ListGroups(
    absl::string_view path, bool recursive) const {
  GroupListing listing;
  listing.recursive = recursive;
  absl::StatusOr<GroupPage> page = ListGroupsPage(path, listing);
  if (!page.ok()) return page.status();
  return std::move(page->paths);
}

namespace {

// [lo, hi) in byte order.
struct KeyInterval {
  std::string lo;
  std::string hi;
};

// The interval of every path with `prefix` (which ends in '/'): '0' follows
// '/' in ASCII, so "/a/" .. "/a0" holds exactly the paths below "/a".
KeyInterval PrefixInterval(std::string prefix) {
  std::string hi = prefix;
  hi.back() = '0';
  return {std::move(prefix), std::move(hi)};
}

// The interval of `path` alone: nothing sorts between s and s + '\0'.
KeyInterval PointInterval(absl::string_view path) {
  std::string hi(path);
  hi.push_back('\0');
  return {std::string(path), std::move(hi)};
}

}  // namespace

absl::StatusOr<GroupPage> GroupTree::ListGroupsPage(
    absl::string_view path, const GroupListing& listing) const {
  PercpuReaderLock l(&lock_, CurrentCpu(nr_cpus_));
  if (absl::StatusOr<Group*> g = Find(path); !g.ok()) return g.status();
  // Every path below `path` starts with `below`.
  const std::string below =
      path == "/" ? std::string("/") : absl::StrCat(path, "/");

  // The disjoint intervals of sorted_paths_ the listing covers. Without a
  // view, or when `path` lies inside one of its subtrees: everything below
  // `path`. Otherwise each outermost subtree of the view strictly below
  // `path`: the subtree's root (a point) and the paths below it (a prefix),
  // two intervals because a sibling such as "/a/b-c" sorts between "/a/b"
  // and "/a/b/x". Disjoint subtrees give disjoint intervals.
  std::vector<KeyInterval> intervals;
  bool whole = !listing.within.has_value();
  if (!whole) {
    for (const std::string& w : *listing.within) {
      if (PathAtOrBelow(path, w)) whole = true;
    }
  }
  if (whole) {
    intervals.push_back(PrefixInterval(below));
  } else {
    const std::vector<std::string>& within = *listing.within;
    for (size_t i = 0; i < within.size(); ++i) {
      const std::string& w = within[i];
      if (!PathStrictlyBelow(w, path)) continue;
      bool outermost = true;  // not inside another (or an equal earlier) one
      for (size_t j = 0; j < within.size() && outermost; ++j) {
        if (j == i) continue;
        if (PathStrictlyBelow(w, within[j]) || (j < i && w == within[j]))
          outermost = false;
      }
      if (!outermost) continue;
      // Without `recursive`, only a subtree whose root is a child of `path`
      // shows, and only its root.
      if (listing.recursive || ParentPath(w) == path)
        intervals.push_back(PointInterval(w));
      if (listing.recursive) intervals.push_back(PrefixInterval(w + "/"));
    }
    std::sort(intervals.begin(), intervals.end(),
              [](const KeyInterval& a, const KeyInterval& b) {
                return a.lo < b.lo;
              });
  }

  GroupPage page;
  for (const KeyInterval& interval : intervals) {
    auto it = (!listing.after.empty() && listing.after >= interval.lo)
                  ? sorted_paths_.upper_bound(listing.after)
                  : sorted_paths_.lower_bound(interval.lo);
    ++page.nr_scanned;  // the seek
    while (it != sorted_paths_.end() && *it < interval.hi) {
      ++page.nr_scanned;
      const absl::string_view key = *it;
      if (key == path) {  // the root's interval starts at "/" itself
        ++it;
        continue;
      }
      if (!listing.recursive) {
        // Below a child of `path`: seek past that child's subtree.
        const size_t slash = key.find('/', below.size());
        if (slash != absl::string_view::npos) {
          it = sorted_paths_.lower_bound(
              absl::StrCat(key.substr(0, slash), "0"));
          continue;
        }
      }
      if (page.paths.size() == listing.max_paths) {
        page.more = true;
        return page;
      }
      page.paths.emplace_back(key);
      ++it;
    }
  }
  return page;
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
  sorted_paths_.insert(g->path());
  nr_groups_.fetch_add(1, std::memory_order_relaxed);
  return g;
}

void GroupTree::Offline(Group* group) {
  sorted_paths_.erase(group->path());
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

std::vector<uint64_t> GroupTree::DyingGroupIds() const {
  PercpuReaderLock l(&lock_, CurrentCpu(nr_cpus_));
  std::vector<uint64_t> out;
  out.reserve(dying_.size());
  for (const std::unique_ptr<Group>& g : dying_) {
    // Holding nothing: freed at the next CreateGroup or DeleteGroup.
    if (g->memory().Read() == 0 && !g->has_children()) continue;
    out.push_back(g->id());
  }
  return out;
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
