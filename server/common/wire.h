// Conversions between cgacct.v1 wire values and engine values: enum values,
// the uint32 cpu, microseconds, and bytes <-> pages (WireUnits). Only what
// the engine cannot see is decided here (proto enum values, the uint32 range
// of cpu); every other argument check is the engine's own exported one
// (engine/validate.h, engine/group_path.h), which the pipeline's validation
// stage runs (server/pipeline/ops.h).
//
// Thread safety: pure functions and an immutable class, thread-safe.
#ifndef CGACCT_SERVER_COMMON_WIRE_H_
#define CGACCT_SERVER_COMMON_WIRE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/types.h"

namespace cgacct {

// cgacct.v1.PageKind wire value -> engine PageKind. PAGE_KIND_UNSPECIFIED and
// values this server does not know become a PageKind that is neither kAnon
// nor kFile, which ValidatePageKind() (and the engine) reject with the
// engine's message.
PageKind PageKindFromProto(int kind);

// The wire's optional uint64 cpu as the engine's std::optional<int>, checked
// by ResolveCpu() when present (absent stays absent: the engine picks the
// serving thread's CPU). A value above INT_MAX, which the engine cannot be
// given, is INVALID_ARGUMENT in ResolveCpu()'s words.
absl::StatusOr<std::optional<int>> CpuFromProto(std::optional<uint64_t> cpu,
                                                int nr_cpus);

// The google.rpc.Code number of `status` as the wire carries it (OpResult.
// code): its code, or UNKNOWN for a number outside 0..16.
int WireCode(const absl::Status& status);

// Whole microseconds of `d`, clamped at 0 (an infinite duration saturates at
// INT64_MAX microseconds).
uint64_t DurationToMicros(absl::Duration d);

// Engine memory.events counts -> the wire's MemoryEvents (every line).
void EventsToProto(const MemoryEvents& events, v1::MemoryEvents* out);

// Bytes on the wire, pages in the engine (docs/DESIGN.md §4.1). Limit bytes
// round down to whole pages; UINT64_MAX, or any value at or above
// page_counter_max pages, is "max" (page_counter_max to the engine); a limit
// of page_counter_max pages is reported back as UINT64_MAX.
class WireUnits {
 public:
  WireUnits(uint64_t page_size_bytes, uint64_t page_counter_max)
      : page_size_bytes_(page_size_bytes),
        page_counter_max_(page_counter_max) {}

  uint64_t page_size_bytes() const { return page_size_bytes_; }
  uint64_t page_counter_max() const { return page_counter_max_; }

  uint64_t LimitBytesToPages(uint64_t bytes) const;
  uint64_t LimitPagesToBytes(uint64_t pages) const;
  // Wire limits -> engine update (absent fields stay absent: unchanged).
  LimitsUpdate LimitsFromProto(const v1::Limits& limits) const;
  // Engine limits -> wire limits, all four fields set.
  void LimitsToProto(const Limits& limits, v1::Limits* out) const;
  void GroupToProto(const GroupInfo& group, v1::Group* out) const;

 private:
  const uint64_t page_size_bytes_;
  const uint64_t page_counter_max_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_COMMON_WIRE_H_
