// AccountingService: the cgacct.v1.Accounting gRPC service (docs/DESIGN.md §4)
// on top of the Engine, on the gRPC callback API.
//
// The service owns the wire conventions and nothing else:
//  - units: limits and usage are bytes on the wire and pages in the engine.
//    Limit bytes round down to whole pages; UINT64_MAX, or any value at or
//    above page_counter_max() pages, is "max" (passed to the engine as
//    page_counter_max()); a limit equal to page_counter_max() is reported
//    back as UINT64_MAX.
//  - validation of what the engine cannot see (proto enum values, the uint32
//    range of cpu, request_id, Reclaim's nr_bytes), with the offending field
//    named in the INVALID_ARGUMENT message. Everything else is checked by
//    the engine's own exported checks (ValidateGroupPath, ValidateNrPages,
//    ValidatePageKind, ResolveCpu in engine/engine.h), so a client reads the
//    engine's words whichever RPC it used;
//  - request_id de-duplication for Charge/Uncharge (RequestDedupCache);
//  - the per-call page cap (max_charge_pages) and the per-identity stream
//    and in-flight limits (CallLimiter, server/limits.h): calls over the
//    latter are shed with RESOURCE_EXHAUSTED (docs/DESIGN.md §4.10);
//  - absl::Status -> grpc::Status: handlers work in absl::Status and convert
//    once, when they answer (ToGrpcStatus, server/status.h);
//  - per-method/per-code RPC metrics and the rejected-charge count
//    (RpcMetrics, lock-free).
//  - access control (server/auth.h, when an Authorizer is given): every RPC
//    first authenticates its caller (UNAUTHENTICATED), validates the path it
//    names (INVALID_ARGUMENT) and checks the caller's grant on it
//    (PERMISSION_DENIED) before anything can be found or changed; so a
//    tenant learns nothing about groups outside its grants, not even whether
//    they exist. ListGroups answers only paths the caller may read;
//    GetEngineInfo hides flush-hold paths it may not read.
// Every handler runs to completion on the gRPC callback thread and finishes
// with the default unary reactor; nothing blocks except the engine call.
//
// Thread safety: thread-safe; gRPC calls the handlers concurrently. The
// engine and the RPC metrics are not owned and must outlive the service (and
// the grpc::Server it is registered with).
#ifndef CGACCT_SERVER_ACCOUNTING_SERVICE_H_
#define CGACCT_SERVER_ACCOUNTING_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/group_handle.h"
#include "engine/remote_stock.h"
#include "engine/types.h"
#include "server/auth.h"
#include "server/drain_wait_pool.h"
#include "server/events_watch.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/raw_request.h"
#include "server/request_dedup.h"
#include "server/session_registry.h"
#include "server/state_store.h"

namespace cgacct {

// The documented cap on ChargeBatch ops per request (EngineInfo.max_batch_ops);
// a larger batch will be INVALID_ARGUMENT.
inline constexpr uint32_t kMaxBatchOps = 4096;
// ListGroups page size used for page_size 0 or anything above it.
inline constexpr uint32_t kMaxListGroupsPageSize = 10000;
// ListGroups also ends a page once its paths reach this many bytes.
inline constexpr size_t kMaxListGroupsPageBytes = size_t{1} << 20;
// Longest accepted request_id, in bytes (bounds the de-duplication table).
inline constexpr size_t kMaxRequestIdBytes = 128;
// Default of --max_charge_pages: 2^20 pages (4 GiB of 4 KiB pages), 2^31
// times below PAGE_COUNTER_MAX at 4 KiB pages.
inline constexpr uint64_t kDefaultMaxChargePages = uint64_t{1} << 20;

struct AccountingServiceOptions {
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
  // Where WatchEvents streams subscribe: the engine's observer (main.cc
  // makes it wrap the metrics observer). Null: WatchEvents answers
  // UNAVAILABLE. Not owned; must outlive the service.
  EventsWatchHub* events_hub = nullptr;
  // Time source of RPC latencies and of the request_id window; null = the
  // steady clock (Clock::Real()). Not owned; must outlive the service.
  const Clock* clock = nullptr;
  // Where groups, limits and the request-id window are persisted
  // (server/state_store.h). Null: an in-memory store the service owns
  // (nothing survives a restart). Not owned; must outlive the service.
  StateStore* store = nullptr;
  // Most pages one Charge may charge, and the charge ops of one
  // ChargeBatch/ChargeStream request together; more is INVALID_ARGUMENT
  // naming nr_pages and this cap (per op in a batch). 0 = only
  // PAGE_COUNTER_MAX. Uncharges are not capped.
  uint64_t max_charge_pages = kDefaultMaxChargePages;
  // Per-identity stream and in-flight limits (server/limits.h).
  CallLimiter::Options limits;
  // The gRPC server's own limits, set by whoever builds the grpc::Server
  // (cgacctd's main.cc); only reported in EngineInfo here. 0 = not set.
  uint32_t max_message_bytes = 0;
  uint32_t max_concurrent_streams_per_connection = 0;
  // Access control (server/auth.h): every RPC authenticates its caller and
  // checks the path(s) it touches before anything else but the path's own
  // validation. Null: no access control, every caller is admin. Not owned;
  // must outlive the service.
  const Authorizer* authorizer = nullptr;
  // Sessions (server/session_registry.h, docs/DESIGN.md §4.14): leases,
  // per-session bound, drain timeout. Must pass SessionOptions::Validate().
  SessionOptions sessions;
};

// What AccountingService::Restore() put back.
struct RestoreReport {
  size_t groups = 0;
  size_t requests = 0;
};

// Every method of cgacct.v1.Accounting on the callback API, reading its
// requests as raw bytes (the generated WithRawCallbackMethod_*): the service
// parses them itself (server/raw_request.h), so bytes that are not a valid
// request are INVALID_ARGUMENT with a message, not gRPC's UNIMPLEMENTED with
// none. The method names and descriptors are the service's, so the wire,
// reflection and generated clients are unchanged. SessionStream alone is on
// the async API (WithRawMethod_, raw bytes too), served from a completion
// queue of its own by a dedicated thread: drain answers are read there,
// never on a callback thread a charge waiting for them may be blocking
// (docs/DESIGN.md §4.14).
using RawAccountingService =
    cgacct::v1::Accounting::WithRawCallbackMethod_OpenSession<
    cgacct::v1::Accounting::WithRawCallbackMethod_CloseSession<
    cgacct::v1::Accounting::WithRawCallbackMethod_GetSession<
    cgacct::v1::Accounting::WithRawMethod_SessionStream<
    cgacct::v1::Accounting::WithRawCallbackMethod_CreateGroup<
        cgacct::v1::Accounting::WithRawCallbackMethod_DeleteGroup<
            cgacct::v1::Accounting::WithRawCallbackMethod_ListGroups<
                cgacct::v1::Accounting::WithRawCallbackMethod_SetLimits<
                    cgacct::v1::Accounting::WithRawCallbackMethod_Charge<
                        cgacct::v1::Accounting::WithRawCallbackMethod_Uncharge<
                            cgacct::v1::Accounting::
                                WithRawCallbackMethod_ChargeBatch<
                                    cgacct::v1::Accounting::
                                        WithRawCallbackMethod_ChargeStream<
                                            cgacct::v1::Accounting::
                                                WithRawCallbackMethod_GetStats<
                                                    cgacct::v1::Accounting::
                                                        WithRawCallbackMethod_Reclaim<
                                                            cgacct::v1::Accounting::
                                                                WithRawCallbackMethod_WatchEvents<
                                                                    cgacct::v1::Accounting::
                                                                        WithRawCallbackMethod_GetEngineInfo<
                                                                            cgacct::v1::Accounting::
                                                                                Service>>>>>>>>>>>>>>>>;

class AccountingService final : public RawAccountingService {
 public:
  // Every method reads its request as raw bytes (the generated
  // WithRawCallbackMethod_*; the typed message is named next to each
  // ByteBuffer): bytes that are not a valid request are INVALID_ARGUMENT
  // "request is not a valid cgacct.v1.<type>: <why>", nothing applied
  // (server/raw_request.h).

  // `engine`: the accounting engine every RPC acts on. `rpc_metrics`: where
  // handled counts and latencies are recorded. Both must outlive the service.
  AccountingService(Engine& engine, RpcMetrics& rpc_metrics,
                    AccountingServiceOptions options = {});
  AccountingService(const AccountingService&) = delete;
  AccountingService& operator=(const AccountingService&) = delete;
  // StopSessionStreams().
  ~AccountingService() override;

  // Serving. Instead of builder.RegisterService(&service):
  //   service.RegisterOn(builder);  server = builder.BuildAndStart();
  //   service.StartSessionStreams();  ...  service.BeginShutdown();
  //   server->Shutdown();  service.StopSessionStreams();  server.reset();
  // RegisterOn registers the service and adds the completion queue
  // SessionStream is served on (once, before BuildAndStart).
  // StartSessionStreams, once the server started, starts the thread that
  // drives that queue; without it SessionStream calls are never answered.
  // StopSessionStreams, after grpc::Server::Shutdown() returned and BEFORE
  // the grpc::Server is destroyed (the queue's last completions, the calls
  // requested but never matched, refer to the server object), shuts the
  // queue down, drains it and joins the thread (idempotent; the destructor
  // calls it, which is only safe if the server object is still alive).
  void RegisterOn(grpc::ServerBuilder& builder);
  void StartSessionStreams() ABSL_LOCKS_EXCLUDED(session_cq_mu_);
  void StopSessionStreams() ABSL_LOCKS_EXCLUDED(session_cq_mu_);

  // Re-creates the store's groups (creation order, stored limits; usage 0)
  // in the engine and reloads the request-id window (entries younger than
  // the window). Call once, before serving, on an engine with only the root.
  // Errors: the store's (INTERNAL, DATA_LOSS, ...); INTERNAL naming the path
  // if the engine refuses a stored group (nothing is served then).
  absl::StatusOr<RestoreReport> Restore() ABSL_LOCKS_EXCLUDED(config_mu_);

  // Shutdown, first step (cgacctd on SIGTERM, before grpc::Server::Shutdown):
  // from here every new call answers UNAVAILABLE with nothing applied;
  // unary calls already running finish; every open ChargeStream stops
  // reading, applies and answers the requests it has read, then ends
  // UNAVAILABLE saying how many were applied (OK if the client had
  // half-closed). Returns once every stream was told. Idempotent.
  void BeginShutdown() ABSL_LOCKS_EXCLUDED(streams_mu_);

  // Errors: INVALID_ARGUMENT bad path; NOT_FOUND parent; ALREADY_EXISTS
  // (the root included: the engine's answer, as mkdir's EEXIST);
  // UNAVAILABLE the state store failed (the group is not created).
  // CreateGroup, DeleteGroup and SetLimits answer OK only once the change
  // is in the state store; they are serialised with each other.
  grpc::ServerUnaryReactor* CreateGroup(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.CreateGroupRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.Group

  // Errors: NOT_FOUND; FAILED_PRECONDITION has children; INVALID_ARGUMENT
  // root or bad path; INTERNAL the state store failed after the engine
  // deleted the group (it would come back after a restart).
  grpc::ServerUnaryReactor* DeleteGroup(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.DeleteGroupRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.DeleteGroupResponse

  // Sorted paths below `path`, paged (page_size 0 or > 10000 means 10000).
  // The page token is the last path of the previous page (opaque to
  // clients); paging is stable under concurrent creates and deletes in the
  // sense that no path present throughout is returned twice or skipped.
  // Errors: NOT_FOUND; INVALID_ARGUMENT bad path.
  grpc::ServerUnaryReactor* ListGroups(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.ListGroupsRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.ListGroupsResponse

  // Errors: NOT_FOUND; INVALID_ARGUMENT root or bad path; INTERNAL the
  // state store failed after the engine applied the limits (a restart would
  // restore the previous ones).
  grpc::ServerUnaryReactor* SetLimits(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.SetLimitsRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.Group

  // Every handler below except GetEngineInfo first admits the call as one
  // in-flight message of its caller's identity (ChargeStream: one stream,
  // then one in-flight message per request); over a limit the call is shed:
  // RESOURCE_EXHAUSTED "cgacctd is shedding load: ..." with trailing
  // metadata cgacct-shed (server/limits.h), and nothing is applied.
  //
  // Checked in the order path, nr_pages, kind, cpu, request_id. Errors:
  // INVALID_ARGUMENT (bad path, nr_pages 0 or > page_counter_max or above
  // the per-call cap max_charge_pages, kind not
  // ANON/FILE, cpu >= nr_cpus, empty/too long request_id, or a request_id
  // reused for a different request); NOT_FOUND; RESOURCE_EXHAUSTED (OOM,
  // naming the limiting group); ABORTED (the same request_id is still in
  // flight; retry). Every Charge answered with another error than
  // RESOURCE_EXHAUSTED counts once as rejected (RpcMetrics; a replay of a
  // stored answer is not counted again).
  grpc::ServerUnaryReactor* Charge(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.ChargeRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.ChargeResponse

  // Errors: as Charge, with FAILED_PRECONDITION (more ANON pages than held)
  // instead of RESOURCE_EXHAUSTED.
  grpc::ServerUnaryReactor* Uncharge(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.UnchargeRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.UnchargeResponse

  // Applies every op in order with the semantics, validation and status codes
  // of Charge/Uncharge (no request_id), and answers one OpResult per op, in
  // order: partial success, the call itself is OK. A failed op's message is
  // "ops[i]: " and the message Charge/Uncharge would give, naming the field;
  // a failed charge op counts as rejected like a failed Charge.
  // Each distinct path is validated and resolved to a GroupHandle once per
  // call. The per-call page cap is one budget per request: each valid charge
  // op takes its nr_pages from max_charge_pages, and an op that asks for
  // more than is left fails alone with INVALID_ARGUMENT (nr_pages). Errors
  // of the call: INVALID_ARGUMENT for more than kMaxBatchOps ops (nothing is
  // applied). Implemented in server/charge_batch.cc.
  grpc::ServerUnaryReactor* ChargeBatch(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.ChargeBatchRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.ChargeBatchResponse

  // ChargeBatch over a stream: one ChargeBatchResponse per request, in
  // order, each exactly what ChargeBatch would answer. The server reads the
  // next request while the previous response is being written (at most one
  // response waits behind the one on the wire). Group handles are cached for
  // the stream's life (re-resolved if their group was deleted). The stream
  // ends OK when the client half-closes and every response is written; a
  // request of more than kMaxBatchOps ops ends
  // it with INVALID_ARGUMENT after the responses to the earlier requests
  // (that request is not applied); a request over the in-flight limit ends
  // it the same way with the shed RESOURCE_EXHAUSTED. A request or response
  // buffer grown past 64 KiB is freed once used, so an idle stream holds
  // little memory. Implemented in server/charge_batch.cc.
  // Messages are cgacct.v1.ChargeBatchRequest / ChargeBatchResponse as raw
  // bytes; a message that does not parse ends the stream INVALID_ARGUMENT
  // "request N: request is not a valid cgacct.v1.ChargeBatchRequest: ..."
  // after the responses to the N-1 before it (applied); it and anything
  // after it are not.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ChargeStream(
      grpc::CallbackServerContext* context) override;

  // memory.current/peak/stat/events of a group; FLUSH_MODE_UNSPECIFIED is
  // EXACT. max_staleness_us is the age of the newest flush covering the
  // group (0 when this read flushed); a group no flush has covered yet
  // reports the time since the engine was created (Engine::GetStats).
  // Errors: NOT_FOUND; INVALID_ARGUMENT bad path or unknown flush.
  grpc::ServerUnaryReactor* GetStats(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.GetStatsRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.GroupStats

  // memory.reclaim: reclaims nr_bytes (rounded down to pages) from the
  // group's subtree, ignoring the group's own min/low; reclaimed_bytes is
  // what was reclaimed (at least the request; reclaim works in 32-page
  // chunks). Errors: INVALID_ARGUMENT nr_bytes 0 or bad path; NOT_FOUND;
  // UNAVAILABLE when the target was not met (the kernel's EAGAIN; retry
  // later: what was reclaimed stays reclaimed).
  grpc::ServerUnaryReactor* Reclaim(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.ReclaimRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.ReclaimResponse

  // A group's memory.events and memory.events.local: the current counts on
  // subscribe, then the latest counts after every change, coalesced (a
  // slow reader skips intermediate counts; one update buffer per stream,
  // nothing queues). Ends NOT_FOUND when the group is deleted (also if the
  // path is created again meanwhile: the stream follows the group instance
  // it subscribed to), CANCELLED when the client cancels, UNAVAILABLE when
  // the server shuts down (BeginShutdown()). Errors on subscribe:
  // INVALID_ARGUMENT bad path; NOT_FOUND; UNAVAILABLE no events hub.
  // `request` is a cgacct.v1.WatchEventsRequest, the stream's messages
  // cgacct.v1.EventsUpdate, as raw bytes.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchEvents(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;

  // --- sessions (docs/DESIGN.md §4.14, server/session_registry.h) ---------
  // A session is owned by the caller identity that opened it: any other
  // identity gets NOT_FOUND for it, as if it did not exist. Charge, Uncharge
  // and ChargeOp name one with session_id (NOT_FOUND unknown/closed,
  // RESOURCE_EXHAUSTED over max_held_pages, FAILED_PRECONDITION an uncharge
  // of more than it holds of that path and kind; nothing applied).

  // Errors: INVALID_ARGUMENT ttl_ms out of [--session_min_ttl_ms,
  // --session_max_ttl_ms] or client_name over 128 bytes;
  // RESOURCE_EXHAUSTED --max_sessions_per_identity reached.
  grpc::ServerUnaryReactor* OpenSession(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.OpenSessionRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.OpenSessionResponse
  // Uncharges every holding (waiting for the session's charges in flight)
  // and answers the pages uncharged. Errors: INVALID_ARGUMENT empty
  // session_id; NOT_FOUND.
  grpc::ServerUnaryReactor* CloseSession(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.CloseSessionRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.CloseSessionResponse
  // Errors: as CloseSession.
  grpc::ServerUnaryReactor* GetSession(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.GetSessionRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.SessionInfo
  // The session's lease and drain channel: the first message attaches
  // (attach_session_id; a newer stream replaces an older one, which ends
  // ABORTED), each keepalive renews the lease; every attach and keepalive
  // is answered expires_in_ms. Drain requests go out with a drain_id; the
  // answer's returned pages are uncharged for the session. Holds one
  // stream permit of its caller (server/limits.h). Ends: OK on client
  // half-close or CloseSession; NOT_FOUND the session is unknown or
  // expired; INVALID_ARGUMENT a message that does not parse or a first
  // message without attach_session_id; ABORTED replaced; UNAVAILABLE
  // shutdown. Implemented in server/session_stream.cc, on the async API
  // (RegisterOn, StartSessionStreams): no method to override.

  // The sessions, for tests and cgacctd's metrics.
  SessionRegistry& sessions() { return *sessions_; }

  // The per-identity limiter, for tests (which hold permits to saturate it).
  CallLimiter& limiter() { return limiter_; }

  // Errors: only access control's (UNAUTHENTICATED, PERMISSION_DENIED).
  grpc::ServerUnaryReactor* GetEngineInfo(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request,       // a cgacct.v1.GetEngineInfoRequest
      grpc::ByteBuffer* response) override;  // a cgacct.v1.EngineInfo

 private:
  // server/charge_batch.cc: applies ChargeOps with a GroupHandle cache, and
  // the ChargeStream reactor.
  class ChargeOpRunner;
  class ChargeStreamReactor;
  // server/watch_events.cc: the WatchEvents reactor.
  class WatchEventsReactor;
  // server/session_stream.cc: one SessionStream call on session_cq_.
  class SessionStreamCall;
  // Asks gRPC for the next SessionStream call on session_cq_ (not after
  // StopSessionStreams began).
  void AwaitSessionStream() ABSL_LOCKS_EXCLUDED(session_cq_mu_);
  // session_thread_: dispatches session_cq_'s completions until it is shut
  // down and drained.
  void SessionStreamLoop();

  // UNAVAILABLE after BeginShutdown(); DEADLINE_EXCEEDED when the call's
  // deadline has passed. Every handler checks it before anything changes.
  absl::Status CheckCallable(const grpc::ServerContextBase& context) const;
  // For a deferred charge about to run again on a drain-wait thread:
  // CANCELLED if the client cancelled the call, DEADLINE_EXCEEDED if its
  // deadline passed while it was queued (nobody waits for the answer:
  // it is not run), else OK.
  static absl::Status CheckStillWanted(const grpc::ServerContextBase& context);
  // Where a ChargeBatch request (or ChargeStream message) stands between a
  // RunBatch() that was deferred (a charge op waits for sessions' drain
  // answers) and the RunBatch() that resumes it. Reset when one ends.
  struct BatchProgress {
    bool begun = false;  // idempotency checked (and, keyed, Begin() done)
    int next_op = 0;     // the first op not yet applied
    bool deferred = false;  // next_op was deferred: its rerun resumes
    // Not OK: the call was cancelled or timed out while deferred; the ops
    // from next_op on are answered with it, not applied.
    absl::Status abort;
    bool keyed = false;  // batch_dedup_ entry in flight under `ticket`
    std::string dedup_key;
    uint64_t ticket = 0;
    uint64_t scope = 0;
    uint64_t digest = 0;
  };
  // Runs a ChargeBatch request (or ChargeStream message) through `runner`,
  // at most once per (identity, generations of its groups,
  // idempotency_key) inside the window when it has a key; records the
  // response in the state store. Errors (nothing applied):
  // INVALID_ARGUMENT bad key, or the key used for other ops; ABORTED the
  // same key is in flight. Inside a RemoteDrainDeferral::Scope it may
  // return IsRemoteDrainDeferred() with the ops before the deferred one
  // applied (their results in `response`) and `progress` saying where it
  // stopped: call it again, outside a Scope, with the same request,
  // response and progress. Implemented in server/charge_batch.cc.
  absl::Status RunBatch(ChargeOpRunner& runner, const std::string& identity,
                        const cgacct::v1::ChargeBatchRequest& request,
                        cgacct::v1::ChargeBatchResponse* response,
                        BatchProgress* progress);
  absl::Status BeginKeyedBatch(const std::string& identity,
                               const cgacct::v1::ChargeBatchRequest& request,
                               cgacct::v1::ChargeBatchResponse* response,
                               BatchProgress* progress);
  absl::Status RunBatchSteps(ChargeOpRunner& runner,
                             const std::string& identity,
                             const cgacct::v1::ChargeBatchRequest& request,
                             cgacct::v1::ChargeBatchResponse* response,
                             BatchProgress* progress);
  // Calls stream->OnServerShutdown() (server/charge_batch.cc).
  static void NotifyStreamShutdown(ChargeStreamReactor* stream);
  // ChargeStream reactors register for BeginShutdown(); false: shutdown
  // has begun (the stream must end at once). Unregister waits while
  // BeginShutdown() is calling that reactor.
  bool RegisterStream(ChargeStreamReactor* stream)
      ABSL_LOCKS_EXCLUDED(streams_mu_);
  void UnregisterStream(ChargeStreamReactor* stream)
      ABSL_LOCKS_EXCLUDED(streams_mu_);
  // The caller's identity (CallerIdentity): the per-identity limits' key,
  // and the scope of request ids and idempotency keys ("" = anonymous).
  static std::string CallerKey(const grpc::ServerContextBase* context);

  enum class UnaryMode {
    kAdmitted,  // shutdown, deadline and in-flight checks; body runs once
    kProbe,     // GetEngineInfo: served during shutdown, never shed
    // kAdmitted, and `body` charges: it runs in a RemoteDrainDeferral::Scope
    // and may return IsRemoteDrainDeferred(); it is then called again, with
    // the same request and the response as it left it, on a
    // drain_wait_pool_ thread (no Scope: it may wait), which finishes the
    // call. Such a body must own what it captures (not `[&]`) and carry its
    // own progress (a batch resumes at the op that was deferred).
    kCharging,
  };
  // The one adapter of the ten unary methods from raw bytes to typed
  // messages. Unless kProbe: refuses the call after BeginShutdown() or past
  // its deadline, and admits it as one in-flight message of the caller (a
  // Permit held while `body` runs; a shed call finishes at once). Then
  // parses `request_bytes` as a Request (INVALID_ARGUMENT naming the type
  // otherwise; an undecodable Charge counts as a rejected charge), runs
  // `body(const Request&, Response*)` (returning absl::Status), serializes
  // its Response into `response_bytes` if OK, and finishes the call (see
  // kCharging for a deferred body).
  template <typename Request, typename Response, typename Body>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context,
                                  RpcMethod method,
                                  const grpc::ByteBuffer* request_bytes,
                                  grpc::ByteBuffer* response_bytes, Body&& body,
                                  UnaryMode mode = UnaryMode::kAdmitted) {
    const int64_t start_ns = clock_.NowNs();
    CallLimiter::Permit permit;
    if (mode != UnaryMode::kProbe) {
      // Shutdown and the deadline first: nothing changes for such a call.
      if (absl::Status s = CheckCallable(*context); !s.ok())
        return FinishUnary(context, method, start_ns, s);
      ShedReason reason;
      absl::StatusOr<CallLimiter::Permit> admitted = limiter_.Acquire(
          CallLimiter::Kind::kInFlight, CallerKey(context), &reason);
      if (!admitted.ok()) {
        MarkShed(context, reason);
        return FinishUnary(context, method, start_ns, admitted.status());
      }
      permit = *std::move(admitted);
    }
    Request request;
    // A call reset before its request arrived (an HTTP/2 rapid-reset flood)
    // still gets here, with no message: INVALID_ARGUMENT "... carried no
    // request message" (counted, answered to nobody).
    absl::Status status = ParseRequest(*request_bytes, &request);
    if (status.ok()) {
      Response response;
      if (mode == UnaryMode::kCharging) {
        {
          RemoteDrainDeferral::Scope no_wait;  // a gRPC callback thread
          status = body(static_cast<const Request&>(request), &response);
        }
        if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(status))) {
          // Taken once: DefaultReactor() constructs the reactor anew.
          grpc::ServerUnaryReactor* const reactor = context->DefaultReactor();
          drain_wait_pool_.Run(
              [this, context, reactor, method, start_ns, response_bytes,
               request = std::move(request), response = std::move(response),
               body = std::forward<Body>(body),
               permit = std::move(permit)]() mutable {
                absl::Status s =
                    body(static_cast<const Request&>(request), &response);
                if (s.ok()) s = SerializeResponse(response, response_bytes);
                FinishUnary(context, method, start_ns, s, std::move(permit),
                            reactor);
              });
          return reactor;
        }
      } else {
        status = body(static_cast<const Request&>(request), &response);
      }
      if (status.ok()) status = SerializeResponse(response, response_bytes);
    } else if (method == RpcMethod::kCharge) {
      CountChargeAnswer(status);  // a refused Charge is a rejected charge
    }
    return FinishUnary(context, method, start_ns, status, std::move(permit));
  }
  // Counts a shed call and adds the cgacct-shed trailing metadata (call it
  // before Finish).
  void MarkShed(grpc::ServerContextBase* context, ShedReason reason);
  // A charge of `nr_pages` is within max_charge_pages (`field` names it in
  // the message: "nr_pages", or "ops" for a batch's sum).
  absl::Status CheckChargeCap(uint64_t nr_pages, absl::string_view field) const;
  // ChargeRequest.batch_pages: >= nr_pages, a valid page count, within
  // max_charge_pages. INVALID_ARGUMENT naming batch_pages otherwise.
  absl::Status ValidateBatchPages(uint64_t batch_pages, uint64_t nr_pages) const;
  // What a ChargeBatch request (or one ChargeStream message) must pass
  // before any op runs: at most kMaxBatchOps ops.
  absl::Status CheckBatch(const cgacct::v1::ChargeBatchRequest& request) const;

  // Converts `status` (ToGrpcStatus), records the call's metrics (latency
  // since `start_ns` on clock_) and finishes it on `reactor` (null: the
  // context's DefaultReactor(), which must not have been taken before).
  // A held `permit` is given back before the call is finished.
  grpc::ServerUnaryReactor* FinishUnary(
      grpc::CallbackServerContext* context, RpcMethod method, int64_t start_ns,
      const absl::Status& status, CallLimiter::Permit permit = {},
      grpc::ServerUnaryReactor* reactor = nullptr);
  void RecordRpc(RpcMethod method, int64_t start_ns, grpc::StatusCode code);
  // Counts `status`, the answer to one charge (a Charge or a charge op), as
  // rejected unless it is OK or RESOURCE_EXHAUSTED. The only place the
  // service counts rejections (see RpcMetrics::RecordChargeRejected).
  void CountChargeAnswer(const absl::Status& status);

  absl::Status DoCreateGroup(const cgacct::v1::CreateGroupRequest& request,
                             cgacct::v1::Group* response);
  absl::Status DoDeleteGroup(const cgacct::v1::DeleteGroupRequest& request,
                             cgacct::v1::DeleteGroupResponse* response);
  absl::Status DoListGroups(const AuthCaller& caller,
                            const cgacct::v1::ListGroupsRequest& request,
                            cgacct::v1::ListGroupsResponse* response);
  absl::Status DoSetLimits(const cgacct::v1::SetLimitsRequest& request,
                           cgacct::v1::Group* response);
  // A keyed Charge deferred to a waiting thread keeps its de-duplication
  // entry in flight (a retry meanwhile is ABORTED "in flight"); its rerun
  // completes that entry instead of beginning another.
  struct PageRequestResume {
    std::string key;      // DedupKey of the deferred attempt ("" : none)
    uint64_t ticket = 0;  // its dedup_ ticket
  };
  // `identity`: the caller's (CallerKey), scoping request ids. `resume`:
  // the call's state across a deferral (see PageRequestResume).
  absl::Status DoCharge(const std::string& identity,
                        const cgacct::v1::ChargeRequest& request,
                        cgacct::v1::ChargeResponse* response,
                        PageRequestResume* resume = nullptr);
  absl::Status DoUncharge(const std::string& identity,
                          const cgacct::v1::UnchargeRequest& request,
                          cgacct::v1::UnchargeResponse* response);
  // A charge (`charge`) or an uncharge of `nr_pages` in the name of
  // `session_id`, through `handle` if not null, else `path` resolved (NOT_FOUND
  // before the session is looked at, as for an unowned call): the session's
  // BeginOp/EndOp (server/session_registry.h) around `apply(group)`, the
  // engine call, whose StatusOr it returns.
  template <typename Apply>
  auto InSession(const std::string& identity, const std::string& session_id,
                 const GroupHandle* handle, absl::string_view path,
                 uint64_t nr_pages, PageKind kind, bool charge, Apply apply)
      -> decltype(apply(std::declval<const GroupHandle&>()));
  absl::Status DoGetStats(const cgacct::v1::GetStatsRequest& request,
                          cgacct::v1::GroupStats* response);
  absl::Status DoReclaim(const cgacct::v1::ReclaimRequest& request,
                         cgacct::v1::ReclaimResponse* response);
  void DoGetEngineInfo(const AuthCaller& caller,
                       cgacct::v1::EngineInfo* response);

  // The nr_pages, kind and cpu of a Charge, Uncharge or ChargeOp, checked in
  // that order by the engine's exported checks (and CpuFromProto for the
  // wire's uint32 cpu); on success *engine_cpu is the cpu to pass to the
  // engine. The path is checked by the caller (ChargeBatch checks each
  // distinct path once).
  // `charge`: the op charges, so nr_pages is also held to max_charge_pages.
  absl::Status ValidatePageArgs(uint64_t nr_pages, PageKind kind,
                                std::optional<uint32_t> cpu, bool charge,
                                std::optional<int>* engine_cpu) const;
  // The body Charge and Uncharge share: checks path, nr_pages, kind, cpu and
  // request_id, then runs `call(handle, path, nr_pages, kind, cpu)` (the
  // engine's Charge or Uncharge, through `handle` when not null, returning a
  // DedupAnswer) at most once per (identity, group generation, request_id)
  // inside the window (request_dedup.h), recording the answer in the state
  // store before it is returned. Returns the answer; *replayed tells whether
  // it was a stored one (nothing was applied). With `resume`, a deferred
  // answer (IsRemoteDrainDeferred) leaves the entry in flight, recorded in
  // *resume, and the next call with the same *resume completes it.
  template <typename Request, typename Call>
  DedupAnswer ApplyPageRequest(const std::string& identity,
                               const Request& request, bool charge,
                               DedupFingerprint::Method method, Call&& call,
                               bool* replayed,
                               PageRequestResume* resume = nullptr);
  // The store generation of engine group `group_id` (see generations_).
  uint64_t GenerationOf(uint64_t group_id) const
      ABSL_LOCKS_EXCLUDED(generations_mu_);
  // Puts the stored Charge/Uncharge answers back into dedup_; returns how
  // many.
  size_t RestoreRequests(const std::vector<StoredRequest>& requests);

  // The caller of `context` (an admin caller when there is no authorizer).
  // Errors: UNAUTHENTICATED, PERMISSION_DENIED (Authorizer::Authenticate).
  absl::StatusOr<AuthCaller> AuthenticateCall(
      const grpc::ServerContextBase& context) const;
  // AuthenticateCall(), then ValidateGroupPath(path), then the caller's
  // `access` on `path`. *caller (if not null) gets the caller.
  absl::Status AuthorizeCall(const grpc::ServerContextBase& context,
                             Access access, const std::string& path,
                             AuthCaller* caller = nullptr) const;

  // Wire limits (bytes) -> engine update (pages); see the file comment.
  LimitsUpdate LimitsFromProto(const cgacct::v1::Limits& limits) const;
  // Engine limits (pages) -> wire limits (bytes), all four fields set.
  void LimitsToProto(const Limits& limits, cgacct::v1::Limits* out) const;
  uint64_t LimitBytesToPages(uint64_t bytes) const;
  uint64_t LimitPagesToBytes(uint64_t pages) const;
  void GroupToProto(const GroupInfo& group, cgacct::v1::Group* out) const;

  // Constant after construction.
  Engine& engine_;
  RpcMetrics& rpc_metrics_;
  const uint64_t page_size_bytes_;
  const uint64_t page_counter_max_;
  const int nr_cpus_;
  const Clock& clock_;
  EventsWatchHub* const events_hub_;  // may be null
  const uint64_t max_charge_pages_;  // 0 = none
  const uint32_t max_message_bytes_;
  const uint32_t max_concurrent_streams_per_connection_;

  // Thread-safe on its own.
  CallLimiter limiter_;

  const Authorizer* const authorizer_;  // may be null; thread-safe

  // Thread-safe on their own; only touched by calls carrying a request_id
  // (dedup_) or an idempotency_key (batch_dedup_).
  RequestDedupCache dedup_;
  RequestDedupCache batch_dedup_;

  // The store: options.store, or owned_store_. Thread-safe on its own.
  std::unique_ptr<StateStore> owned_store_;
  StateStore* const store_;
  // Serialises CreateGroup/DeleteGroup/SetLimits (engine change + store
  // write) so the store sees them in the engine's order.
  absl::Mutex config_mu_ ABSL_ACQUIRED_BEFORE(generations_mu_);
  // Engine group id -> the group's store generation (stable across
  // restarts; request ids are scoped by it).
  mutable absl::Mutex generations_mu_;
  absl::flat_hash_map<uint64_t, uint64_t> generations_
      ABSL_GUARDED_BY(generations_mu_);

  // Set once by BeginShutdown(); read by every handler (relaxed is enough:
  // a call racing with it is either refused or runs to completion before
  // the server's own shutdown, which waits for it).
  std::atomic<bool> shutting_down_{false};
  // Open ChargeStreams (BeginShutdown() tells each one).
  absl::Mutex streams_mu_;
  absl::flat_hash_set<ChargeStreamReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool streams_shut_ ABSL_GUARDED_BY(streams_mu_) = false;
  // The stream BeginShutdown() is calling (unlocked), and on which thread.
  ChargeStreamReactor* calling_ ABSL_GUARDED_BY(streams_mu_) = nullptr;
  std::thread::id calling_thread_ ABSL_GUARDED_BY(streams_mu_);

  // SessionStream's completion queue (RegisterOn) and its thread
  // (StartSessionStreams). session_cq_ is set once before serving;
  // session_cq_mu_ orders requesting a call on it against shutting it down
  // (gRPC aborts on a request to a queue already shut down).
  std::unique_ptr<grpc::ServerCompletionQueue> session_cq_;
  std::thread session_thread_;  // started and joined under session_cq_mu_
  absl::Mutex session_cq_mu_;
  bool session_cq_shut_ ABSL_GUARDED_BY(session_cq_mu_) = false;

  // Thread-safe on its own; declared last: destroyed first (stops its
  // reaper and leaves the engine's drainer hook before anything else goes).
  std::unique_ptr<SessionRegistry> sessions_;
  // Where charges that wait for sessions' drain answers finish (Unary's
  // kCharging, ChargeStream). Thread-safe on its own; declared after
  // sessions_: destroyed before it (its last tasks may still ask it).
  DrainWaitPool drain_wait_pool_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_ACCOUNTING_SERVICE_H_
