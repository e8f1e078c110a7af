// PageOps: the stages of one Charge or Uncharge after validation and
// authorization (docs/DESIGN.md §2.4): resolve -> dedup -> session -> engine
// -> persist. A request without a request_id or session skips the first
// three (no lock, no copy: the unkeyed hot path is the engine's path call).
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_PIPELINE_PAGE_OPS_H_
#define CGACCT_SERVER_PIPELINE_PAGE_OPS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/group_handle.h"
#include "server/idempotency/dedup_table.h"
#include "server/pipeline/groups.h"
#include "server/pipeline/ops.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

// The answer of one page op (what a request_id entry stores).
struct PageAnswer {
  absl::Status status;
  uint64_t nr_pages = 0;     // charged (a batch may be more) or uncharged
  uint64_t throttle_us = 0;  // charges: memory.high's delay
  bool replayed = false;     // a request_id's stored answer
};

// A keyed Charge deferred to a drain-wait thread keeps its request_id entry
// in flight (a retry meanwhile is ABORTED "in flight"); its rerun completes
// that entry instead of beginning another.
struct PageOpResume {
  DedupTable::Entry entry;  // ticket 0: none
};

class PageOps {
 public:
  // Every reference must outlive the object.
  PageOps(Engine& engine, GroupOps& groups, SessionRegistry& sessions,
          DedupTable& request_ids);
  PageOps(const PageOps&) = delete;
  PageOps& operator=(const PageOps&) = delete;

  // Applies `op` (validated, authorized) for `identity`: at most once per
  // (identity, group generation, request_id) inside the window when it has
  // a request_id (a missing group is scope 0: its NOT_FOUND is stored and
  // replayed like any answer), in the session's name when it names one.
  // The answer is persisted before it is returned. `resume` (charges that
  // may be deferred): a deferred answer (IsRemoteDrainDeferred) leaves the
  // entry in flight in *resume; the next call with it completes it.
  // *store_error: the state store failed to persist the answer.
  PageAnswer Apply(const std::string& identity, const PageOp& op,
                   PageOpResume* resume, absl::Status* store_error);

  // `op` through the session named by `session_id`: the registry's
  // BeginOp/EndOp around the engine call (server/sessions/
  // session_registry.h). `group`: the op's group instance, resolved.
  // `reserve_pages`: what the session reserves (a charge's batch). Errors:
  // the session's (NOT_FOUND, RESOURCE_EXHAUSTED, FAILED_PRECONDITION;
  // nothing applied; *session_refused set if not null) or the engine's.
  template <typename EngineCall>
  auto InSession(const std::string& identity, const std::string& session_id,
                 GroupHandle group, const PageOp& op, uint64_t reserve_pages,
                 EngineCall apply, bool* session_refused = nullptr)
      -> decltype(apply(std::declval<const GroupHandle&>()));

 private:
  // The engine call of `op`, through `handle` when not null.
  PageAnswer ApplyToEngine(const std::string& identity, const PageOp& op,
                           const GroupHandle* handle);

  Engine& engine_;
  GroupOps& groups_;
  SessionRegistry& sessions_;
  DedupTable& request_ids_;
};

template <typename EngineCall>
auto PageOps::InSession(const std::string& identity,
                        const std::string& session_id, GroupHandle group,
                        const PageOp& op, uint64_t reserve_pages,
                        EngineCall apply, bool* session_refused)
    -> decltype(apply(std::declval<const GroupHandle&>())) {
  absl::StatusOr<SessionRegistry::Op> session_op = sessions_.BeginOp(
      identity, session_id, group, op.path, op.kind, reserve_pages, op.charge);
  if (!session_op.ok()) {
    if (session_refused != nullptr) *session_refused = true;
    return session_op.status();
  }
  auto result = apply(group);
  if (op.charge && result.ok()) sessions_.ChargeApplied(*session_op);
  // A charge holds what it charged (a batch may have dropped to less).
  sessions_.EndOp(*session_op, result.ok(),
                  op.charge && result.ok() ? result->nr_pages : reserve_pages,
                  /*refilled=*/result.ok() &&
                      (op.charge ? result->nr_pages > op.nr_pages
                                 : op.restock));
  return result;
}

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_PAGE_OPS_H_
