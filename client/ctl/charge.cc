// cgacctctl charge, uncharge and reclaim: pages in and out of a group.
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cli/grpc_util.h"
#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"

namespace cgacct::ctl {
namespace {

// The fields a ChargeRequest and an UnchargeRequest share.
template <typename Request>
Request PageRequest(const Invocation& inv) {
  Request request;
  request.set_path(inv.path);
  request.set_nr_pages(inv.nr_pages);
  request.set_kind(inv.kind);
  if (inv.cpu.has_value()) request.set_cpu(*inv.cpu);
  return request;
}

// --json: {"path": the group, then the response's fields}.
Json PathJson(const Invocation& inv, const google::protobuf::Message& response) {
  Json json = {{"path", inv.path}};
  json.update(MessageJson(response));
  return json;
}

}  // namespace

int ChargeOrUncharge(Ctl& ctl, const Invocation& given) {
  const std::string what = absl::StrCat(given.command, " ", given.path);
  Invocation inv = given;
  if (inv.nr_pages == 0) {
    // A SIZE: whole pages of the server's page size, rounded up.
    v1::EngineInfo info;
    const grpc::Status status = ctl.stub().GetEngineInfo(
        ctl.Context().get(), v1::GetEngineInfoRequest(), &info);
    if (!status.ok()) return PrintRpcError("GetEngineInfo", status);
    const uint64_t page = info.page_size_bytes() == 0 ? 4096
                                                      : info.page_size_bytes();
    inv.nr_pages = inv.nr_bytes / page + (inv.nr_bytes % page != 0 ? 1 : 0);
  }
  if (inv.command == "uncharge") {
    v1::UnchargeResponse response;
    const grpc::Status status = ctl.stub().Uncharge(
        ctl.Context().get(), PageRequest<v1::UnchargeRequest>(inv), &response);
    if (!status.ok()) return PrintRpcError(what, status);
    return PrintAnswer(ctl, PathJson(inv, response),
                       [&] { Line("nr_pages", response.nr_pages()); });
  }
  v1::ChargeResponse response;
  const grpc::Status status = ctl.stub().Charge(
      ctl.Context().get(), PageRequest<v1::ChargeRequest>(inv), &response);
  if (!status.ok()) return PrintRpcError(what, status);
  return PrintAnswer(ctl, PathJson(inv, response), [&] {
    Line("nr_pages", response.nr_pages());
    Line("throttle_us", response.throttle_us());
  });
}

// memory.reclaim: all of it or EAGAIN (exit 5).
int Reclaim(Ctl& ctl, const Invocation& inv) {
  v1::ReclaimRequest request;
  request.set_path(inv.path);
  request.set_nr_bytes(inv.nr_bytes);
  v1::ReclaimResponse response;
  const grpc::Status status =
      ctl.stub().Reclaim(ctl.Context().get(), request, &response);
  // The engine's EAGAIN: "memory.reclaim of PATH: reclaimed N of M pages".
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      absl::StrContains(status.error_message(), "memory.reclaim of")) {
    std::cerr << "cgacctctl: reclaim " << inv.path << ": not all of "
              << inv.nr_bytes
              << " bytes could be reclaimed (memory.reclaim's EAGAIN): "
              << OneLine(cli::FormatStatus(status)) << "\n";
    return kExitUnavailable;
  }
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("reclaim ", inv.path), status);
  }
  if (ctl.json()) PrintJson(PathJson(inv, response));
  return kExitOk;
}

}  // namespace cgacct::ctl
