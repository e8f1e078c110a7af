// The state SessionRegistry keeps per session and per drain, shared by its
// two implementation files (session_registry.cc: sessions, ops, leases;
// remote_drain.cc: drain_all_stock() over the network). Internal to
// server/sessions/.
//
// Thread safety: every field below the constant ones is guarded by the
// registry's mu_.
#ifndef CGACCT_SERVER_SESSIONS_SESSION_STATE_H_
#define CGACCT_SERVER_SESSIONS_SESSION_STATE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "engine/group_handle.h"
#include "engine/remote_stock.h"
#include "engine/types.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

// What a session holds of one group instance and kind.
struct Holding {
  GroupHandle group;
  std::string path;
  PageKind kind = PageKind::kAnon;
  uint64_t nr_pages = 0;
};

struct SessionRegistry::Session {
  std::string id;
  std::string identity;
  std::string client_name;
  uint32_t ttl_ms = 0;
  // Guarded by the registry's mu_ from here on.
  int64_t deadline_ms = 0;  // lease end, on the steady clock (NowMs())
  bool closing = false;     // new ops refused; a Finish() owns it
  int in_flight = 0;        // ops between BeginOp and EndOp
  uint64_t held = 0;        // sum of holdings
  uint64_t reserved = 0;    // charges in flight
  // Charges the engine applied in its name (ChargeApplied, right after the
  // engine call, before EndOp takes mu_): sent with each drain request
  // (SessionServerMessage.charges_applied) so the client can wait for the
  // answers still in flight to it before taking its stock. Atomic, not
  // under mu_: a drain sending under mu_ must count a charge whose EndOp
  // is waiting for that very lock. Relaxed: read under mu_ after the
  // charge's usage was seen by the charge that drains.
  std::atomic<uint64_t> charges_applied{0};
  // (group id, kind) -> holding.
  absl::flat_hash_map<std::pair<uint64_t, int>, Holding> holdings;
  SessionStreamSink* stream = nullptr;
  // Drain requests in a row that timed out unanswered; silent at
  // SessionOptions::silent_after_unanswered_drains (charges do not wait for
  // it). Reset by any drain answer and by a new stream.
  uint32_t unanswered_drains = 0;
  // A drain request nobody waits for is out to it (it is silent, or its
  // stock is known empty): no other is sent until it answers (a client
  // that never reads must not pile requests up).
  bool silent_request_out = false;
  // Drain requests out to it, by drain_id: what each asked (the room its
  // charge needed), for which group's subtree, and the refills applied in
  // its name when it went out. An answer is judged against its own request
  // (a later request, e.g. for a child group, must not change what an
  // earlier answer means). At most kMaxAskedRequests, the oldest dropped
  // (an answer to a dropped one counts for nothing here).
  struct AskedRequest {
    uint64_t nr_pages = 0;
    std::string path;
    uint64_t refills = 0;
  };
  static constexpr size_t kMaxAskedRequests = 8;
  absl::flat_hash_map<uint64_t, AskedRequest> asked;
  // Where its stock is known empty: it answered a drain request with less
  // than asked, so the client gave all its stock at or below that group
  // (the client libraries take every page there, and until their next
  // refill send what their application frees back to the server instead of
  // stocking it). Another identity's charges limited at or below one of
  // these stop waiting for its answers (it is still asked, as a silent
  // session is, and its answers return its pages), as the kernel's
  // drain_all_stock() skips a CPU whose stock holds no pages. At most
  // kMaxAskedRequests groups, none below another. Cleared by a charge in
  // its name that charged more than it asked for (a refill of its stock),
  // by an uncharge in its name with `restock` (its client stocks frees
  // again) and by an answer that returned what was asked; not by a new stream
  // (its stock did not change with it), nor by a request for another group.
  std::vector<std::string> stock_empty_below;
  // Refills applied in its name (charges that charged more than asked,
  // uncharges with `restock`): a
  // short answer means an empty stock only if none was applied after its
  // request went out (a refill the client sent after its answer can reach
  // the server first: the answer and the Charge travel on different
  // streams).
  uint64_t refills = 0;
  // When the last drain request went out to it: an answer later than half
  // the bound after it is slow (DrainAnswer), a step towards silent.
  absl::Time last_request_at = absl::InfinitePast();
  // Engine ids of the peak watermarks it owns (SessionRegistry::
  // watermarks_ has each).
  absl::flat_hash_set<uint64_t> watermarks;
  // Set when an OOM group kill ends it: the killed group's path.
  std::string oom_killed_by;
};

// An open memory.peak watermark (SessionRegistry::OpenPeakWatermark), kept
// in the registry's watermarks_: guarded by its mu_, as that map is.
struct SessionRegistry::Watermark {
  std::string identity;
  std::string session_id;
  std::string path;
  uint64_t group_id = 0;  // the group instance it was opened on
};

// One DrainRemoteStock() call waiting for answers (on its caller's stack).
struct SessionRegistry::Drain {
  uint64_t id = 0;
  std::string over_path;
  uint64_t nr_pages = 0;  // the room its charge needs
  absl::flat_hash_set<Session*> pending;
  std::vector<RemoteStockReturn> returned;
  uint64_t returned_pages = 0;  // the sum of `returned`
  // Identities of the sessions it waits for (pending when it started).
  absl::flat_hash_set<std::string> awaited_identities;
  // Pages returned, by the answering session's identity.
  absl::flat_hash_map<std::string, uint64_t> returned_by_identity;
  // Identities of the charges waiting on it: its own charge's and those of
  // the charges that joined it (none for a charge without a ChargerScope).
  absl::flat_hash_set<std::string> waiters;
};

// An identity whose sessions made another identity's charge wait for
// nothing (SessionRegistry::JudgeWaitLocked): until `until`, other
// identities' charges do not wait for its sessions. Guarded by the
// registry's mu_, as its map drain_cooldowns_ is.
struct SessionRegistry::DrainCooldown {
  absl::Time until = absl::InfinitePast();
  absl::Time last_cooled = absl::InfinitePast();
  int level = 0;  // the cool-down is kDrainCooldownBase << level
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_SESSIONS_SESSION_STATE_H_
