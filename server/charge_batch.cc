// ChargeBatch and ChargeStream (docs/DESIGN.md §4.6): many charges and uncharges
// per message, tuned for throughput.
//
// Per op the semantics are Charge/Uncharge's exactly (same validation order
// and messages, same engine call, same codes), minus request_id. What is
// saved is per-op overhead: a path is validated and resolved to a GroupHandle
// once per call (ChargeBatch) or once per stream (ChargeStream), and looked up
// again only when it differs from the previous op's; results are written into
// reused protobuf objects; the stream reactor keeps one request and two
// response buffers for its whole life.
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/group_handle.h"
#include "engine/group_path.h"
#include "server/accounting_service.h"
#include "server/status.h"
#include "server/wire.h"

namespace cgacct {

// `v1` below is cgacct::v1, the generated proto namespace.
namespace {

// Distinct paths a stream keeps handles for; past it the cache starts over
// (bounds the memory a client can make a stream hold).
constexpr size_t kMaxCachedPaths = 4096;

// A request or response buffer a stream keeps between messages is freed
// once used if its encoding outgrew this (so an idle stream that once carried
// a 4 MB batch does not keep 4 MB).
constexpr size_t kMaxRetainedMessageBytes = size_t{64} << 10;
// Responses are bounded per op (code, id, counts and a message of at most a
// few hundred bytes): their op count stands in for their size.
constexpr int kMaxRetainedResults = 256;

absl::Status TooManyOps(int nr_ops) {
  return absl::InvalidArgumentError(
      absl::StrCat("ops has ", nr_ops, " entries; at most ", kMaxBatchOps,
                   " per request (EngineInfo.max_batch_ops)"));
}

// Frees `message`'s memory (a swap with an empty one).
template <typename Message>
void FreeMessage(Message* message) {
  Message().Swap(message);
}

}  // namespace

// Applies ChargeOps to the engine, caching the GroupHandle of every path it
// has resolved. A cached handle whose group was deleted answers NOT_FOUND
// from the engine; the runner then forgets it, resolves the path again (it may
// name a re-created group) and retries once: a failed engine call changes
// nothing, so the retry cannot double-apply.
//
// Thread safety: thread-compatible; one per call or stream.
class AccountingService::ChargeOpRunner {
 public:
  // `caller`: who sends the ops (each distinct path is checked for
  // Access::kWrite once, when first resolved); must outlive the runner.
  ChargeOpRunner(AccountingService& service, const AuthCaller& caller)
      : service_(service), caller_(caller) {}

  // Fills `response` with one result per op of `request`, in order. The
  // caller has checked the op count against kMaxBatchOps.
  void Run(const v1::ChargeBatchRequest& request,
           v1::ChargeBatchResponse* response) {
    budget_ = service_.max_charge_pages_;
    auto* results = response->mutable_results();
    results->Clear();  // keeps the cleared OpResults for reuse by Add()
    results->Reserve(request.ops_size());
    for (int i = 0; i < request.ops_size(); ++i) {
      Apply(i, request.ops(i), results->Add());
    }
  }

 private:
  // The op's answer is `status` (not OK); a failed charge op is counted as
  // a failed Charge would be.
  void Fail(int index, const v1::ChargeOp& op, const absl::Status& status,
            v1::OpResult* result) {
    if (!op.uncharge()) service_.CountChargeAnswer(status);
    result->set_code(ToGrpcStatusCode(status));
    result->set_message(absl::StrCat("ops[", index, "]: ", status.message()));
  }

  // The cached handle of `path`, or null.
  const GroupHandle* Find(absl::string_view path) {
    if (last_ != nullptr && path == last_path_) return last_;
    auto it = cache_.find(path);
    if (it == cache_.end()) return nullptr;
    Remember(it->first, &it->second);
    return last_;
  }

  const GroupHandle* Insert(absl::string_view path, GroupHandle handle) {
    if (cache_.size() >= kMaxCachedPaths) Forget();
    auto it = cache_.emplace(std::string(path), handle).first;
    Remember(it->first, &it->second);
    return last_;
  }

  void Remember(const std::string& path, GroupHandle* handle) {
    last_path_.assign(path);
    last_ = handle;
  }

  void Forget() {
    cache_.clear();
    last_ = nullptr;
  }

  void Apply(int index, const v1::ChargeOp& op, v1::OpResult* result) {
    result->set_id(op.id());
    const absl::string_view path = op.path();
    const GroupHandle* handle = Find(path);
    // Charge/Uncharge's validation (the same checks, order and words):
    // path (once per distinct path; "/" is never charged directly, so it
    // is never cached), nr_pages, kind, cpu; then the group.
    if (handle == nullptr) {
      absl::Status s = ValidateGroupPath(path);
      if (s.ok()) s = RefuseRootCharge(path);
      // Access control before anything else can tell whether it exists;
      // a path stays cached only once it passed.
      if (s.ok() && service_.authorizer_ != nullptr)
        s = service_.authorizer_->Check(caller_, Access::kWrite, path);
      if (!s.ok()) return Fail(index, op, s, result);
    }
    const std::optional<uint32_t> cpu =
        op.has_cpu() ? std::optional<uint32_t>(op.cpu()) : std::nullopt;
    const PageKind kind = PageKindFromProto(op.kind());
    std::optional<int> engine_cpu;
    if (absl::Status s = service_.ValidatePageArgs(
            op.nr_pages(), kind, cpu, /*charge=*/!op.uncharge(), &engine_cpu);
        !s.ok()) {
      return Fail(index, op, s, result);
    }
    // The per-call cap is one budget for the whole request: each valid
    // charge op takes its pages from it, whatever the engine answers.
    if (!op.uncharge() && service_.max_charge_pages_ != 0) {
      if (op.nr_pages() > budget_) {
        return Fail(index, op,
                    absl::InvalidArgumentError(absl::StrCat(
                        "nr_pages ", op.nr_pages(), " exceeds the ", budget_,
                        " pages left of this request's per-call cap of ",
                        service_.max_charge_pages_,
                        " pages (--max_charge_pages, "
                        "EngineInfo.max_charge_pages)")),
                    result);
      }
      budget_ -= op.nr_pages();
    }
    if (handle == nullptr) {
      absl::StatusOr<GroupHandle> resolved =
          service_.engine_.ResolveGroup(path);
      if (!resolved.ok()) return Fail(index, op, resolved.status(), result);
      handle = Insert(path, *resolved);
    }
    absl::Status status = ApplyToEngine(*handle, op, kind, engine_cpu, result);
    if (status.code() == absl::StatusCode::kNotFound) {
      // The cached group was deleted: the path may name a new one.
      Forget();
      absl::StatusOr<GroupHandle> resolved =
          service_.engine_.ResolveGroup(path);
      if (!resolved.ok()) return Fail(index, op, resolved.status(), result);
      status =
          ApplyToEngine(*Insert(path, *resolved), op, kind, engine_cpu, result);
      if (status.code() == absl::StatusCode::kNotFound) {
        // Deleted again between the resolve and the call: the engine's
        // message names the handle's internal id; the client knows paths.
        Forget();
        status = absl::NotFoundError(absl::StrCat(
            "path ", QuotePath(path),
            ": no such group (deleted while this op was applied)"));
      }
    }
    if (!status.ok()) Fail(index, op, status, result);
  }

  absl::Status ApplyToEngine(GroupHandle handle, const v1::ChargeOp& op,
                             PageKind kind, std::optional<int> cpu,
                             v1::OpResult* result) {
    if (op.uncharge()) {
      absl::StatusOr<UnchargeResult> r =
          service_.engine_.Uncharge(handle, op.nr_pages(), kind, cpu);
      if (!r.ok()) return r.status();
      result->set_nr_pages(r->nr_pages);
      return absl::OkStatus();
    }
    absl::StatusOr<ChargeResult> r =
        service_.engine_.Charge(handle, op.nr_pages(), kind, cpu);
    if (!r.ok()) return r.status();
    result->set_nr_pages(r->nr_pages);
    result->set_throttle_us(DurationToMicros(r->throttle));
    return absl::OkStatus();
  }

  AccountingService& service_;
  const AuthCaller& caller_;
  // Pages the valid charge ops of the current request may still charge
  // (max_charge_pages per request; unused when that is 0).
  uint64_t budget_ = 0;
  absl::flat_hash_map<std::string, GroupHandle> cache_;
  // The entry of the previous op, so a run of ops on one path skips hashing.
  std::string last_path_;
  GroupHandle* last_ = nullptr;  // into cache_; null after any rehash risk
};

absl::Status AccountingService::CheckBatch(
    const v1::ChargeBatchRequest& request) const {
  if (request.ops_size() > static_cast<int>(kMaxBatchOps))
    return TooManyOps(request.ops_size());
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::ChargeBatch(
    grpc::CallbackServerContext* context, const v1::ChargeBatchRequest* request,
    v1::ChargeBatchResponse* response) {
  return Unary(context, RpcMethod::kChargeBatch, [&] {
    if (absl::Status s = CheckBatch(*request); !s.ok()) return s;
    absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
    if (!caller.ok()) return caller.status();
    ChargeOpRunner runner(*this, *caller);
    runner.Run(*request, response);
    return absl::OkStatus();
  });
}

// The ChargeStream reactor. One read and one write may be outstanding at
// once (gRPC's rule); requests are applied on the thread that completes the
// read, into whichever of the two response buffers is not on the wire.
//
//   read done -> apply into the free buffer ->
//     no write on the wire: write it, read the next request;
//     else: park it ("ready"), stop reading until the write completes.
//   write done -> a ready buffer: write it and resume reading;
//     else, if reads are over: Finish.
//
// So responses leave in request order, at most one waits, and the stream
// holds 1 request + 2 responses of memory whatever the client does; a buffer
// that grew past kMaxRetainedMessageBytes is freed once used.
//
// Limits (server/limits.h): the stream holds a stream permit of its caller's
// identity for its life (given by ChargeStream(), released with the reactor),
// and each request an in-flight permit from its read until its response has
// been written (`permits_`, one per response buffer). A request over the
// in-flight limit or over kMaxBatchOps ops ends the stream with its error after the earlier responses; it is not applied.
// Cancellation (or a broken connection) fails the outstanding read/write;
// the reactor then finishes once nothing is outstanding.
//
// Thread safety: gRPC may run OnReadDone and OnWriteDone concurrently; the
// flags below are guarded by mu_, and Start*/Finish are called without it.
class AccountingService::ChargeStreamReactor final
    : public grpc::ServerBidiReactor<v1::ChargeBatchRequest,
                                     v1::ChargeBatchResponse> {
 public:
  ChargeStreamReactor(AccountingService& service,
                      grpc::CallbackServerContext* context,
                      CallLimiter::Permit stream_permit, int64_t start_ns,
                      AuthCaller caller)
      : service_(service),
        context_(context),
        caller_(std::move(caller)),
        runner_(service, caller_),
        start_ns_(start_ns),
        stream_permit_(std::move(stream_permit)) {
    read_outstanding_ = true;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Half-close by the client, or the call is over (the read can fail
      // before OnCancel runs: ask the context which).
      const bool cancelled = context_->IsCancelled();
      bool finish;
      {
        absl::MutexLock l(&mu_);
        read_outstanding_ = false;
        reads_done_ = true;
        if (cancelled && status_.ok()) {
          status_ = absl::CancelledError("ChargeStream cancelled");
        }
        finish = ShouldFinishLocked();
      }
      if (finish) DoFinish();
      return;
    }
    absl::Status refused = service_.CheckBatch(request_);
    CallLimiter::Permit permit;
    if (refused.ok()) {
      ShedReason reason;
      absl::StatusOr<CallLimiter::Permit> admitted = service_.limiter_.Acquire(
          CallLimiter::Kind::kInFlight, CallerKey(context_), &reason);
      if (admitted.ok()) {
        permit = *std::move(admitted);
      } else {
        refused = admitted.status();
        service_.MarkShed(context_, reason);
      }
    }
    if (!refused.ok()) {
      FreeMessage(&request_);
      bool finish;
      {
        absl::MutexLock l(&mu_);
        read_outstanding_ = false;
        reads_done_ = true;
        if (status_.ok()) status_ = std::move(refused);
        finish = ShouldFinishLocked();
      }
      if (finish) DoFinish();
      return;
    }
    int buffer;
    {
      absl::MutexLock l(&mu_);
      buffer = 1 - writing_;  // never the one on the wire; never "ready"
      permits_[buffer] = std::move(permit);
    }
    runner_.Run(request_, &responses_[buffer]);
    // The request is done with; a big one is not kept while the stream idles
    // (the next read parses into a fresh message).
    if (request_.ByteSizeLong() > kMaxRetainedMessageBytes) {
      FreeMessage(&request_);
    }
    bool write = false;
    bool read = false;
    bool finish = false;
    {
      absl::MutexLock l(&mu_);
      read_outstanding_ = false;
      if (broken_) {
        reads_done_ = true;
        finish = ShouldFinishLocked();
      } else if (!write_outstanding_) {
        write_outstanding_ = true;
        writing_ = buffer;
        write = true;
        read_outstanding_ = read = true;
      } else {
        ready_ = buffer;  // resumed by OnWriteDone
      }
    }
    if (write) StartWrite(&responses_[buffer]);
    if (read) StartRead(&request_);
    if (finish) DoFinish();
  }

  void OnWriteDone(bool ok) override {
    bool write = false;
    bool read = false;
    bool finish = false;
    int buffer = -1;
    {
      absl::MutexLock l(&mu_);
      write_outstanding_ = false;
      // The buffer just written: nobody fills it before the next write
      // moves `writing_` (below, or in a later OnReadDone), so it is ours.
      permits_[writing_].Release();
      if (responses_[writing_].results_size() > kMaxRetainedResults) {
        FreeMessage(&responses_[writing_]);
      }
      if (!ok) {
        // The call is dead: drop what waits; an outstanding read fails too.
        broken_ = true;
        ready_ = -1;
        if (!read_outstanding_) reads_done_ = true;
        if (status_.ok()) {
          status_ = absl::CancelledError("ChargeStream: write failed");
        }
      } else if (ready_ >= 0) {
        buffer = writing_ = ready_;
        ready_ = -1;
        write_outstanding_ = write = true;
        if (!reads_done_) read_outstanding_ = read = true;
      }
      finish = ShouldFinishLocked();
    }
    if (write) StartWrite(&responses_[buffer]);
    if (read) StartRead(&request_);
    if (finish) DoFinish();
  }

  void OnCancel() override {
    absl::MutexLock l(&mu_);
    broken_ = true;
    if (status_.ok()) {
      status_ = absl::CancelledError("ChargeStream cancelled");
    }
  }

  void OnDone() override { delete this; }

 private:
  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || read_outstanding_ || write_outstanding_ ||
        ready_ >= 0) {
      return false;
    }
    finished_ = true;
    return true;
  }

  void DoFinish() {
    grpc::Status status;
    {
      absl::MutexLock l(&mu_);
      status = ToGrpcStatus(status_);
    }
    // Recorded before Finish so a client that sees the end sees it counted.
    service_.RecordRpc(RpcMethod::kChargeStream, start_ns_,
                       status.error_code());
    Finish(status);
  }

  AccountingService& service_;
  grpc::CallbackServerContext* const context_;
  const AuthCaller caller_;  // authenticated when the stream started
  ChargeOpRunner runner_;  // touched only by the thread applying a request
  const int64_t start_ns_;                // service_.clock_
  const CallLimiter::Permit stream_permit_;  // released when the reactor goes
  v1::ChargeBatchRequest request_;        // owned by the outstanding read
  v1::ChargeBatchResponse responses_[2];  // see `writing_` and `ready_`

  absl::Mutex mu_;
  bool read_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool write_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;  // no more requests
  bool broken_ ABSL_GUARDED_BY(mu_) = false;      // cancelled or write failed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int writing_ ABSL_GUARDED_BY(mu_) = 1;  // buffer last handed to StartWrite
  int ready_ ABSL_GUARDED_BY(mu_) = -1;   // built, waiting for the wire
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  // The in-flight permit of the request each response buffer answers, held
  // until that response is written (or the reactor goes). Releasing one
  // takes the limiter's leaf mutex under mu_.
  CallLimiter::Permit permits_[2] ABSL_GUARDED_BY(mu_);
};

// A ChargeStream refused before it started (shed, or access control):
// finishes at once.
class ShedStreamReactor final
    : public grpc::ServerBidiReactor<v1::ChargeBatchRequest,
                                     v1::ChargeBatchResponse> {
 public:
  explicit ShedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

grpc::ServerBidiReactor<v1::ChargeBatchRequest, v1::ChargeBatchResponse>*
AccountingService::ChargeStream(grpc::CallbackServerContext* context) {
  const int64_t start_ns = clock_.NowNs();
  ShedReason reason;
  absl::StatusOr<CallLimiter::Permit> permit = limiter_.Acquire(
      CallLimiter::Kind::kStream, CallerKey(context), &reason);
  if (!permit.ok()) {
    MarkShed(context, reason);
    const grpc::Status status = ToGrpcStatus(permit.status());
    RecordRpc(RpcMethod::kChargeStream, start_ns, status.error_code());
    return new ShedStreamReactor(status);
  }
  // Access control after shedding: an unauthenticated flood is shed under
  // the anonymous identity's limits.
  absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
  if (!caller.ok()) {
    const grpc::Status status = ToGrpcStatus(caller.status());
    RecordRpc(RpcMethod::kChargeStream, start_ns, status.error_code());
    return new ShedStreamReactor(status);
  }
  return new ChargeStreamReactor(*this, context, *std::move(permit), start_ns,
                                 *std::move(caller));
}

}  // namespace cgacct
