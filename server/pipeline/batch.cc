// BatchRunner (server/pipeline/batch.h).
#include "server/pipeline/batch.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "engine/remote_stock.h"
#include "server/cluster/routing.h"
#include "server/common/wire.h"
#include "server/sessions/charger_scope.h"

namespace cgacct {
namespace {

// Distinct paths a runner keeps handles for; past it the cache starts over
// (bounds the memory a client can make a stream hold).
constexpr size_t kMaxCachedPaths = 4096;

}  // namespace

absl::Status BatchRunner::Run(const v1::ChargeBatchRequest& request,
                              v1::ChargeBatchResponse* response) {
  absl::Status status = Steps(request, response);
  if (ABSL_PREDICT_TRUE(!IsRemoteDrainDeferred(status))) {
    // The request is over: the next one starts afresh.
    begun_ = false;
    next_op_ = 0;
    deferred_ = false;
    abort_ = absl::OkStatus();
    keyed_ = false;
    entry_ = DedupTable::Entry();
  } else {
    deferred_ = true;
  }
  return status;
}

absl::Status BatchRunner::Steps(const v1::ChargeBatchRequest& request,
                                v1::ChargeBatchResponse* response) {
  if (!begun_) {
    if (absl::Status s = deps_.validator.Batch(request); !s.ok()) return s;
    if (request.has_idempotency_key()) {
      absl::Status begun = BeginKeyed(request, response);
      if (!begun.ok() || !keyed_) return begun;  // refused, or replayed
    }
    begun_ = true;
  }
  if (absl::Status s = RunOps(request, response); !s.ok())
    return s;  // deferred: a keyed entry stays in flight
  response->set_replayed(false);
  if (!keyed_) return absl::OkStatus();
  DedupAnswer answer;
  answer.body = response->SerializeAsString();
  StoredRequest stored;
  stored.identity = caller_.identity();
  stored.request_id = request.idempotency_key();
  stored.scope = scope_;
  stored.method = static_cast<int>(DedupFingerprint::Method::kBatch);
  stored.nr_pages = static_cast<uint64_t>(request.ops_size());
  stored.digest = digest_;
  stored.body = answer.body;
  if (!deps_.batch_keys.Complete(entry_, std::move(stored), std::move(answer))
           .ok())
    deps_.metrics.RecordStateStoreError();
  return absl::OkStatus();
}

absl::Status BatchRunner::BeginKeyed(const v1::ChargeBatchRequest& request,
                                     v1::ChargeBatchResponse* response) {
  const std::string& key = request.idempotency_key();
  if (absl::Status s = deps_.batch_keys.ValidateKey(key); !s.ok()) return s;
  // What a retry must repeat: the ops, byte for byte.
  v1::ChargeBatchRequest ops_only;
  *ops_only.mutable_ops() = request.ops();
  const uint64_t digest = StableDigest(ops_only.SerializeAsString());
  // The scope: the generation of each distinct group the ops name, in
  // first-use order, so a batch naming a group re-created since is a new
  // request. 0 for a group that does not exist, and for every path the
  // caller may not charge (an invalid one, or outside its grants), whether
  // its group exists or not: the answer to a reused key must not tell the
  // caller what it may not see.
  uint64_t scope = StableDigest("");
  absl::flat_hash_map<absl::string_view, bool> seen;
  for (const v1::ChargeOp& op : request.ops()) {
    if (!seen.emplace(op.path(), true).second) continue;
    uint64_t generation = 0;
    if (ValidateGroupPath(op.path()).ok() &&
        (deps_.authorizer == nullptr ||
         Authorizer::Allows(caller_, Access::kWrite, op.path()))) {
      absl::StatusOr<GroupHandle> handle =
          deps_.engine.ResolveGroup(op.path());
      if (handle.ok()) generation = deps_.groups.GenerationOf(handle->id());
    }
    scope = StableDigest(
        absl::string_view(reinterpret_cast<const char*>(&generation),
                          sizeof(generation)),
        scope);
  }
  DedupFingerprint fingerprint;
  fingerprint.method = DedupFingerprint::Method::kBatch;
  fingerprint.path_hash = digest;
  fingerprint.nr_pages = static_cast<uint64_t>(request.ops_size());
  std::optional<DedupAnswer> replay;
  if (absl::Status s =
          deps_.batch_keys.Begin(DedupKey(caller_.identity(), scope, key),
                                 fingerprint, key, &entry_, &replay);
      !s.ok())
    return s;
  if (replay.has_value()) {
    if (!response->ParseFromString(replay->body)) {
      return absl::InternalError(
          absl::StrCat("idempotency_key \"", absl::CHexEscape(key),
                       "\": the stored response is corrupt"));
    }
    response->set_replayed(true);
    return absl::OkStatus();  // not keyed: nothing to apply
  }
  keyed_ = true;
  scope_ = scope;
  digest_ = digest;
  return absl::OkStatus();
}

absl::Status BatchRunner::RunOps(const v1::ChargeBatchRequest& request,
                                 v1::ChargeBatchResponse* response) {
  auto* results = response->mutable_results();
  const bool resume = deferred_;
  if (next_op_ == 0 && !resume) {
    budget_ = deps_.validator.max_charge_pages();
    results->Clear();  // keeps the cleared OpResults for reuse by Add()
    results->Reserve(request.ops_size());
  }
  if (ABSL_PREDICT_FALSE(resume && !abort_.ok())) {
    for (int i = next_op_; i < request.ops_size(); ++i) {
      v1::OpResult* result =
          i < results->size() ? results->Mutable(i) : results->Add();
      result->set_id(request.ops(i).id());
      Fail(i, request.ops(i), abort_, result);
    }
    next_op_ = 0;
    return absl::OkStatus();
  }
  for (int i = next_op_; i < request.ops_size(); ++i) {
    v1::OpResult* result =
        i < results->size() ? results->Mutable(i) : results->Add();
    bool applied;
    if (ABSL_PREDICT_FALSE(resume && i == next_op_)) {
      // The deferred op resumes at the drain (its `max` event is counted).
      RemoteDrainDeferral::Resume resumed;
      applied = ApplyOp(i, request.ops(i), result);
    } else {
      applied = ApplyOp(i, request.ops(i), result);
    }
    if (ABSL_PREDICT_FALSE(!applied)) {
      next_op_ = i;
      return RemoteDrainDeferredError(request.ops(i).path());
    }
  }
  next_op_ = 0;
  return absl::OkStatus();
}

void BatchRunner::Fail(int index, const v1::ChargeOp& op,
                       const absl::Status& status, v1::OpResult* result) {
  if (!op.uncharge()) deps_.metrics.RecordChargeAnswer(status);
  result->set_code(WireCode(status));
  result->set_message(absl::StrCat("ops[", index, "]: ", status.message()));
}

const GroupHandle* BatchRunner::Find(absl::string_view path) {
  if (last_ != nullptr && path == last_path_) return last_;
  auto it = cache_.find(path);
  if (it == cache_.end()) return nullptr;
  last_path_.assign(it->first);
  last_ = &it->second;
  return last_;
}

const GroupHandle* BatchRunner::Insert(absl::string_view path,
                                       GroupHandle handle) {
  if (cache_.size() >= kMaxCachedPaths) Forget();
  auto it = cache_.emplace(std::string(path), handle).first;
  last_path_.assign(it->first);
  last_ = &it->second;
  return last_;
}

void BatchRunner::Forget() {
  cache_.clear();
  last_ = nullptr;
}

bool BatchRunner::ApplyOp(int index, const v1::ChargeOp& op,
                          v1::OpResult* result) {
  result->set_id(op.id());
  const absl::string_view path = op.path();
  // A cached path passed validation and authorization before.
  const GroupHandle* handle = Find(path);
  PageOp page_op;
  if (absl::Status s = AuthorizeCpu(deps_.authorizer, caller_, op.has_cpu());
      !s.ok()) {
    Fail(index, op, s, result);
    return true;
  }
  if (absl::Status s = deps_.validator.BatchOp(
          op, /*path_checked=*/handle != nullptr, &page_op);
      !s.ok()) {
    Fail(index, op, s, result);
    return true;
  }
  if (handle == nullptr) {
    if (absl::Status s =
            Authorize(deps_.authorizer, caller_, Access::kWrite, path);
        !s.ok()) {
      Fail(index, op, s, result);
      return true;
    }
  }
  // Every op, cached or not: a shard can move while a stream is open.
  // A batch's charges are never re-charges of a resumed session: fresh.
  if (absl::Status s =
          page_op.charge
              ? ChargeRouteStatus(deps_.cluster, path, /*resume=*/false,
                                  page_op.session_id != nullptr)
              : RouteStatus(deps_.cluster, path);
      !s.ok()) {
    Fail(index, op, s, result);
    return true;
  }
  // The per-call cap is one budget for the whole request: each valid
  // charge op takes its pages from it, whatever the engine answers.
  const uint64_t cap = deps_.validator.max_charge_pages();
  if (page_op.charge && cap != 0) {
    if (page_op.nr_pages > budget_) {
      Fail(index, op,
           absl::InvalidArgumentError(absl::StrCat(
               "nr_pages ", page_op.nr_pages, " exceeds the ", budget_,
               " pages left of this request's per-call cap of ", cap,
               " pages (--max_charge_pages, EngineInfo.max_charge_pages)")),
           result);
      return true;
    }
    budget_ -= page_op.nr_pages;
  }
  if (handle == nullptr) {
    absl::StatusOr<GroupHandle> resolved = deps_.engine.ResolveGroup(path);
    if (!resolved.ok()) {
      Fail(index, op, resolved.status(), result);
      return true;
    }
    handle = Insert(path, *resolved);
  }
  bool session_refused = false;
  absl::Status status =
      ApplyToEngine(*handle, page_op, result, &session_refused);
  if (status.code() == absl::StatusCode::kNotFound && !session_refused) {
    // The cached group was deleted: the path may name a new one.
    Forget();
    absl::StatusOr<GroupHandle> resolved = deps_.engine.ResolveGroup(path);
    if (!resolved.ok()) {
      Fail(index, op, resolved.status(), result);
      return true;
    }
    status = ApplyToEngine(*Insert(path, *resolved), page_op, result,
                           &session_refused);
    if (status.code() == absl::StatusCode::kNotFound && !session_refused) {
      // Deleted again between the resolve and the call: the engine's
      // message names the handle's internal id; the client knows paths.
      Forget();
      status = absl::NotFoundError(
          absl::StrCat("path ", QuotePath(path),
                       ": no such group (deleted while this op was applied)"));
    }
  }
  if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(status))) {
    // Run again later: the op takes its pages from the budget then.
    if (page_op.charge && cap != 0) budget_ += page_op.nr_pages;
    return false;
  }
  if (!status.ok()) Fail(index, op, status, result);
  return true;
}

absl::Status BatchRunner::ApplyToEngine(GroupHandle handle, const PageOp& op,
                                        v1::OpResult* result,
                                        bool* session_refused) {
  Engine& engine = deps_.engine;
  const ChargerScope charger(caller_.identity());  // for the network drain
  if (op.charge) {
    auto charge = [&](const GroupHandle& group) {
      return engine.Charge(group, op.nr_pages, op.kind, op.cpu);
    };
    absl::StatusOr<ChargeResult> r =
        op.session_id == nullptr
            ? charge(handle)
            : deps_.page_ops.InSession(caller_.identity(), *op.session_id,
                                       handle, op, op.nr_pages, charge,
                                       session_refused);
    if (!r.ok()) return r.status();
    result->set_nr_pages(r->nr_pages);
    result->set_throttle_us(DurationToMicros(r->throttle));
    return absl::OkStatus();
  }
  auto uncharge = [&](const GroupHandle& group) {
    return engine.Uncharge(group, op.nr_pages, op.kind, op.cpu);
  };
  absl::StatusOr<UnchargeResult> r =
      op.session_id == nullptr
          ? uncharge(handle)
          : deps_.page_ops.InSession(caller_.identity(), *op.session_id, handle,
                                     op, op.nr_pages, uncharge,
                                     session_refused);
  if (!r.ok()) return r.status();
  result->set_nr_pages(r->nr_pages);
  return absl::OkStatus();
}

}  // namespace cgacct
