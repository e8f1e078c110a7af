#include "engine/validate.h"

#include "absl/strings/str_cat.h"

namespace cgacct {

namespace validate_internal {

absl::Status NrPagesError(uint64_t nr_pages, uint64_t page_counter_max) {
  if (nr_pages == 0) return absl::InvalidArgumentError("nr_pages must be > 0");
  return absl::InvalidArgumentError(absl::StrCat("nr_pages ", nr_pages,
                                                 " exceeds PAGE_COUNTER_MAX (",
                                                 page_counter_max, ")"));
}

absl::Status PageKindError() {
  return absl::InvalidArgumentError("kind must be ANON or FILE");
}

absl::Status CpuError(int cpu, int nr_cpus) {
  return absl::InvalidArgumentError(
      absl::StrCat("cpu ", cpu, " out of range [0, ", nr_cpus, ")"));
}

}  // namespace validate_internal

}  // namespace cgacct
