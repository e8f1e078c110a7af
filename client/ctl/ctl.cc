#include "client/ctl/ctl.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cli/grpc_util.h"
#include "client/ctl/exit_status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

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

namespace {

namespace pb = google::protobuf;

Json FieldValueJson(const pb::Message& message, const pb::FieldDescriptor* f,
                    int index) {
  const pb::Reflection& r = *message.GetReflection();
  const bool repeated = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return repeated ? r.GetRepeatedInt32(message, f, index)
                      : r.GetInt32(message, f);
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return repeated ? r.GetRepeatedInt64(message, f, index)
                      : r.GetInt64(message, f);
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? r.GetRepeatedUInt32(message, f, index)
                      : r.GetUInt32(message, f);
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? r.GetRepeatedUInt64(message, f, index)
                      : r.GetUInt64(message, f);
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? r.GetRepeatedDouble(message, f, index)
                      : r.GetDouble(message, f);
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return repeated ? r.GetRepeatedFloat(message, f, index)
                      : r.GetFloat(message, f);
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? r.GetRepeatedBool(message, f, index)
                      : r.GetBool(message, f);
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      return (repeated ? r.GetRepeatedEnum(message, f, index)
                       : r.GetEnum(message, f))
          ->name();
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return repeated ? r.GetRepeatedString(message, f, index)
                      : r.GetString(message, f);
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageJson(repeated ? r.GetRepeatedMessage(message, f, index)
                                  : r.GetMessage(message, f));
  }
  return nullptr;
}

}  // namespace

Json MessageJson(const google::protobuf::Message& message) {
  if (const auto* stats = dynamic_cast<const v1::GroupStats*>(&message)) {
    return GroupStatsJson(*stats);
  }
  if (const auto* group = dynamic_cast<const v1::Group*>(&message)) {
    return GroupJson(*group);
  }
  if (const auto* limits = dynamic_cast<const v1::Limits*>(&message)) {
    return LimitsJson(*limits);
  }
  Json json = Json::object();
  const pb::Descriptor& d = *message.GetDescriptor();
  const pb::Reflection& r = *message.GetReflection();
  for (int i = 0; i < d.field_count(); ++i) {
    const pb::FieldDescriptor* f = d.field(i);
    if (f->is_repeated()) {
      Json values = Json::array();
      for (int k = 0; k < r.FieldSize(message, f); ++k) {
        values.push_back(FieldValueJson(message, f, k));
      }
      json[f->name()] = std::move(values);
    } else if (!f->has_presence() || r.HasField(message, f) ||
               (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE &&
                !f->real_containing_oneof() && !f->has_optional_keyword())) {
      json[f->name()] = FieldValueJson(message, f, 0);
    }
  }
  return json;
}

void PrintJson(const Json& json, bool pretty) {
  std::cout << json.dump(pretty ? 2 : -1, ' ', /*ensure_ascii=*/false,
                         Json::error_handler_t::replace)
            << "\n";
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
