// BatchRunner: ChargeBatch requests and ChargeStream messages (docs/DESIGN.md
// §4.6): many charges and uncharges per message, tuned for throughput.
//
// Each op passes the stages a Charge or Uncharge passes, in the same order
// and with the same codes and messages (validate -> authorize -> resolve ->
// session -> engine), minus request_id; a keyed request runs them all
// inside one batch-level de-duplication (idempotency_key), persisted with
// the response. What is saved is per-op overhead: a path is validated,
// authorized and resolved to a GroupHandle once per call (ChargeBatch) or
// once per stream (ChargeStream) and looked up again only when it differs
// from the previous op's, and results are written into reused protobuf
// objects.
//
// Thread safety: thread-compatible; one runner per call or stream, used by
// one thread at a time.
#ifndef CGACCT_SERVER_PIPELINE_BATCH_H_
#define CGACCT_SERVER_PIPELINE_BATCH_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/engine.h"
#include "engine/group_handle.h"
#include "server/auth/authorizer.h"
#include "server/cluster/cluster_node.h"
#include "server/idempotency/dedup_table.h"
#include "server/metrics/rpc_metrics.h"
#include "server/pipeline/call.h"
#include "server/pipeline/groups.h"
#include "server/pipeline/ops.h"
#include "server/pipeline/page_ops.h"

namespace cgacct {

// What a BatchRunner uses of the pipeline; every member outlives the
// runners (the Pipeline owns them).
struct BatchDeps {
  Engine& engine;
  const OpValidator& validator;
  const Authorizer* authorizer;  // may be null
  PageOps& page_ops;
  GroupOps& groups;
  DedupTable& batch_keys;
  RpcMetrics& metrics;
  // Cluster mode: each op's path must be in a shard this node owns now
  // (server/cluster/routing.h); null in single-node mode.
  const ClusterNode* cluster = nullptr;
};

class BatchRunner {
 public:
  // `caller`: who sends the ops (each distinct path is authorized for
  // Access::kWrite once, when first resolved; the identity owns the
  // sessions ops name and scopes idempotency keys).
  BatchRunner(const BatchDeps& deps, Caller caller)
      : deps_(deps), caller_(std::move(caller)) {}
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // Runs `request` into `response`: one result per op, in order; a keyed
  // request at most once per (identity, generations of its groups,
  // idempotency_key) inside the window, its response persisted. Errors of
  // the request (nothing applied): INVALID_ARGUMENT more than kMaxBatchOps
  // ops, a bad key, or the key used for other ops; ABORTED the same key is
  // in flight. Inside a RemoteDrainDeferral::Scope a charge op that would
  // wait for sessions' drain answers stops the run: the ops before it
  // applied (their results in `response`), the result
  // IsRemoteDrainDeferred(), deferred() true. Then call Run again, outside a
  // Scope, with the same request and response: it resumes at that op.
  absl::Status Run(const v1::ChargeBatchRequest& request,
                   v1::ChargeBatchResponse* response);

  // The stream's caller was authenticated again (an access control reload):
  // its paths are authorized anew (the handle cache is emptied).
  void SetCaller(Caller caller) {
    caller_ = std::move(caller);
    Forget();
  }

  // A deferred run is about to resume but the call is gone (`abort`:
  // CANCELLED or DEADLINE_EXCEEDED): the ops from the deferred one on are
  // answered with it instead of applied (a keyed request still completes).
  void AbortDeferred(absl::Status abort) { abort_ = std::move(abort); }
  bool deferred() const { return deferred_; }

 private:
  // The keyed request's check and DedupTable::Begin(): OK with keyed_ set
  // when the ops are to be applied; OK without it when `response` holds the
  // replayed answer; an error otherwise.
  absl::Status BeginKeyed(const v1::ChargeBatchRequest& request,
                          v1::ChargeBatchResponse* response);
  absl::Status Steps(const v1::ChargeBatchRequest& request,
                     v1::ChargeBatchResponse* response);
  // The ops from next_op_ on; see Run.
  absl::Status RunOps(const v1::ChargeBatchRequest& request,
                      v1::ChargeBatchResponse* response);
  // False: the op was deferred (see Run), nothing of it applied.
  bool ApplyOp(int index, const v1::ChargeOp& op, v1::OpResult* result);
  // `op` through `handle`, in its session's name if it names one.
  absl::Status ApplyToEngine(GroupHandle handle, const PageOp& op,
                             v1::OpResult* result, bool* session_refused);
  // The op's answer is `status` (not OK); a failed charge op is counted as
  // a failed Charge would be.
  void Fail(int index, const v1::ChargeOp& op, const absl::Status& status,
            v1::OpResult* result);

  // The handle cache: paths that passed validation and authorization.
  const GroupHandle* Find(absl::string_view path);
  const GroupHandle* Insert(absl::string_view path, GroupHandle handle);
  void Forget();

  const BatchDeps& deps_;
  Caller caller_;

  // Where a request stands between a deferred Run and the one resuming it.
  bool begun_ = false;     // the key checked (and, keyed, Begin() done)
  int next_op_ = 0;        // the first op not yet applied
  bool deferred_ = false;  // next_op_ was deferred: its rerun resumes
  absl::Status abort_;     // see AbortDeferred
  bool keyed_ = false;     // a batch_keys entry in flight
  DedupTable::Entry entry_;
  uint64_t scope_ = 0;
  uint64_t digest_ = 0;
  // Pages the valid charge ops of the current request may still charge
  // (max_charge_pages per request; unused when that is 0).
  uint64_t budget_ = 0;

  absl::flat_hash_map<std::string, GroupHandle> cache_;
  // The entry of the previous op, so a run of ops on one path skips hashing.
  std::string last_path_;
  GroupHandle* last_ = nullptr;  // into cache_; null after any rehash risk
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_BATCH_H_
