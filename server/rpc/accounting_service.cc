// AccountingService (server/rpc/accounting_service.h): one line per method.
#include "server/rpc/accounting_service.h"

#include "server/rpc/unary.h"
#include "server/rpc/watch_events.h"

namespace cgacct {

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

grpc::ServerUnaryReactor* AccountingService::CreateGroup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kCreateGroup, Admission::kMessage,
               request, response, &Pipeline::CreateGroup);
}

grpc::ServerUnaryReactor* AccountingService::DeleteGroup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kDeleteGroup, Admission::kMessage,
               request, response, &Pipeline::DeleteGroup);
}

grpc::ServerUnaryReactor* AccountingService::ListGroups(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kListGroups, Admission::kMessage,
               request, response, &Pipeline::ListGroups);
}

grpc::ServerUnaryReactor* AccountingService::SetLimits(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kSetLimits, Admission::kMessage,
               request, response, &Pipeline::SetLimits);
}

grpc::ServerUnaryReactor* AccountingService::Charge(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return DeferrableUnary(pipeline_, context, RpcMethod::kCharge, request,
                         response, &Pipeline::Charge);
}

grpc::ServerUnaryReactor* AccountingService::Uncharge(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kUncharge, Admission::kMessage,
               request, response, &Pipeline::Uncharge);
}

grpc::ServerUnaryReactor* AccountingService::ChargeBatch(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return DeferrableUnary(pipeline_, context, RpcMethod::kChargeBatch, request,
                         response, &Pipeline::ChargeBatch);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
AccountingService::ChargeStream(grpc::CallbackServerContext* context) {
  return StartChargeStream(pipeline_, charge_streams_, context);
}

grpc::ServerUnaryReactor* AccountingService::GetStats(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kGetStats, Admission::kMessage,
               request, response, &Pipeline::GetStats);
}

grpc::ServerUnaryReactor* AccountingService::Reclaim(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kReclaim, Admission::kMessage,
               request, response, &Pipeline::Reclaim);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* AccountingService::WatchEvents(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return StartWatchEvents(pipeline_, events_hub_, context, request);
}

grpc::ServerUnaryReactor* AccountingService::GetEngineInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kGetEngineInfo, Admission::kProbe,
               request, response, &Pipeline::GetEngineInfo);
}

grpc::ServerUnaryReactor* AccountingService::OpenSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kOpenSession, Admission::kMessage,
               request, response, &Pipeline::OpenSession);
}

grpc::ServerUnaryReactor* AccountingService::CloseSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kCloseSession,
               Admission::kMessage, request, response, &Pipeline::CloseSession);
}

grpc::ServerUnaryReactor* AccountingService::GetSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kGetSession, Admission::kMessage,
               request, response, &Pipeline::GetSession);
}

grpc::ServerUnaryReactor* AccountingService::OpenPeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kOpenPeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::OpenPeakWatermark);
}

grpc::ServerUnaryReactor* AccountingService::ResetPeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kResetPeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::ResetPeakWatermark);
}

grpc::ServerUnaryReactor* AccountingService::ReadPeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kReadPeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::ReadPeakWatermark);
}

grpc::ServerUnaryReactor* AccountingService::ClosePeakWatermark(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Unary(pipeline_, context, RpcMethod::kClosePeakWatermark,
               Admission::kMessage, request, response,
               &Pipeline::ClosePeakWatermark);
}

}  // namespace cgacct
