#include "server/pipeline/call_limiter.h"

#include <algorithm>

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
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void CallLimiter::Permit::Release() {
  if (limiter_ == nullptr) return;
  std::exchange(limiter_, nullptr)->Give(kind_, identity_, bytes_);
  bytes_ = 0;
}

absl::StatusOr<CallLimiter::Permit> CallLimiter::Acquire(
    Kind kind, absl::string_view identity, uint64_t message_bytes) {
  const bool stream = kind == Kind::kStream;
  const uint32_t limit = stream ? options_.max_streams_per_identity
                                : options_.max_in_flight_per_identity;
  const uint64_t bytes_limit =
      stream ? 0 : options_.max_in_flight_bytes_per_identity;
  const uint64_t bytes = stream ? 0 : message_bytes;
  bool over_bytes = false;
  uint64_t bytes_held = 0;
  {
    absl::MutexLock l(&mu_);
    Counts& counts = counts_[identity];
    uint32_t& used = stream ? counts.streams : counts.in_flight;
    bytes_held = counts.in_flight_bytes;
    // One message alone always passes (bytes_held == 0).
    over_bytes = bytes_limit != 0 && bytes_held != 0 &&
                 bytes_held + bytes > bytes_limit;
    if ((limit == 0 || used < limit) && !over_bytes) {
      ++used;
      counts.in_flight_bytes += bytes;
      return Permit(this, std::string(identity), kind, bytes);
    }
  }
  const ShedReason reason = stream ? ShedReason::kStreamsPerIdentity
                            : over_bytes
                                ? ShedReason::kInFlightBytesPerIdentity
                                : ShedReason::kInFlightPerIdentity;
  const std::string who =
      identity.empty()
          ? std::string("the anonymous identity")
          : absl::StrCat("identity \"", absl::CHexEscape(identity), "\"");
  const std::string what =
      stream ? absl::StrCat(" already has ", limit,
                            " streams open (--max_streams_per_identity); "
                            "close one or retry later")
      : over_bytes
          ? absl::StrCat(" has ", bytes_held, " bytes of messages in flight; ",
                         bytes, " more would pass ", bytes_limit,
                         " (--max_in_flight_bytes_per_identity); retry later "
                         "with backoff")
          : absl::StrCat(" already has ", limit,
                         " messages in flight (--max_in_flight_per_identity); "
                         "retry later with backoff");
  absl::Status shed = absl::ResourceExhaustedError(
      absl::StrCat("cgacctd is shedding load: ", who, what,
                   " (not a memory.max OOM: nothing was applied)"));
  shed.SetPayload(kShedPayloadUrl, absl::Cord(ShedReasonName(reason)));
  return shed;
}

void CallLimiter::Give(Kind kind, const std::string& identity,
                       uint64_t bytes) {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(identity);
  if (it == counts_.end()) return;  // unreachable: a Permit names a held unit
  uint32_t& used =
      kind == Kind::kStream ? it->second.streams : it->second.in_flight;
  if (used > 0) --used;
  it->second.in_flight_bytes -= std::min(it->second.in_flight_bytes, bytes);
  if (it->second.streams == 0 && it->second.in_flight == 0) counts_.erase(it);
}

uint64_t CallLimiter::BytesInUse(absl::string_view identity) const {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(identity);
  return it == counts_.end() ? 0 : it->second.in_flight_bytes;
}

uint32_t CallLimiter::InUse(Kind kind, absl::string_view identity) const {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(identity);
  if (it == counts_.end()) return 0;
  return kind == Kind::kStream ? it->second.streams : it->second.in_flight;
}

}  // namespace cgacct
