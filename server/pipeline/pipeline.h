// Pipeline: every cgacct.v1.Accounting call's stages, in one order for every
// entry point (docs/DESIGN.md §2.4, §4.11), without gRPC:
//
//   admit -> authenticate -> decode -> validate -> authorize -> resolve
//   -> dedup -> session -> engine -> persist -> answer
//
// The rpc room (server/rpc/) decodes the bytes and answers on the wire; it
// builds a CallContext with BeginCall() (the caller worked out once from
// the call's credentials), asks Admit() and Authenticate(), runs the RPC's
// body here, and ends the call with EndCall() (recorded once). The bodies
// validate into typed ops (server/pipeline/ops.h), authorize, and hand
// over to the room that does the rest: GroupOps (configuration), PageOps
// (Charge, Uncharge), BatchRunner (ChargeBatch, ChargeStream), ReadOps
// (GetStats, Reclaim, GetEngineInfo), the SessionRegistry (sessions).
//
// Charges run inside a RemoteDrainDeferral::Scope on gRPC's threads: a
// charge that would wait for sessions' drain answers comes back
// IsRemoteDrainDeferred(), and the rpc room runs the body again on a
// DrainWaitPool thread (drain_wait_pool()), which may wait.
//
// Thread safety: thread-safe; calls run concurrently. The engine, the RPC
// metrics and everything in PipelineOptions that is not owned must outlive
// the pipeline.
#ifndef CGACCT_SERVER_PIPELINE_PIPELINE_H_
#define CGACCT_SERVER_PIPELINE_PIPELINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/group_handle.h"
#include "server/auth/authorizer.h"
#include "server/auth/credentials.h"
#include "server/cluster/cluster_node.h"
#include "server/common/wire.h"
#include "server/idempotency/dedup_table.h"
#include "server/idempotency/state_store.h"
#include "server/metrics/rpc_metrics.h"
#include "server/pipeline/batch.h"
#include "server/pipeline/call.h"
#include "server/pipeline/call_limiter.h"
#include "server/pipeline/drain_wait_pool.h"
#include "server/pipeline/large_request_pool.h"
#include "server/pipeline/groups.h"
#include "server/pipeline/ops.h"
#include "server/pipeline/page_ops.h"
#include "server/pipeline/reads.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

struct PipelineOptions {
  // request_id de-duplication: 65536 ids, 60 s window by default. Its clock
  // is `clock` below unless set here.
  RequestDedupCache::Options dedup;
  // idempotency_key de-duplication of ChargeBatch/ChargeStream: 16384 keys,
  // 60 s, at most 64 MiB of stored responses by default.
  RequestDedupCache::Options batch_dedup = DefaultBatchDedupOptions();
  static RequestDedupCache::Options DefaultBatchDedupOptions() {
    RequestDedupCache::Options o;
    o.capacity = 16384;
    o.max_bytes = size_t{64} << 20;
    return o;
  }
  // Time source of call latencies, leases and the windows; null = the
  // steady clock (Clock::Real()). Not owned.
  const Clock* clock = nullptr;
  // Where groups, limits and the two windows are persisted
  // (server/idempotency/state_store.h). Null: an in-memory store the
  // pipeline owns (nothing survives a restart). Not owned.
  StateStore* store = nullptr;
  // Most pages one Charge may charge, and the charge ops of one
  // ChargeBatch/ChargeStream request together; more is INVALID_ARGUMENT
  // naming nr_pages and this cap. 0 = only PAGE_COUNTER_MAX.
  uint64_t max_charge_pages = kDefaultMaxChargePages;
  // Per-identity stream and in-flight limits (server/pipeline/
  // call_limiter.h).
  CallLimiter::Options limits;
  // Groups a caller that is not admin may have created (0 = no bound):
  // --max_groups_per_identity.
  uint32_t max_groups_per_identity = kDefaultMaxGroupsPerIdentity;
  // Reported in EngineInfo only (the gRPC server's own limits).
  TransportLimits transport;
  // Access control: null = none, every caller is the anonymous admin. Not
  // owned.
  const Authorizer* authorizer = nullptr;
  // Sessions: leases, bounds, the drain. Must pass SessionOptions::Validate().
  SessionOptions sessions;
  // Threads that decode and run requests of at least kLargeRequestBytes
  // (server/pipeline/large_request_pool.h): --large_request_threads; < 1 =
  // one per CPU the process may run on.
  int large_request_threads = 0;
};

// A Charge between its first run and a rerun on a drain-wait thread.
struct ChargeRun {
  bool rerun = false;
  PageOpResume resume;
};

// A ChargeBatch between its first run and a rerun: its runner (handle
// cache, budget, where it stopped).
struct BatchRun {
  std::unique_ptr<BatchRunner> runner;
};

class Pipeline {
 public:
  Pipeline(Engine& engine, RpcMetrics& rpc_metrics, PipelineOptions options);
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline();

  // Cluster mode (docs/DESIGN.md §4.18): group changes go to `cluster`'s
  // etcd, paths of shards this node does not own are refused with their
  // owner (the routing stage, server/cluster/routing.h). Not owned. Call
  // once, before `cluster` starts (it applies the tree through
  // cluster_applier()) and before serving; Restore() is then not called.
  void AttachCluster(ClusterNode* cluster);
  ClusterTreeApplier& cluster_applier() { return groups_; }

  // Restores the state store's groups and windows (GroupOps::Restore()).
  // Once, before serving.
  absl::StatusOr<RestoreReport> Restore();

  // --- the call's own stages ---
  // Whether calls must present credentials (access control is on): the rpc
  // room takes them from the transport only then.
  bool authenticates() const { return authorizer_ != nullptr; }
  // The call context of a call of `method` that arrived now with
  // `deadline`, its caller authenticated once from `credentials` (null: none
  // presented; ignored without access control).
  CallContext BeginCall(RpcMethod method,
                        std::chrono::system_clock::time_point deadline,
                        const Credentials* credentials) const;
  // Admission: UNAVAILABLE after BeginShutdown(), DEADLINE_EXCEEDED past
  // the deadline, RESOURCE_EXHAUSTED over the caller's limit (shed:
  // ShedReasonOf() says why; counted). Sets call.permit and call.admitted.
  // `message_bytes`: a unary call's encoded request size (counted against
  // --max_in_flight_bytes_per_identity).
  absl::Status Admit(CallContext& call, Admission admission,
                     uint64_t message_bytes = 0);
  // One message of an admitted stream (a ChargeStream request of
  // `message_bytes` encoded bytes): an in-flight permit of the stream's
  // caller, or RESOURCE_EXHAUSTED (shed, counted). The stream checks
  // shutdown and its deadline itself.
  absl::StatusOr<CallLimiter::Permit> AdmitMessage(const CallContext& call,
                                                   uint64_t message_bytes);
  // A unary call admitted before its request was read (Admit with 0
  // bytes, server/rpc/unary.h), once it is read: UNAVAILABLE after
  // BeginShutdown(), DEADLINE_EXCEEDED past the deadline (the read may have
  // waited), else its request's `message_bytes` added to its permit, or
  // RESOURCE_EXHAUSTED over --max_in_flight_bytes_per_identity (shed,
  // counted). A call admitted as a probe passes.
  absl::Status AdmitBytes(CallContext& call, uint64_t message_bytes);
  // UNAVAILABLE after BeginShutdown(), DEADLINE_EXCEEDED past the call's
  // deadline, else OK.
  absl::Status ShutdownOrDeadline(const CallContext& call) const;
  // A stream's caller after access control was reloaded: when the
  // Authorizer's generation moved since `call` was authenticated, its
  // credentials are authenticated again against the new configuration
  // (*changed set). Errors: the new verdict's refusal (UNAUTHENTICATED,
  // PERMISSION_DENIED; counted): the stream must end. OK without access
  // control.
  absl::Status Reauthenticate(CallContext& call, bool* changed);
  // A WatchEvents stream's read access to `path` after Reauthenticate():
  // PERMISSION_DENIED (counted) once the caller's grants no longer cover it.
  absl::Status RecheckWatch(CallContext& call, absl::string_view path);
  // The authentication verdict of call.authentication (UNAUTHENTICATED,
  // PERMISSION_DENIED; counted when answered).
  absl::Status Authenticate(const CallContext& call) const;
  // The end of a call with `status`: recorded once in RpcMetrics (latency
  // since the call began), a Charge refused before its body counted as a
  // rejected charge, the permit given back.
  void EndCall(CallContext& call, const absl::Status& status);

  // --- the bodies: validate -> authorize -> ... -> answer ---
  absl::Status CreateGroup(CallContext& call,
                           const v1::CreateGroupRequest& request,
                           v1::Group* response);
  absl::Status DeleteGroup(CallContext& call,
                           const v1::DeleteGroupRequest& request,
                           v1::DeleteGroupResponse* response);
  absl::Status ListGroups(CallContext& call,
                          const v1::ListGroupsRequest& request,
                          v1::ListGroupsResponse* response);
  absl::Status SetLimits(CallContext& call, const v1::SetLimitsRequest& request,
                         v1::Group* response);
  // Deferrable (see the file comment): a rerun gets the same `run`.
  absl::Status Charge(CallContext& call, const v1::ChargeRequest& request,
                      v1::ChargeResponse* response, ChargeRun* run);
  absl::Status Uncharge(CallContext& call, const v1::UnchargeRequest& request,
                        v1::UnchargeResponse* response);
  // Deferrable: a rerun resumes at the deferred op.
  absl::Status ChargeBatch(CallContext& call,
                           const v1::ChargeBatchRequest& request,
                           v1::ChargeBatchResponse* response, BatchRun* run);
  absl::Status GetStats(CallContext& call, const v1::GetStatsRequest& request,
                        v1::GroupStats* response);
  absl::Status Reclaim(CallContext& call, const v1::ReclaimRequest& request,
                       v1::ReclaimResponse* response);
  absl::Status GetEngineInfo(CallContext& call,
                             const v1::GetEngineInfoRequest& request,
                             v1::EngineInfo* response);
  // Cluster mode's map as this node sees it (docs/DESIGN.md §4.18);
  // cluster_mode false in single-node mode. With access control, only the
  // shards related to what the caller may read. No errors.
  absl::Status GetClusterMap(CallContext& call,
                             const v1::GetClusterMapRequest& request,
                             v1::ClusterMap* response);
  absl::Status OpenSession(CallContext& call,
                           const v1::OpenSessionRequest& request,
                           v1::OpenSessionResponse* response);
  absl::Status CloseSession(CallContext& call,
                            const v1::CloseSessionRequest& request,
                            v1::CloseSessionResponse* response);
  absl::Status GetSession(CallContext& call,
                          const v1::GetSessionRequest& request,
                          v1::SessionInfo* response);
  // memory.peak per open file (docs/DESIGN.md §4.17): validate (path,
  // session_id / watermark_id) -> authorize (open, reset: write; read: read;
  // close: the owner only) -> the session registry -> engine. Units in the
  // answers: bytes.
  absl::Status OpenPeakWatermark(CallContext& call,
                                 const v1::OpenPeakWatermarkRequest& request,
                                 v1::PeakWatermark* response);
  absl::Status ResetPeakWatermark(CallContext& call,
                                  const v1::PeakWatermarkRequest& request,
                                  v1::PeakWatermark* response);
  absl::Status ReadPeakWatermark(CallContext& call,
                                 const v1::PeakWatermarkRequest& request,
                                 v1::PeakWatermark* response);
  absl::Status ClosePeakWatermark(CallContext& call,
                                  const v1::PeakWatermarkRequest& request,
                                  v1::ClosePeakWatermarkResponse* response);
  // WatchEvents' stages up to the subscription: validate -> authorize
  // (read) -> resolve. The group instance to watch.
  absl::StatusOr<GroupHandle> ResolveWatch(
      CallContext& call, const v1::WatchEventsRequest& request);
  // A ChargeStream's runner (one per stream), for `call`'s caller.
  std::unique_ptr<BatchRunner> NewBatchRunner(const CallContext& call) {
    return std::make_unique<BatchRunner>(batch_deps_, call.caller());
  }

  // Shutdown, first step: from here every admitted call answers
  // UNAVAILABLE with nothing applied (GetEngineInfo aside), sessions' streams
  // end. Idempotent.
  void BeginShutdown();
  bool shutting_down() const {
    // Relaxed: a call racing with it is either refused or runs to
    // completion before the server's own shutdown, which waits for it.
    return shutting_down_.load(std::memory_order_relaxed);
  }

  Engine& engine() { return engine_; }
  const Clock& clock() const { return clock_; }
  SessionRegistry& sessions() { return *sessions_; }
  CallLimiter& limiter() { return limiter_; }
  RpcMetrics& rpc_metrics() { return rpc_metrics_; }
  DrainWaitPool& drain_wait_pool() { return drain_wait_pool_; }
  LargeRequestPool& large_request_pool() { return large_request_pool_; }

 private:
  // ResetPeakWatermark (`reset`: a write through the file, write access) and
  // ReadPeakWatermark (a read, read access).
  absl::Status PeakWatermarkIo(const CallContext& call, uint64_t watermark_id,
                               bool reset, v1::PeakWatermark* response);
  // A peak watermark as the wire has it (pages -> bytes).
  void PeakToProto(const SessionRegistry::PeakWatermarkValue& value,
                   v1::PeakWatermark* out) const;
  // The stages a deferred charge's rerun passes first: CANCELLED if the
  // client cancelled, DEADLINE_EXCEEDED if the deadline passed while it was
  // queued (nobody waits for the answer: it is not run), else OK.
  static absl::Status StillWanted(const CallContext& call);

  // Constant after construction.
  Engine& engine_;
  RpcMetrics& rpc_metrics_;
  const Clock& clock_;
  const Authorizer* const authorizer_;  // may be null; thread-safe
  const WireUnits units_;
  const OpValidator validator_;

  // Thread-safe on their own.
  CallLimiter limiter_;
  std::unique_ptr<StateStore> owned_store_;  // when options.store was null
  StateStore& store_;
  DedupTable request_ids_;
  DedupTable batch_keys_;
  // Declared before what refers to it; its reaper and drainer hook stop
  // before anything else goes (destroyed after the rooms below).
  std::unique_ptr<SessionRegistry> sessions_;
  GroupOps groups_;
  PageOps page_ops_;
  ReadOps reads_;
  BatchDeps batch_deps_;  // its cluster set once, before serving
  ClusterNode* cluster_ = nullptr;  // set once, before serving
  // Set once by BeginShutdown().
  std::atomic<bool> shutting_down_{false};
  // Where deferred charges finish; destroyed before the rooms above (its
  // last tasks may still use them).
  DrainWaitPool drain_wait_pool_;
  // Where large requests are decoded and run; destroyed before the
  // drain-wait pool (a large charge may defer to it).
  LargeRequestPool large_request_pool_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_PIPELINE_H_
