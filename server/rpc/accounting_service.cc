// AccountingService (server/rpc/accounting_service.h): one line per method.
#include "server/rpc/accounting_service.h"

#include <google/protobuf/descriptor.h>

#include <cstdlib>

#include "server/rpc/unary.h"
#include "server/rpc/watch_events.h"

namespace cgacct {

namespace {

// The index gRPC's generated code gives method `name` of the service: its
// place in the .proto (the generated Service adds them in that order).
int MethodIndex(const char* name) {
  const google::protobuf::MethodDescriptor* method =
      v1::ChargeRequest::descriptor()->file()->FindServiceByName(
          "Accounting")->FindMethodByName(name);
  if (method == nullptr) std::abort();  // a method this file names is gone
  return method->index();
}

// A body that is never deferred, as UnaryCall calls it.
template <typename Request, typename Response,
          absl::Status (Pipeline::*kBody)(CallContext&, const Request&,
                                          Response*)>
absl::Status Plain(Pipeline& pipeline, CallContext& call,
                   const Request& request, Response* response, NoRun*) {
  return (pipeline.*kBody)(call, request, response);
}

// A deferrable body (its Run carries the state of a rerun).
template <typename Request, typename Response, typename Run,
          absl::Status (Pipeline::*kBody)(CallContext&, const Request&,
                                          Response*, Run*)>
absl::Status Deferrable(Pipeline& pipeline, CallContext& call,
                        const Request& request, Response* response, Run* run) {
  return (pipeline.*kBody)(call, request, response, run);
}

}  // namespace

template <typename Request, typename Response, typename Run>
void AccountingService::ServeUnary(
    const char* name, RpcMethod method, Admission admission,
    typename UnaryCall<Request, Response, Run>::Body body) {
  MarkMethodStreamed(
      MethodIndex(name),
      new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer,
                                              grpc::ByteBuffer>(
          [this, method, admission,
           body](grpc::CallbackServerContext* context) {
            return new UnaryCall<Request, Response, Run>(pipeline_, forwarder_.get(), context,
                                                         method, admission,
                                                         body);
          }));
}

AccountingService::AccountingService(Engine& engine, RpcMetrics& rpc_metrics,
                                     AccountingServiceOptions options)
    : pipeline_(engine, rpc_metrics, options),
      events_hub_(options.events_hub),
      session_streams_(
          pipeline_,
          [this](grpc::ServerContext* context,
                 grpc::ServerAsyncReaderWriter<grpc::ByteBuffer,
                                               grpc::ByteBuffer>* stream,
                 grpc::ServerCompletionQueue* cq, void* tag) {
            RequestSessionStream(context, stream, cq, cq, tag);
          }) {
  if (events_hub_ != nullptr)
    events_hub_->SetOomGroupKillListener(
        &pipeline_.sessions().oom_group_kill_observer());
  // A server stream, its request read as a streamed unary call's
  // (watch_events.h).
  MarkMethodStreamed(
      MethodIndex("WatchEvents"),
      new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer,
                                              grpc::ByteBuffer>(
          [this](grpc::CallbackServerContext* context) {
            return StartWatchEvents(pipeline_, events_hub_, context);
          }));
  // Without access control every caller is one identity: gRPC's unary path
  // (the overrides below), which costs a batch less per call.
  if (!pipeline_.authenticates()) return;
  using P = Pipeline;
  constexpr Admission kMessage = Admission::kMessage;
  ServeUnary<v1::CreateGroupRequest, v1::Group, NoRun>(
      "CreateGroup", RpcMethod::kCreateGroup, kMessage,
      &Plain<v1::CreateGroupRequest, v1::Group, &P::CreateGroup>);
  ServeUnary<v1::DeleteGroupRequest, v1::DeleteGroupResponse, NoRun>(
      "DeleteGroup", RpcMethod::kDeleteGroup, kMessage,
      &Plain<v1::DeleteGroupRequest, v1::DeleteGroupResponse, &P::DeleteGroup>);
  ServeUnary<v1::ListGroupsRequest, v1::ListGroupsResponse, NoRun>(
      "ListGroups", RpcMethod::kListGroups, kMessage,
      &Plain<v1::ListGroupsRequest, v1::ListGroupsResponse, &P::ListGroups>);
  ServeUnary<v1::SetLimitsRequest, v1::Group, NoRun>(
      "SetLimits", RpcMethod::kSetLimits, kMessage,
      &Plain<v1::SetLimitsRequest, v1::Group, &P::SetLimits>);
  ServeUnary<v1::ChargeRequest, v1::ChargeResponse, ChargeRun>(
      "Charge", RpcMethod::kCharge, kMessage,
      &Deferrable<v1::ChargeRequest, v1::ChargeResponse, ChargeRun,
                  &P::Charge>);
  ServeUnary<v1::UnchargeRequest, v1::UnchargeResponse, NoRun>(
      "Uncharge", RpcMethod::kUncharge, kMessage,
      &Plain<v1::UnchargeRequest, v1::UnchargeResponse, &P::Uncharge>);
  ServeUnary<v1::ChargeBatchRequest, v1::ChargeBatchResponse, BatchRun>(
      "ChargeBatch", RpcMethod::kChargeBatch, kMessage,
      &Deferrable<v1::ChargeBatchRequest, v1::ChargeBatchResponse, BatchRun,
                  &P::ChargeBatch>);
  ServeUnary<v1::GetStatsRequest, v1::GroupStats, NoRun>(
      "GetStats", RpcMethod::kGetStats, kMessage,
      &Plain<v1::GetStatsRequest, v1::GroupStats, &P::GetStats>);
  ServeUnary<v1::ReclaimRequest, v1::ReclaimResponse, NoRun>(
      "Reclaim", RpcMethod::kReclaim, kMessage,
      &Plain<v1::ReclaimRequest, v1::ReclaimResponse, &P::Reclaim>);
  ServeUnary<v1::GetEngineInfoRequest, v1::EngineInfo, NoRun>(
      "GetEngineInfo", RpcMethod::kGetEngineInfo, Admission::kProbe,
      &Plain<v1::GetEngineInfoRequest, v1::EngineInfo, &P::GetEngineInfo>);
  ServeUnary<v1::GetClusterMapRequest, v1::ClusterMap, NoRun>(
      "GetClusterMap", RpcMethod::kGetClusterMap, kMessage,
      &Plain<v1::GetClusterMapRequest, v1::ClusterMap, &P::GetClusterMap>);
  ServeUnary<v1::OpenSessionRequest, v1::OpenSessionResponse, NoRun>(
      "OpenSession", RpcMethod::kOpenSession, kMessage,
      &Plain<v1::OpenSessionRequest, v1::OpenSessionResponse,
             &P::OpenSession>);
  ServeUnary<v1::CloseSessionRequest, v1::CloseSessionResponse, NoRun>(
      "CloseSession", RpcMethod::kCloseSession, kMessage,
      &Plain<v1::CloseSessionRequest, v1::CloseSessionResponse,
             &P::CloseSession>);
  ServeUnary<v1::GetSessionRequest, v1::SessionInfo, NoRun>(
      "GetSession", RpcMethod::kGetSession, kMessage,
      &Plain<v1::GetSessionRequest, v1::SessionInfo, &P::GetSession>);
  ServeUnary<v1::OpenPeakWatermarkRequest, v1::PeakWatermark, NoRun>(
      "OpenPeakWatermark", RpcMethod::kOpenPeakWatermark, kMessage,
      &Plain<v1::OpenPeakWatermarkRequest, v1::PeakWatermark,
             &P::OpenPeakWatermark>);
  ServeUnary<v1::PeakWatermarkRequest, v1::PeakWatermark, NoRun>(
      "ResetPeakWatermark", RpcMethod::kResetPeakWatermark, kMessage,
      &Plain<v1::PeakWatermarkRequest, v1::PeakWatermark,
             &P::ResetPeakWatermark>);
  ServeUnary<v1::PeakWatermarkRequest, v1::PeakWatermark, NoRun>(
      "ReadPeakWatermark", RpcMethod::kReadPeakWatermark, kMessage,
      &Plain<v1::PeakWatermarkRequest, v1::PeakWatermark,
             &P::ReadPeakWatermark>);
  ServeUnary<v1::PeakWatermarkRequest, v1::ClosePeakWatermarkResponse,
             NoRun>(
      "ClosePeakWatermark", RpcMethod::kClosePeakWatermark, kMessage,
      &Plain<v1::PeakWatermarkRequest, v1::ClosePeakWatermarkResponse,
             &P::ClosePeakWatermark>);
}

AccountingService::~AccountingService() {
  session_streams_.Stop();
  // No charge runs any more (the gRPC server is shut down first).
  if (events_hub_ != nullptr) events_hub_->SetOomGroupKillListener(nullptr);
}

void AccountingService::RegisterOn(grpc::ServerBuilder& builder) {
  builder.RegisterService(this);
  session_streams_.RegisterOn(builder);
}

void AccountingService::BeginShutdown() {
  pipeline_.BeginShutdown();
  charge_streams_.BeginShutdown();
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
AccountingService::ChargeStream(grpc::CallbackServerContext* context) {
  return StartChargeStream(pipeline_, charge_streams_, context);
}

grpc::ServerUnaryReactor* AccountingService::CreateGroup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kCreateGroup, Admission::kMessage,
               request, response, &Pipeline::CreateGroup);
}

grpc::ServerUnaryReactor* AccountingService::DeleteGroup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kDeleteGroup, Admission::kMessage,
               request, response, &Pipeline::DeleteGroup);
}

grpc::ServerUnaryReactor* AccountingService::ListGroups(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kListGroups, Admission::kMessage,
               request, response, &Pipeline::ListGroups);
}

grpc::ServerUnaryReactor* AccountingService::SetLimits(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kSetLimits, Admission::kMessage,
               request, response, &Pipeline::SetLimits);
}

grpc::ServerUnaryReactor* AccountingService::Charge(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return DeferrableUnary(pipeline_, forwarder_.get(), context, RpcMethod::kCharge, request,
                         response, &Pipeline::Charge);
}

grpc::ServerUnaryReactor* AccountingService::Uncharge(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kUncharge, Admission::kMessage,
               request, response, &Pipeline::Uncharge);
}

grpc::ServerUnaryReactor* AccountingService::ChargeBatch(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return DeferrableUnary(pipeline_, forwarder_.get(), context, RpcMethod::kChargeBatch, request,
                         response, &Pipeline::ChargeBatch);
}

grpc::ServerUnaryReactor* AccountingService::GetStats(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kGetStats, Admission::kMessage,
               request, response, &Pipeline::GetStats);
}

grpc::ServerUnaryReactor* AccountingService::Reclaim(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kReclaim, Admission::kMessage,
               request, response, &Pipeline::Reclaim);
}

grpc::ServerUnaryReactor* AccountingService::GetEngineInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kGetEngineInfo, Admission::kProbe,
               request, response, &Pipeline::GetEngineInfo);
}

grpc::ServerUnaryReactor* AccountingService::GetClusterMap(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kGetClusterMap,
               Admission::kMessage, request, response,
               &Pipeline::GetClusterMap);
}

grpc::ServerUnaryReactor* AccountingService::OpenSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kOpenSession, Admission::kMessage,
               request, response, &Pipeline::OpenSession);
}

grpc::ServerUnaryReactor* AccountingService::CloseSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kCloseSession,
               Admission::kMessage, request, response, &Pipeline::CloseSession);
}

grpc::ServerUnaryReactor* AccountingService::GetSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kGetSession, Admission::kMessage,
               request, response, &Pipeline::GetSession);
}

grpc::ServerUnaryReactor* AccountingService::OpenPeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kOpenPeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::OpenPeakWatermark);
}

grpc::ServerUnaryReactor* AccountingService::ResetPeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kResetPeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::ResetPeakWatermark);
}

grpc::ServerUnaryReactor* AccountingService::ReadPeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kReadPeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::ReadPeakWatermark);
}

grpc::ServerUnaryReactor* AccountingService::ClosePeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, forwarder_.get(), context, RpcMethod::kClosePeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::ClosePeakWatermark);
}

}  // namespace cgacct
