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

void Group::ReparentPages() {
  for (PageKind kind : {PageKind::kAnon, PageKind::kFile})
    parent_->PagesOf(kind).fetch_add(nr_pages(kind), std::memory_order_relaxed);
}

void Group::CountEvent(MemoryEvent event) {
  const int e = static_cast<int>(event);
  events_local_[e].fetch_add(1, std::memory_order_relaxed);
  for (Group* pos = this; pos != nullptr && !pos->is_root(); pos = pos->parent_)
    pos->events_[e].fetch_add(1, std::memory_order_relaxed);
}

namespace {

MemoryEvents ReadEvents(const std::atomic<uint64_t> (&e)[kNrMemoryEvents]) {
  MemoryEvents out;
  out.low = e[0].load(std::memory_order_relaxed);
  out.high = e[1].load(std::memory_order_relaxed);
  out.max = e[2].load(std::memory_order_relaxed);
  out.oom = e[3].load(std::memory_order_relaxed);
  out.oom_kill = e[4].load(std::memory_order_relaxed);
  return out;
}

}  // namespace

MemoryEvents Group::events() const { return ReadEvents(events_); }
MemoryEvents Group::events_local() const { return ReadEvents(events_local_); }

}  // namespace cgacct
