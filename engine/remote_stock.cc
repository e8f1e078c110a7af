#include "engine/remote_stock.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace cgacct {

thread_local bool RemoteDrainDeferral::active_ = false;
thread_local bool RemoteDrainDeferral::resuming_ = false;

namespace {
// The payload that tells a deferred charge from any other UNAVAILABLE.
constexpr absl::string_view kDeferredPayload =
    "type.googleapis.com/cgacct.internal.RemoteDrainDeferred";
}  // namespace

absl::Status RemoteDrainDeferredError(absl::string_view over_path) {
  absl::Status status = absl::UnavailableError(absl::StrCat(
      "memory.max of ", over_path,
      " reached while clients hold stock there: the charge waits for their "
      "drain answers on another thread"));
  status.SetPayload(kDeferredPayload, absl::Cord());
  return status;
}

bool IsRemoteDrainDeferred(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(kDeferredPayload).has_value();
}

}  // namespace cgacct
