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
  const bool charge_stream = kind == Kind::kChargeStream;
  const bool stream = kind == Kind::kStream || charge_stream;
  const uint32_t limit = stream ? options_.max_streams_per_identity
                                : options_.max_in_flight_per_identity;
  const uint32_t charge_stream_limit =
      charge_stream ? options_.max_charge_streams_per_identity : 0;
  bool over_charge_streams = false;
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
    over_charge_streams = charge_stream_limit != 0 &&
                          counts.charge_streams >= charge_stream_limit;
    if ((limit == 0 || used < limit) && !over_bytes && !over_charge_streams) {
      ++used;
      if (charge_stream) ++counts.charge_streams;
      counts.in_flight_bytes += bytes;
      return Permit(this, std::string(identity), kind, bytes);
    }
  }
  const ShedReason reason = over_charge_streams
                                ? ShedReason::kChargeStreamsPerIdentity
                            : stream ? ShedReason::kStreamsPerIdentity
                            : over_bytes
                                ? ShedReason::kInFlightBytesPerIdentity
                                : ShedReason::kInFlightPerIdentity;
  return Shed(reason, identity, bytes_held, bytes);
}

absl::Status CallLimiter::AddBytes(Permit& permit, uint64_t message_bytes) {
  if (permit.limiter_ == nullptr || message_bytes == 0) return absl::OkStatus();
  const uint64_t bytes_limit = options_.max_in_flight_bytes_per_identity;
  uint64_t bytes_held = 0;
  {
    absl::MutexLock l(&mu_);
    Counts& counts = counts_[permit.identity_];
    bytes_held = counts.in_flight_bytes;
    // One message alone always passes (bytes_held == 0).
    if (bytes_limit == 0 || bytes_held == 0 ||
        bytes_held + message_bytes <= bytes_limit) {
      counts.in_flight_bytes += message_bytes;
      permit.bytes_ += message_bytes;
      return absl::OkStatus();
    }
  }
  return Shed(ShedReason::kInFlightBytesPerIdentity, permit.identity_,
              bytes_held, message_bytes);
}

absl::Status CallLimiter::Shed(ShedReason reason, absl::string_view identity,
                               uint64_t bytes_held, uint64_t bytes) const {
  const bool stream = reason == ShedReason::kStreamsPerIdentity;
  const bool over_bytes = reason == ShedReason::kInFlightBytesPerIdentity;
  const uint32_t limit = stream ? options_.max_streams_per_identity
                                : options_.max_in_flight_per_identity;
  const uint64_t bytes_limit = options_.max_in_flight_bytes_per_identity;
  const std::string who =
      identity.empty()
          ? std::string("the anonymous identity")
          : absl::StrCat("identity \"", absl::CHexEscape(identity), "\"");
  const std::string what =
      reason == ShedReason::kChargeStreamsPerIdentity
          ? absl::StrCat(
                " already has ", options_.max_charge_streams_per_identity,
                " ChargeStreams open, as many as its in-flight bytes "
                "(--max_in_flight_bytes_per_identity=",
                options_.max_in_flight_bytes_per_identity,
                ") hold messages of --max_message_bytes (each open "
                "ChargeStream can be receiving one); close one, use "
                "ChargeBatch, or ask the operator for a lower "
                "--max_message_bytes")
      : stream ? absl::StrCat(" already has ", limit,
                            " streams open (--max_streams_per_identity); "
                            "close one or retry later")
      : over_bytes
          ? absl::StrCat(" has ", bytes_held, " bytes of messages in flight; ",
                         bytes == 0 ? std::string("that is past ")
                                    : absl::StrCat(bytes, " more would pass "),
                         bytes_limit,
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
  const bool stream = kind != Kind::kInFlight;
  uint32_t& used = stream ? it->second.streams : it->second.in_flight;
  if (used > 0) --used;
  if (kind == Kind::kChargeStream && it->second.charge_streams > 0)
    --it->second.charge_streams;
  it->second.in_flight_bytes -= std::min(it->second.in_flight_bytes, bytes);
  if (it->second.streams == 0 && it->second.in_flight == 0) counts_.erase(it);
}

uint64_t CallLimiter::BeginRead(absl::string_view identity,
                                std::function<void()> start, ReadPool pool) {
  absl::MutexLock l(&mu_);
  Reads& reads = reads_[static_cast<int>(pool)][identity];
  const uint32_t max_reads = MaxReads(pool);
  if (max_reads == 0 || reads.pending < max_reads) {
    ++reads.pending;
    return 0;
  }
  const uint64_t ticket = ++next_read_ticket_;
  reads.waiting.emplace_back(ticket, std::move(start));
  return ticket;
}

void CallLimiter::EndRead(absl::string_view identity, ReadPool pool) {
  std::function<void()> next;
  {
    absl::MutexLock l(&mu_);
    auto& reads_of = reads_[static_cast<int>(pool)];
    auto it = reads_of.find(identity);
    if (it == reads_of.end()) return;  // unreachable: a read was begun
    Reads& reads = it->second;
    if (!reads.waiting.empty()) {
      // The slot passes to the first waiting read: pending is unchanged.
      next = std::move(reads.waiting.front().second);
      reads.waiting.pop_front();
    } else {
      if (reads.pending > 0) --reads.pending;
      if (reads.pending == 0) reads_of.erase(it);
    }
  }
  if (next) next();  // outside the lock: it starts a gRPC read
}

bool CallLimiter::CancelRead(absl::string_view identity, uint64_t ticket,
                             ReadPool pool) {
  absl::MutexLock l(&mu_);
  auto& reads_of = reads_[static_cast<int>(pool)];
  auto it = reads_of.find(identity);
  if (it == reads_of.end()) return false;
  auto& waiting = it->second.waiting;
  for (auto w = waiting.begin(); w != waiting.end(); ++w) {
    if (w->first != ticket) continue;
    waiting.erase(w);
    return true;
  }
  return false;
}

uint32_t CallLimiter::ReadsInUse(absl::string_view identity,
                                 ReadPool pool) const {
  absl::MutexLock l(&mu_);
  const auto& reads_of = reads_[static_cast<int>(pool)];
  auto it = reads_of.find(identity);
  return it == reads_of.end() ? 0 : it->second.pending;
}

size_t CallLimiter::ReadsWaiting(absl::string_view identity,
                                 ReadPool pool) const {
  absl::MutexLock l(&mu_);
  const auto& reads_of = reads_[static_cast<int>(pool)];
  auto it = reads_of.find(identity);
  return it == reads_of.end() ? 0 : it->second.waiting.size();
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
  switch (kind) {
    case Kind::kStream:
      return it->second.streams;
    case Kind::kChargeStream:
      return it->second.charge_streams;
    case Kind::kInFlight:
      break;
  }
  return it->second.in_flight;
}

}  // namespace cgacct
