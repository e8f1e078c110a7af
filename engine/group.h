// Group: one node of the engine's hierarchy (struct mem_cgroup).
//
// Invariants:
//   - path, id and parent never change; a group's path is valid
//     (engine/group_path.h) and its id is engine-unique, never reused.
//   - The tree links (the children list, the handle slot) are written only
//     by GroupTree (engine/group_tree.h), under the writer side of its lock;
//     readers follow them holding a reader slot.
//   - A group's children are a list in creation order, as the kernel's
//     cgroup->children (css_create() appends with list_add_tail_rcu()):
//     css_next_descendant_pre(), and so every reclaim walk, visits siblings
//     in the order they were created, and a group created during a walk's
//     round comes after every existing sibling.
//   - Own pages by kind (nr_anon/nr_file): exact and synchronous (unlike
//     rstat). Charged() is called after the page_counter charge succeeded,
//     Uncharging() before the page_counter uncharge, so memory.current never
//     falls below them; Uncharging() refuses more ANON than is held before
//     any counter moves. nr_file is also the FILE LRU (engine/lru.h).
//   - A group is online from creation until DeleteGroup takes it offline
//     (mem_cgroup_css_offline()); an offline ("dying") group keeps its pages,
//     its page_counter and its place in its parent's children list (reclaim
//     walks still visit it, get_scan_count()'s offline floor applies) until
//     it holds no page and has no children, when the engine frees it. It is
//     never charged again; its pages leave by reclaim, or by uncharges that
//     name its nearest online ancestor (MemoryController). An offline
//     group's children are offline.
//   - memory.events: an event counts once locally and once in the group and
//     each ancestor below the root (CountEvent()), or in the group alone
//     under memory_localevents.
//
// Thread safety: thread-safe as described above: the page counts, events and
// counters are atomics or guarded as their classes say; the tree links and
// the group's lifetime belong to the group tree's lock.
#ifndef CGACCT_ENGINE_GROUP_H_
#define CGACCT_ENGINE_GROUP_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "engine/lru.h"
#include "engine/mutex.h"
#include "engine/page_counter.h"
#include "engine/rstat.h"
#include "engine/types.h"

namespace cgacct {

class Group {
 public:
  // `parent` is null for the root only. `rstat` must outlive the group.
  Group(std::string path, uint64_t id, Group* parent, Rstat* rstat,
        uint64_t page_counter_max);
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& path() const { return path_; }
  // The last path segment ("" for the root).
  absl::string_view name() const;
  uint64_t id() const { return id_; }
  Group* parent() const { return parent_; }
  bool is_root() const { return parent_ == nullptr; }
  // The children list, in creation order (null when empty or at the end).
  // Caller holds a tree reader slot (or the writer side).
  Group* first_child() const { return first_child_; }
  Group* last_child() const { return last_child_; }
  Group* next_sibling() const { return next_sibling_; }
  Group* prev_sibling() const { return prev_sibling_; }
  // Whether any child is linked, online or dying (the walk's view).
  bool has_children() const { return first_child_ != nullptr; }
  // Online children (rmdir's EBUSY test: css_has_online_children()).
  uint64_t nr_children() const { return nr_children_; }
  // Dying (offline) children still linked.
  uint64_t nr_dying_children() const { return nr_dying_children_; }
  // mem_cgroup_online(): false once DeleteGroup took the group offline.
  // Written under the tree's writer lock; read under a reader slot.
  bool online() const { return online_; }

  PageCounter& memory() { return memory_; }  // memory.current/max/high/...
  const PageCounter& memory() const { return memory_; }
  RstatGroup& rstat_group() { return rstat_group_; }
  const RstatGroup& rstat_group() const { return rstat_group_; }
  // Shared cursor of reclaim walks that target this group (engine/lru.h).
  MemcgReclaimIter& reclaim_iter() { return reclaim_iter_; }

  // --- Own pages by kind ------------------------------------------------

  // Pages of `kind` charged to this group itself (not its descendants).
  uint64_t nr_pages(PageKind kind) const {
    return PagesOf(kind).load(std::memory_order_relaxed);
  }
  // After a successful page_counter charge of nr_pages of `kind`.
  void Charged(PageKind kind, uint64_t nr_pages);
  // Before uncharging: takes nr_pages of `kind` off the group's own count and
  // returns how many the caller must uncharge. ANON: all of nr_pages, or
  // FAILED_PRECONDITION (nothing taken) if the group holds fewer. FILE: what
  // is left of nr_pages (reclaim may have taken some), possibly 0; with
  // `at_most`, ANON too takes what is left instead of refusing.
  // Inline: on every uncharge.
  absl::StatusOr<uint64_t> Uncharging(PageKind kind, uint64_t nr_pages,
                                      bool at_most = false) {
    std::atomic<uint64_t>& held = PagesOf(kind);
    uint64_t cur = held.load(std::memory_order_relaxed);
    uint64_t take;
    do {
      if (ABSL_PREDICT_FALSE(kind == PageKind::kAnon && nr_pages > cur &&
                             !at_most))
        return AnonUnderflow(nr_pages, cur);
      take = std::min(nr_pages, cur);
      if (take == 0) return 0;
      // Relaxed: the count is the only data; the page_counter uncharge that
      // follows is ordered by its own atomics. The same CAS as reclaim's
      // LruIsolatePages(), so a FILE page is reclaimed or uncharged, not both.
    } while (!held.compare_exchange_weak(cur, cur - take,
                                         std::memory_order_relaxed));
    return take;
  }
  // isolate_lru_folios() on the FILE LRU: takes up to nr_to_scan FILE pages
  // off the list for reclaim, which then uncharges them. Lock-free.
  uint64_t IsolateLruPages(uint64_t nr_to_scan) {
    return LruIsolatePages(nr_file_pages_, nr_to_scan);
  }
  // The children list (GroupTree, under the writer side of its lock):
  // appends `child` (online) after the last child; marks this group offline
  // (it stays linked, counted among its parent's dying children); unlinks
  // this offline group from its parent's list.
  void LinkChild(Group* child);
  void MarkOffline();
  void UnlinkFromParent();

  // Uncharging()'s FAILED_PRECONDITION for ANON: "nr_pages N: path P holds
  // only H ANON pages".
  absl::Status AnonUnderflow(uint64_t nr_pages, uint64_t held) const;

  // --- reclaim: a subtree known to hold no FILE page --------------------

  // The engine's FILE charge count (MemoryController::FileChargeEpoch())
  // read before a reclaim walk that saw this group's whole subtree without
  // one FILE page; kNoFileFreeEpoch if none did. While the count is still
  // that, a reclaim of this subtree would find nothing. Lock-free.
  static constexpr uint64_t kNoFileFreeEpoch = ~uint64_t{0};
  uint64_t file_free_epoch() const {
    return file_free_epoch_.load(std::memory_order_relaxed);
  }
  void set_file_free_epoch(uint64_t epoch) {
    file_free_epoch_.store(epoch, std::memory_order_relaxed);
  }

  // --- memory.oom.group -------------------------------------------------

  // memory.oom.group (memcg->oom_group): at an OOM, the whole group is
  // killed (mem_cgroup_get_oom_group()). Lock-free.
  bool oom_group() const { return oom_group_.load(std::memory_order_relaxed); }
  void set_oom_group(bool on) {
    oom_group_.store(on, std::memory_order_relaxed);
  }

  // --- memory.peak, per open file (Linux 6.12+) -------------------------

  // memory_peak_write() on the file `watermark_id` names: local_watermark
  // = usage; every registered watermark below usage is raised to it (so
  // their readers keep the peak they saw); `watermark_id` is registered (if
  // new) or reset at usage. Returns usage. Takes peaks_mu_.
  uint64_t PeakWrite(uint64_t watermark_id) ABSL_LOCKS_EXCLUDED(peaks_mu_);
  // memory_peak_show() of a registered watermark: max(its value,
  // local_watermark), pages; nullopt if `watermark_id` is not registered.
  std::optional<uint64_t> PeakRead(uint64_t watermark_id) const
      ABSL_LOCKS_EXCLUDED(peaks_mu_);
  // peak_release(): forgets `watermark_id`; false if it was not registered.
  bool PeakRelease(uint64_t watermark_id) ABSL_LOCKS_EXCLUDED(peaks_mu_);

  // --- memory.events ----------------------------------------------------

  // memcg_memory_event()'s counting: `event` once in memory.events.local,
  // and in memory.events of this group and each ancestor below the root.
  // With `local_only` (memory_localevents), memory.events counts on this
  // group alone.
  void CountEvent(MemoryEvent event, bool local_only = false);
  MemoryEvents events() const;        // hierarchical (memory.events)
  MemoryEvents events_local() const;  // memory.events.local

 private:
  friend class GroupTree;  // the tree links

  std::atomic<uint64_t>& PagesOf(PageKind kind) {
    return kind == PageKind::kAnon ? nr_anon_pages_ : nr_file_pages_;
  }
  const std::atomic<uint64_t>& PagesOf(PageKind kind) const {
    return kind == PageKind::kAnon ? nr_anon_pages_ : nr_file_pages_;
  }

  // Constant after construction.
  const std::string path_;
  const uint64_t id_;
  Group* const parent_;

  // Tree links, written by GroupTree under its writer lock (LinkChild,
  // UnlinkFromParent), read under a reader slot: the children list in
  // creation order (cgroup->children / ->sibling).
  Group* first_child_ = nullptr;
  Group* last_child_ = nullptr;
  Group* prev_sibling_ = nullptr;
  Group* next_sibling_ = nullptr;
  uint64_t nr_children_ = 0;        // online ones
  uint64_t nr_dying_children_ = 0;  // offline ones still linked
  bool online_ = true;
  uint32_t handle_slot_ = 0;  // index in the tree's GroupHandle table

  PageCounter memory_;
  RstatGroup rstat_group_;

  // memory.events (hierarchical) and memory.events.local; relaxed atomics.
  std::atomic<uint64_t> events_[kNrMemoryEvents] = {};
  std::atomic<uint64_t> events_local_[kNrMemoryEvents] = {};

  // Own pages by kind (see the invariants above). Own cache line.
  alignas(kCacheLineBytes) std::atomic<uint64_t> nr_anon_pages_{0};
  std::atomic<uint64_t> nr_file_pages_{0};  // also the FILE LRU

  MemcgReclaimIter reclaim_iter_;

  std::atomic<bool> oom_group_{false};
  std::atomic<uint64_t> file_free_epoch_{kNoFileFreeEpoch};

  // memory.peak's registered per-file watermarks (the kernel's
  // memcg->memory_peaks list of struct cgroup_of_peak, under
  // memcg->peaks_lock): watermark id -> value, pages.
  mutable Mutex peaks_mu_;
  absl::flat_hash_map<uint64_t, uint64_t> peaks_ ABSL_GUARDED_BY(peaks_mu_);
};

}  // namespace cgacct

#endif  // CGACCT_ENGINE_GROUP_H_
