// PageOps (server/pipeline/page_ops.h).
#include "server/pipeline/page_ops.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/remote_stock.h"
#include "server/common/wire.h"
#include "server/sessions/charger_scope.h"

namespace cgacct {
namespace {

PageAnswer Refused(absl::Status status) {
  PageAnswer answer;
  answer.status = std::move(status);
  return answer;
}

template <typename Result>
PageAnswer Answered(const absl::StatusOr<Result>& result) {
  if (!result.ok()) return Refused(result.status());
  PageAnswer answer;
  answer.nr_pages = result->nr_pages;
  if constexpr (std::is_same_v<Result, ChargeResult>)
    answer.throttle_us = DurationToMicros(result->throttle);
  return answer;
}

// The state store's record of a keyed page op's answer.
StoredRequest Stored(const std::string& identity, const PageOp& op,
                     uint64_t generation, std::string fingerprint_path,
                     const PageAnswer& answer) {
  StoredRequest stored;
  stored.identity = identity;
  stored.request_id = *op.request_id;
  stored.scope = generation;
  stored.method = static_cast<int>(
      op.charge ? DedupFingerprint::Method::kCharge
                : DedupFingerprint::Method::kUncharge);
  stored.path = std::move(fingerprint_path);
  stored.nr_pages = op.nr_pages;
  stored.kind = op.wire_kind;
  stored.cpu =
      op.wire_cpu.has_value() ? static_cast<int64_t>(*op.wire_cpu) : -1;
  stored.code = static_cast<int>(answer.status.code());
  stored.message = std::string(answer.status.message());
  stored.answer_nr_pages = answer.nr_pages;
  stored.throttle_us = answer.throttle_us;
  return stored;
}

}  // namespace

PageOps::PageOps(Engine& engine, GroupOps& groups, SessionRegistry& sessions,
                 DedupTable& request_ids)
    : engine_(engine),
      groups_(groups),
      sessions_(sessions),
      request_ids_(request_ids) {}

PageAnswer PageOps::ApplyToEngine(const std::string& identity, const PageOp& op,
                                  const GroupHandle* handle) {
  const ChargerScope charger(identity);  // for the network drain
  if (op.charge) {
    auto charge = [&](const GroupHandle& group) {
      return op.batch_pages > op.nr_pages
                 ? engine_.ChargeWithBatch(group, op.nr_pages, op.batch_pages,
                                           op.kind, op.cpu)
                 : engine_.Charge(group, op.nr_pages, op.kind, op.cpu);
    };
    // A client's batch and a session's holdings are per group instance:
    // through a handle.
    absl::StatusOr<GroupHandle> resolved;
    if (handle == nullptr &&
        (op.batch_pages > op.nr_pages || op.session_id != nullptr)) {
      resolved = engine_.ResolveGroup(op.path);
      if (!resolved.ok()) return Refused(resolved.status());
      handle = &*resolved;
    }
    if (op.session_id != nullptr)
      return Answered(InSession(identity, *op.session_id, *handle, op,
                                std::max(op.nr_pages, op.batch_pages), charge));
    return Answered(handle != nullptr ? charge(*handle)
                                      : engine_.Charge(op.path, op.nr_pages,
                                                       op.kind, op.cpu));
  }
  absl::StatusOr<GroupHandle> resolved;
  if (handle == nullptr && op.session_id != nullptr) {
    resolved = engine_.ResolveGroup(op.path);
    if (!resolved.ok()) return Refused(resolved.status());
    handle = &*resolved;
  }
  auto uncharge = [&](const GroupHandle& group) {
    return engine_.Uncharge(group, op.nr_pages, op.kind, op.cpu);
  };
  if (op.session_id != nullptr)
    return Answered(InSession(identity, *op.session_id, *handle, op,
                              op.nr_pages, uncharge));
  return Answered(handle != nullptr ? uncharge(*handle)
                                    : engine_.Uncharge(op.path, op.nr_pages,
                                                       op.kind, op.cpu));
}

PageAnswer PageOps::Apply(const std::string& identity, const PageOp& op,
                          PageOpResume* resume, absl::Status* store_error) {
  // Without a request_id: no lock, no copy of the request.
  if (op.request_id == nullptr) return ApplyToEngine(identity, op, nullptr);

  // The id is scoped to the group instance: resolve it first (a missing
  // group takes scope 0), apply through its handle (a group re-created
  // meanwhile is NOT_FOUND, never charged under the old one's scope).
  absl::StatusOr<GroupHandle> handle = engine_.ResolveGroup(op.path);
  const uint64_t generation =
      handle.ok() ? groups_.GenerationOf(handle->id()) : 0;
  std::string key = DedupKey(identity, generation, *op.request_id);
  // A session's request is another request than the same one unowned (or
  // in another session): the session_id is part of what a retry repeats;
  // so is a client's batch.
  std::string fingerprint_path(op.path);
  if (op.session_id != nullptr)
    absl::StrAppend(&fingerprint_path, "\nsession_id=", *op.session_id);
  if (op.batch_pages != 0)
    absl::StrAppend(&fingerprint_path, "\nbatch_pages=", op.batch_pages);
  const DedupFingerprint::Method method =
      op.charge ? DedupFingerprint::Method::kCharge
                : DedupFingerprint::Method::kUncharge;

  DedupTable::Entry entry;
  if (resume != nullptr && resume->entry.ticket != 0 &&
      resume->entry.key == key) {
    // The rerun of a deferred call: its entry is still in flight.
    entry = std::move(resume->entry);
  } else {
    // The group was re-created meanwhile (another scope): the deferred
    // attempt's entry will not be completed.
    if (resume != nullptr && resume->entry.ticket != 0)
      request_ids_.Abandon(resume->entry);
    std::optional<DedupAnswer> replay;
    if (absl::Status s = request_ids_.Begin(
            std::move(key),
            DedupFingerprint::Of(method, fingerprint_path, op.nr_pages,
                                 op.wire_kind, op.wire_cpu),
            *op.request_id, &entry, &replay);
        !s.ok())
      return Refused(std::move(s));
    if (replay.has_value()) {
      PageAnswer answer;
      answer.status = std::move(replay->status);
      answer.nr_pages = replay->nr_pages;
      answer.throttle_us = replay->throttle_us;
      answer.replayed = true;
      return answer;
    }
  }
  if (resume != nullptr) resume->entry = DedupTable::Entry();

  PageAnswer answer = handle.ok() ? ApplyToEngine(identity, op, &*handle)
                                  : Refused(handle.status());
  if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(answer.status))) {
    // Not an answer: the call runs again on a waiting thread, which
    // completes this entry (a retry of the id meanwhile: ABORTED, in
    // flight). Without a resume state there is no rerun to complete it.
    if (resume != nullptr) {
      resume->entry = std::move(entry);
    } else {
      request_ids_.Abandon(entry);
    }
    return answer;
  }
  *store_error = request_ids_.Complete(
      entry,
      Stored(identity, op, generation, std::move(fingerprint_path), answer),
      DedupAnswer{answer.status, answer.nr_pages, answer.throttle_us, {}});
  return answer;
}

}  // namespace cgacct
