#include "engine/options.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cgacct {

absl::Status EngineOptions::Validate() const {
  if (nr_cpus < 0 || nr_cpus > kMaxCpus)
    return absl::InvalidArgumentError(
        absl::StrCat("nr_cpus ", nr_cpus, " out of range [0, ", kMaxCpus, "]"));
  if (charge_batch_pages < 1 || charge_batch_pages > 127)
    return absl::InvalidArgumentError(absl::StrCat(
        "charge_batch_pages ", charge_batch_pages, " out of range [1, 127]"));
  const uint32_t buckets = stock_pool_buckets;
  if (buckets > 65536 || (buckets & (buckets - 1)) != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("stock_pool_buckets ", buckets,
                     " must be 0 or a power of two <= 65536"));
  const uint32_t sets = stock_victim_sets;
  if (sets > 1024 || (sets & (sets - 1)) != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "stock_victim_sets ", sets, " must be 0 or a power of two <= 1024"));
  const uint64_t ps = page_size_bytes;
  if (ps < 512 || (ps & (ps - 1)) != 0 || ps > (uint64_t{1} << 30))
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size_bytes ", ps, " must be a power of two in [512, 1 GiB]"));
  if (flush_batch_cpus < 1 || flush_batch_cpus > kMaxCpus)
    return absl::InvalidArgumentError(
        absl::StrCat("flush_batch_cpus ", flush_batch_cpus,
                     " out of range [1, ", kMaxCpus, "]"));
  if (flush_preempt_model != FlushPreemptModel::kNone &&
      flush_preempt_model != FlushPreemptModel::kFull)
    return absl::InvalidArgumentError(absl::StrCat(
        "flush_preempt_model ", static_cast<int>(flush_preempt_model),
        " must be none (0) or full (1)"));
  if (flush_hold_budget < absl::ZeroDuration() ||
      flush_hold_budget > absl::Seconds(1))
    return absl::InvalidArgumentError(absl::StrCat(
        "flush_hold_budget ", absl::FormatDuration(flush_hold_budget),
        " must be in [0, 1s]"));
  if (periodic_flush_interval < absl::ZeroDuration())
    return absl::InvalidArgumentError("periodic_flush_interval must be >= 0");
  return absl::OkStatus();
}

int EngineOptions::ResolvedNrCpus() const {
  if (nr_cpus != 0) return nr_cpus;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(std::min<long>(online, kMaxCpus)) : 1;
}

}  // namespace cgacct
