#include "server/common/wire.h"

#include <algorithm>
#include <climits>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/engine.h"

namespace cgacct {

// The wire and the engine number the kinds alike; pin it.
static_assert(static_cast<int>(PageKind::kAnon) == v1::PAGE_KIND_ANON);
static_assert(static_cast<int>(PageKind::kFile) == v1::PAGE_KIND_FILE);

PageKind PageKindFromProto(int kind) {
  switch (kind) {
    case v1::PAGE_KIND_ANON:
      return PageKind::kAnon;
    case v1::PAGE_KIND_FILE:
      return PageKind::kFile;
    default:
      // Neither kAnon nor kFile: ValidatePageKind() says what is wrong.
      return static_cast<PageKind>(v1::PAGE_KIND_UNSPECIFIED);
  }
}

absl::StatusOr<std::optional<int>> CpuFromProto(std::optional<uint64_t> cpu,
                                                int nr_cpus) {
  if (!cpu.has_value()) return std::optional<int>();
  if (*cpu > static_cast<uint64_t>(INT_MAX)) {
    // Out of every range ResolveCpu() accepts, but not an int it can print.
    return absl::InvalidArgumentError(
        absl::StrCat("cpu ", *cpu, " out of range [0, ", nr_cpus, ")"));
  }
  absl::StatusOr<int> resolved = ResolveCpu(static_cast<int>(*cpu), nr_cpus);
  if (!resolved.ok()) return resolved.status();
  return std::optional<int>(*resolved);
}

int WireCode(const absl::Status& status) {
  const int code = static_cast<int>(status.code());
  return code >= 0 &&
                 code <= static_cast<int>(absl::StatusCode::kUnauthenticated)
             ? code
             : static_cast<int>(absl::StatusCode::kUnknown);
}

uint64_t DurationToMicros(absl::Duration d) {
  const int64_t us = absl::ToInt64Microseconds(d);
  return us > 0 ? static_cast<uint64_t>(us) : 0;
}

void EventsToProto(const MemoryEvents& events, v1::MemoryEvents* out) {
  out->set_low(events.low);
  out->set_high(events.high);
  out->set_max(events.max);
  out->set_oom(events.oom);
  out->set_oom_kill(events.oom_kill);
  out->set_oom_group_kill(events.oom_group_kill);
  out->set_sock_throttled(events.sock_throttled);
}

namespace {
constexpr uint64_t kMaxLimitBytes = std::numeric_limits<uint64_t>::max();
}  // namespace

uint64_t WireUnits::LimitBytesToPages(uint64_t bytes) const {
  if (bytes == kMaxLimitBytes) return page_counter_max_;
  return std::min(bytes / page_size_bytes_, page_counter_max_);
}

uint64_t WireUnits::LimitPagesToBytes(uint64_t pages) const {
  // page_counter_max() * page_size <= LONG_MAX: no overflow below "max".
  if (pages >= page_counter_max_) return kMaxLimitBytes;
  return pages * page_size_bytes_;
}

LimitsUpdate WireUnits::LimitsFromProto(const v1::Limits& limits) const {
  LimitsUpdate update;
  if (limits.has_max_bytes())
    update.max_pages = LimitBytesToPages(limits.max_bytes());
  if (limits.has_high_bytes())
    update.high_pages = LimitBytesToPages(limits.high_bytes());
  if (limits.has_min_bytes())
    update.min_pages = LimitBytesToPages(limits.min_bytes());
  if (limits.has_low_bytes())
    update.low_pages = LimitBytesToPages(limits.low_bytes());
  return update;
}

void WireUnits::LimitsToProto(const Limits& limits, v1::Limits* out) const {
  out->set_max_bytes(LimitPagesToBytes(limits.max_pages));
  out->set_high_bytes(LimitPagesToBytes(limits.high_pages));
  out->set_min_bytes(LimitPagesToBytes(limits.min_pages));
  out->set_low_bytes(LimitPagesToBytes(limits.low_pages));
}

void WireUnits::GroupToProto(const GroupInfo& group, v1::Group* out) const {
  out->set_path(group.path);
  out->set_id(group.id);
  LimitsToProto(group.limits, out->mutable_limits());
}

}  // namespace cgacct
