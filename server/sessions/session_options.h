// The sessions' registry's options, counts and stream end
// (server/sessions/session_registry.h): SessionOptions (the --session_*
// flags), SessionStats (what /metrics reports of the sessions) and
// SessionStreamSink (the server end of one SessionStream, as the registry
// sees it).
#ifndef CGACCT_SERVER_SESSIONS_SESSION_OPTIONS_H_
#define CGACCT_SERVER_SESSIONS_SESSION_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/clock.h"

namespace cgacct {

struct SessionOptions {
  // OpenSessionRequest.ttl_ms 0 gets default_ttl_ms; others must lie in
  // [min_ttl_ms, max_ttl_ms] (--session_default_ttl_ms, --session_min_ttl_ms,
  // --session_max_ttl_ms).
  uint32_t default_ttl_ms = 10000;
  uint32_t min_ttl_ms = 100;
  uint32_t max_ttl_ms = 600000;
  // Most pages one session may hold at once, all groups and kinds together
  // (--session_max_pages; OpenSessionResponse.max_held_pages).
  uint64_t max_pages = uint64_t{1} << 20;
  // Open sessions per caller identity (--max_sessions_per_identity); one
  // more is RESOURCE_EXHAUSTED.
  uint32_t max_sessions_per_identity = 1024;
  // How long a charge at memory.max waits for the sessions it asked to
  // return their stock (--session_drain_timeout_ms).
  absl::Duration drain_timeout = absl::Milliseconds(20);
  // A session that left this many drain requests in a row unanswered
  // within drain_timeout, or answered later than drain_timeout / 2, is
  // silent: charges stop waiting for it (it is still asked, one request at
  // a time; its answers return its pages, and a prompt one ends the
  // silence; so does a new stream). Without
  // this, one tenant's session that kept its lease alive and never
  // answered made every refused charge under a shared limit wait the whole
  // bound, for ever. >= 1.
  uint32_t silent_after_unanswered_drains = 2;
  // Threads on which charges wait for drain answers (DrainWaitPool's
  // max_threads, --session_drain_wait_threads): that many wait side by
  // side; more queue. 1..4096.
  int drain_wait_threads = 256;
  // memory.peak watermarks (OpenPeakWatermark) one caller identity may have
  // open at once, over all its sessions (--max_peak_watermarks_per_identity;
  // the kernel's bound is the process's RLIMIT_NOFILE, 1024 by default); one
  // more is RESOURCE_EXHAUSTED.
  uint32_t max_peak_watermarks_per_identity = 1024;
  // How often the reaper looks for expired sessions and queued OOM group
  // kills (at most this late; a queued kill wakes it at once).
  absl::Duration reap_interval = absl::Milliseconds(25);
  // The clock leases run on (NowNs); null = the steady clock. Tests give a
  // ManualClock and call ReapExpired() after moving it. The drain wait
  // (drain_timeout) stays on real time: it is a CondVar deadline. Not owned.
  const Clock* clock = nullptr;

  // INVALID_ARGUMENT naming the first field out of range: min_ttl_ms >= 1,
  // min <= default <= max, max_pages >= 1, max_sessions_per_identity >= 1,
  // drain_timeout >= 0, silent_after_unanswered_drains >= 1,
  // 1 <= drain_wait_threads <= 4096, max_peak_watermarks_per_identity >= 1.
  absl::Status Validate() const;
};

// The server end of one SessionStream, as the registry sees it.
// Thread safety: both methods are called with the registry's mutex held and
// must not block nor call back into the registry.
class SessionStreamSink {
 public:
  virtual ~SessionStreamSink() = default;
  // Queues `message` for the client (never blocks).
  virtual void Send(const cgacct::v1::SessionServerMessage& message) = 0;
  // Ends the stream with `status` once queued messages are written (the
  // session closed or expired, a newer stream replaced it, or shutdown).
  // After End() the registry never calls the sink again.
  virtual void End(absl::Status status) = 0;
};

// Cumulative counts (since the registry was built) and the current gauge.
struct SessionStats {
  uint64_t sessions = 0;  // open now
  uint64_t opened = 0;
  uint64_t closed = 0;                 // by CloseSession
  uint64_t expired = 0;                // by the reaper
  uint64_t returned_pages_close = 0;   // uncharged by closes
  uint64_t returned_pages_expire = 0;  // uncharged by expiries
  uint64_t oom_killed = 0;  // ended by memory.oom.group kills
  uint64_t returned_pages_oom_kill = 0;  // uncharged by those
  // Cluster mode: ended because their shard moved (EndSessionsHolding()).
  uint64_t shard_moved = 0;
  uint64_t returned_pages_shard_moved = 0;  // uncharged by those
  uint64_t oom_group_kills = 0;  // group kills handled (OnOomGroupKill)
  uint64_t peak_watermarks = 0;  // open now (a gauge)
  uint64_t drains = 0;                 // charges that asked sessions
  uint64_t drains_joined = 0;  // charges that waited for a drain in flight
  // Charges on a thread that may not wait (gRPC's) handed to a waiting
  // thread (server/drain_wait_pool.h).
  uint64_t drains_deferred = 0;
  uint64_t drain_requests_answered = 0;  // per session asked
  uint64_t drain_requests_timeout = 0;
  // Unanswered when the pages already returned covered the charge.
  uint64_t drain_requests_unneeded = 0;
  // Sent to a silent session (SessionOptions::silent_after_unanswered_
  // drains): no charge waited for the answer.
  uint64_t drain_requests_not_awaited = 0;
  // Answers later than half the bound after their request (a step towards
  // silent; also counted answered or late as they came).
  uint64_t drain_answers_slow = 0;
  // Answers that returned less than their request asked: the session's
  // stock there is then known empty and charges stop waiting for it until
  // it refills (Session::stock_empty_below).
  uint64_t drain_answers_short = 0;
  // Waits of a charge for another identity's sessions that did not cover
  // it: each cools that identity (its sessions are not waited for by other
  // identities' charges for 100 ms, doubling to 6.4 s).
  uint64_t drain_identity_cooldowns = 0;
  uint64_t sessions_silent = 0;  // silent now (a gauge)
  uint64_t sessions_silenced = 0;  // times a session became silent
  uint64_t drain_returned_pages = 0;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_SESSIONS_SESSION_OPTIONS_H_
