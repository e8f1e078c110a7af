#include "server/accounting_service.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "engine/validate.h"
#include "absl/time/time.h"
#include "server/caller_identity.h"
#include "server/status.h"
#include "server/wire.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;

constexpr uint64_t kMaxLimitBytes = std::numeric_limits<uint64_t>::max();

// request_id: what only the service sees.
absl::Status ValidateRequestId(const std::string& request_id) {
  if (request_id.empty())
    return absl::InvalidArgumentError(
        "request_id must not be empty when present");
  if (request_id.size() > kMaxRequestIdBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("request_id is ", request_id.size(), " bytes; at most ",
                     kMaxRequestIdBytes, " allowed"));
  return absl::OkStatus();
}

// A ListGroups page_token is empty or the last path of a previous page of
// the same listing: a valid group path strictly below `path` (it need not
// exist any more). Checked after `path` itself.
absl::Status ValidatePageToken(absl::string_view token, absl::string_view path) {
  if (token.empty()) return absl::OkStatus();
  if (absl::Status s = ValidateGroupPath(token, "page_token"); !s.ok())
    return s;
  const bool below = path == "/" ? token != "/"
                                 : token.size() > path.size() + 1 &&
                                       absl::StartsWith(token, path) &&
                                       token[path.size()] == '/';
  if (!below)
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token ", QuotePath(token), " is not below path ",
        QuotePath(path),
        ": pass the next_page_token of the previous page of this listing"));
  return absl::OkStatus();
}

std::optional<FlushMode> FlushModeFromProto(int mode) {
  switch (mode) {
    case v1::FLUSH_MODE_UNSPECIFIED:
    case v1::FLUSH_MODE_EXACT:
      return FlushMode::kExact;
    case v1::FLUSH_MODE_THRESHOLD:
      return FlushMode::kThreshold;
    case v1::FLUSH_MODE_NONE:
      return FlushMode::kNone;
    default:
      return std::nullopt;
  }
}

DedupAnswer AnswerWithStatus(absl::Status status) {
  DedupAnswer answer;
  answer.status = std::move(status);
  return answer;
}

DedupFingerprint MakeFingerprint(DedupFingerprint::Method method,
                                 absl::string_view path, uint64_t nr_pages,
                                 int kind, std::optional<uint32_t> cpu) {
  DedupFingerprint fingerprint;
  fingerprint.method = method;
  fingerprint.SetPath(path);
  fingerprint.nr_pages = nr_pages;
  fingerprint.kind = kind;
  fingerprint.cpu = cpu;
  return fingerprint;
}


}  // namespace

namespace {

RequestDedupCache::Options DedupOptions(
    const AccountingServiceOptions& options) {
  RequestDedupCache::Options dedup = options.dedup;
  if (dedup.clock == nullptr) dedup.clock = options.clock;
  return dedup;
}

RequestDedupCache::Options BatchDedupOptions(
    const AccountingServiceOptions& options) {
  RequestDedupCache::Options dedup = options.batch_dedup;
  if (dedup.clock == nullptr) dedup.clock = options.clock;
  return dedup;
}

}  // namespace

AccountingService::AccountingService(Engine& engine, RpcMetrics& rpc_metrics,
                                     AccountingServiceOptions options)
    : engine_(engine),
      rpc_metrics_(rpc_metrics),
      page_size_bytes_(engine.page_size_bytes()),
      page_counter_max_(engine.page_counter_max()),
      nr_cpus_(engine.nr_cpus()),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()),
      events_hub_(options.events_hub),
      max_charge_pages_(options.max_charge_pages),
      max_message_bytes_(options.max_message_bytes),
      max_concurrent_streams_per_connection_(
          options.max_concurrent_streams_per_connection),
      limiter_(options.limits),
      authorizer_(options.authorizer),
      dedup_(DedupOptions(options)),
      batch_dedup_(BatchDedupOptions(options)),
      owned_store_(options.store == nullptr ? std::make_unique<MemoryStateStore>()
                                            : nullptr),
      store_(options.store != nullptr ? options.store : owned_store_.get()),
      sessions_(std::make_unique<SessionRegistry>(engine, options.sessions)),
      drain_wait_pool_(options.sessions.drain_wait_threads) {}

absl::StatusOr<RestoreReport> AccountingService::Restore() {
  RestoreReport report;
  absl::MutexLock l(&config_mu_);
  // Entries older than the window are dropped by the store.
  const int64_t since_ns =
      absl::ToUnixNanos(absl::Now() - dedup_.window());
  absl::StatusOr<StateStore::Snapshot> snapshot = store_->Load(since_ns);
  if (!snapshot.ok()) return snapshot.status();
  for (const StoredGroup& group : snapshot->groups) {
    LimitsUpdate update;
    update.max_pages = group.limits.max_pages;
    update.high_pages = group.limits.high_pages;
    update.min_pages = group.limits.min_pages;
    update.low_pages = group.limits.low_pages;
    absl::StatusOr<GroupInfo> created = engine_.CreateGroup(group.path, update);
    if (!created.ok()) {
      return absl::InternalError(
          absl::StrCat("restoring group ", group.path, " (generation ",
                       group.generation, "): ", created.status().message()));
    }
    absl::MutexLock g(&generations_mu_);
    generations_[created->id] = group.generation;
    ++report.groups;
  }
  report.requests = RestoreRequests(snapshot->requests);
  return report;
}

std::string AccountingService::CallerKey(
    const grpc::ServerContextBase* context) {
  return CallerIdentity(context);
}

void AccountingService::MarkShed(grpc::ServerContextBase* context,
                                 ShedReason reason) {
  rpc_metrics_.RecordShed(reason);
  context->AddTrailingMetadata(kShedMetadataKey, ShedReasonName(reason));
}

absl::Status AccountingService::ValidateBatchPages(uint64_t batch_pages,
                                                   uint64_t nr_pages) const {
  if (batch_pages < nr_pages)
    return absl::InvalidArgumentError(
        absl::StrCat("batch_pages ", batch_pages, " is below nr_pages ",
                     nr_pages, " (a batch is at least what is needed)"));
  if (!NrPagesValid(batch_pages, page_counter_max_))
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_pages ", batch_pages, " out of range [1, ", page_counter_max_,
        "]"));
  return CheckChargeCap(batch_pages, "batch_pages");
}

absl::Status AccountingService::CheckChargeCap(uint64_t nr_pages,
                                               absl::string_view field) const {
  if (max_charge_pages_ == 0 || nr_pages <= max_charge_pages_)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " ", nr_pages,
      " pages exceed the per-call cap of ", max_charge_pages_,
      " pages (--max_charge_pages, EngineInfo.max_charge_pages)"));
}

// ---------------------------------------------------------------------------
// Conversions

uint64_t AccountingService::LimitBytesToPages(uint64_t bytes) const {
  if (bytes == kMaxLimitBytes) return page_counter_max_;
  return std::min(bytes / page_size_bytes_, page_counter_max_);
}

uint64_t AccountingService::LimitPagesToBytes(uint64_t pages) const {
  // page_counter_max() * page_size <= LONG_MAX: no overflow below "max".
  if (pages >= page_counter_max_) return kMaxLimitBytes;
  return pages * page_size_bytes_;
}

LimitsUpdate AccountingService::LimitsFromProto(
    const v1::Limits& limits) const {
  LimitsUpdate update;
  if (limits.has_max_bytes()) {
    update.max_pages = LimitBytesToPages(limits.max_bytes());
  }
  if (limits.has_high_bytes()) {
    update.high_pages = LimitBytesToPages(limits.high_bytes());
  }
  if (limits.has_min_bytes()) {
    update.min_pages = LimitBytesToPages(limits.min_bytes());
  }
  if (limits.has_low_bytes()) {
    update.low_pages = LimitBytesToPages(limits.low_bytes());
  }
  return update;
}

void AccountingService::LimitsToProto(const Limits& limits,
                                      v1::Limits* out) const {
  out->set_max_bytes(LimitPagesToBytes(limits.max_pages));
  out->set_high_bytes(LimitPagesToBytes(limits.high_pages));
  out->set_min_bytes(LimitPagesToBytes(limits.min_pages));
  out->set_low_bytes(LimitPagesToBytes(limits.low_pages));
}

void AccountingService::GroupToProto(const GroupInfo& group,
                                     v1::Group* out) const {
  out->set_path(group.path);
  out->set_id(group.id);
  LimitsToProto(group.limits, out->mutable_limits());
}

// ---------------------------------------------------------------------------
// Plumbing

absl::Status AccountingService::CheckCallable(
    const grpc::ServerContextBase& context) const {
  if (shutting_down_.load(std::memory_order_relaxed)) {
    return absl::UnavailableError(
        "cgacctd is shutting down; nothing was applied: retry (with the same "
        "request_id) once it is back or on another server");
  }
  if (context.deadline() <= std::chrono::system_clock::now()) {
    return absl::DeadlineExceededError(
        "the call's deadline passed before it was handled; nothing was "
        "applied");
  }
  return absl::OkStatus();
}

void AccountingService::BeginShutdown() {
  shutting_down_.store(true, std::memory_order_relaxed);
  // Session streams end UNAVAILABLE; the reaper stops (nothing is returned:
  // usage does not outlive the process).
  sessions_->Shutdown();
  absl::MutexLock l(&streams_mu_);
  streams_shut_ = true;
  // Each stream is called unlocked (it may Finish); UnregisterStream()
  // waits while it is the one being called, so it stays alive.
  std::vector<ChargeStreamReactor*> streams(streams_.begin(), streams_.end());
  for (ChargeStreamReactor* stream : streams) {
    if (!streams_.contains(stream)) continue;
    calling_ = stream;
    calling_thread_ = std::this_thread::get_id();
    streams_mu_.Unlock();
    NotifyStreamShutdown(stream);
    streams_mu_.Lock();
    calling_ = nullptr;
  }
}

bool AccountingService::RegisterStream(ChargeStreamReactor* stream) {
  absl::MutexLock l(&streams_mu_);
  if (streams_shut_) return false;
  streams_.insert(stream);
  return true;
}

void AccountingService::UnregisterStream(ChargeStreamReactor* stream) {
  absl::MutexLock l(&streams_mu_);
  if (calling_ == stream && calling_thread_ != std::this_thread::get_id()) {
    auto not_calling = [this, stream]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                           streams_mu_) { return calling_ != stream; };
    streams_mu_.Await(absl::Condition(&not_calling));
  }
  streams_.erase(stream);
}

void AccountingService::RecordRpc(RpcMethod method, int64_t start_ns,
                                  grpc::StatusCode code) {
  rpc_metrics_.Record(method, code,
                      absl::Nanoseconds(clock_.NowNs() - start_ns));
}

grpc::ServerUnaryReactor* AccountingService::FinishUnary(
    grpc::CallbackServerContext* context, RpcMethod method, int64_t start_ns,
    const absl::Status& status, CallLimiter::Permit permit,
    grpc::ServerUnaryReactor* reactor) {
  const grpc::Status answer = ToGrpcStatus(status);
  RecordRpc(method, start_ns, answer.error_code());
  // Given back before Finish: a client that has its answer may call again
  // at once without meeting its own previous call's permit.
  permit.Release();
  if (reactor == nullptr) reactor = context->DefaultReactor();
  reactor->Finish(answer);
  return reactor;
}

absl::Status AccountingService::CheckStillWanted(
    const grpc::ServerContextBase& context) {
  if (context.IsCancelled())
    return absl::CancelledError(
        "the call was cancelled while its charge waited for a drain-wait "
        "thread; not applied");
  if (context.deadline() <= std::chrono::system_clock::now())
    return absl::DeadlineExceededError(
        "the call's deadline passed while its charge waited for a "
        "drain-wait thread; not applied");
  return absl::OkStatus();
}

absl::StatusOr<AuthCaller> AccountingService::AuthenticateCall(
    const grpc::ServerContextBase& context) const {
  if (authorizer_ == nullptr) return AuthCaller();
  return authorizer_->Authenticate(context);
}

absl::Status AccountingService::AuthorizeCall(
    const grpc::ServerContextBase& context, Access access,
    const std::string& path, AuthCaller* caller) const {
  if (authorizer_ == nullptr) return absl::OkStatus();
  absl::StatusOr<AuthCaller> who = authorizer_->Authenticate(context);
  if (!who.ok()) return who.status();
  if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
  if (absl::Status s = authorizer_->Check(*who, access, path); !s.ok())
    return s;
  if (caller != nullptr) *caller = *std::move(who);
  return absl::OkStatus();
}

void AccountingService::CountChargeAnswer(const absl::Status& status) {
  if (!status.ok() && status.code() != absl::StatusCode::kResourceExhausted)
    rpc_metrics_.RecordChargeRejected();
}

absl::Status AccountingService::ValidatePageArgs(
    uint64_t nr_pages, PageKind kind, std::optional<uint32_t> cpu, bool charge,
    std::optional<int>* engine_cpu) const {
  if (absl::Status s = ValidateNrPages(nr_pages, page_counter_max_); !s.ok())
    return s;
  if (charge) {
    if (absl::Status s = CheckChargeCap(nr_pages, "nr_pages"); !s.ok())
      return s;
  }
  if (absl::Status s = ValidatePageKind(kind); !s.ok()) return s;
  absl::StatusOr<std::optional<int>> resolved = CpuFromProto(cpu, nr_cpus_);
  if (!resolved.ok()) return resolved.status();
  *engine_cpu = *resolved;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Handlers

grpc::ServerUnaryReactor* AccountingService::CreateGroup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::CreateGroupRequest, v1::Group>(
      context, RpcMethod::kCreateGroup, request_bytes, response_bytes,
      [&](const v1::CreateGroupRequest& request, v1::Group* response) {
        if (absl::Status s =
                AuthorizeCall(*context, Access::kConfigure, request.path());
            !s.ok()) {
          return s;
        }
        return DoCreateGroup(request, response);
      });
}

absl::Status AccountingService::DoCreateGroup(
    const v1::CreateGroupRequest& request, v1::Group* response) {
  absl::MutexLock l(&config_mu_);
  absl::StatusOr<GroupInfo> group =
      engine_.CreateGroup(request.path(), LimitsFromProto(request.limits()));
  if (!group.ok()) return group.status();
  absl::StatusOr<uint64_t> generation =
      store_->CreateGroup(group->path, group->limits);
  if (!generation.ok()) {
    // Not acknowledged, so not kept: the group is new and has no children.
    (void)engine_.DeleteGroup(group->path);
    return absl::UnavailableError(
        absl::StrCat("group ", group->path, " not created: ",
                     generation.status().message()));
  }
  {
    absl::MutexLock g(&generations_mu_);
    generations_[group->id] = *generation;
  }
  GroupToProto(*group, response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::DeleteGroup(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::DeleteGroupRequest, v1::DeleteGroupResponse>(
      context, RpcMethod::kDeleteGroup, request_bytes, response_bytes,
      [&](const v1::DeleteGroupRequest& request,
          v1::DeleteGroupResponse* response) {
        if (absl::Status s =
                AuthorizeCall(*context, Access::kConfigure, request.path());
            !s.ok()) {
          return s;
        }
        return DoDeleteGroup(request, response);
      });
}

absl::Status AccountingService::DoDeleteGroup(
    const v1::DeleteGroupRequest& request, v1::DeleteGroupResponse* response) {
  absl::MutexLock l(&config_mu_);
  const absl::StatusOr<GroupHandle> handle =
      engine_.ResolveGroup(request.path());
  absl::StatusOr<uint64_t> reparented = engine_.DeleteGroup(request.path());
  if (!reparented.ok()) return reparented.status();
  if (handle.ok()) {
    {
      absl::MutexLock g(&generations_mu_);
      generations_.erase(handle->id());
    }
    // The engine gave the group's pages to its parent: so do the sessions.
    sessions_->OnGroupDeleted(handle->id(), request.path());
  }
  if (absl::Status s = store_->DeleteGroup(request.path()); !s.ok()) {
    return absl::InternalError(absl::StrCat(
        "group ", request.path(),
        " deleted, but the state store failed (it would come back after a "
        "restart): ",
        s.message()));
  }
  response->set_reparented_pages(*reparented);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::ListGroups(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::ListGroupsRequest, v1::ListGroupsResponse>(
      context, RpcMethod::kListGroups, request_bytes, response_bytes,
      [&](const v1::ListGroupsRequest& request,
          v1::ListGroupsResponse* response) {
        absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
        if (!caller.ok()) return caller.status();
        return DoListGroups(*caller, request, response);
      });
}

absl::Status AccountingService::DoListGroups(
    const AuthCaller& caller, const v1::ListGroupsRequest& request,
    v1::ListGroupsResponse* response) {
  if (authorizer_ != nullptr) {
    // Checked before the engine is asked: NOT_FOUND would tell a tenant
    // whether a group outside its grants exists.
    if (absl::Status s = ValidateGroupPath(request.path()); !s.ok()) return s;
    if (absl::Status s = authorizer_->CheckList(caller, request.path());
        !s.ok())
      return s;
  }
  absl::StatusOr<std::vector<std::string>> paths =
      engine_.ListGroups(request.path(), request.recursive());
  if (!paths.ok()) return paths.status();
  if (absl::Status s = ValidatePageToken(request.page_token(), request.path());
      !s.ok())
    return s;
  // A tenant sees only what it may read (listing an ancestor of its grant
  // shows the grant's subtree, nothing beside it). Filtered before paging,
  // so page sizes and tokens work as without access control.
  if (!caller.admin()) {
    paths->erase(std::remove_if(paths->begin(), paths->end(),
                                [&](const std::string& p) {
                                  return !Authorizer::CanRead(caller, p);
                                }),
                 paths->end());
  }
  // The engine returns them sorted; the cursor below depends on it.
  if (!std::is_sorted(paths->begin(), paths->end())) {
    std::sort(paths->begin(), paths->end());
  }
  const size_t page_size =
      (request.page_size() == 0 || request.page_size() > kMaxListGroupsPageSize)
          ? kMaxListGroupsPageSize
          : request.page_size();
  // The token is the last path already returned: resume strictly after it.
  auto first = request.page_token().empty()
                   ? paths->begin()
                   : std::upper_bound(paths->begin(), paths->end(),
                                      request.page_token());
  const size_t remaining = static_cast<size_t>(paths->end() - first);
  auto last = first + static_cast<ptrdiff_t>(std::min(remaining, page_size));
  // Also stop at kMaxListGroupsPageBytes of paths (at least one path), so a
  // page of long paths stays under gRPC's default 4 MiB message limit.
  size_t bytes = 0;
  for (auto it = first; it != last; ++it) {
    bytes += it->size() + 8;  // the path and its framing
    if (bytes > kMaxListGroupsPageBytes && it != first) {
      last = it;
      break;
    }
  }
  response->mutable_paths()->Reserve(static_cast<int>(last - first));
  for (auto it = first; it != last; ++it) {
    response->add_paths(std::move(*it));
  }
  if (last != paths->end()) {
    response->set_next_page_token(response->paths(response->paths_size() - 1));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::SetLimits(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::SetLimitsRequest, v1::Group>(
      context, RpcMethod::kSetLimits, request_bytes, response_bytes,
      [&](const v1::SetLimitsRequest& request, v1::Group* response) {
        if (absl::Status s =
                AuthorizeCall(*context, Access::kConfigure, request.path());
            !s.ok()) {
          return s;
        }
        return DoSetLimits(request, response);
      });
}

absl::Status AccountingService::DoSetLimits(const v1::SetLimitsRequest& request,
                                            v1::Group* response) {
  absl::MutexLock l(&config_mu_);
  absl::StatusOr<GroupInfo> group =
      engine_.SetLimits(request.path(), LimitsFromProto(request.limits()));
  if (!group.ok()) return group.status();
  if (absl::Status s = store_->SetLimits(group->path, group->limits); !s.ok()) {
    return absl::InternalError(absl::StrCat(
        "limits of ", group->path,
        " applied, but the state store failed (a restart would restore the "
        "previous ones): ",
        s.message()));
  }
  GroupToProto(*group, response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::Charge(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  // Owns its captures: a deferred call runs it again on a waiting thread
  // (from the start: a deferred charge left nothing behind).
  return Unary<v1::ChargeRequest, v1::ChargeResponse>(
      context, RpcMethod::kCharge, request_bytes, response_bytes,
      [this, context, rerun = false, resume = PageRequestResume()](
          const v1::ChargeRequest& request,
          v1::ChargeResponse* response) mutable {
        if (rerun) {
          // Queued past its deadline, or cancelled: not run; its
          // de-duplication entry is let go (a retry is a new arrival).
          if (absl::Status gone = CheckStillWanted(*context); !gone.ok()) {
            if (resume.ticket != 0) dedup_.Abandon(resume.key, resume.ticket);
            return gone;
          }
        }
        if (absl::Status s =
                AuthorizeCall(*context, Access::kWrite, request.path());
            !s.ok()) {
          CountChargeAnswer(s);  // a refused Charge is a rejected charge
          return s;
        }
        // The rerun resumes the deferred turn (its `max` event is counted).
        RemoteDrainDeferral::Resume resumed_turn(/*enabled=*/rerun);
        absl::Status s =
            DoCharge(CallerKey(context), request, response, &resume);
        rerun = IsRemoteDrainDeferred(s);
        return s;
      },
      UnaryMode::kCharging);
}

template <typename Request, typename Call>
DedupAnswer AccountingService::ApplyPageRequest(
    const std::string& identity, const Request& request, bool charge,
    DedupFingerprint::Method method, Call&& call, bool* replayed,
    PageRequestResume* resume) {
  *replayed = false;
  const std::optional<uint32_t> cpu =
      request.has_cpu() ? std::optional<uint32_t>(request.cpu()) : std::nullopt;
  const std::string* request_id =
      request.has_request_id() ? &request.request_id() : nullptr;
  const PageKind kind = PageKindFromProto(request.kind());
  std::optional<int> engine_cpu;
  // Checked here, before the de-duplication table, so that an invalid
  // request never takes an entry; the engine's checks, in its words.
  absl::Status valid = ValidateGroupPath(request.path());
  // The root is charged only through its children (engine/group_path.h).
  if (valid.ok()) valid = RefuseRootCharge(request.path());
  if (valid.ok())
    valid =
        ValidatePageArgs(request.nr_pages(), kind, cpu, charge, &engine_cpu);
  if constexpr (std::is_same_v<Request, v1::ChargeRequest>) {
    if (valid.ok() && request.has_batch_pages())
      valid = ValidateBatchPages(request.batch_pages(), request.nr_pages());
  }
  if (valid.ok() && request_id != nullptr)
    valid = ValidateRequestId(*request_id);
  if (!valid.ok()) return AnswerWithStatus(std::move(valid));
  // Without a request_id: no lock, no copy of the request.
  if (request_id == nullptr)
    return call(nullptr, request.path(), request.nr_pages(), kind, engine_cpu);

  // The id is scoped to the group instance: resolve it first (a missing
  // group takes no entry), apply through its handle (a group re-created
  // meanwhile is NOT_FOUND, never charged under the old one's scope).
  // A missing group is scope 0: its NOT_FOUND is stored and replayed like
  // any answer, and a retry once the group exists is a new request.
  absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(request.path());
  const uint64_t generation = handle.ok() ? GenerationOf(handle->id()) : 0;
  const std::string key = DedupKey(identity, generation, *request_id);
  // A session's request is another request than the same one unowned (or
  // in another session): the session_id is part of what a retry repeats.
  std::string fingerprint_path =
      request.has_session_id()
          ? absl::StrCat(request.path(), "\nsession_id=", request.session_id())
          : request.path();
  if constexpr (std::is_same_v<Request, v1::ChargeRequest>) {
    if (request.has_batch_pages())
      absl::StrAppend(&fingerprint_path, "\nbatch_pages=",
                      request.batch_pages());
  }
  RequestDedupCache::BeginResult begin;
  if (resume != nullptr && resume->ticket != 0 && resume->key == key) {
    // The rerun of a deferred call: its entry is still in flight.
    begin.verdict = RequestDedupCache::Verdict::kProceed;
    begin.ticket = resume->ticket;
  } else {
    if (resume != nullptr && resume->ticket != 0) {
      // The group was re-created meanwhile (another scope): the deferred
      // attempt's entry will not be completed.
      dedup_.Abandon(resume->key, resume->ticket);
    }
    begin = dedup_.Begin(key, MakeFingerprint(method, fingerprint_path,
                                              request.nr_pages(),
                                              request.kind(), cpu));
  }
  if (resume != nullptr) *resume = PageRequestResume();
  switch (begin.verdict) {
    case RequestDedupCache::Verdict::kReplay:
      *replayed = true;
      return begin.answer;
    case RequestDedupCache::Verdict::kMismatch:
      return AnswerWithStatus(absl::InvalidArgumentError(absl::StrCat(
          "request_id \"", absl::CHexEscape(*request_id),
          "\" was already used for a different request (method, path, "
          "nr_pages, kind, cpu or session_id differ)")));
    case RequestDedupCache::Verdict::kInFlight:
      return AnswerWithStatus(absl::AbortedError(absl::StrCat(
          "request_id \"", absl::CHexEscape(*request_id),
          "\" is in flight; retry")));
    case RequestDedupCache::Verdict::kProceed:
      break;
  }
  DedupAnswer answer =
      handle.ok()
          ? call(&*handle, request.path(), request.nr_pages(), kind, engine_cpu)
          : AnswerWithStatus(handle.status());
  if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(answer.status))) {
    // Not an answer: the call runs again on a waiting thread, which
    // completes this entry (a retry of the id meanwhile: ABORTED, in
    // flight). Without a resume state there is no rerun to complete it.
    if (resume != nullptr) {
      resume->key = key;
      resume->ticket = begin.ticket;
    } else {
      dedup_.Abandon(key, begin.ticket);
    }
    return answer;
  }
  // Persisted before the answer is stored or sent: an acknowledged id
  // survives a restart.
  StoredRequest stored;
  stored.identity = identity;
  stored.request_id = *request_id;
  stored.scope = generation;
  stored.method = static_cast<int>(method);
  stored.path = fingerprint_path;
  stored.nr_pages = request.nr_pages();
  stored.kind = request.kind();
  stored.cpu = cpu.has_value() ? static_cast<int64_t>(*cpu) : -1;
  stored.code = static_cast<int>(answer.status.code());
  stored.message = std::string(answer.status.message());
  stored.answer_nr_pages = answer.nr_pages;
  stored.throttle_us = answer.throttle_us;
  const absl::Time now = absl::Now();
  stored.arrived_unix_ns = absl::ToUnixNanos(now);
  if (absl::Status s = store_->PutRequest(
          stored, absl::ToUnixNanos(now - dedup_.window()), dedup_.capacity());
      !s.ok()) {
    rpc_metrics_.RecordStateStoreError();
  }
  dedup_.Complete(key, begin.ticket, answer);
  return answer;
}

uint64_t AccountingService::GenerationOf(uint64_t group_id) const {
  absl::ReaderMutexLock l(&generations_mu_);
  auto it = generations_.find(group_id);
  // Groups not made through the service (tests' engines): the engine id,
  // unique for the process's life, offset so it cannot meet a stored one.
  return it != generations_.end() ? it->second : (uint64_t{1} << 63) | group_id;
}

size_t AccountingService::RestoreRequests(
    const std::vector<StoredRequest>& requests) {
  const absl::Time now = absl::Now();
  size_t restored = 0;
  for (const StoredRequest& r : requests) {
    if (r.method == static_cast<int>(DedupFingerprint::Method::kBatch)) {
      DedupFingerprint fingerprint;
      fingerprint.method = DedupFingerprint::Method::kBatch;
      fingerprint.path_hash = r.digest;
      fingerprint.nr_pages = r.nr_pages;
      DedupAnswer answer;
      answer.body = r.body;
      batch_dedup_.Restore(DedupKey(r.identity, r.scope, r.request_id),
                           fingerprint, std::move(answer),
                           now - absl::FromUnixNanos(r.arrived_unix_ns));
      ++restored;
      continue;
    }
    if (r.method != static_cast<int>(DedupFingerprint::Method::kCharge) &&
        r.method != static_cast<int>(DedupFingerprint::Method::kUncharge))
      continue;
    DedupAnswer answer;
    answer.status = absl::Status(static_cast<absl::StatusCode>(r.code), r.message);
    answer.nr_pages = r.answer_nr_pages;
    answer.throttle_us = r.throttle_us;
    const std::optional<uint32_t> cpu =
        r.cpu >= 0 ? std::optional<uint32_t>(static_cast<uint32_t>(r.cpu))
                   : std::nullopt;
    dedup_.Restore(
        DedupKey(r.identity, r.scope, r.request_id),
        MakeFingerprint(static_cast<DedupFingerprint::Method>(r.method), r.path,
                        r.nr_pages, r.kind, cpu),
        std::move(answer), now - absl::FromUnixNanos(r.arrived_unix_ns));
    ++restored;
  }
  return restored;
}

absl::Status AccountingService::DoCharge(const std::string& identity,
                                         const v1::ChargeRequest& request,
                                         v1::ChargeResponse* response,
                                         PageRequestResume* resume) {
  bool replayed;
  DedupAnswer answer = ApplyPageRequest(
      identity, request, /*charge=*/true, DedupFingerprint::Method::kCharge,
      [&](const GroupHandle* handle, absl::string_view path, uint64_t nr_pages,
          PageKind kind, std::optional<int> cpu) {
        // A client's batch (batch_pages): charged through the handle.
        const uint64_t batch =
            request.has_batch_pages() ? request.batch_pages() : 0;
        auto charge = [&](const GroupHandle& group) {
          return batch > nr_pages ? engine_.ChargeWithBatch(group, nr_pages,
                                                            batch, kind, cpu)
                                  : engine_.Charge(group, nr_pages, kind, cpu);
        };
        absl::StatusOr<GroupHandle> resolved;
        if (handle == nullptr && batch > nr_pages && !request.has_session_id()) {
          resolved = engine_.ResolveGroup(path);
          if (!resolved.ok()) return AnswerWithStatus(resolved.status());
          handle = &*resolved;
        }
        absl::StatusOr<ChargeResult> result =
            request.has_session_id()
                ? InSession(identity, request.session_id(), handle, path,
                            std::max(nr_pages, batch), kind, /*charge=*/true,
                            charge)
            : handle != nullptr ? charge(*handle)
                                : engine_.Charge(path, nr_pages, kind, cpu);
        if (!result.ok()) return AnswerWithStatus(result.status());
        DedupAnswer ok;
        ok.nr_pages = result->nr_pages;
        ok.throttle_us = DurationToMicros(result->throttle);
        return ok;
      },
      &replayed, resume);
  // A replay was counted when it was first answered; a deferred charge is
  // counted when it runs again.
  if (!replayed && !IsRemoteDrainDeferred(answer.status))
    CountChargeAnswer(answer.status);
  if (answer.status.ok()) {
    response->set_nr_pages(answer.nr_pages);
    response->set_throttle_us(answer.throttle_us);
    response->set_replayed(replayed);
  }
  return std::move(answer.status);
}

grpc::ServerUnaryReactor* AccountingService::Uncharge(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::UnchargeRequest, v1::UnchargeResponse>(
      context, RpcMethod::kUncharge, request_bytes, response_bytes,
      [&](const v1::UnchargeRequest& request, v1::UnchargeResponse* response) {
        if (absl::Status s =
                AuthorizeCall(*context, Access::kWrite, request.path());
            !s.ok()) {
          return s;
        }
        return DoUncharge(CallerKey(context), request, response);
      });
}

absl::Status AccountingService::DoUncharge(const std::string& identity,
                                           const v1::UnchargeRequest& request,
                                           v1::UnchargeResponse* response) {
  bool replayed;
  DedupAnswer answer = ApplyPageRequest(
      identity, request, /*charge=*/false, DedupFingerprint::Method::kUncharge,
      [&](const GroupHandle* handle, absl::string_view path, uint64_t nr_pages,
          PageKind kind, std::optional<int> cpu) {
        absl::StatusOr<UnchargeResult> result =
            request.has_session_id()
                ? InSession(identity, request.session_id(), handle, path,
                            nr_pages, kind, /*charge=*/false,
                            [&](const GroupHandle& group) {
                              return engine_.Uncharge(group, nr_pages, kind,
                                                      cpu);
                            })
            : handle != nullptr ? engine_.Uncharge(*handle, nr_pages, kind, cpu)
                                : engine_.Uncharge(path, nr_pages, kind, cpu);
        if (!result.ok()) return AnswerWithStatus(result.status());
        DedupAnswer ok;
        ok.nr_pages = result->nr_pages;
        return ok;
      },
      &replayed);
  if (answer.status.ok()) {
    response->set_nr_pages(answer.nr_pages);
    response->set_replayed(replayed);
  }
  return std::move(answer.status);
}

template <typename Apply>
auto AccountingService::InSession(const std::string& identity,
                                  const std::string& session_id,
                                  const GroupHandle* handle,
                                  absl::string_view path, uint64_t nr_pages,
                                  PageKind kind, bool charge, Apply apply)
    -> decltype(apply(std::declval<const GroupHandle&>())) {
  // Holdings are per group instance: resolve the path first.
  absl::StatusOr<GroupHandle> group =
      handle != nullptr ? *handle : engine_.ResolveGroup(path);
  if (!group.ok()) return group.status();
  absl::StatusOr<SessionRegistry::Op> op = sessions_->BeginOp(
      identity, session_id, *group, path, kind, nr_pages, charge);
  if (!op.ok()) return op.status();
  auto result = apply(*group);
  // A charge holds what it charged (a batch may have dropped to less).
  sessions_->EndOp(*op, result.ok(),
                   charge && result.ok() ? result->nr_pages : nr_pages);
  return result;
}

// --- sessions ----------------------------------------------------------------

grpc::ServerUnaryReactor* AccountingService::OpenSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::OpenSessionRequest, v1::OpenSessionResponse>(
      context, RpcMethod::kOpenSession, request_bytes, response_bytes,
      [&](const v1::OpenSessionRequest& request,
          v1::OpenSessionResponse* response) {
        absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
        if (!caller.ok()) return caller.status();
        absl::StatusOr<v1::OpenSessionResponse> opened =
            sessions_->Open(CallerKey(context), request);
        if (!opened.ok()) return opened.status();
        *response = *std::move(opened);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AccountingService::CloseSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::CloseSessionRequest, v1::CloseSessionResponse>(
      context, RpcMethod::kCloseSession, request_bytes, response_bytes,
      [&](const v1::CloseSessionRequest& request,
          v1::CloseSessionResponse* response) {
        absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
        if (!caller.ok()) return caller.status();
        absl::StatusOr<uint64_t> returned =
            sessions_->Close(CallerKey(context), request.session_id());
        if (!returned.ok()) return returned.status();
        response->set_returned_pages(*returned);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AccountingService::GetSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::GetSessionRequest, v1::SessionInfo>(
      context, RpcMethod::kGetSession, request_bytes, response_bytes,
      [&](const v1::GetSessionRequest& request, v1::SessionInfo* response) {
        absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
        if (!caller.ok()) return caller.status();
        return sessions_->Get(CallerKey(context), request.session_id(),
                              response);
      });
}

// ChargeBatch and ChargeStream: server/charge_batch.cc.

grpc::ServerUnaryReactor* AccountingService::GetStats(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::GetStatsRequest, v1::GroupStats>(
      context, RpcMethod::kGetStats, request_bytes, response_bytes,
      [&](const v1::GetStatsRequest& request, v1::GroupStats* response) {
        if (absl::Status s =
                AuthorizeCall(*context, Access::kRead, request.path());
            !s.ok()) {
          return s;
        }
        return DoGetStats(request, response);
      });
}

absl::Status AccountingService::DoGetStats(const v1::GetStatsRequest& request,
                                           v1::GroupStats* response) {
  const std::optional<FlushMode> mode = FlushModeFromProto(request.flush());
  if (!mode.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("flush must be FLUSH_MODE_EXACT, FLUSH_MODE_THRESHOLD or "
                     "FLUSH_MODE_NONE (got ",
                     request.flush(), ")"));
  }
  absl::StatusOr<GroupStats> stats = engine_.GetStats(request.path(), *mode);
  if (!stats.ok()) return stats.status();
  // Pages never exceed page_counter_max(), so pages * page_size fits.
  response->set_path(stats->path);
  response->set_memory_current_bytes(stats->memory_current_pages *
                                     page_size_bytes_);
  response->set_memory_peak_bytes(stats->memory_peak_pages * page_size_bytes_);
  LimitsToProto(stats->limits, response->mutable_limits());
  response->mutable_stat()->Reserve(static_cast<int>(stats->stat.size()));
  for (StatEntry& entry : stats->stat) {
    v1::StatEntry* out = response->add_stat();
    out->set_name(std::move(entry.name));
    out->set_value(entry.value);  // already in memory.stat units
  }
  EventsToProto(stats->events, response->mutable_events());
  EventsToProto(stats->events_local, response->mutable_events_local());
  response->set_failcnt(stats->failcnt);
  response->set_emin_bytes(stats->emin_pages * page_size_bytes_);
  response->set_elow_bytes(stats->elow_pages * page_size_bytes_);
  response->set_flushed(stats->flushed);
  response->set_max_staleness_us(DurationToMicros(stats->max_staleness));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::Reclaim(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::ReclaimRequest, v1::ReclaimResponse>(
      context, RpcMethod::kReclaim, request_bytes, response_bytes,
      [&](const v1::ReclaimRequest& request, v1::ReclaimResponse* response) {
        if (absl::Status s =
                AuthorizeCall(*context, Access::kWrite, request.path());
            !s.ok()) {
          return s;
        }
        return DoReclaim(request, response);
      });
}

absl::Status AccountingService::DoReclaim(const v1::ReclaimRequest& request,
                                          v1::ReclaimResponse* response) {
  if (request.nr_bytes() == 0)
    return absl::InvalidArgumentError("nr_bytes must be > 0");
  // memory_reclaim(): bytes round down to pages (less than a page is 0
  // pages, which succeeds with nothing reclaimed).
  absl::StatusOr<uint64_t> reclaimed =
      engine_.Reclaim(request.path(), request.nr_bytes() / page_size_bytes_);
  if (!reclaimed.ok()) return reclaimed.status();
  response->set_reclaimed_bytes(*reclaimed * page_size_bytes_);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::GetEngineInfo(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes) {
  return Unary<v1::GetEngineInfoRequest, v1::EngineInfo>(
      context, RpcMethod::kGetEngineInfo, request_bytes, response_bytes,
      [&](const v1::GetEngineInfoRequest&, v1::EngineInfo* response) {
        absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
        if (!caller.ok()) return caller.status();
        DoGetEngineInfo(*caller, response);
        return absl::OkStatus();
      },
      UnaryMode::kProbe);
}

void AccountingService::DoGetEngineInfo(const AuthCaller& caller,
                                        v1::EngineInfo* response) {
  response->set_caller_identity(caller.identity());
  const EngineInfo info = engine_.GetInfo();
  response->set_nr_cpus(static_cast<uint32_t>(info.nr_cpus));
  response->set_page_size_bytes(info.page_size_bytes);
  response->set_charge_batch_pages(info.charge_batch_pages);
  response->set_flush_lock_policy(info.flush_lock_policy_name);
  response->set_nr_stock_slots(static_cast<uint32_t>(info.nr_stock_slots));
  response->set_nr_groups(info.nr_groups);
  response->set_flush_lock_hold_max_us(
      DurationToMicros(info.flush_lock_hold_max));
  response->set_max_batch_ops(kMaxBatchOps);
  response->set_max_charge_pages(max_charge_pages_);
  response->set_max_streams_per_identity(
      limiter_.options().max_streams_per_identity);
  response->set_max_in_flight_per_identity(
      limiter_.options().max_in_flight_per_identity);
  response->set_max_message_bytes(max_message_bytes_);
  response->set_max_concurrent_streams_per_connection(
      max_concurrent_streams_per_connection_);
  for (const FlushHoldRecord& record : info.longest_flush_holds) {
    v1::FlushLockHold* hold = response->add_longest_flush_holds();
    hold->set_policy(record.policy);
    // A flush-hold path outside the caller's grants is not its to see.
    if (Authorizer::CanRead(caller, record.root_path))
      hold->set_root_path(record.root_path);
    hold->set_cpus_walked(static_cast<uint32_t>(record.cpus_walked));
    hold->set_groups_folded(static_cast<uint32_t>(record.groups_folded));
    hold->set_hold_ns(
        static_cast<uint64_t>(absl::ToInt64Nanoseconds(record.hold)));
    hold->set_when_unix_us(absl::ToUnixMicros(record.when));
    hold->set_preempt_model(FlushPreemptModelName(record.preempt_model));
  }
  response->set_flush_preempt_model(
      FlushPreemptModelName(info.flush_preempt_model));
  response->set_flush_lock_hold_wall_max_us(
      DurationToMicros(info.flush_lock_hold_wall_max));
  response->set_preempted_flushes(info.preempted_flushes);
  response->set_flush_lock_hold_max_cpus_walked(
      static_cast<uint32_t>(info.flush_lock_hold_max_cpus_walked));
  response->set_flush_lock_hold_max_groups_folded(
      static_cast<uint32_t>(info.flush_lock_hold_max_groups_folded));
  if (info.flush_lock_policy == FlushLockPolicy::kAdaptive &&
      info.flush_hold_budget > absl::ZeroDuration()) {
    // Rounded up: 0 means "no budget" (one CPU per hold), so a budget
    // under 1 µs reads 1, not 0.
    response->set_flush_hold_budget_us(static_cast<uint64_t>(
        absl::ToInt64Microseconds(info.flush_hold_budget +
                                  absl::Nanoseconds(999))));
  }
  response->set_periodic_flush_interval_ms(static_cast<uint64_t>(
      absl::ToInt64Milliseconds(info.periodic_flush_interval)));
  const SessionOptions& so = sessions_->options();
  response->set_session_default_ttl_ms(so.default_ttl_ms);
  response->set_session_min_ttl_ms(so.min_ttl_ms);
  response->set_session_max_ttl_ms(so.max_ttl_ms);
  response->set_session_max_pages(so.max_pages);
  response->set_max_sessions_per_identity(so.max_sessions_per_identity);
  response->set_session_drain_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(so.drain_timeout)));
}

}  // namespace cgacct
