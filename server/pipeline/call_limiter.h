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
//    admission to its end; ChargeStreams also on their own, because each
//    keeps a read pending for as long as it is open, and gRPC 1.51 takes a
//    pending read's whole message (up to --max_message_bytes) whatever the
//    HTTP/2 window: cgacctd allows, with access control, as many as the
//    in-flight bytes hold largest messages;
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
#include <deque>
#include <functional>
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
inline constexpr uint32_t kDefaultMaxReadsPerIdentity = 4;
// 64 MiB / 4 MiB: ChargeStreams (with access control) and SessionStream reads
// per identity at the default flags.
inline constexpr uint32_t kDefaultMaxStreamReadsPerIdentity = 16;

class CallLimiter {
 public:
  struct Options {
    // Concurrent streams (ChargeStream, WatchEvents, SessionStream) per
    // identity; 0 = no limit.
    uint32_t max_streams_per_identity = kDefaultMaxStreamsPerIdentity;
    // Concurrent ChargeStreams per identity (also counted as streams); 0 =
    // no limit. cgacctd sets max(1, max_in_flight_bytes_per_identity /
    // --max_message_bytes) with access control, 0 without.
    uint32_t max_charge_streams_per_identity = 0;
    // Concurrent in-flight messages per identity (see the file comment);
    // 0 = no limit.
    uint32_t max_in_flight_per_identity = kDefaultMaxInFlightPerIdentity;
    // Encoded bytes of those messages per identity; 0 = no limit.
    uint64_t max_in_flight_bytes_per_identity =
        kDefaultMaxInFlightBytesPerIdentity;
    // Requests being read at once per identity (BeginRead); 0 = no limit.
    // cgacctd sets max_in_flight_bytes_per_identity / (4 x
    // --max_message_bytes), at least 1 (4 by default): a request being
    // handled costs about four times its encoded size (its bytes, the
    // parsed message, the answer and its bytes).
    uint32_t max_reads_per_identity = kDefaultMaxReadsPerIdentity;
    // SessionStream reads pending at once per identity (ReadPool::kSession);
    // 0 = no limit. cgacctd sets max(1, max_in_flight_bytes_per_identity /
    // --max_message_bytes), 0 without a bytes bound. Such a read is started
    // only when the server awaits an answer, so it is held for about one
    // round trip (server/rpc/session_stream.cc).
    uint32_t max_session_reads_per_identity = kDefaultMaxStreamReadsPerIdentity;
  };

  // kChargeStream is a stream counted twice: as a stream, and against
  // max_charge_streams_per_identity.
  enum class Kind : uint8_t { kStream, kChargeStream, kInFlight };
  // The read slots a read is taken from: unary requests' (and WatchEvents'
  // one request), or SessionStream messages'.
  enum class ReadPool : uint8_t { kRequest, kSession };

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
    // It holds a unit (not empty, not released).
    bool held() const { return limiter_ != nullptr; }

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
  // Adds `message_bytes` to an in-flight permit admitted before its message
  // was read (a unary call, server/rpc/unary.h), by the rule Acquire
  // applies: RESOURCE_EXHAUSTED (shed, nothing added) when the identity
  // already holds bytes and these would pass the bound. An empty permit (a
  // call never shed) takes nothing.
  absl::Status AddBytes(Permit& permit, uint64_t message_bytes);

  // Reads of unary requests. gRPC buffers a request before any handler
  // runs, up to --max_message_bytes, for every stream whose read is
  // pending: one tenant's 200 concurrent 4 MiB requests held ~1 GB before
  // (issue 22's attack round, row 11a). So a unary call reads its request
  // only once admitted and authenticated, and an identity has at most
  // max_reads_per_identity reads pending; a call past that waits (its
  // stream buffers at most HTTP/2's initial window) for one of them to end,
  // in arrival order, not shed. BeginRead returns 0 if `start` may run now
  // (the caller runs it), else a ticket: `start` then runs on the thread of
  // the EndRead that frees the slot, unless CancelRead(ticket) removed it
  // first (true). Each read started ends with one EndRead.
  // `pool` says whose slots: kRequest's max_reads_per_identity, or
  // kSession's max_session_reads_per_identity (the two never share).
  uint64_t BeginRead(absl::string_view identity, std::function<void()> start,
                     ReadPool pool = ReadPool::kRequest);
  void EndRead(absl::string_view identity, ReadPool pool = ReadPool::kRequest);
  bool CancelRead(absl::string_view identity, uint64_t ticket,
                  ReadPool pool = ReadPool::kRequest);
  // Reads pending and waiting of `identity` (tests).
  uint32_t ReadsInUse(absl::string_view identity,
                      ReadPool pool = ReadPool::kRequest) const;
  size_t ReadsWaiting(absl::string_view identity,
                      ReadPool pool = ReadPool::kRequest) const;

  // Units held now by `identity` (tests, metrics).
  uint32_t InUse(Kind kind, absl::string_view identity) const;
  // In-flight message bytes held now by `identity` (tests).
  uint64_t BytesInUse(absl::string_view identity) const;

  const Options& options() const { return options_; }

 private:
  struct Counts {
    uint32_t streams = 0;
    uint32_t charge_streams = 0;  // also in streams
    uint32_t in_flight = 0;
    uint64_t in_flight_bytes = 0;
  };
  struct Reads {
    uint32_t pending = 0;
    std::deque<std::pair<uint64_t, std::function<void()>>> waiting;
  };
  void Give(Kind kind, const std::string& identity, uint64_t bytes);
  // The shed status of `identity` for `reason` (`held`, `bytes`: the
  // in-flight bytes held and asked for).
  absl::Status Shed(ShedReason reason, absl::string_view identity,
                    uint64_t held, uint64_t bytes) const;

  const Options options_;
  mutable absl::Mutex mu_;
  // Identities holding at least one unit; an entry goes when both reach 0,
  // so the map is bounded by the calls in progress.
  absl::flat_hash_map<std::string, Counts> counts_ ABSL_GUARDED_BY(mu_);
  uint32_t MaxReads(ReadPool pool) const {
    return pool == ReadPool::kRequest ? options_.max_reads_per_identity
                                      : options_.max_session_reads_per_identity;
  }
  // Per ReadPool: identities with a read pending or waiting (an entry goes
  // when neither).
  absl::flat_hash_map<std::string, Reads> reads_[2] ABSL_GUARDED_BY(mu_);
  uint64_t next_read_ticket_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_CALL_LIMITER_H_
