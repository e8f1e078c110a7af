#include "engine/types.h"

namespace cgacct {

const char* FlushLockPolicyName(FlushLockPolicy policy) {
  switch (policy) {
    case FlushLockPolicy::kPerCpu:
      return "per_cpu";
    case FlushLockPolicy::kWhole:
      return "whole";
  }
  return "unknown";
}

std::optional<FlushLockPolicy> ParseFlushLockPolicy(const std::string& name) {
  if (name == "per_cpu") return FlushLockPolicy::kPerCpu;
  if (name == "whole") return FlushLockPolicy::kWhole;
  return std::nullopt;
}

}  // namespace cgacct
