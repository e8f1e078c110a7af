// gRPC plumbing shared by cgacct-load and cgacctctl: channels, connecting with
// a deadline, and status formatting.
//
// Thread safety: all functions are thread-safe; a grpc::Channel is thread-safe
// and may be shared by any number of stubs and threads.
#ifndef CGACCT_CLIENT_CLI_GRPC_UTIL_H_
#define CGACCT_CLIENT_CLI_GRPC_UTIL_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cgacct/status.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::cli {

// Creates a channel to `target` (a gRPC target string, typically
// HOST:PORT). Plaintext unless the client TLS flags (defined here, shared by
// cgacctctl and cgacct-load) say otherwise: --tls_ca=PEM turns TLS on
// (server verified against that CA bundle; --tls_server_name overrides the
// name checked), --tls_cert/--tls_key present a client certificate (mTLS),
// --token_file sends "authorization: Bearer TOKEN" (over TLS, or without
// --tls_ca over a local connection: gRPC's LOCAL_TCP credentials, which
// only connect to a loopback target). The flags are cgacct::client's
// ConnectOptions (cgacct/channel.h), which makes the channel. With
// `own_connection`, the channel gets a private subchannel pool and
// therefore its own TCP connection; otherwise gRPC shares one connection
// between channels with equal arguments. Does not connect yet. Errors:
// INVALID_ARGUMENT naming the flag (a file that cannot be read or is empty,
// --tls_cert without --tls_key, ...).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, bool own_connection = false);

// The client TLS and token flags above that are set, as command-line
// arguments ("--tls_ca=PATH", ...): what a process spawned to make the same
// channels (cgacct-load's session-churn children) must be given.
std::vector<std::string> ChannelFlags();

// Blocks until `channel` is connected or `timeout` passes. With
// `fail_fast`, returns at the first failed connection attempt (refused,
// unreachable, a TLS handshake that failed) instead of waiting out the
// timeout through gRPC's reconnect backoff (cgacctctl: a refused connection
// took the whole 3 s before). Errors: UNAVAILABLE with a one-line message
// naming `target`.
absl::Status WaitForConnected(grpc::Channel& channel, absl::string_view target,
                              absl::Duration timeout, bool fail_fast = false);

// The deadline `timeout` from now, in the form ClientContext::set_deadline
// takes.
std::chrono::system_clock::time_point DeadlineAfter(absl::Duration timeout);

// The canonical name of a status code ("RESOURCE_EXHAUSTED"), as
// absl::StatusCodeToString() spells it; "CODE_N" for a number outside
// google.rpc.Code.
std::string StatusCodeName(grpc::StatusCode code);

// "CODE: message" (or just "CODE" when the message is empty).
std::string FormatStatus(const grpc::Status& status);
std::string FormatStatus(const client::Status& status);

}  // namespace cgacct::cli

#endif  // CGACCT_CLIENT_CLI_GRPC_UTIL_H_
