#include "engine/group.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/group_path.h"

namespace cgacct {

Group::Group(std::string path, uint64_t id, Group* parent, Rstat* rstat,
             uint64_t page_counter_max)
    : path_(std::move(path)),
      id_(id),
      parent_(parent),
      memory_(parent != nullptr ? &parent->memory_ : nullptr, page_counter_max),
      rstat_group_(rstat, parent != nullptr ? &parent->rstat_group_ : nullptr,
                   path_) {}

absl::string_view Group::name() const { return LeafName(path_); }

void Group::Charged(PageKind kind, uint64_t nr_pages) {
  PagesOf(kind).fetch_add(nr_pages, std::memory_order_relaxed);
}

absl::Status Group::AnonUnderflow(uint64_t nr_pages, uint64_t held) const {
  return absl::FailedPreconditionError(
      absl::StrCat("nr_pages ", nr_pages, ": path ", QuotePath(path_),
                   " holds only ", held, " ANON pages"));
}

void Group::LinkChild(Group* child) {
  child->prev_sibling_ = last_child_;
  child->next_sibling_ = nullptr;
  if (last_child_ != nullptr) {
    last_child_->next_sibling_ = child;
  } else {
    first_child_ = child;
  }
  last_child_ = child;
  ++nr_children_;
}

void Group::MarkOffline() {
  online_ = false;
  --parent_->nr_children_;
  ++parent_->nr_dying_children_;
}

void Group::UnlinkFromParent() {
  Group* parent = parent_;
  (prev_sibling_ != nullptr ? prev_sibling_->next_sibling_
                            : parent->first_child_) = next_sibling_;
  (next_sibling_ != nullptr ? next_sibling_->prev_sibling_
                            : parent->last_child_) = prev_sibling_;
  prev_sibling_ = next_sibling_ = nullptr;
  --parent->nr_dying_children_;
}

void Group::CountEvent(MemoryEvent event, bool local_only) {
  const int e = static_cast<int>(event);
  events_local_[e].fetch_add(1, std::memory_order_relaxed);
  for (Group* pos = this; pos != nullptr && !pos->is_root(); pos = pos->parent_) {
    pos->events_[e].fetch_add(1, std::memory_order_relaxed);
    if (local_only) break;
  }
}

uint64_t Group::PeakWrite(uint64_t watermark_id) {
  MutexLock l(&peaks_mu_);
  const uint64_t usage = memory_.ResetLocalWatermark();
  for (auto& [id, value] : peaks_) value = std::max(value, usage);
  peaks_[watermark_id] = usage;
  return usage;
}

std::optional<uint64_t> Group::PeakRead(uint64_t watermark_id) const {
  MutexLock l(&peaks_mu_);
  auto it = peaks_.find(watermark_id);
  if (it == peaks_.end()) return std::nullopt;
  return std::max(it->second, memory_.local_watermark());
}

bool Group::PeakRelease(uint64_t watermark_id) {
  MutexLock l(&peaks_mu_);
  return peaks_.erase(watermark_id) > 0;
}

namespace {

MemoryEvents ReadEvents(const std::atomic<uint64_t> (&e)[kNrMemoryEvents]) {
  MemoryEvents out;
  for (int i = 0; i < kNrMemoryEvents; ++i)
    out.*kMemoryEventFields[i].value = e[i].load(std::memory_order_relaxed);
  return out;
}

}  // namespace

MemoryEvents Group::events() const { return ReadEvents(events_); }
MemoryEvents Group::events_local() const { return ReadEvents(events_local_); }

}  // namespace cgacct
