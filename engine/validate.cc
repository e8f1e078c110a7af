#include "engine/validate.h"

#include "absl/strings/str_cat.h"
#include "engine/percpu.h"

namespace cgacct {

absl::Status ValidateNrPages(uint64_t nr_pages, uint64_t page_counter_max) {
  if (nr_pages == 0) return absl::InvalidArgumentError("nr_pages must be > 0");
  if (nr_pages > page_counter_max)
    return absl::InvalidArgumentError(
        absl::StrCat("nr_pages ", nr_pages, " exceeds PAGE_COUNTER_MAX (",
                     page_counter_max, ")"));
  return absl::OkStatus();
}

absl::Status ValidatePageKind(PageKind kind) {
  if (kind != PageKind::kAnon && kind != PageKind::kFile)
    return absl::InvalidArgumentError("kind must be ANON or FILE");
  return absl::OkStatus();
}

absl::StatusOr<int> ResolveCpu(std::optional<int> cpu, int nr_cpus) {
  if (!cpu.has_value()) return CurrentCpu(nr_cpus);
  if (*cpu < 0 || *cpu >= nr_cpus)
    return absl::InvalidArgumentError(
        absl::StrCat("cpu ", *cpu, " out of range [0, ", nr_cpus, ")"));
  return *cpu;
}

}  // namespace cgacct
