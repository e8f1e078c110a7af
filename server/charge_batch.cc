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

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/group_handle.h"
#include "engine/group_path.h"
#include "engine/remote_stock.h"
#include "server/accounting_service.h"
#include "server/request_dedup.h"
#include "server/state_store.h"
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
  // `identity`: the caller's (CallerKey), owner of the sessions ops name;
  // must outlive the runner.
  ChargeOpRunner(AccountingService& service, const AuthCaller& caller,
                 const std::string& identity)
      : service_(service), caller_(caller), identity_(identity) {}

  // Fills `response` with one result per op of `request`, in order, from
  // op *next_op (0: a new request). The caller has checked the op count
  // against kMaxBatchOps. Inside a RemoteDrainDeferral::Scope, an op whose
  // charge would wait for sessions' drain answers stops the run: nothing
  // of it applied, *next_op is its index, and the result is
  // IsRemoteDrainDeferred(); calling Run again (outside a Scope) with the
  // same request, response and *next_op, and `resume` true, resumes there
  // (that op's charge inside a RemoteDrainDeferral::Resume). Otherwise OK
  // and *next_op is 0.
  // `abort` (not OK; with `resume`): the ops from *next_op on are
  // answered with it instead of applied.
  absl::Status Run(const v1::ChargeBatchRequest& request,
                   v1::ChargeBatchResponse* response, int* next_op,
                   bool resume, const absl::Status& abort = absl::OkStatus()) {
    auto* results = response->mutable_results();
    if (*next_op == 0) {
      budget_ = service_.max_charge_pages_;
      results->Clear();  // keeps the cleared OpResults for reuse by Add()
      results->Reserve(request.ops_size());
    }
    if (ABSL_PREDICT_FALSE(resume && !abort.ok())) {
      for (int i = *next_op; i < request.ops_size(); ++i) {
        v1::OpResult* result =
            i < results->size() ? results->Mutable(i) : results->Add();
        result->set_id(request.ops(i).id());
        Fail(i, request.ops(i), abort, result);
      }
      *next_op = 0;
      return absl::OkStatus();
    }
    for (int i = *next_op; i < request.ops_size(); ++i) {
      v1::OpResult* result =
          i < results->size() ? results->Mutable(i) : results->Add();
      bool applied;
      if (ABSL_PREDICT_FALSE(resume && i == *next_op)) {
        RemoteDrainDeferral::Resume resumed;
        applied = Apply(i, request.ops(i), result);
      } else {
        applied = Apply(i, request.ops(i), result);
      }
      if (ABSL_PREDICT_FALSE(!applied)) {
        *next_op = i;
        return RemoteDrainDeferredError(request.ops(i).path());
      }
    }
    *next_op = 0;
    return absl::OkStatus();
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

  // False: the op was deferred (see Run), nothing of it applied.
  bool Apply(int index, const v1::ChargeOp& op, v1::OpResult* result) {
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
      if (!s.ok()) {
        Fail(index, op, s, result);
        return true;
      }
    }
    const std::optional<uint32_t> cpu =
        op.has_cpu() ? std::optional<uint32_t>(op.cpu()) : std::nullopt;
    const PageKind kind = PageKindFromProto(op.kind());
    std::optional<int> engine_cpu;
    if (absl::Status s = service_.ValidatePageArgs(
            op.nr_pages(), kind, cpu, /*charge=*/!op.uncharge(), &engine_cpu);
        !s.ok()) {
      Fail(index, op, s, result);
      return true;
    }
    // The per-call cap is one budget for the whole request: each valid
    // charge op takes its pages from it, whatever the engine answers.
    if (!op.uncharge() && service_.max_charge_pages_ != 0) {
      if (op.nr_pages() > budget_) {
        Fail(index, op,
             absl::InvalidArgumentError(absl::StrCat(
                 "nr_pages ", op.nr_pages(), " exceeds the ", budget_,
                 " pages left of this request's per-call cap of ",
                 service_.max_charge_pages_,
                 " pages (--max_charge_pages, EngineInfo.max_charge_pages)")),
             result);
        return true;
      }
      budget_ -= op.nr_pages();
    }
    if (handle == nullptr) {
      absl::StatusOr<GroupHandle> resolved =
          service_.engine_.ResolveGroup(path);
      if (!resolved.ok()) {
        Fail(index, op, resolved.status(), result);
        return true;
      }
      handle = Insert(path, *resolved);
    }
    session_refused_ = false;
    absl::Status status = ApplyToEngine(*handle, op, kind, engine_cpu, result);
    if (status.code() == absl::StatusCode::kNotFound && !session_refused_) {
      // The cached group was deleted: the path may name a new one.
      Forget();
      absl::StatusOr<GroupHandle> resolved =
          service_.engine_.ResolveGroup(path);
      if (!resolved.ok()) {
        Fail(index, op, resolved.status(), result);
        return true;
      }
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
    if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(status))) {
      // Run again later: the op takes its pages from the budget then.
      if (!op.uncharge() && service_.max_charge_pages_ != 0)
        budget_ += op.nr_pages();
      return false;
    }
    if (!status.ok()) Fail(index, op, status, result);
    return true;
  }

  absl::Status ApplyToEngine(GroupHandle handle, const v1::ChargeOp& op,
                             PageKind kind, std::optional<int> cpu,
                             v1::OpResult* result) {
    if (!op.has_session_id()) return ApplyUnowned(handle, op, kind, cpu, result);
    // In a session's name (server/session_registry.h): the session's own
    // refusals are not a deleted group's NOT_FOUND (no retry).
    absl::StatusOr<SessionRegistry::Op> session_op =
        service_.sessions_->BeginOp(identity_, op.session_id(), handle,
                                    op.path(), kind, op.nr_pages(),
                                    /*charge=*/!op.uncharge());
    if (!session_op.ok()) {
      session_refused_ = true;
      return session_op.status();
    }
    absl::Status status = ApplyUnowned(handle, op, kind, cpu, result);
    service_.sessions_->EndOp(*session_op, status.ok());
    return status;
  }

  absl::Status ApplyUnowned(GroupHandle handle, const v1::ChargeOp& op,
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
  const std::string& identity_;
  // The last ApplyToEngine() failed in the session's checks, not the engine.
  bool session_refused_ = false;
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
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  // Owns what the body needs, so that a call deferred to a waiting thread
  // (Unary's kCharging) resumes with the same runner and progress.
  struct BatchCall {
    BatchCall(AccountingService& service, AuthCaller who, std::string key)
        : caller(std::move(who)),
          identity(std::move(key)),
          runner(service, caller, identity) {}
    const AuthCaller caller;
    const std::string identity;
    ChargeOpRunner runner;  // refers to caller and identity
    BatchProgress progress;
  };
  return Unary<v1::ChargeBatchRequest, v1::ChargeBatchResponse>(
      context, RpcMethod::kChargeBatch, request_bytes, response_bytes,
      [this, context, call = std::unique_ptr<BatchCall>()](
          const v1::ChargeBatchRequest& request,
          v1::ChargeBatchResponse* response) mutable -> absl::Status {
        if (call == nullptr) {
          if (absl::Status s = CheckBatch(request); !s.ok()) return s;
          absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
          if (!caller.ok()) return caller.status();
          call = std::make_unique<BatchCall>(*this, *std::move(caller),
                                             CallerKey(context));
        } else if (call->progress.deferred) {
          // Queued past its deadline, or cancelled: the ops not applied
          // yet are answered with that (a keyed batch still completes).
          call->progress.abort = CheckStillWanted(*context);
        }
        return RunBatch(call->runner, call->identity, request, response,
                        &call->progress);
      },
      UnaryMode::kCharging);
}

// The idempotency_key's checks and batch_dedup_.Begin(): OK with
// progress->keyed set when the ops are to be applied; OK without it when
// `response` holds the replayed answer; an error otherwise.
absl::Status AccountingService::BeginKeyedBatch(
    const std::string& identity, const v1::ChargeBatchRequest& request,
    v1::ChargeBatchResponse* response, BatchProgress* progress) {
  const std::string& key = request.idempotency_key();
  progress->begun = true;
  if (key.empty())
    return absl::InvalidArgumentError(
        "idempotency_key must not be empty when present");
  if (key.size() > kMaxRequestIdBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("idempotency_key is ", key.size(), " bytes; at most ",
                     kMaxRequestIdBytes, " allowed"));
  // What a retry must repeat: the ops, byte for byte.
  v1::ChargeBatchRequest ops_only;
  *ops_only.mutable_ops() = request.ops();
  const uint64_t digest = StableDigest(ops_only.SerializeAsString());
  // The scope: the generation of each distinct group the ops name, in
  // first-use order (0 for one that does not exist), so a batch naming a
  // group re-created since is a new request.
  uint64_t scope = StableDigest("");
  absl::flat_hash_map<absl::string_view, bool> seen;
  for (const v1::ChargeOp& op : request.ops()) {
    if (!seen.emplace(op.path(), true).second) continue;
    absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(op.path());
    const uint64_t generation = handle.ok() ? GenerationOf(handle->id()) : 0;
    scope = StableDigest(
        absl::string_view(reinterpret_cast<const char*>(&generation),
                          sizeof(generation)),
        scope);
  }
  DedupFingerprint fingerprint;
  fingerprint.method = DedupFingerprint::Method::kBatch;
  fingerprint.path_hash = digest;
  fingerprint.nr_pages = static_cast<uint64_t>(request.ops_size());
  const std::string dedup_key = DedupKey(identity, scope, key);
  const RequestDedupCache::BeginResult begin =
      batch_dedup_.Begin(dedup_key, fingerprint);
  switch (begin.verdict) {
    case RequestDedupCache::Verdict::kReplay:
      if (!response->ParseFromString(begin.answer.body)) {
        return absl::InternalError(absl::StrCat(
            "idempotency_key \"", absl::CHexEscape(key), "\": the stored response is corrupt"));
      }
      response->set_replayed(true);
      return absl::OkStatus();  // not keyed: nothing to apply
    case RequestDedupCache::Verdict::kMismatch:
      return absl::InvalidArgumentError(absl::StrCat(
          "idempotency_key \"", absl::CHexEscape(key),
          "\" was already used for a different request (its ops differ)"));
    case RequestDedupCache::Verdict::kInFlight:
      return absl::AbortedError(absl::StrCat(
          "idempotency_key \"", absl::CHexEscape(key), "\" is in flight; retry"));
    case RequestDedupCache::Verdict::kProceed:
      break;
  }
  progress->keyed = true;
  progress->dedup_key = dedup_key;
  progress->ticket = begin.ticket;
  progress->scope = scope;
  progress->digest = digest;
  return absl::OkStatus();
}

absl::Status AccountingService::RunBatch(ChargeOpRunner& runner,
                                         const std::string& identity,
                                         const v1::ChargeBatchRequest& request,
                                         v1::ChargeBatchResponse* response,
                                         BatchProgress* progress) {
  absl::Status status =
      RunBatchSteps(runner, identity, request, response, progress);
  if (ABSL_PREDICT_TRUE(!IsRemoteDrainDeferred(status))) {
    *progress = BatchProgress();
  } else {
    progress->deferred = true;
  }
  return status;
}

absl::Status AccountingService::RunBatchSteps(
    ChargeOpRunner& runner, const std::string& identity,
    const v1::ChargeBatchRequest& request, v1::ChargeBatchResponse* response,
    BatchProgress* progress) {
  if (!request.has_idempotency_key()) {
    if (absl::Status s = runner.Run(request, response, &progress->next_op,
                                    progress->deferred, progress->abort);
        !s.ok())
      return s;  // deferred
    response->set_replayed(false);
    return absl::OkStatus();
  }
  const std::string& key = request.idempotency_key();
  if (!progress->begun) {
    absl::Status begun =
        BeginKeyedBatch(identity, request, response, progress);
    if (!begun.ok() || !progress->keyed) return begun;  // refused, replayed
  }
  if (absl::Status s = runner.Run(request, response, &progress->next_op,
                                  progress->deferred, progress->abort);
      !s.ok())
    return s;  // deferred: the entry stays in flight
  response->set_replayed(false);
  DedupAnswer answer;
  answer.body = response->SerializeAsString();
  StoredRequest stored;
  stored.identity = identity;
  stored.request_id = key;
  stored.scope = progress->scope;
  stored.method = static_cast<int>(DedupFingerprint::Method::kBatch);
  stored.nr_pages = static_cast<uint64_t>(request.ops_size());
  stored.digest = progress->digest;
  stored.body = answer.body;
  const absl::Time now = absl::Now();
  stored.arrived_unix_ns = absl::ToUnixNanos(now);
  if (absl::Status s = store_->PutRequest(
          stored, absl::ToUnixNanos(now - batch_dedup_.window()),
          batch_dedup_.capacity());
      !s.ok()) {
    rpc_metrics_.RecordStateStoreError();
  }
  batch_dedup_.Complete(progress->dedup_key, progress->ticket,
                        std::move(answer));
  return absl::OkStatus();
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
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ChargeStreamReactor(AccountingService& service,
                      grpc::CallbackServerContext* context,
                      CallLimiter::Permit stream_permit, int64_t start_ns,
                      AuthCaller caller)
      : service_(service),
        context_(context),
        caller_(std::move(caller)),
        identity_(AccountingService::CallerKey(context)),
        runner_(service, caller_, identity_),
        start_ns_(start_ns),
        stream_permit_(std::move(stream_permit)) {
    const bool shutting_down = !service_.RegisterStream(this);
    {
      absl::MutexLock l(&mu_);
      if (shutting_down) {
        // Shutdown began before this stream was registered: nothing read,
        // nothing applied.
        shutting_down_ = true;
        shutdown_end_ = true;
        finished_ = true;
      } else {
        read_outstanding_ = true;
      }
    }
    if (shutting_down) {
      DoFinish();
      return;
    }
    StartRead(&request_bytes_);
    // A BeginShutdown() that reached this stream before the read was
    // started left the finishing to here (Finish must not precede it).
    bool finish;
    {
      absl::MutexLock l(&mu_);
      started_ = true;
      finish = shutting_down_ && ShouldFinishLocked();
    }
    if (finish) DoFinish();
  }

  // BeginShutdown(): stop reading; the requests already read are applied
  // and answered, then the stream ends UNAVAILABLE saying how many were
  // (or OK if the client had already half-closed).
  void OnServerShutdown() {
    bool finish;
    {
      absl::MutexLock l(&mu_);
      if (finished_) return;
      shutting_down_ = true;
      if (!reads_done_ && status_.ok()) shutdown_end_ = true;
      if (!started_) return;  // the constructor finishes (after StartRead)
      finish = ShouldFinishLocked();
    }
    if (finish) DoFinish();
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
        if (cancelled && status_.ok() && !finished_) {
          status_ = absl::CancelledError("ChargeStream cancelled");
        }
        finish = ShouldFinishLocked();
      }
      if (finish) DoFinish();
      return;
    }
    // The checks that need no lock first (they change nothing). The bytes
    // are parsed here (not by gRPC, which would report a failed read, like
    // a half-close): bytes that are no ChargeBatchRequest end the stream.
    absl::Status undecodable = ParseRequest(request_bytes_, &request_);
    request_bytes_.Clear();
    absl::Status refused =
        undecodable.ok() ? service_.CheckBatch(request_) : undecodable;
    CallLimiter::Permit permit;
    ShedReason reason{};
    bool shed = false;
    if (refused.ok()) {
      absl::StatusOr<CallLimiter::Permit> admitted = service_.limiter_.Acquire(
          CallLimiter::Kind::kInFlight, CallerKey(context_), &reason);
      if (admitted.ok()) {
        permit = *std::move(admitted);
      } else {
        refused = admitted.status();
        shed = true;
      }
    }
    int buffer = 0;
    bool stop = false;
    bool stop_finish = false;
    bool refused_ends = false;
    {
      absl::MutexLock l(&mu_);
      read_outstanding_ = false;
      if (finished_ || shutting_down_ || broken_) {
        // Read after shutdown began (or the call broke): not applied.
        reads_done_ = true;
        stop = true;
      } else if (context_->deadline() <= std::chrono::system_clock::now()) {
        // Checked before anything of this request changes.
        reads_done_ = true;
        status_ = absl::DeadlineExceededError(absl::StrCat(
            "ChargeStream deadline passed before request ", applied_ + 1,
            " was applied; the ", applied_,
            " requests answered before it were applied"));
        stop = true;
      } else if (!undecodable.ok()) {
        reads_done_ = true;
        if (status_.ok()) {
          status_ = absl::InvalidArgumentError(absl::StrCat(
              "request ", applied_ + 1, ": ", undecodable.message(), "; the ",
              applied_,
              " requests answered before it were applied, it was not"));
        }
        stop = true;
      } else if (!refused.ok()) {
        reads_done_ = true;
        if (status_.ok()) status_ = std::move(refused);
        stop = true;
        refused_ends = true;
      } else {
        applying_ = true;
        buffer = 1 - writing_;  // never the one on the wire; never "ready"
        permits_[buffer] = std::move(permit);
      }
      if (stop) stop_finish = ShouldFinishLocked();
    }
    if (stop) {
      // The trailer goes before Finish (DoFinish below).
      if (refused_ends && shed) service_.MarkShed(context_, reason);
      FreeMessage(&request_);
      if (stop_finish) DoFinish();
      return;
    }
    ApplyAndAnswer(buffer, /*may_defer=*/true);
  }

  // Applies request_ into responses_[buffer] (applying_ is set), then sends
  // or parks the response as the class comment says. `may_defer`: on a
  // gRPC callback thread; a charge op that would wait for sessions' drain
  // answers hands the rest of the request to the service's DrainWaitPool
  // (applying_ stays set meanwhile, so the stream neither reads nor
  // finishes), which calls this again with may_defer false.
  void ApplyAndAnswer(int buffer, bool may_defer) {
    absl::Status run;
    {
      RemoteDrainDeferral::Scope no_wait(/*enabled=*/may_defer);
      run = service_.RunBatch(runner_, identity_, request_,
                              &responses_[buffer], &progress_);
    }
    if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(run))) {
      service_.drain_wait_pool_.Run(
          [this, buffer] { ApplyAndAnswer(buffer, /*may_defer=*/false); });
      return;
    }
    // The wire form of the response, while its buffer is ours (not on the
    // wire, not parked).
    if (run.ok()) {
      run = SerializeResponse(responses_[buffer], &response_bytes_[buffer]);
    }
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
      applying_ = false;
      if (run.ok()) ++applied_;
      if (!run.ok()) {
        // A bad or conflicting idempotency_key: nothing of this request was
        // applied; the stream ends with it after the earlier responses.
        reads_done_ = true;
        permits_[buffer].Release();
        if (status_.ok()) {
          status_ = absl::Status(
              run.code(), absl::StrCat("request ", applied_ + 1, ": ",
                                       run.message()));
        }
      } else if (broken_) {
        reads_done_ = true;
      } else if (!write_outstanding_) {
        write_outstanding_ = true;
        writing_ = buffer;
        write = true;
        if (!shutting_down_) {
          read_outstanding_ = read = true;
        } else {
          reads_done_ = true;
        }
      } else {
        ready_ = buffer;  // resumed by OnWriteDone
      }
      finish = ShouldFinishLocked();
    }
    if (write) StartWrite(&response_bytes_[buffer]);
    if (read) StartRead(&request_bytes_);
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
      response_bytes_[writing_].Clear();
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
        if (!reads_done_ && !shutting_down_) {
          read_outstanding_ = read = true;
        } else if (!read_outstanding_) {
          reads_done_ = true;
        }
      }
      finish = ShouldFinishLocked();
    }
    if (write) StartWrite(&response_bytes_[buffer]);
    if (read) StartRead(&request_bytes_);
    if (finish) DoFinish();
  }

  void OnCancel() override {
    absl::MutexLock l(&mu_);
    broken_ = true;
    if (status_.ok() && !finished_) {
      status_ = absl::CancelledError("ChargeStream cancelled");
    }
  }

  void OnDone() override {
    service_.UnregisterStream(this);
    delete this;
  }

 private:
  // Whether to Finish now (true once). Not while a request is being
  // applied or a response waits for the wire; a read may still be
  // outstanding only after shutdown began (Finish fails it: nothing read
  // after that point is applied).
  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || applying_ || write_outstanding_ || ready_ >= 0) {
      return false;
    }
    if (!reads_done_ && !shutting_down_) return false;
    if (read_outstanding_ && !shutting_down_) return false;
    finished_ = true;
    return true;
  }

  void DoFinish() {
    grpc::Status status;
    {
      absl::MutexLock l(&mu_);
      if (shutdown_end_ && status_.ok()) {
        status_ = absl::UnavailableError(absl::StrCat(
            "cgacctd is shutting down: the ", applied_,
            " requests answered on this stream were applied, nothing sent "
            "after them was; retry those on a new stream"));
      }
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
  const std::string identity_;  // CallerKey(context_)
  ChargeOpRunner runner_;  // touched only by the thread applying a request
  BatchProgress progress_;  // likewise
  const int64_t start_ns_;                // service_.clock_
  const CallLimiter::Permit stream_permit_;  // released when the reactor goes
  grpc::ByteBuffer request_bytes_;           // owned by the outstanding read
  v1::ChargeBatchRequest request_;           // parsed from it by OnReadDone
  v1::ChargeBatchResponse responses_[2];  // see `writing_` and `ready_`
  grpc::ByteBuffer response_bytes_[2];    // responses_[i] serialized

  absl::Mutex mu_;
  bool read_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool write_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool applying_ ABSL_GUARDED_BY(mu_) = false;    // runner_ is running
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;  // no more requests
  bool broken_ ABSL_GUARDED_BY(mu_) = false;      // cancelled or write failed
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;  // BeginShutdown() seen
  bool shutdown_end_ ABSL_GUARDED_BY(mu_) = false;   // end UNAVAILABLE
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the first read was started
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;  // requests applied
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
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit ShedStreamReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

void AccountingService::NotifyStreamShutdown(ChargeStreamReactor* stream) {
  stream->OnServerShutdown();
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
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
