// AccountingService: the cgacct.v1.Accounting gRPC service (DESIGN.md §4.1)
// on top of the Engine, on the gRPC callback API.
//
// The service owns the wire conventions and nothing else:
//  - units: limits and usage are bytes on the wire and pages in the engine.
//    Limit bytes round down to whole pages; UINT64_MAX, or any value at or
//    above page_counter_max() pages, is "max" (passed to the engine as
//    page_counter_max()); a limit equal to page_counter_max() is reported
//    back as UINT64_MAX.
//  - validation the engine cannot express (PageKind UNSPECIFIED, nr_pages
//    that would overflow bytes, cpu range, empty request_id), with the
//    offending field named in the INVALID_ARGUMENT message;
//  - request_id de-duplication for Charge/Uncharge (RequestDedupCache);
//  - absl::Status -> grpc::Status (ToGrpcStatus, one place);
//  - per-method/per-code RPC metrics (RpcMetrics, lock-free).
// Every handler runs to completion on the gRPC callback thread and finishes
// with the default unary reactor; nothing blocks except the engine call.
//
// Thread safety: thread-safe; gRPC calls the handlers concurrently. The
// engine and the RPC metrics are not owned and must outlive the service (and
// the grpc::Server it is registered with).
#ifndef CGACCT_SERVER_ACCOUNTING_SERVICE_H_
#define CGACCT_SERVER_ACCOUNTING_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <optional>

#include "cgacct/v1/accounting.grpc.pb.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/engine.h"
#include "engine/types.h"
#include "server/metrics.h"
#include "server/request_dedup.h"

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

struct AccountingServiceOptions {
  // request_id de-duplication: 65536 ids, 60 s window by default.
  RequestDedupCache::Options dedup;
};

class AccountingService final : public cgacct::v1::Accounting::CallbackService {
 public:
  // `engine`: the accounting engine every RPC acts on. `rpc_metrics`: where
  // handled counts and latencies are recorded. Both must outlive the service.
  AccountingService(Engine& engine, RpcMetrics& rpc_metrics,
                    AccountingServiceOptions options = {});
  AccountingService(const AccountingService&) = delete;
  AccountingService& operator=(const AccountingService&) = delete;

  // Errors: INVALID_ARGUMENT bad path (the root included); NOT_FOUND parent;
  // ALREADY_EXISTS.
  grpc::ServerUnaryReactor* CreateGroup(
      grpc::CallbackServerContext* context,
      const cgacct::v1::CreateGroupRequest* request,
      cgacct::v1::Group* response) override;

  // Errors: NOT_FOUND; FAILED_PRECONDITION has children; INVALID_ARGUMENT
  // root or bad path.
  grpc::ServerUnaryReactor* DeleteGroup(
      grpc::CallbackServerContext* context,
      const cgacct::v1::DeleteGroupRequest* request,
      cgacct::v1::DeleteGroupResponse* response) override;

  // Sorted paths below `path`, paged (page_size 0 or > 10000 means 10000).
  // The page token is the last path of the previous page (opaque to
  // clients); paging is stable under concurrent creates and deletes in the
  // sense that no path present throughout is returned twice or skipped.
  // Errors: NOT_FOUND; INVALID_ARGUMENT bad path.
  grpc::ServerUnaryReactor* ListGroups(
      grpc::CallbackServerContext* context,
      const cgacct::v1::ListGroupsRequest* request,
      cgacct::v1::ListGroupsResponse* response) override;

  // Errors: NOT_FOUND; INVALID_ARGUMENT root or bad path.
  grpc::ServerUnaryReactor* SetLimits(
      grpc::CallbackServerContext* context,
      const cgacct::v1::SetLimitsRequest* request,
      cgacct::v1::Group* response) override;

  // Errors: INVALID_ARGUMENT (nr_pages 0 or > page_counter_max, kind not
  // ANON/FILE, cpu >= nr_cpus, bad path, empty/too long request_id, or a
  // request_id reused for a different request); NOT_FOUND; RESOURCE_EXHAUSTED
  // (OOM, naming the limiting group); ABORTED (the same request_id is still
  // in flight; retry).
  grpc::ServerUnaryReactor* Charge(
      grpc::CallbackServerContext* context,
      const cgacct::v1::ChargeRequest* request,
      cgacct::v1::ChargeResponse* response) override;

  // Errors: as Charge, with FAILED_PRECONDITION (more ANON pages than held)
  // instead of RESOURCE_EXHAUSTED.
  grpc::ServerUnaryReactor* Uncharge(
      grpc::CallbackServerContext* context,
      const cgacct::v1::UnchargeRequest* request,
      cgacct::v1::UnchargeResponse* response) override;

  // Applies every op in order with the semantics, validation and status codes
  // of Charge/Uncharge (no request_id), and answers one OpResult per op, in
  // order: partial success, the call itself is OK. A failed op's message is
  // "ops[i]: " and the message Charge/Uncharge would give, naming the field.
  // Each distinct path is validated and resolved to a GroupHandle once per
  // call. Errors of the call: INVALID_ARGUMENT for more than kMaxBatchOps ops
  // (nothing is applied). Implemented in server/charge_batch.cc.
  grpc::ServerUnaryReactor* ChargeBatch(
      grpc::CallbackServerContext* context,
      const cgacct::v1::ChargeBatchRequest* request,
      cgacct::v1::ChargeBatchResponse* response) override;

  // ChargeBatch over a stream: one ChargeBatchResponse per request, in
  // order, each exactly what ChargeBatch would answer. The server reads the
  // next request while the previous response is being written (at most one
  // response waits behind the one on the wire). Group handles are cached for
  // the stream's life (re-resolved if their group was deleted). The stream
  // ends OK when the client half-closes and every response is written; a
  // request of more than kMaxBatchOps ops ends it with INVALID_ARGUMENT
  // after the responses to the earlier requests. Implemented in
  // server/charge_batch.cc.
  grpc::ServerBidiReactor<cgacct::v1::ChargeBatchRequest,
                          cgacct::v1::ChargeBatchResponse>*
  ChargeStream(grpc::CallbackServerContext* context) override;

  // memory.current/peak/stat/events of a group; FLUSH_MODE_UNSPECIFIED is
  // EXACT. max_staleness_us is UINT64_MAX when the group's numbers were never
  // flushed (unbounded staleness). Errors: NOT_FOUND; INVALID_ARGUMENT bad path
  // or unknown flush.
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const cgacct::v1::GetStatsRequest* request,
                                     cgacct::v1::GroupStats* response) override;

  // memory.reclaim: reclaims nr_bytes (rounded down to pages) from the
  // group's subtree, ignoring the group's own min/low; reclaimed_bytes is
  // what was reclaimed (at least the request; reclaim works in 32-page
  // chunks). Errors: INVALID_ARGUMENT nr_bytes 0 or bad path; NOT_FOUND;
  // UNAVAILABLE when the target was not met (the kernel's EAGAIN; retry
  // later: what was reclaimed stays reclaimed).
  grpc::ServerUnaryReactor* Reclaim(
      grpc::CallbackServerContext* context,
      const cgacct::v1::ReclaimRequest* request,
      cgacct::v1::ReclaimResponse* response) override;

  // Not implemented yet: the stream ends with UNIMPLEMENTED.
  grpc::ServerWriteReactor<cgacct::v1::EventsUpdate>* WatchEvents(
      grpc::CallbackServerContext* context,
      const cgacct::v1::WatchEventsRequest* request) override;

  // Never fails.
  grpc::ServerUnaryReactor* GetEngineInfo(
      grpc::CallbackServerContext* context,
      const cgacct::v1::GetEngineInfoRequest* request,
      cgacct::v1::EngineInfo* response) override;

 private:
  using Clock = std::chrono::steady_clock;
  // server/charge_batch.cc: applies ChargeOps with a GroupHandle cache, and
  // the ChargeStream reactor.
  class ChargeOpRunner;
  class ChargeStreamReactor;

  // Records metrics for a finished unary call and finishes it.
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                        RpcMethod method,
                                        Clock::time_point start,
                                        const grpc::Status& status);
  void RecordRpc(RpcMethod method, Clock::time_point start,
                 grpc::StatusCode code);

  grpc::Status DoCreateGroup(const cgacct::v1::CreateGroupRequest& request,
                             cgacct::v1::Group* response);
  grpc::Status DoDeleteGroup(const cgacct::v1::DeleteGroupRequest& request,
                             cgacct::v1::DeleteGroupResponse* response);
  grpc::Status DoListGroups(const cgacct::v1::ListGroupsRequest& request,
                            cgacct::v1::ListGroupsResponse* response);
  grpc::Status DoSetLimits(const cgacct::v1::SetLimitsRequest& request,
                           cgacct::v1::Group* response);
  grpc::Status DoCharge(const cgacct::v1::ChargeRequest& request,
                        cgacct::v1::ChargeResponse* response);
  grpc::Status DoUncharge(const cgacct::v1::UnchargeRequest& request,
                          cgacct::v1::UnchargeResponse* response);
  grpc::Status DoGetStats(const cgacct::v1::GetStatsRequest& request,
                          cgacct::v1::GroupStats* response);
  grpc::Status DoReclaim(const cgacct::v1::ReclaimRequest& request,
                         cgacct::v1::ReclaimResponse* response);
  void DoGetEngineInfo(cgacct::v1::EngineInfo* response);

  // Checks path, nr_pages, kind, cpu and request_id of a Charge/Uncharge.
  grpc::Status ValidateChargeRequest(absl::string_view path, uint64_t nr_pages,
                                     int kind, std::optional<uint32_t> cpu,
                                     const std::string* request_id) const;
  // The body Charge and Uncharge share: validates the request (sets
  // *invalid and returns the error), then runs `call(path, nr_pages, kind,
  // cpu)` (the engine's Charge or Uncharge, returning a DedupAnswer) at most
  // once per request_id (request_dedup.h), stores its answer in *answer and
  // returns its status.
  template <typename Request, typename Call>
  grpc::Status ApplyPageRequest(const Request& request,
                                DedupFingerprint::Method method, Call&& call,
                                DedupAnswer* answer, bool* invalid);
  // The nr_pages, kind and cpu part of ValidateChargeRequest.
  grpc::Status ValidateChargeArgs(uint64_t nr_pages, int kind,
                                  std::optional<uint32_t> cpu) const;

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

  // Thread-safe on its own; only touched by calls carrying a request_id.
  RequestDedupCache dedup_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_ACCOUNTING_SERVICE_H_
