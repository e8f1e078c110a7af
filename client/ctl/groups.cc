// cgacctctl create, delete, ls and set: groups and their limits.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/cli_util.h"
#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"

namespace cgacct::ctl {
namespace {

// A group as create and set answer it: its path, id and limit files.
int PrintGroup(const Ctl& ctl, const v1::Group& group) {
  return PrintAnswer(ctl, GroupJson(group), [&] {
    Line("path", group.path());
    Line("id", group.id());
    Line("memory.max", cli::FormatSizeBytes(group.limits().max_bytes()));
    Line("memory.high", cli::FormatSizeBytes(group.limits().high_bytes()));
    Line("memory.min", cli::FormatSizeBytes(group.limits().min_bytes()));
    Line("memory.low", cli::FormatSizeBytes(group.limits().low_bytes()));
    Line("memory.oom.group", group.limits().oom_group() ? 1 : 0);
  });
}

}  // namespace

int Create(Ctl& ctl, const Invocation& inv) {
  v1::CreateGroupRequest request;
  request.set_path(inv.path);
  if (inv.limits.has_max_bytes()) *request.mutable_limits() = inv.limits;
  v1::Group group;
  const grpc::Status status =
      ctl.stub().CreateGroup(ctl.Context().get(), request, &group);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("create ", inv.path), status);
  }
  return PrintGroup(ctl, group);
}

int Delete(Ctl& ctl, const Invocation& inv) {
  v1::DeleteGroupRequest request;
  request.set_path(inv.path);
  v1::DeleteGroupResponse response;
  const grpc::Status status =
      ctl.stub().DeleteGroup(ctl.Context().get(), request, &response);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("delete ", inv.path), status);
  }
  Json json = {{"path", inv.path}};
  json.update(MessageJson(response));
  return PrintAnswer(ctl, json, [&] {
    Line("reparented_pages", response.reparented_pages());
  });
}

int List(Ctl& ctl, const Invocation& inv) {
  std::vector<std::string> paths;
  const grpc::Status status = ctl.ListAll(inv.path, inv.recursive, &paths);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("ls ", inv.path), status);
  }
  if (ctl.json()) {
    PrintJson(Json(paths));
    return kExitOk;
  }
  for (const std::string& p : paths) std::cout << p << "\n";
  return kExitOk;
}

int Set(Ctl& ctl, const Invocation& inv) {
  v1::SetLimitsRequest request;
  request.set_path(inv.path);
  *request.mutable_limits() = inv.limits;
  v1::Group group;
  const grpc::Status status =
      ctl.stub().SetLimits(ctl.Context().get(), request, &group);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("set ", inv.path), status);
  }
  return PrintGroup(ctl, group);
}

}  // namespace cgacct::ctl
