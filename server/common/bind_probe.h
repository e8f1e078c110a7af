// ProbeBind(): whether a listening address can be bound, and if not why, in
// one line a user can act on (the errno's words, "address already in use"
// naming the likely holder), before a server library is asked to bind it:
// gRPC and civetweb report a failed bind in their own terms (gRPC: a raw
// core error tree on stderr), or not at all.
//
// Thread-safe (no state). The probe socket is closed before it returns.
#ifndef CGACCT_SERVER_COMMON_BIND_PROBE_H_
#define CGACCT_SERVER_COMMON_BIND_PROBE_H_

#include <string>

#include "absl/status/status.h"

namespace cgacct {

// Binds (SO_REUSEADDR, as gRPC and civetweb bind) a TCP socket to `listen`
// ("HOST:PORT", "[V6]:PORT" or "PORT"; port 0 always binds) and closes it.
// OK if the bind succeeded; UNAVAILABLE "address already in use (another
// cgacctd, or another program, has the port)" for EADDRINUSE, another
// errno's text otherwise; INVALID_ARGUMENT "invalid address (want
// HOST:PORT)" when the address does not resolve to a numeric port.
absl::Status ProbeBind(const std::string& listen);

}  // namespace cgacct

#endif  // CGACCT_SERVER_COMMON_BIND_PROBE_H_
