#include "server/pipeline/call_limiter.h"

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cgacct {

namespace {

// The payload that marks a shed status, holding ShedReasonName().
constexpr char kShedPayloadUrl[] = "type.cgacct.dev/cgacct.shed";

}  // namespace

std::optional<ShedReason> ShedReasonOf(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kResourceExhausted)
    return std::nullopt;
  const auto payload = status.GetPayload(kShedPayloadUrl);
  if (!payload.has_value()) return std::nullopt;
  for (int r = 0; r < kNrShedReasons; ++r) {
    const auto reason = static_cast<ShedReason>(r);
    if (*payload == ShedReasonName(reason)) return reason;
  }
  return std::nullopt;
}

CallLimiter::Permit& CallLimiter::Permit::operator=(Permit&& other) noexcept {
  if (this != &other) {
    Release();
    limiter_ = std::exchange(other.limiter_, nullptr);
    identity_ = std::move(other.identity_);
    kind_ = other.kind_;
  }
  return *this;
}

void CallLimiter::Permit::Release() {
  if (limiter_ == nullptr) return;
  std::exchange(limiter_, nullptr)->Give(kind_, identity_);
}

absl::StatusOr<CallLimiter::Permit> CallLimiter::Acquire(
    Kind kind, absl::string_view identity) {
  const bool stream = kind == Kind::kStream;
  const uint32_t limit = stream ? options_.max_streams_per_identity
                                : options_.max_in_flight_per_identity;
  {
    absl::MutexLock l(&mu_);
    Counts& counts = counts_[identity];
    uint32_t& used = stream ? counts.streams : counts.in_flight;
    if (limit == 0 || used < limit) {
      ++used;
      return Permit(this, std::string(identity), kind);
    }
  }
  const ShedReason reason = stream ? ShedReason::kStreamsPerIdentity
                                   : ShedReason::kInFlightPerIdentity;
  const std::string who =
      identity.empty()
          ? std::string("the anonymous identity")
          : absl::StrCat("identity \"", absl::CHexEscape(identity), "\"");
  absl::Status shed = absl::ResourceExhaustedError(absl::StrCat(
      "cgacctd is shedding load: ", who, " already has ", limit,
      stream ? " streams open (--max_streams_per_identity); close one "
               "or retry later"
             : " messages in flight (--max_in_flight_per_identity); retry "
               "later with backoff",
      " (not a memory.max OOM: nothing was applied)"));
  shed.SetPayload(kShedPayloadUrl, absl::Cord(ShedReasonName(reason)));
  return shed;
}

void CallLimiter::Give(Kind kind, const std::string& identity) {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(identity);
  if (it == counts_.end()) return;  // unreachable: a Permit names a held unit
  uint32_t& used =
      kind == Kind::kStream ? it->second.streams : it->second.in_flight;
  if (used > 0) --used;
  if (it->second.streams == 0 && it->second.in_flight == 0) counts_.erase(it);
}

uint32_t CallLimiter::InUse(Kind kind, absl::string_view identity) const {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(identity);
  if (it == counts_.end()) return 0;
  return kind == Kind::kStream ? it->second.streams : it->second.in_flight;
}

}  // namespace cgacct
