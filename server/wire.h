// Conversions between cgacct.v1 wire values and engine values, shared by the
// handlers in accounting_service.cc and charge_batch.cc. Only what the engine
// cannot see is decided here (proto enum values, the uint32 range of cpu);
// every other argument check is the engine's own (engine/engine.h).
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_SERVER_WIRE_H_
#define CGACCT_SERVER_WIRE_H_

#include <cstdint>
#include <optional>

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

// The wire's optional uint32 cpu as the engine's std::optional<int>, checked
// by ResolveCpu() when present (absent stays absent: the engine picks the
// serving thread's CPU). A value above INT_MAX, which the engine cannot be
// given, is INVALID_ARGUMENT in ResolveCpu()'s words.
absl::StatusOr<std::optional<int>> CpuFromProto(std::optional<uint32_t> cpu,
                                                int nr_cpus);

// Whole microseconds of `d`, clamped at 0 (an infinite duration saturates at
// INT64_MAX microseconds).
uint64_t DurationToMicros(absl::Duration d);

// Engine memory.events counts -> the wire's MemoryEvents (every line).
void EventsToProto(const MemoryEvents& events, v1::MemoryEvents* out);

}  // namespace cgacct

#endif  // CGACCT_SERVER_WIRE_H_
