// Per-identity admission limits of cgacctd (docs/DESIGN.md §4.10): how many
// streams (ChargeStream, WatchEvents, SessionStream) an identity may hold
// open and how many of its messages may be in flight at once. A call over a
// limit is shed: answered RESOURCE_EXHAUSTED with a message that starts
// "cgacctd is shedding load" and names the limit and its flag, a trailing
// metadata entry `cgacct-shed: <reason>`, and one count in
// cgacct_shed_total{reason}: never confused with a memory.max OOM (whose
// message names the limiting group and which counts in
// cgacct_charges_total{result="oom"}).
//
// What is counted:
//  - streams: a ChargeStream, WatchEvents or SessionStream call from its
//    admission to its end;
//  - in-flight messages: a unary call from its admission to its answer (a
//    charge deferred to a drain-wait thread keeps its permit while it
//    waits), and a ChargeStream request from the moment it is read until its
//    response has been written, so a client that does not read its responses
//    holds its permits. A stream holds at most two (docs/DESIGN.md §4.6).
//    GetEngineInfo is never shed (readiness probes use it);
//  - in-flight bytes: the encoded size of those messages. A tenant's large
//    requests (a ChargeBatch may be 4 MiB on the wire, several times that
//    decoded) are bounded in bytes, not only in number: 1024 of them are
//    4 GiB. A message is admitted when the identity holds no bytes, so one
//    larger than the bound still gets through, alone.
//
// The identity is the caller's (Caller::identity(), server/auth/
// authorizer.h): "" for anonymous callers, who share the anonymous
// identity's limits (process-wide limits on a server without access
// control).
//
// Thread safety: thread-safe. Acquire* and the Permit destructor take one
// mutex (never held across anything else: a leaf lock).
#ifndef CGACCT_SERVER_PIPELINE_CALL_LIMITER_H_
#define CGACCT_SERVER_PIPELINE_CALL_LIMITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/rpc_metrics.h"

namespace cgacct {

// The trailing metadata key that carries ShedReasonName() on a shed call
// (server/rpc/status.h adds it from ShedReasonOf()).
inline constexpr char kShedMetadataKey[] = "cgacct-shed";

// The reason a RESOURCE_EXHAUSTED status was shed for (a payload the
// limiter puts on it), or nullopt for any other status: a memory.max
// refusal carries none.
std::optional<ShedReason> ShedReasonOf(const absl::Status& status);

// Defaults of the flags of the same names (docs/DESIGN.md §6.1).
inline constexpr uint32_t kDefaultMaxStreamsPerIdentity = 256;
inline constexpr uint32_t kDefaultMaxInFlightPerIdentity = 1024;
inline constexpr uint64_t kDefaultMaxInFlightBytesPerIdentity = uint64_t{64}
                                                                << 20;

class CallLimiter {
 public:
  struct Options {
    // Concurrent ChargeStreams per identity; 0 = no limit.
    uint32_t max_streams_per_identity = kDefaultMaxStreamsPerIdentity;
    // Concurrent in-flight messages per identity (see the file comment);
    // 0 = no limit.
    uint32_t max_in_flight_per_identity = kDefaultMaxInFlightPerIdentity;
    // Encoded bytes of those messages per identity; 0 = no limit.
    uint64_t max_in_flight_bytes_per_identity =
        kDefaultMaxInFlightBytesPerIdentity;
  };

  enum class Kind : uint8_t { kStream, kInFlight };

  // One admitted unit (a stream or an in-flight message) of one identity,
  // given back when destroyed or Release()d. Movable; an empty Permit holds
  // nothing. Not thread-safe itself: one owner at a time.
  class Permit {
   public:
    Permit() = default;
    Permit(Permit&& other) noexcept { *this = std::move(other); }
    Permit& operator=(Permit&& other) noexcept;
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;
    ~Permit() { Release(); }

    void Release();

   private:
    friend class CallLimiter;
    Permit(CallLimiter* limiter, std::string identity, Kind kind,
           uint64_t bytes)
        : limiter_(limiter),
          identity_(std::move(identity)),
          kind_(kind),
          bytes_(bytes) {}

    CallLimiter* limiter_ = nullptr;
    std::string identity_;
    Kind kind_ = Kind::kInFlight;
    uint64_t bytes_ = 0;  // in-flight bytes it holds
  };

  explicit CallLimiter(Options options) : options_(options) {}
  CallLimiter(const CallLimiter&) = delete;
  CallLimiter& operator=(const CallLimiter&) = delete;

  // Admits one more stream / in-flight message of `identity` (a message of
  // `message_bytes` encoded bytes), or returns RESOURCE_EXHAUSTED ("cgacctd
  // is shedding load: ...") carrying the ShedReason (ShedReasonOf()).
  // Outstanding Permits must be gone before the limiter is destroyed.
  absl::StatusOr<Permit> Acquire(Kind kind, absl::string_view identity,
                                 uint64_t message_bytes = 0);

  // Units held now by `identity` (tests, metrics).
  uint32_t InUse(Kind kind, absl::string_view identity) const;
  // In-flight message bytes held now by `identity` (tests).
  uint64_t BytesInUse(absl::string_view identity) const;

  const Options& options() const { return options_; }

 private:
  struct Counts {
    uint32_t streams = 0;
    uint32_t in_flight = 0;
    uint64_t in_flight_bytes = 0;
  };
  void Give(Kind kind, const std::string& identity, uint64_t bytes);

  const Options options_;
  mutable absl::Mutex mu_;
  // Identities holding at least one unit; an entry goes when both reach 0,
  // so the map is bounded by the calls in progress.
  absl::flat_hash_map<std::string, Counts> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_CALL_LIMITER_H_
