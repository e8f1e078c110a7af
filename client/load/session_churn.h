// cgacct-load --scenario=session-churn (docs/DESIGN.md §6.2): clients that
// open sessions, charge, and die without closing, as crashed application
// processes do.
//
// Each of --churn_rounds rounds starts --churn_clients child processes (this
// binary again, with the hidden --session_churn_child): each opens a
// cgacct::client session with lease --session_ttl_ms on --target, charges
// --churn_pages pages of GROUP in 3-page charges through the library's
// stock (keeping what it charged) and reports "ready"; then the parent
// SIGKILLs half of them and SIGTERMs the other half (its default action:
// no destructor runs); none calls CloseSession.
// The parent then polls GROUP's memory.current (GetStats, exact) every 10 ms
// until it is 0. The report, per round: the pages held when the clients
// died, how long memory.current took to reach 0 (goal: within ttl + 1 s),
// and, from /metrics, the sessions expired and the pages their expiry
// returned (cgacct_sessions_expired_total,
// cgacct_session_returned_pages_total{reason="expire"}).
//
// Thread safety: RunSessionChurn and RunSessionChurnChild run once per
// process, from main; the report functions are pure.
#ifndef CGACCT_CLIENT_LOAD_SESSION_CHURN_H_
#define CGACCT_CLIENT_LOAD_SESSION_CHURN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "client/load/options.h"

namespace cgacct::load {

// The parent: returns the exit code (0 every round back to 0 within
// ttl + 1 s, 1 set-up failed, 3 a round missed the bound or a child failed).
int RunSessionChurn(const SessionChurnOptions& o, const char* argv0);

// The child (--session_churn_child): never returns normally; exits 1 if the
// session cannot be opened or a charge fails.
int RunSessionChurnChild(const SessionChurnOptions& o);

// The session counters of /metrics a round reads before and after.
struct SessionCounters {
  double expired = 0;
  double returned_expire = 0;
};

// One round's figures.
struct ChurnRound {
  uint64_t held_pages = 0;    // memory.current when the clients died
  double to_zero_ms = -1;     // -1: not back to 0 within the wait
  bool within_bound = false;  // to_zero_ms <= ttl + 1000
  std::optional<SessionCounters> delta;
};

// The table cgacct-load prints, ending in '\n'; `first_error` "" if none.
std::string FormatSessionChurnTable(const SessionChurnOptions& o,
                                    const std::vector<ChurnRound>& rounds,
                                    const std::string& first_error);

// The --json document, ending in '\n'.
std::string SessionChurnJson(const SessionChurnOptions& o,
                             const std::vector<ChurnRound>& rounds,
                             const std::string& first_error);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_SESSION_CHURN_H_
