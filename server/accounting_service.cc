#include "server/accounting_service.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
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

// Runs `apply` (returning a DedupAnswer) at most once per live request_id;
// *replayed is set when the answer is a stored one. Without a request_id it
// just runs it: no lock, no copy of the request.
template <typename Apply>
DedupAnswer ApplyOnce(RequestDedupCache& cache, const std::string* request_id,
                      DedupFingerprint::Method method, absl::string_view path,
                      uint64_t nr_pages, int kind, std::optional<uint32_t> cpu,
                      Apply&& apply, bool* replayed) {
  *replayed = false;
  if (request_id == nullptr) return apply();

  DedupFingerprint fingerprint;
  fingerprint.method = method;
  fingerprint.SetPath(path);
  fingerprint.nr_pages = nr_pages;
  fingerprint.kind = kind;
  fingerprint.cpu = cpu;
  const RequestDedupCache::BeginResult begin =
      cache.Begin(*request_id, fingerprint);
  switch (begin.verdict) {
    case RequestDedupCache::Verdict::kReplay:
      *replayed = true;
      return begin.answer;
    case RequestDedupCache::Verdict::kMismatch:
      return AnswerWithStatus(absl::InvalidArgumentError(absl::StrCat(
          "request_id \"", absl::CHexEscape(*request_id),
          "\" was already used for a different request (method, path, "
          "nr_pages, kind or cpu differ)")));
    case RequestDedupCache::Verdict::kInFlight:
      return AnswerWithStatus(absl::AbortedError(absl::StrCat(
          "request_id \"", absl::CHexEscape(*request_id),
          "\" is in flight; retry")));
    case RequestDedupCache::Verdict::kProceed:
      break;
  }
  DedupAnswer answer = apply();
  cache.Complete(*request_id, begin.ticket, answer);
  return answer;
}

}  // namespace

namespace {

RequestDedupCache::Options DedupOptions(
    const AccountingServiceOptions& options) {
  RequestDedupCache::Options dedup = options.dedup;
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
      dedup_(DedupOptions(options)) {}

std::string AccountingService::CallerKey(
    const grpc::ServerContextBase* context) {
  return CallerIdentity(context);
}

void AccountingService::MarkShed(grpc::ServerContextBase* context,
                                 ShedReason reason) {
  rpc_metrics_.RecordShed(reason);
  context->AddTrailingMetadata(kShedMetadataKey, ShedReasonName(reason));
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

void AccountingService::RecordRpc(RpcMethod method, int64_t start_ns,
                                  grpc::StatusCode code) {
  rpc_metrics_.Record(method, code,
                      absl::Nanoseconds(clock_.NowNs() - start_ns));
}

grpc::ServerUnaryReactor* AccountingService::FinishUnary(
    grpc::CallbackServerContext* context, RpcMethod method, int64_t start_ns,
    const absl::Status& status, CallLimiter::Permit permit) {
  const grpc::Status answer = ToGrpcStatus(status);
  RecordRpc(method, start_ns, answer.error_code());
  // Given back before Finish: a client that has its answer may call again
  // at once without meeting its own previous call's permit.
  permit.Release();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(answer);
  return reactor;
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
    grpc::CallbackServerContext* context, const v1::CreateGroupRequest* request,
    v1::Group* response) {
  return Unary(context, RpcMethod::kCreateGroup, [&] {
    if (absl::Status s =
            AuthorizeCall(*context, Access::kConfigure, request->path());
        !s.ok()) {
      return s;
    }
    return DoCreateGroup(*request, response);
  });
}

absl::Status AccountingService::DoCreateGroup(
    const v1::CreateGroupRequest& request, v1::Group* response) {
  absl::StatusOr<GroupInfo> group =
      engine_.CreateGroup(request.path(), LimitsFromProto(request.limits()));
  if (!group.ok()) return group.status();
  GroupToProto(*group, response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::DeleteGroup(
    grpc::CallbackServerContext* context, const v1::DeleteGroupRequest* request,
    v1::DeleteGroupResponse* response) {
  return Unary(context, RpcMethod::kDeleteGroup, [&] {
    if (absl::Status s =
            AuthorizeCall(*context, Access::kConfigure, request->path());
        !s.ok()) {
      return s;
    }
    return DoDeleteGroup(*request, response);
  });
}

absl::Status AccountingService::DoDeleteGroup(
    const v1::DeleteGroupRequest& request, v1::DeleteGroupResponse* response) {
  absl::StatusOr<uint64_t> reparented = engine_.DeleteGroup(request.path());
  if (!reparented.ok()) return reparented.status();
  response->set_reparented_pages(*reparented);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::ListGroups(
    grpc::CallbackServerContext* context, const v1::ListGroupsRequest* request,
    v1::ListGroupsResponse* response) {
  return Unary(context, RpcMethod::kListGroups, [&] {
    absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
    if (!caller.ok()) return caller.status();
    return DoListGroups(*caller, *request, response);
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
    grpc::CallbackServerContext* context, const v1::SetLimitsRequest* request,
    v1::Group* response) {
  return Unary(context, RpcMethod::kSetLimits, [&] {
    if (absl::Status s =
            AuthorizeCall(*context, Access::kConfigure, request->path());
        !s.ok()) {
      return s;
    }
    return DoSetLimits(*request, response);
  });
}

absl::Status AccountingService::DoSetLimits(const v1::SetLimitsRequest& request,
                                            v1::Group* response) {
  absl::StatusOr<GroupInfo> group =
      engine_.SetLimits(request.path(), LimitsFromProto(request.limits()));
  if (!group.ok()) return group.status();
  GroupToProto(*group, response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AccountingService::Charge(
    grpc::CallbackServerContext* context, const v1::ChargeRequest* request,
    v1::ChargeResponse* response) {
  return Unary(context, RpcMethod::kCharge, [&] {
    if (absl::Status s =
            AuthorizeCall(*context, Access::kWrite, request->path());
        !s.ok()) {
      CountChargeAnswer(s);  // a refused Charge is a rejected charge
      return s;
    }
    return DoCharge(*request, response);
  });
}

template <typename Request, typename Call>
DedupAnswer AccountingService::ApplyPageRequest(const Request& request,
                                                bool charge,
                                                DedupFingerprint::Method method,
                                                Call&& call, bool* replayed) {
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
  if (valid.ok() && request_id != nullptr)
    valid = ValidateRequestId(*request_id);
  if (!valid.ok()) return AnswerWithStatus(std::move(valid));
  return ApplyOnce(
      dedup_, request_id, method, request.path(), request.nr_pages(),
      request.kind(), cpu,
      [&]() {
        return call(request.path(), request.nr_pages(), kind, engine_cpu);
      },
      replayed);
}

absl::Status AccountingService::DoCharge(const v1::ChargeRequest& request,
                                         v1::ChargeResponse* response) {
  bool replayed;
  DedupAnswer answer = ApplyPageRequest(
      request, /*charge=*/true, DedupFingerprint::Method::kCharge,
      [&](absl::string_view path, uint64_t nr_pages, PageKind kind,
          std::optional<int> cpu) {
        absl::StatusOr<ChargeResult> result =
            engine_.Charge(path, nr_pages, kind, cpu);
        if (!result.ok()) return AnswerWithStatus(result.status());
        DedupAnswer ok;
        ok.nr_pages = result->nr_pages;
        ok.throttle_us = DurationToMicros(result->throttle);
        return ok;
      },
      &replayed);
  // A replay was counted when it was first answered.
  if (!replayed) CountChargeAnswer(answer.status);
  if (answer.status.ok()) {
    response->set_nr_pages(answer.nr_pages);
    response->set_throttle_us(answer.throttle_us);
  }
  return std::move(answer.status);
}

grpc::ServerUnaryReactor* AccountingService::Uncharge(
    grpc::CallbackServerContext* context, const v1::UnchargeRequest* request,
    v1::UnchargeResponse* response) {
  return Unary(context, RpcMethod::kUncharge, [&] {
    if (absl::Status s =
            AuthorizeCall(*context, Access::kWrite, request->path());
        !s.ok()) {
      return s;
    }
    return DoUncharge(*request, response);
  });
}

absl::Status AccountingService::DoUncharge(const v1::UnchargeRequest& request,
                                           v1::UnchargeResponse* response) {
  bool replayed;
  DedupAnswer answer = ApplyPageRequest(
      request, /*charge=*/false, DedupFingerprint::Method::kUncharge,
      [&](absl::string_view path, uint64_t nr_pages, PageKind kind,
          std::optional<int> cpu) {
        absl::StatusOr<UnchargeResult> result =
            engine_.Uncharge(path, nr_pages, kind, cpu);
        if (!result.ok()) return AnswerWithStatus(result.status());
        DedupAnswer ok;
        ok.nr_pages = result->nr_pages;
        return ok;
      },
      &replayed);
  if (answer.status.ok()) response->set_nr_pages(answer.nr_pages);
  return std::move(answer.status);
}

// ChargeBatch and ChargeStream: server/charge_batch.cc.

grpc::ServerUnaryReactor* AccountingService::GetStats(
    grpc::CallbackServerContext* context, const v1::GetStatsRequest* request,
    v1::GroupStats* response) {
  return Unary(context, RpcMethod::kGetStats, [&] {
    if (absl::Status s =
            AuthorizeCall(*context, Access::kRead, request->path());
        !s.ok()) {
      return s;
    }
    return DoGetStats(*request, response);
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
    grpc::CallbackServerContext* context, const v1::ReclaimRequest* request,
    v1::ReclaimResponse* response) {
  return Unary(context, RpcMethod::kReclaim, [&] {
    if (absl::Status s =
            AuthorizeCall(*context, Access::kWrite, request->path());
        !s.ok()) {
      return s;
    }
    return DoReclaim(*request, response);
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
    grpc::CallbackServerContext* context,
    const v1::GetEngineInfoRequest* request, v1::EngineInfo* response) {
  const int64_t start_ns = clock_.NowNs();
  absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
  if (!caller.ok())
    return FinishUnary(context, RpcMethod::kGetEngineInfo, start_ns,
                       caller.status());
  DoGetEngineInfo(*caller, response);
  return FinishUnary(context, RpcMethod::kGetEngineInfo, start_ns,
                     absl::OkStatus());
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
  if (info.flush_lock_policy == FlushLockPolicy::kAdaptive)
    response->set_flush_hold_budget_us(
        DurationToMicros(info.flush_hold_budget));
  response->set_periodic_flush_interval_ms(static_cast<uint64_t>(
      absl::ToInt64Milliseconds(info.periodic_flush_interval)));
}

}  // namespace cgacct
