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
// Thread safety: thread-safe (ResolveCpu reads the calling thread's CPU).
#ifndef CGACCT_ENGINE_VALIDATE_H_
#define CGACCT_ENGINE_VALIDATE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/group_path.h"
#include "engine/types.h"

namespace cgacct {

// nr_pages in [1, page_counter_max] (Engine::page_counter_max()).
absl::Status ValidateNrPages(uint64_t nr_pages, uint64_t page_counter_max);

// kind is PageKind::kAnon or PageKind::kFile.
absl::Status ValidatePageKind(PageKind kind);

// The CPU slot of an operation: absent -> the calling thread's slot
// (CurrentCpu(), engine/percpu.h); present -> itself if in [0, nr_cpus).
absl::StatusOr<int> ResolveCpu(std::optional<int> cpu, int nr_cpus);

}  // namespace cgacct

#endif  // CGACCT_ENGINE_VALIDATE_H_
