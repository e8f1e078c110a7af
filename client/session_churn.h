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
// process, from main.
#ifndef CGACCT_CLIENT_SESSION_CHURN_H_
#define CGACCT_CLIENT_SESSION_CHURN_H_

namespace cgacct::client {

// The parent: returns the exit code (0 every round back to 0 within
// ttl + 1 s, 1 set-up failed, 3 a round missed the bound or a child failed).
int RunSessionChurn(const char* argv0);

// The child (--session_churn_child): never returns normally; exits 1 if the
// session cannot be opened or a charge fails.
int RunSessionChurnChild();

// Whether this process is a churn child (the hidden flag is set).
bool IsSessionChurnChild();

}  // namespace cgacct::client

#endif  // CGACCT_CLIENT_SESSION_CHURN_H_
