// Pipeline (server/pipeline/pipeline.h).
#include "server/pipeline/pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "engine/remote_stock.h"
#include "server/cluster/routing.h"

namespace cgacct {
namespace {

DedupTable::Options RequestIdOptions(const PipelineOptions& options) {
  DedupTable::Options o;
  o.cache = options.dedup;
  if (o.cache.clock == nullptr) o.cache.clock = options.clock;
  o.field = "request_id";
  o.mismatch_detail =
      "(method, path, nr_pages, kind, cpu or session_id differ)";
  return o;
}

DedupTable::Options BatchKeyOptions(const PipelineOptions& options) {
  DedupTable::Options o;
  o.cache = options.batch_dedup;
  if (o.cache.clock == nullptr) o.cache.clock = options.clock;
  o.field = "idempotency_key";
  o.mismatch_detail = "(its ops differ)";
  return o;
}

StateStore& StoreOf(const PipelineOptions& options,
                    std::unique_ptr<StateStore>& owned) {
  if (options.store != nullptr) return *options.store;
  owned = std::make_unique<MemoryStateStore>();
  return *owned;
}

}  // namespace

Pipeline::Pipeline(Engine& engine, RpcMetrics& rpc_metrics,
                   PipelineOptions options)
    : engine_(engine),
      rpc_metrics_(rpc_metrics),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()),
      authorizer_(options.authorizer),
      units_(engine.page_size_bytes(), engine.page_counter_max()),
      validator_(engine.page_counter_max(), engine.nr_cpus(),
                 options.max_charge_pages),
      limiter_(options.limits),
      store_(StoreOf(options, owned_store_)),
      request_ids_(RequestIdOptions(options), store_),
      batch_keys_(BatchKeyOptions(options), store_),
      sessions_(std::make_unique<SessionRegistry>(engine, options.sessions)),
      groups_(engine, units_, store_, *sessions_, authorizer_,
              options.max_groups_per_identity),
      page_ops_(engine, groups_, *sessions_, request_ids_),
      reads_(engine, units_, validator_, limiter_, *sessions_, authorizer_,
             options.transport),
      batch_deps_{engine,  validator_,  authorizer_, page_ops_,
                  groups_, batch_keys_, rpc_metrics},
      drain_wait_pool_(options.sessions.drain_wait_threads),
      large_request_pool_(options.large_request_threads) {}

Pipeline::~Pipeline() = default;

absl::StatusOr<RestoreReport> Pipeline::Restore() {
  return groups_.Restore(request_ids_, batch_keys_);
}

CallContext Pipeline::BeginCall(RpcMethod method,
                                std::chrono::system_clock::time_point deadline,
                                const Credentials* credentials) const {
  CallContext call;
  call.method = method;
  call.start_ns = clock_.NowNs();
  call.deadline = deadline;
  if (authorizer_ != nullptr) {
    call.auth_generation = authorizer_->generation();
    call.authentication = authorizer_->Authenticate(
        credentials != nullptr ? *credentials : Credentials());
    // Streams keep them: a reload re-authenticates a stream from them.
    const bool stream = method == RpcMethod::kChargeStream ||
                        method == RpcMethod::kWatchEvents ||
                        method == RpcMethod::kSessionStream;
    if (stream && credentials != nullptr) call.credentials = *credentials;
  }
  return call;
}

absl::Status Pipeline::Reauthenticate(CallContext& call, bool* changed) {
  *changed = false;
  if (authorizer_ == nullptr) return absl::OkStatus();
  const uint64_t generation = authorizer_->generation();
  if (generation == call.auth_generation) return absl::OkStatus();
  call.auth_generation = generation;
  call.authentication = authorizer_->Authenticate(call.credentials);
  *changed = true;
  return authorizer_->Refuse(call.authentication);
}

absl::Status Pipeline::RecheckWatch(CallContext& call,
                                    absl::string_view path) {
  bool changed = false;
  if (absl::Status s = Reauthenticate(call, &changed); !s.ok()) return s;
  if (!changed) return absl::OkStatus();
  return Authorize(authorizer_, call.caller(), Access::kRead, path);
}

absl::Status Pipeline::ShutdownOrDeadline(const CallContext& call) const {
  if (shutting_down()) {
    return absl::UnavailableError(
        "cgacctd is shutting down; nothing was applied: retry (with the same "
        "request_id) once it is back or on another server");
  }
  if (call.DeadlinePassed()) {
    return absl::DeadlineExceededError(
        "the call's deadline passed before it was handled; nothing was "
        "applied");
  }
  return absl::OkStatus();
}

absl::Status Pipeline::Admit(CallContext& call, Admission admission,
                             uint64_t message_bytes) {
  if (admission == Admission::kProbe) {
    call.admitted = true;
    return absl::OkStatus();
  }
  // Shutdown and the deadline first: nothing changes for such a call.
  if (absl::Status s = ShutdownOrDeadline(call); !s.ok()) return s;
  const bool stream = admission == Admission::kStream ||
                      admission == Admission::kChargeStream;
  absl::StatusOr<CallLimiter::Permit> permit =
      stream ? limiter_.Acquire(admission == Admission::kStream
                                    ? CallLimiter::Kind::kStream
                                    : CallLimiter::Kind::kChargeStream,
                                call.identity())
             : AdmitMessage(call, message_bytes);
  if (!permit.ok()) {
    if (stream) {
      if (std::optional<ShedReason> reason = ShedReasonOf(permit.status()))
        rpc_metrics_.RecordShed(*reason);
    }
    return permit.status();
  }
  call.permit = *std::move(permit);
  call.admitted = true;
  return absl::OkStatus();
}

absl::Status Pipeline::AdmitBytes(CallContext& call, uint64_t message_bytes) {
  if (!call.permit.held()) return absl::OkStatus();  // a probe
  if (absl::Status s = ShutdownOrDeadline(call); !s.ok()) return s;
  absl::Status status = limiter_.AddBytes(call.permit, message_bytes);
  if (!status.ok()) {
    if (std::optional<ShedReason> reason = ShedReasonOf(status))
      rpc_metrics_.RecordShed(*reason);
  }
  return status;
}

absl::StatusOr<CallLimiter::Permit> Pipeline::AdmitMessage(
    const CallContext& call, uint64_t message_bytes) {
  absl::StatusOr<CallLimiter::Permit> permit = limiter_.Acquire(
      CallLimiter::Kind::kInFlight, call.identity(), message_bytes);
  if (!permit.ok()) {
    if (std::optional<ShedReason> reason = ShedReasonOf(permit.status()))
      rpc_metrics_.RecordShed(*reason);
  }
  return permit;
}

absl::Status Pipeline::Authenticate(const CallContext& call) const {
  if (authorizer_ == nullptr) return absl::OkStatus();
  return authorizer_->Refuse(call.authentication);
}

void Pipeline::EndCall(CallContext& call, const absl::Status& status) {
  if (call.method == RpcMethod::kCharge && call.admitted &&
      !call.charge_counted) {
    // Refused before its body answered (authentication, decoding).
    rpc_metrics_.RecordChargeAnswer(status);
  }
  rpc_metrics_.Record(call.method, static_cast<int>(status.code()),
                      absl::Nanoseconds(clock_.NowNs() - call.start_ns));
  // Given back before the call is finished: a client that has its answer
  // may call again at once without meeting its own previous call's permit.
  call.permit.Release();
}

absl::Status Pipeline::StillWanted(const CallContext& call) {
  if (call.Cancelled())
    return absl::CancelledError(
        "the call was cancelled while its charge waited for a drain-wait "
        "thread; not applied");
  if (call.DeadlinePassed())
    return absl::DeadlineExceededError(
        "the call's deadline passed while its charge waited for a "
        "drain-wait thread; not applied");
  return absl::OkStatus();
}

void Pipeline::BeginShutdown() {
  shutting_down_.store(true, std::memory_order_relaxed);
  // Session streams end UNAVAILABLE; the reaper stops (nothing is returned:
  // usage does not outlive the process).
  sessions_->Shutdown();
}

absl::Status Pipeline::CreateGroup(CallContext& call,
                                   const v1::CreateGroupRequest& request,
                                   v1::Group* response) {
  return groups_.Create(call, request, response);
}

absl::Status Pipeline::DeleteGroup(CallContext& call,
                                   const v1::DeleteGroupRequest& request,
                                   v1::DeleteGroupResponse* response) {
  return groups_.Delete(call, request, response);
}

absl::Status Pipeline::ListGroups(CallContext& call,
                                  const v1::ListGroupsRequest& request,
                                  v1::ListGroupsResponse* response) {
  return groups_.List(call, request, response);
}

absl::Status Pipeline::SetLimits(CallContext& call,
                                 const v1::SetLimitsRequest& request,
                                 v1::Group* response) {
  return groups_.SetLimits(call, request, response);
}

void Pipeline::AttachCluster(ClusterNode* cluster) {
  cluster_ = cluster;
  groups_.AttachCluster(cluster);
  reads_.AttachCluster(cluster);
  batch_deps_.cluster = cluster;
}

absl::Status Pipeline::Charge(CallContext& call,
                              const v1::ChargeRequest& request,
                              v1::ChargeResponse* response, ChargeRun* run) {
  if (run->rerun) {
    // Queued past its deadline, or cancelled: not run; its request_id
    // entry is let go (a retry is a new arrival).
    if (absl::Status gone = StillWanted(call); !gone.ok()) {
      if (run->resume.entry.ticket != 0)
        request_ids_.Abandon(run->resume.entry);
      return gone;
    }
  }
  call.charge_counted = true;
  PageOp op;
  absl::Status status =
      AuthorizeCpu(authorizer_, call.caller(), request.has_cpu());
  if (status.ok()) status = validator_.Charge(request, request_ids_, &op);
  if (status.ok())
    status = Authorize(authorizer_, call.caller(), Access::kWrite, op.path);
  if (status.ok())
    status = ChargeRouteStatus(cluster_, op.path, request.resume(),
                               request.has_session_id());
  if (!status.ok()) {
    rpc_metrics_.RecordChargeAnswer(status);
    return status;
  }
  // The rerun resumes the deferred turn (its `max` event is counted).
  RemoteDrainDeferral::Resume resumed_turn(/*enabled=*/run->rerun);
  absl::Status store_error;
  PageAnswer answer =
      page_ops_.Apply(call.identity(), op, &run->resume, &store_error);
  if (!store_error.ok()) rpc_metrics_.RecordStateStoreError();
  run->rerun = IsRemoteDrainDeferred(answer.status);
  // A replay was counted when it was first answered; a deferred charge is
  // counted when it runs again.
  if (!answer.replayed && !run->rerun)
    rpc_metrics_.RecordChargeAnswer(answer.status);
  if (answer.status.ok()) {
    response->set_nr_pages(answer.nr_pages);
    response->set_throttle_us(answer.throttle_us);
    response->set_replayed(answer.replayed);
  }
  return std::move(answer.status);
}

absl::Status Pipeline::Uncharge(CallContext& call,
                                const v1::UnchargeRequest& request,
                                v1::UnchargeResponse* response) {
  PageOp op;
  if (absl::Status s =
          AuthorizeCpu(authorizer_, call.caller(), request.has_cpu());
      !s.ok())
    return s;
  if (absl::Status s = validator_.Uncharge(request, request_ids_, &op); !s.ok())
    return s;
  if (absl::Status s =
          Authorize(authorizer_, call.caller(), Access::kWrite, op.path);
      !s.ok())
    return s;
  if (absl::Status s = RouteStatus(cluster_, op.path); !s.ok()) return s;
  absl::Status store_error;
  PageAnswer answer =
      page_ops_.Apply(call.identity(), op, /*resume=*/nullptr, &store_error);
  if (!store_error.ok()) rpc_metrics_.RecordStateStoreError();
  if (answer.status.ok()) {
    response->set_nr_pages(answer.nr_pages);
    response->set_replayed(answer.replayed);
  }
  return std::move(answer.status);
}

absl::Status Pipeline::ChargeBatch(CallContext& call,
                                   const v1::ChargeBatchRequest& request,
                                   v1::ChargeBatchResponse* response,
                                   BatchRun* run) {
  if (run->runner == nullptr) {
    run->runner = NewBatchRunner(call);
  } else if (run->runner->deferred()) {
    // Queued past its deadline, or cancelled: the ops not applied yet are
    // answered with that (a keyed batch still completes).
    run->runner->AbortDeferred(StillWanted(call));
  }
  return run->runner->Run(request, response);
}

absl::Status Pipeline::GetStats(CallContext& call,
                                const v1::GetStatsRequest& request,
                                v1::GroupStats* response) {
  return reads_.GetStats(call, request, response);
}

absl::Status Pipeline::Reclaim(CallContext& call,
                               const v1::ReclaimRequest& request,
                               v1::ReclaimResponse* response) {
  return reads_.Reclaim(call, request, response);
}

absl::Status Pipeline::GetEngineInfo(CallContext& call,
                                     const v1::GetEngineInfoRequest&,
                                     v1::EngineInfo* response) {
  reads_.GetEngineInfo(call, response);
  return absl::OkStatus();
}

absl::Status Pipeline::GetClusterMap(CallContext& call,
                                     const v1::GetClusterMapRequest&,
                                     v1::ClusterMap* response) {
  if (cluster_ == nullptr) return absl::OkStatus();
  const ClusterMapView map = cluster_->Map();
  response->set_cluster_mode(true);
  response->set_node_name(map.node_name);
  response->set_node_address(map.advertise_address);
  response->set_shard_depth(map.shard_depth);
  response->set_revision(map.applied_revision);
  response->set_has_lease(map.has_lease);
  for (const ClusterMapView::Node& node : map.nodes) {
    v1::ClusterNodeInfo* out = response->add_nodes();
    out->set_name(node.name);
    out->set_address(node.address);
  }
  // A tenant sees the shards on the way to, at or inside what it may read:
  // their roots name groups, which it may not learn of otherwise.
  const std::optional<std::vector<std::string>> readable =
      Authorizer::ReadableSubtrees(call.caller());
  for (const ClusterMapView::Shard& shard : map.shards) {
    if (readable.has_value()) {
      bool related = false;
      for (const std::string& subtree : *readable)
        related |= PathAtOrBelow(subtree, shard.root) ||
                   PathAtOrBelow(shard.root, subtree);
      if (!related) continue;
    }
    v1::ShardOwner* out = response->add_shards();
    out->set_shard_root(shard.root);
    out->set_owner_name(shard.owner_node);
    out->set_owner_address(shard.owner_address);
    out->set_epoch(shard.epoch);
  }
  return absl::OkStatus();
}

absl::Status Pipeline::OpenSession(CallContext& call,
                                   const v1::OpenSessionRequest& request,
                                   v1::OpenSessionResponse* response) {
  absl::StatusOr<v1::OpenSessionResponse> opened =
      sessions_->Open(call.identity(), request);
  if (!opened.ok()) return opened.status();
  *response = *std::move(opened);
  return absl::OkStatus();
}

absl::Status Pipeline::CloseSession(CallContext& call,
                                    const v1::CloseSessionRequest& request,
                                    v1::CloseSessionResponse* response) {
  absl::StatusOr<uint64_t> returned =
      sessions_->Close(call.identity(), request.session_id());
  if (!returned.ok()) return returned.status();
  response->set_returned_pages(*returned);
  return absl::OkStatus();
}

absl::Status Pipeline::GetSession(CallContext& call,
                                  const v1::GetSessionRequest& request,
                                  v1::SessionInfo* response) {
  return sessions_->Get(call.identity(), request.session_id(), response);
}

void Pipeline::PeakToProto(const SessionRegistry::PeakWatermarkValue& value,
                           v1::PeakWatermark* out) const {
  out->set_watermark_id(value.watermark_id);
  out->set_path(value.path);
  // Pages never exceed page_counter_max(), so pages * page_size fits.
  out->set_peak_bytes(value.pages * units_.page_size_bytes());
}

absl::Status Pipeline::OpenPeakWatermark(
    CallContext& call, const v1::OpenPeakWatermarkRequest& request,
    v1::PeakWatermark* response) {
  if (absl::Status s = ValidateGroupPath(request.path()); !s.ok()) return s;
  if (request.session_id().empty())
    return absl::InvalidArgumentError(
        "session_id is required: a peak watermark belongs to a session of "
        "the caller and closes with it (OpenSession first)");
  // Writing memory.peak: write access, as for a charge.
  if (absl::Status s =
          Authorize(authorizer_, call.caller(), Access::kWrite, request.path());
      !s.ok())
    return s;
  if (absl::Status s = RouteStatus(cluster_, request.path()); !s.ok()) return s;
  absl::StatusOr<SessionRegistry::PeakWatermarkValue> opened =
      sessions_->OpenPeakWatermark(call.identity(), request.session_id(),
                                   request.path());
  if (!opened.ok()) return opened.status();
  PeakToProto(*opened, response);
  return absl::OkStatus();
}

absl::Status Pipeline::PeakWatermarkIo(const CallContext& call,
                                       uint64_t watermark_id, bool reset,
                                       v1::PeakWatermark* response) {
  // The caller's own watermark first (NOT_FOUND for anyone else's), then
  // the access the file operation needs on its group, checked every time:
  // a grant withdrawn by a reload stops the reads and writes.
  absl::StatusOr<std::string> path =
      sessions_->PeakWatermarkPath(call.identity(), watermark_id);
  if (!path.ok()) return path.status();
  if (absl::Status s = Authorize(authorizer_, call.caller(),
                                 reset ? Access::kWrite : Access::kRead, *path);
      !s.ok())
    return s;
  absl::StatusOr<SessionRegistry::PeakWatermarkValue> value =
      reset ? sessions_->ResetPeakWatermark(call.identity(), watermark_id)
            : sessions_->ReadPeakWatermark(call.identity(), watermark_id);
  if (!value.ok()) return value.status();
  PeakToProto(*value, response);
  return absl::OkStatus();
}

absl::Status Pipeline::ResetPeakWatermark(
    CallContext& call, const v1::PeakWatermarkRequest& request,
    v1::PeakWatermark* response) {
  return PeakWatermarkIo(call, request.watermark_id(), /*reset=*/true,
                         response);
}

absl::Status Pipeline::ReadPeakWatermark(
    CallContext& call, const v1::PeakWatermarkRequest& request,
    v1::PeakWatermark* response) {
  return PeakWatermarkIo(call, request.watermark_id(), /*reset=*/false,
                         response);
}

absl::Status Pipeline::ClosePeakWatermark(
    CallContext& call, const v1::PeakWatermarkRequest& request,
    v1::ClosePeakWatermarkResponse*) {
  // Closing a file needs no access to the group: the owner may always.
  return sessions_->ClosePeakWatermark(call.identity(),
                                       request.watermark_id());
}

absl::StatusOr<GroupHandle> Pipeline::ResolveWatch(
    CallContext& call, const v1::WatchEventsRequest& request) {
  if (absl::Status s = ValidateGroupPath(request.path()); !s.ok()) return s;
  if (absl::Status s =
          Authorize(authorizer_, call.caller(), Access::kRead, request.path());
      !s.ok())
    return s;
  // memory.events are counted where the shard's charges are: its owner.
  if (absl::Status s = RouteStatus(cluster_, request.path()); !s.ok()) return s;
  return engine_.ResolveGroup(request.path());
}

}  // namespace cgacct
