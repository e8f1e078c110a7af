// The validation stage (docs/DESIGN.md §4.3, §4.11): a request's fields
// checked once, in one order, into a typed op that every later stage reads
// instead of the request. The checks are the engine's exported ones
// (engine/group_path.h, engine/validate.h), so a client reads the engine's
// words whichever RPC it used; only what the engine cannot see is checked
// here (proto enums, the cpu range, the per-call page cap, client keys).
//
// Thread safety: OpValidator is immutable (thread-safe); PageOp is a value.
#ifndef CGACCT_SERVER_PIPELINE_OPS_H_
#define CGACCT_SERVER_PIPELINE_OPS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/types.h"
#include "engine/validate.h"
#include "server/idempotency/dedup_table.h"

namespace cgacct {

// The documented cap on ChargeBatch ops per request (EngineInfo.max_batch_ops);
// a larger batch is INVALID_ARGUMENT.
inline constexpr uint32_t kMaxBatchOps = 4096;
// Default of --max_charge_pages: 2^20 pages (4 GiB of 4 KiB pages), 2^31
// times below PAGE_COUNTER_MAX at 4 KiB pages.
inline constexpr uint64_t kDefaultMaxChargePages = uint64_t{1} << 20;

// A Charge, an Uncharge or one ChargeOp, validated. Views into the request:
// valid while it is.
struct PageOp {
  absl::string_view path;  // a valid group path, not the root
  uint64_t nr_pages = 0;   // 1..PAGE_COUNTER_MAX (charges: within the cap)
  PageKind kind = PageKind::kAnon;
  int wire_kind = 0;       // cgacct.v1.PageKind as sent (fingerprints)
  std::optional<int> cpu;  // the engine's CPU, in range; none: the thread's
  std::optional<uint32_t> wire_cpu;  // as sent (fingerprints)
  bool charge = true;
  uint64_t batch_pages = 0;  // a Charge's client batch (>= nr_pages); 0: none
  const std::string* request_id = nullptr;  // valid when not null
  const std::string* session_id = nullptr;  // not null: in a session's name
  // An Uncharge's `restock` (with a session): its client stocks again.
  bool restock = false;
};

class OpValidator {
 public:
  // `max_charge_pages` 0: only PAGE_COUNTER_MAX.
  OpValidator(uint64_t page_counter_max, int nr_cpus, uint64_t max_charge_pages)
      : page_counter_max_(page_counter_max),
        nr_cpus_(nr_cpus),
        max_charge_pages_(max_charge_pages) {}

  uint64_t max_charge_pages() const { return max_charge_pages_; }

  // In this order, the first failure answered (INVALID_ARGUMENT naming the
  // field): path (grammar), the root (never charged directly), nr_pages,
  // the per-call cap (charges), kind, cpu, batch_pages (Charge), request_id
  // (`request_ids`' own checks), restock without session_id (Uncharge).
  absl::Status Charge(const v1::ChargeRequest& request,
                      const DedupTable& request_ids, PageOp* op) const;
  absl::Status Uncharge(const v1::UnchargeRequest& request,
                        const DedupTable& request_ids, PageOp* op) const;
  // One ChargeOp of a batch, in the same order. `path_checked`: its path
  // passed before in this call or stream (the batch runner's cache), so
  // its checks are not run again.
  // Inline for the common case (a cached path, arguments in range: one op
  // of every ChargeStream message); anything else, errors included, goes
  // through the out-of-line checks in their order.
  absl::Status BatchOp(const v1::ChargeOp& request, bool path_checked,
                       PageOp* op) const {
    const uint64_t nr_pages = request.nr_pages();
    const bool charge = !request.uncharge();
    const int kind = request.kind();
    if (ABSL_PREDICT_TRUE(
            path_checked && NrPagesValid(nr_pages, page_counter_max_) &&
            (!charge || max_charge_pages_ == 0 ||
             nr_pages <= max_charge_pages_) &&
            (kind == v1::PAGE_KIND_ANON || kind == v1::PAGE_KIND_FILE) &&
            (!request.has_cpu() ||
             request.cpu() < static_cast<uint64_t>(nr_cpus_)))) {
      op->path = request.path();
      op->nr_pages = nr_pages;
      op->kind = kind == v1::PAGE_KIND_ANON ? PageKind::kAnon : PageKind::kFile;
      op->wire_kind = kind;
      if (request.has_cpu()) {
        op->cpu = static_cast<int>(request.cpu());
        op->wire_cpu = static_cast<uint32_t>(request.cpu());
      } else {
        op->cpu.reset();
        op->wire_cpu.reset();
      }
      op->charge = charge;
      op->session_id = request.has_session_id() ? &request.session_id() : nullptr;
      return absl::OkStatus();
    }
    return CheckBatchOp(request, path_checked, op);
  }
  // A batch before any op: at most kMaxBatchOps ops.
  absl::Status Batch(const v1::ChargeBatchRequest& request) const;

  // A charge of `nr_pages` is within max_charge_pages (`field` is named in
  // the message).
  absl::Status CheckChargeCap(uint64_t nr_pages, absl::string_view field) const;

 private:
  // BatchOp() past its fast path: every check, in order.
  absl::Status CheckBatchOp(const v1::ChargeOp& request, bool path_checked,
                            PageOp* op) const;
  absl::Status PathAndArgs(absl::string_view path, bool path_checked,
                           uint64_t nr_pages, int wire_kind,
                           std::optional<uint64_t> wire_cpu, bool charge,
                           PageOp* op) const;

  const uint64_t page_counter_max_;
  const int nr_cpus_;
  const uint64_t max_charge_pages_;  // 0 = none
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_PIPELINE_OPS_H_
