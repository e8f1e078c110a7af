// The calls cgacct-load's scenarios make around their load: connecting,
// GetEngineInfo, creating groups, reading a group's exact stats, an
// Uncharge. Each returns an absl::Status whose
// message is the one line cgacct-load prints ("CreateGroup /a: NOT_FOUND:
// ...").
//
// Thread safety: thread-safe (a stub may be shared; each call has its own
// ClientContext).
#ifndef CGACCT_CLIENT_LOAD_SERVER_CALLS_H_
#define CGACCT_CLIENT_LOAD_SERVER_CALLS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::load {

// A channel to `target`, connected within `timeout`; UNAVAILABLE naming the
// target otherwise.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(
    const std::string& target, absl::Duration timeout,
    bool own_connection = false);

// GetEngineInfo; UNAVAILABLE "GetEngineInfo: STATUS" on failure.
absl::StatusOr<v1::EngineInfo> GetEngineInfo(v1::Accounting::Stub& stub,
                                             absl::Duration timeout);

// What a scenario sets up and reads the server through: a stub on a
// connection of its own, and the server's GetEngineInfo at the start.
struct ControlConnection {
  std::unique_ptr<v1::Accounting::Stub> stub;
  v1::EngineInfo info;
};

// Connect() then GetEngineInfo(), with their errors.
absl::StatusOr<ControlConnection> ConnectControl(const std::string& target,
                                                 absl::Duration connect_timeout,
                                                 absl::Duration rpc_timeout);

// A call's status, when it was sent and how long it took to come back.
struct TimedStatus {
  grpc::Status status;
  std::chrono::steady_clock::time_point sent;
  uint64_t ns = 0;
};

// One Charge of `request` with a deadline `timeout` from now, timed.
TimedStatus TimedCharge(v1::Accounting::Stub& stub,
                        const v1::ChargeRequest& request,
                        v1::ChargeResponse* response, absl::Duration timeout);

// CreateGroup of `path` alone (its parent must exist); OK if it was already
// there. INTERNAL
// "CreateGroup PATH: STATUS" on any other failure.
absl::Status CreateGroupIfMissing(v1::Accounting::Stub& stub,
                                  const std::string& path,
                                  absl::Duration timeout);

// Creates `path` and any missing ancestors (like mkdir -p); with `limits`,
// sets them on `path` whether it was created or already there. INTERNAL
// naming the call and the path on failure.
absl::Status EnsureGroup(v1::Accounting::Stub& stub, const std::string& path,
                         std::optional<v1::Limits> limits,
                         absl::Duration timeout);

// GetStats of `path` with an exact flush; UNAVAILABLE naming the path and
// the gRPC status on failure.
absl::StatusOr<v1::GroupStats> ReadExactStats(v1::Accounting::Stub& stub,
                                              const std::string& path,
                                              absl::Duration timeout);

// The group's pages of memory.stat entry `name` ("anon", "file": bytes)
// from an exact stats read.
absl::StatusOr<uint64_t> ReadStatPages(v1::Accounting::Stub& stub,
                                       const std::string& path,
                                       uint64_t page_size_bytes,
                                       absl::Duration timeout,
                                       absl::string_view name = "anon");

// One Uncharge of `nr_pages` pages of `kind` from `path` on CPU slot `cpu`
// (nullopt: the server's choice), with a deadline `timeout` from now; the
// call's status.
grpc::Status UnchargePages(v1::Accounting::Stub& stub, const std::string& path,
                           uint64_t nr_pages, v1::PageKind kind,
                           std::optional<uint32_t> cpu, absl::Duration timeout);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_SERVER_CALLS_H_
