#include "server/wire.h"

#include <climits>

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

absl::StatusOr<std::optional<int>> CpuFromProto(std::optional<uint32_t> cpu,
                                                int nr_cpus) {
  if (!cpu.has_value()) return std::optional<int>();
  if (*cpu > static_cast<uint32_t>(INT_MAX)) {
    // Out of every range ResolveCpu() accepts, but not an int it can print.
    return absl::InvalidArgumentError(
        absl::StrCat("cpu ", *cpu, " out of range [0, ", nr_cpus, ")"));
  }
  absl::StatusOr<int> resolved = ResolveCpu(static_cast<int>(*cpu), nr_cpus);
  if (!resolved.ok()) return resolved.status();
  return std::optional<int>(*resolved);
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

}  // namespace cgacct
