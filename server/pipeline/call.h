// CallContext: one call as the pipeline sees it, built once when the call
// arrives and handed to every stage (docs/DESIGN.md §2.4, §4.11).
//
// The rpc room (server/rpc/) builds it from the gRPC context with
// Pipeline::BeginCall(): the method, the arrival time, the deadline and the
// caller (authenticated once, from the credentials the call presented).
// Admission adds the permit; the stages read the caller from it instead of
// working it out again; Pipeline::EndCall() records the call once and gives
// the permit back. Nothing here is a gRPC type.
//
// Thread safety: thread-compatible. A call's context is used by one thread
// at a time (the gRPC thread that started it, then, for a charge deferred
// to wait for sessions' drain answers, the drain-wait thread that finishes
// it).
#ifndef CGACCT_SERVER_PIPELINE_CALL_H_
#define CGACCT_SERVER_PIPELINE_CALL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "server/auth/authorizer.h"
#include "server/auth/credentials.h"
#include "server/metrics/rpc_metrics.h"
#include "server/pipeline/call_limiter.h"

namespace cgacct {

// What admission checks before a call's request is read.
enum class Admission : uint8_t {
  // Shutdown, the deadline, and one in-flight message of the caller
  // (--max_in_flight_per_identity): every unary call but GetEngineInfo.
  kMessage,
  // Shutdown, the deadline, and one stream of the caller
  // (--max_streams_per_identity): WatchEvents, SessionStream.
  kStream,
  // As kStream, and one of the caller's ChargeStreams (CallLimiter's
  // max_charge_streams_per_identity): ChargeStream.
  kChargeStream,
  // Nothing: GetEngineInfo, which readiness probes call, is served during
  // shutdown and never shed.
  kProbe,
};

struct CallContext {
  RpcMethod method = RpcMethod::kGetEngineInfo;
  // Pipeline's clock (Clock::NowNs) when the call arrived.
  int64_t start_ns = 0;
  // The client's deadline (max(): none).
  std::chrono::system_clock::time_point deadline =
      std::chrono::system_clock::time_point::max();
  // Who is calling, and whether that is accepted (OK without access
  // control). Refused callers still have an identity (or "") for admission.
  Authentication authentication;
  // Streams under access control: the credentials they started with and
  // the Authorizer::generation() they were authenticated at, so a reload
  // reaches them (Pipeline::Reauthenticate). Empty for unary calls.
  Credentials credentials;
  uint64_t auth_generation = 0;
  // Admission's: the caller's in-flight message (unary) or stream permit.
  CallLimiter::Permit permit;
  // Admission passed (a call refused before it is neither counted as a
  // rejected charge nor given a permit).
  bool admitted = false;
  // A Charge whose answer the body has counted (or knows it must not: a
  // replay, a deferral): EndCall() counts the others as rejected charges.
  bool charge_counted = false;
  // Whether the client has given up on the call (cancelled it); null: it
  // cannot say. Asked before a deferred charge runs again.
  bool (*cancelled)(const void* arg) = nullptr;
  const void* cancelled_arg = nullptr;

  const Caller& caller() const { return authentication.caller; }
  // The one per-caller key: limits, request ids, idempotency keys, sessions.
  const std::string& identity() const {
    return authentication.caller.identity();
  }
  bool Cancelled() const {
    return cancelled != nullptr && cancelled(cancelled_arg);
  }
  bool DeadlinePassed() const {
    return deadline != std::chrono::system_clock::time_point::max() &&
           deadline <= std::chrono::system_clock::now();
  }
};

// The authorization stage: `caller` may do `access` on `path` (a valid
// group path). OK without access control (`authorizer` null). Errors:
// PERMISSION_DENIED (Authorizer::Check, counted).
inline absl::Status Authorize(const Authorizer* authorizer,
                              const Caller& caller, Access access,
                              absl::string_view path) {
  if (authorizer == nullptr) return absl::OkStatus();
  return authorizer->Check(caller, access, path);
}

// A page op's `cpu`: `caller` may name a modelled CPU slot (`named`: the
// request sets the field) only as an admin (Authorizer::CheckCpuSlot). OK
// without access control. Checked before the value is validated, so a
// caller who may not name one learns nothing from it (not even nr_cpus from
// an out-of-range answer).
inline absl::Status AuthorizeCpu(const Authorizer* authorizer,
                                 const Caller& caller, bool named) {
  if (authorizer == nullptr || !named) return absl::OkStatus();
  return authorizer->CheckCpuSlot(caller);
}

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_CALL_H_
