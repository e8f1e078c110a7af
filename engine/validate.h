// The engine's argument checks, exported so that a front end (the gRPC
// service) checks a request with the engine's own rules and words instead of
// a copy. Every Engine method runs the same checks on its arguments.
//
// Each returns INVALID_ARGUMENT with a message naming the field:
//   ValidateGroupPath   "path \"/a/\" must not end with '/'" (group_path.h)
//   ValidateNrPages     "nr_pages must be > 0",
//                       "nr_pages N exceeds PAGE_COUNTER_MAX (M)"
//   ValidatePageKind    "kind must be ANON or FILE"
//   ResolveCpu          "cpu N out of range [0, nr_cpus)"
//
// The checks sit on every charge and uncharge, so each is inline with its
// error message built out of line (the Status-building half is cold code in
// validate.cc): a valid argument costs a compare, not a Status round trip.
//
// Thread safety: thread-safe (ResolveCpu reads the calling thread's CPU).
#ifndef CGACCT_ENGINE_VALIDATE_H_
#define CGACCT_ENGINE_VALIDATE_H_

#include <cstdint>
#include <optional>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/group_path.h"
#include "engine/percpu.h"
#include "engine/types.h"

namespace cgacct {

namespace validate_internal {
// The INVALID_ARGUMENT of each check; called only when the check fails.
absl::Status NrPagesError(uint64_t nr_pages, uint64_t page_counter_max);
absl::Status PageKindError();
absl::Status CpuError(int cpu, int nr_cpus);
}  // namespace validate_internal

// nr_pages in [1, page_counter_max] (Engine::page_counter_max()).
inline bool NrPagesValid(uint64_t nr_pages, uint64_t page_counter_max) {
  return nr_pages != 0 && nr_pages <= page_counter_max;
}
inline absl::Status ValidateNrPages(uint64_t nr_pages,
                                    uint64_t page_counter_max) {
  if (ABSL_PREDICT_TRUE(NrPagesValid(nr_pages, page_counter_max)))
    return absl::OkStatus();
  return validate_internal::NrPagesError(nr_pages, page_counter_max);
}

// kind is PageKind::kAnon or PageKind::kFile.
inline bool PageKindValid(PageKind kind) {
  return kind == PageKind::kAnon || kind == PageKind::kFile;
}
inline absl::Status ValidatePageKind(PageKind kind) {
  if (ABSL_PREDICT_TRUE(PageKindValid(kind))) return absl::OkStatus();
  return validate_internal::PageKindError();
}

// A cpu an operation names is in [0, nr_cpus).
inline bool CpuValid(std::optional<int> cpu, int nr_cpus) {
  return !cpu.has_value() || (*cpu >= 0 && *cpu < nr_cpus);
}
// The CPU slot of an operation: absent -> the calling thread's slot
// (CurrentCpu(), engine/percpu.h); present -> itself if in [0, nr_cpus).
inline absl::StatusOr<int> ResolveCpu(std::optional<int> cpu, int nr_cpus) {
  if (!cpu.has_value()) return CurrentCpu(nr_cpus);
  if (ABSL_PREDICT_TRUE(*cpu >= 0 && *cpu < nr_cpus)) return *cpu;
  return validate_internal::CpuError(*cpu, nr_cpus);
}

}  // namespace cgacct

#endif  // CGACCT_ENGINE_VALIDATE_H_
