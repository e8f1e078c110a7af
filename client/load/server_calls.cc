#include "client/load/server_calls.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli/grpc_util.h"

namespace cgacct::load {
namespace {

// One CreateGroup of `path`, with `limits` when not null.
grpc::Status CreateGroupCall(v1::Accounting::Stub& stub,
                             const std::string& path, const v1::Limits* limits,
                             absl::Duration timeout) {
  v1::CreateGroupRequest request;
  request.set_path(path);
  if (limits != nullptr) *request.mutable_limits() = *limits;
  v1::Group group;
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(timeout));
  return stub.CreateGroup(&context, request, &group);
}

absl::Status CreateGroupError(const std::string& path,
                              const grpc::Status& status) {
  return absl::InternalError(
      absl::StrCat("CreateGroup ", path, ": ", cli::FormatStatus(status)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(
    const std::string& target, absl::Duration timeout, bool own_connection) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      cli::MakeChannel(target, own_connection);
  if (!channel.ok()) return channel.status();
  if (absl::Status s = cli::WaitForConnected(**channel, target, timeout);
      !s.ok()) {
    return s;
  }
  return channel;
}

absl::StatusOr<v1::EngineInfo> GetEngineInfo(v1::Accounting::Stub& stub,
                                             absl::Duration timeout) {
  v1::EngineInfo info;
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(timeout));
  const grpc::Status status =
      stub.GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("GetEngineInfo: ", cli::FormatStatus(status)));
  }
  return info;
}

absl::StatusOr<ControlConnection> ConnectControl(const std::string& target,
                                                 absl::Duration connect_timeout,
                                                 absl::Duration rpc_timeout) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      Connect(target, connect_timeout);
  if (!channel.ok()) return channel.status();
  ControlConnection control;
  control.stub = v1::Accounting::NewStub(*channel);
  absl::StatusOr<v1::EngineInfo> info =
      GetEngineInfo(*control.stub, rpc_timeout);
  if (!info.ok()) return info.status();
  control.info = *std::move(info);
  return control;
}

TimedStatus TimedCharge(v1::Accounting::Stub& stub,
                        const v1::ChargeRequest& request,
                        v1::ChargeResponse* response, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(timeout));
  TimedStatus call;
  call.sent = std::chrono::steady_clock::now();
  call.status = stub.Charge(&context, request, response);
  call.ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - call.sent)
          .count());
  return call;
}

absl::Status CreateGroupIfMissing(v1::Accounting::Stub& stub,
                                  const std::string& path,
                                  absl::Duration timeout) {
  const grpc::Status status = CreateGroupCall(stub, path, nullptr, timeout);
  if (!status.ok() && status.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
    return CreateGroupError(path, status);
  }
  return absl::OkStatus();
}

absl::Status EnsureGroup(v1::Accounting::Stub& stub, const std::string& path,
                         std::optional<v1::Limits> limits,
                         absl::Duration timeout) {
  std::string prefix;
  const std::vector<absl::string_view> parts =
      absl::StrSplit(path, '/', absl::SkipEmpty());
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StrAppend(&prefix, "/", parts[i]);
    const bool last = i + 1 == parts.size();
    const v1::Limits* set = last && limits.has_value() ? &*limits : nullptr;
    grpc::Status status = CreateGroupCall(stub, prefix, set, timeout);
    if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      if (set == nullptr) continue;
      v1::SetLimitsRequest request;
      request.set_path(prefix);
      *request.mutable_limits() = *set;
      v1::Group group;
      grpc::ClientContext context;
      context.set_deadline(cli::DeadlineAfter(timeout));
      status = stub.SetLimits(&context, request, &group);
      if (!status.ok()) {
        return absl::InternalError(absl::StrCat("SetLimits ", prefix, ": ",
                                                cli::FormatStatus(status)));
      }
    } else if (!status.ok()) {
      return CreateGroupError(prefix, status);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::GroupStats> ReadExactStats(v1::Accounting::Stub& stub,
                                              const std::string& path,
                                              absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(timeout));
  v1::GetStatsRequest request;
  request.set_path(path);
  request.set_flush(v1::FLUSH_MODE_EXACT);
  v1::GroupStats stats;
  const grpc::Status status = stub.GetStats(&context, request, &stats);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("GetStats ", path, ": ", cli::FormatStatus(status)));
  }
  return stats;
}

absl::StatusOr<uint64_t> ReadStatPages(v1::Accounting::Stub& stub,
                                       const std::string& path,
                                       uint64_t page_size_bytes,
                                       absl::Duration timeout,
                                       absl::string_view name) {
  absl::StatusOr<v1::GroupStats> stats = ReadExactStats(stub, path, timeout);
  if (!stats.ok()) return stats.status();
  for (const v1::StatEntry& entry : stats->stat()) {
    if (entry.name() == name) return entry.value() / page_size_bytes;
  }
  return absl::NotFoundError(
      absl::StrCat("GetStats ", path, ": no \"", name, "\" entry"));
}

grpc::Status UnchargePages(v1::Accounting::Stub& stub, const std::string& path,
                           uint64_t nr_pages, v1::PageKind kind,
                           std::optional<uint32_t> cpu,
                           absl::Duration timeout) {
  v1::UnchargeRequest request;
  request.set_path(path);
  request.set_nr_pages(nr_pages);
  request.set_kind(kind);
  if (cpu.has_value()) request.set_cpu(*cpu);
  v1::UnchargeResponse response;
  grpc::ClientContext context;
  context.set_deadline(cli::DeadlineAfter(timeout));
  return stub.Uncharge(&context, request, &response);
}

}  // namespace cgacct::load
