// AccountingService: the cgacct.v1.Accounting gRPC service (docs/DESIGN.md
// §4), a thin adapter from gRPC's callback API to the request pipeline
// (server/pipeline/pipeline.h), which it owns.
//
// Every method reads its request as raw bytes (the generated
// WithRawCallbackMethod_*; the unary ones re-registered as streamed unary,
// server/rpc/unary.h): bytes that are not a valid request are
// INVALID_ARGUMENT "request is not a valid cgacct.v1.<type>: <why>", nothing
// applied (server/rpc/codec.h). The method names and descriptors are the
// service's, so the wire, reflection and generated clients are unchanged.
// Unary methods go through the one adapter (server/rpc/unary.h); the
// streams through their reactors (charge_stream.h, watch_events.h,
// session_stream.h). What each RPC does and answers is the pipeline's.
//
// Thread safety: thread-safe; gRPC calls the handlers concurrently. The
// engine, the RPC metrics and the events hub are not owned and must outlive
// the service (and the grpc::Server it is registered with).
#ifndef CGACCT_SERVER_RPC_ACCOUNTING_SERVICE_H_
#define CGACCT_SERVER_RPC_ACCOUNTING_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/events/events_hub.h"
#include "server/metrics/rpc_metrics.h"
#include "server/pipeline/pipeline.h"
#include "server/rpc/charge_stream.h"
#include "server/rpc/forwarder.h"
#include "server/rpc/session_stream.h"
#include "server/rpc/unary.h"

namespace cgacct {

struct AccountingServiceOptions : PipelineOptions {
  // Where WatchEvents streams subscribe: the engine's observer (cgacctd
  // makes it wrap the metrics observer). Null: WatchEvents answers
  // UNAVAILABLE. The service also makes it pass memory.oom.group kills to
  // the sessions (EventsHub::SetOomGroupKillListener) for its life: without
  // a hub as the engine's observer, an OOM group kill ends no session. Not
  // owned.
  EventsHub* events_hub = nullptr;
};

// Every method of cgacct.v1.Accounting as raw bytes: on the callback API,
// but SessionStream on the async API (WithRawMethod_), served by
// SessionStreams.
using RawAccountingService = v1::Accounting::WithRawCallbackMethod_GetClusterMap<
    v1::Accounting::WithRawCallbackMethod_OpenPeakWatermark<
    v1::Accounting::WithRawCallbackMethod_ResetPeakWatermark<
    v1::Accounting::WithRawCallbackMethod_ReadPeakWatermark<
    v1::Accounting::WithRawCallbackMethod_ClosePeakWatermark<
    v1::Accounting::WithRawCallbackMethod_OpenSession<
    v1::Accounting::WithRawCallbackMethod_CloseSession<
        v1::Accounting::WithRawCallbackMethod_GetSession<
            v1::Accounting::WithRawMethod_SessionStream<
                v1::Accounting::WithRawCallbackMethod_CreateGroup<
                    v1::Accounting::WithRawCallbackMethod_DeleteGroup<
                        v1::Accounting::WithRawCallbackMethod_ListGroups<
                            v1::Accounting::WithRawCallbackMethod_SetLimits<
                                v1::Accounting::WithRawCallbackMethod_Charge<
                                    v1::Accounting::WithRawCallbackMethod_Uncharge<
                                        v1::Accounting::
                                            WithRawCallbackMethod_ChargeBatch<
                                                v1::Accounting::WithRawCallbackMethod_ChargeStream<
                                                    v1::Accounting::
                                                        WithRawCallbackMethod_GetStats<
                                                            v1::Accounting::WithRawCallbackMethod_Reclaim<
                                                                v1::Accounting::WithRawCallbackMethod_WatchEvents<
                                                                    v1::Accounting::WithRawCallbackMethod_GetEngineInfo<
                                                                        v1::Accounting::
                                                                            Service>>>>>>>>>>>>>>>>>>>>>;

class AccountingService final : public RawAccountingService {
 public:
  AccountingService(Engine& engine, RpcMetrics& rpc_metrics,
                    AccountingServiceOptions options = {});
  AccountingService(const AccountingService&) = delete;
  AccountingService& operator=(const AccountingService&) = delete;
  ~AccountingService() override;

  // Serving. Instead of builder.RegisterService(&service):
  //   service.RegisterOn(builder);  server = builder.BuildAndStart();
  //   service.StartSessionStreams();  ...  service.BeginShutdown();
  //   server->Shutdown();  service.StopSessionStreams();  server.reset();
  // (SessionStreams' rules, server/rpc/session_stream.h.)
  void RegisterOn(grpc::ServerBuilder& builder);
  void StartSessionStreams() { session_streams_.Start(); }
  void StopSessionStreams() { session_streams_.Stop(); }

  // Cluster mode: unary calls for shards other nodes own are forwarded to
  // their owner, and GetStats above the shard roots fanned out to the
  // owners below (server/rpc/forwarder.h). Once, before serving; `cluster`
  // must outlive the service.
  void EnableForwarding(const ClusterNode* cluster) {
    forwarder_ =
        std::make_unique<Forwarder>(pipeline_.authenticates(), cluster);
  }
  const Forwarder* forwarder() const { return forwarder_.get(); }

  // The state store's groups and windows back (Pipeline::Restore()): once,
  // before serving.
  absl::StatusOr<RestoreReport> Restore() { return pipeline_.Restore(); }

  // Shutdown, first step (before grpc::Server::Shutdown): from here every
  // new call answers UNAVAILABLE with nothing applied (GetEngineInfo aside);
  // unary calls already running finish; every open ChargeStream stops
  // reading, applies and answers what it has read, then ends UNAVAILABLE
  // saying how many were applied (OK if the client had half-closed);
  // session streams end UNAVAILABLE. Idempotent.
  void BeginShutdown();

  Pipeline& pipeline() { return pipeline_; }
  // For tests and cgacctd's metrics.
  SessionRegistry& sessions() { return pipeline_.sessions(); }
  CallLimiter& limiter() { return pipeline_.limiter(); }

  // cgacct.v1.Accounting. Requests and responses are the typed messages of
  // the same names, as raw bytes. With access control the unary methods are
  // re-registered in the constructor as streamed unary (UnaryCall,
  // server/rpc/unary.h), and these are not called; WatchEvents always is
  // (server/rpc/watch_events.h).
  grpc::ServerUnaryReactor* CreateGroup(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteGroup(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListGroups(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SetLimits(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Charge(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Uncharge(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ChargeBatch(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Reclaim(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetEngineInfo(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetClusterMap(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* OpenPeakWatermark(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ResetPeakWatermark(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReadPeakWatermark(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ClosePeakWatermark(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ChargeStream(
      grpc::CallbackServerContext* context) override;

 private:
  // Serves unary method `name` as gRPC's streamed unary (UnaryCall).
  template <typename Request, typename Response, typename Run>
  void ServeUnary(const char* name, RpcMethod method, Admission admission,
                  typename UnaryCall<Request, Response, Run>::Body body);

  Pipeline pipeline_;
  // Cluster mode's one hop (EnableForwarding()); null otherwise. Set once,
  // before serving.
  std::unique_ptr<Forwarder> forwarder_;
  EventsHub* const events_hub_;  // may be null
  ChargeStreams charge_streams_;
  // Declared last: stopped first (its calls refer to the pipeline).
  SessionStreams session_streams_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_ACCOUNTING_SERVICE_H_
