#include "engine/types.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace cgacct {

const char* FlushLockPolicyName(FlushLockPolicy policy) {
  switch (policy) {
    case FlushLockPolicy::kPerCpu:
      return "per_cpu";
    case FlushLockPolicy::kWhole:
      return "whole";
    case FlushLockPolicy::kBatch:
      return "batch";
    case FlushLockPolicy::kAdaptive:
      return "adaptive";
  }
  return "unknown";
}

const char* FlushPreemptModelName(FlushPreemptModel model) {
  switch (model) {
    case FlushPreemptModel::kNone:
      return "none";
    case FlushPreemptModel::kFull:
      return "full";
  }
  return "unknown";
}

std::optional<FlushPreemptModel> ParseFlushPreemptModel(
    const std::string& name) {
  if (name == "none") return FlushPreemptModel::kNone;
  if (name == "full") return FlushPreemptModel::kFull;
  return std::nullopt;
}

std::optional<FlushLockPolicy> ParseFlushLockPolicy(const std::string& name,
                                                    int* batch_cpus) {
  if (name == "per_cpu") return FlushLockPolicy::kPerCpu;
  if (name == "whole") return FlushLockPolicy::kWhole;
  if (name == "adaptive") return FlushLockPolicy::kAdaptive;
  constexpr absl::string_view kBatchPrefix = "batch:";
  if (absl::StartsWith(name, kBatchPrefix)) {
    int n = 0;
    if (!absl::SimpleAtoi(absl::string_view(name).substr(kBatchPrefix.size()),
                          &n) ||
        n < 1 || n > 4096) {
      return std::nullopt;
    }
    if (batch_cpus != nullptr) *batch_cpus = n;
    return FlushLockPolicy::kBatch;
  }
  return std::nullopt;
}

}  // namespace cgacct
