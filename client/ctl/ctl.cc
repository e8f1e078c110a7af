#include "client/ctl/ctl.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cli/grpc_util.h"
#include "client/ctl/exit_status.h"
#include "google/protobuf/util/json_util.h"

namespace cgacct::ctl {

Ctl::Ctl(std::shared_ptr<grpc::Channel> channel, bool json,
         absl::Duration timeout)
    : channel_(std::move(channel)),
      stub_(v1::Accounting::NewStub(channel_)),
      json_(json),
      timeout_(timeout) {}

std::unique_ptr<grpc::ClientContext> Ctl::Context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(cli::DeadlineAfter(timeout_));
  return context;
}

grpc::Status Ctl::GetStats(const std::string& path, v1::FlushMode flush,
                           v1::GroupStats* stats) {
  v1::GetStatsRequest request;
  request.set_path(path);
  request.set_flush(flush);
  return stub_->GetStats(Context().get(), request, stats);
}

grpc::Status Ctl::ListAll(const std::string& path, bool recursive,
                          std::vector<std::string>* paths) {
  v1::ListGroupsRequest request;
  request.set_path(path);
  request.set_recursive(recursive);
  while (true) {
    v1::ListGroupsResponse response;
    const grpc::Status status =
        stub_->ListGroups(Context().get(), request, &response);
    if (!status.ok()) return status;
    paths->insert(paths->end(), response.paths().begin(),
                  response.paths().end());
    if (response.next_page_token().empty()) return grpc::Status::OK;
    request.set_page_token(response.next_page_token());
  }
}

grpc::Status Ctl::ReadSubtree(const std::string& path, v1::FlushMode flush,
                              std::vector<GroupRow>* rows) {
  GroupRow root{path, {}};
  grpc::Status status = GetStats(path, flush, &root.stats);
  if (!status.ok()) return status;
  rows->push_back(std::move(root));
  std::vector<std::string> paths;
  status = ListAll(path, /*recursive=*/true, &paths);
  if (!status.ok()) return status;
  for (const std::string& p : paths) {
    GroupRow row{p, {}};
    status = GetStats(p, flush, &row.stats);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) continue;
    if (!status.ok()) return status;
    rows->push_back(std::move(row));
  }
  return grpc::Status::OK;
}

std::string ProtoJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto status =
      google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::StrCat("{\"error\": \"", status.ToString(), "\"}\n");
  }
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  return out;
}

void PrintProtoJson(const google::protobuf::Message& message) {
  std::cout << ProtoJson(message, /*pretty=*/true);
}

void PrintJson(const Json& json, bool pretty) {
  std::cout << json.dump(pretty ? 2 : -1) << "\n";
}

void Line(absl::string_view name, absl::string_view value) {
  std::cout << name << " " << value << "\n";
}

void Line(absl::string_view name, uint64_t value) {
  std::cout << name << " " << value << "\n";
}

int RunCommand(Ctl& ctl, const Invocation& inv) {
  using Command = int (*)(Ctl&, const Invocation&);
  static const struct {
    const char* name;
    Command run;
  } kCommands[] = {
      {"info", Info},
      {"cluster", Cluster},
      {"health", Health},
      {"create", Create},
      {"delete", Delete},
      {"ls", List},
      {"set", Set},
      {"stat", Stat},
      {"cat", Cat},
      {"events", Events},
      {"reclaim", Reclaim},
      {"tree", Tree},
      {"top", Top},
      {"peak", Peak},
      {"charge", ChargeOrUncharge},
      {"uncharge", ChargeOrUncharge},
  };
  for (const auto& c : kCommands) {
    if (inv.command == c.name) return c.run(ctl, inv);
  }
  // ParseInvocation() accepts no other command.
  std::cerr << "cgacctctl: unknown command \"" << inv.command << "\"\n";
  return kExitUsage;
}

}  // namespace cgacct::ctl
