// The validation stage (server/pipeline/ops.h).
#include "server/pipeline/ops.h"

#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "engine/validate.h"
#include "server/common/wire.h"

namespace cgacct {

absl::Status OpValidator::CheckChargeCap(uint64_t nr_pages,
                                         absl::string_view field) const {
  if (max_charge_pages_ == 0 || nr_pages <= max_charge_pages_)
    return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " ", nr_pages, " pages exceed the per-call cap of ",
                   max_charge_pages_,
                   " pages (--max_charge_pages, EngineInfo.max_charge_pages)"));
}

absl::Status OpValidator::PathAndArgs(absl::string_view path, bool path_checked,
                                      uint64_t nr_pages, int wire_kind,
                                      std::optional<uint64_t> wire_cpu,
                                      bool charge, PageOp* op) const {
  if (!path_checked) {
    if (absl::Status s = ValidateGroupPath(path); !s.ok()) return s;
    // The root is charged only through its children (engine/group_path.h).
    if (absl::Status s = RefuseRootCharge(path); !s.ok()) return s;
  }
  if (absl::Status s = ValidateNrPages(nr_pages, page_counter_max_); !s.ok())
    return s;
  if (charge) {
    if (absl::Status s = CheckChargeCap(nr_pages, "nr_pages"); !s.ok())
      return s;
  }
  const PageKind kind = PageKindFromProto(wire_kind);
  if (absl::Status s = ValidatePageKind(kind); !s.ok()) return s;
  absl::StatusOr<std::optional<int>> cpu = CpuFromProto(wire_cpu, nr_cpus_);
  if (!cpu.ok()) return cpu.status();
  op->path = path;
  op->nr_pages = nr_pages;
  op->kind = kind;
  op->wire_kind = wire_kind;
  op->cpu = *cpu;
  // In range now (below nr_cpus): the uint32 the fingerprints keep.
  op->wire_cpu = wire_cpu.has_value()
                     ? std::optional<uint32_t>(static_cast<uint32_t>(*wire_cpu))
                     : std::nullopt;
  op->charge = charge;
  return absl::OkStatus();
}

namespace {

// A Charge's or Uncharge's request_id (its table's own checks) and
// session_id, last in the order.
template <typename Request>
absl::Status KeysOf(const Request& request, const DedupTable& request_ids,
                    PageOp* op) {
  if (request.has_request_id()) {
    if (absl::Status s = request_ids.ValidateKey(request.request_id()); !s.ok())
      return s;
    op->request_id = &request.request_id();
  }
  if (request.has_session_id()) op->session_id = &request.session_id();
  return absl::OkStatus();
}

}  // namespace

absl::Status OpValidator::Charge(const v1::ChargeRequest& request,
                                 const DedupTable& request_ids,
                                 PageOp* op) const {
  const std::optional<uint64_t> cpu =
      request.has_cpu() ? std::optional<uint64_t>(request.cpu()) : std::nullopt;
  if (absl::Status s =
          PathAndArgs(request.path(), /*path_checked=*/false,
                      request.nr_pages(), request.kind(), cpu, true, op);
      !s.ok())
    return s;
  if (request.has_batch_pages()) {
    const uint64_t batch = request.batch_pages();
    if (batch < request.nr_pages())
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_pages ", batch, " is below nr_pages ", request.nr_pages(),
          " (a batch is at least what is needed)"));
    if (!NrPagesValid(batch, page_counter_max_))
      return absl::InvalidArgumentError(absl::StrCat(
          "batch_pages ", batch, " out of range [1, ", page_counter_max_, "]"));
    if (absl::Status s = CheckChargeCap(batch, "batch_pages"); !s.ok())
      return s;
    op->batch_pages = batch;
  }
  return KeysOf(request, request_ids, op);
}

absl::Status OpValidator::Uncharge(const v1::UnchargeRequest& request,
                                   const DedupTable& request_ids,
                                   PageOp* op) const {
  const std::optional<uint64_t> cpu =
      request.has_cpu() ? std::optional<uint64_t>(request.cpu()) : std::nullopt;
  if (absl::Status s =
          PathAndArgs(request.path(), /*path_checked=*/false,
                      request.nr_pages(), request.kind(), cpu, false, op);
      !s.ok())
    return s;
  if (absl::Status s = KeysOf(request, request_ids, op); !s.ok()) return s;
  if (request.restock() && !request.has_session_id()) {
    return absl::InvalidArgumentError(
        "restock: only in a session's name (set session_id)");
  }
  op->restock = request.restock();
  return absl::OkStatus();
}

absl::Status OpValidator::CheckBatchOp(const v1::ChargeOp& request,
                                       bool path_checked, PageOp* op) const {
  const std::optional<uint64_t> cpu =
      request.has_cpu() ? std::optional<uint64_t>(request.cpu()) : std::nullopt;
  if (absl::Status s =
          PathAndArgs(request.path(), path_checked, request.nr_pages(),
                      request.kind(), cpu, !request.uncharge(), op);
      !s.ok())
    return s;
  op->session_id = request.has_session_id() ? &request.session_id() : nullptr;
  return absl::OkStatus();
}

absl::Status OpValidator::Batch(const v1::ChargeBatchRequest& request) const {
  if (request.ops_size() > static_cast<int>(kMaxBatchOps))
    return absl::InvalidArgumentError(
        absl::StrCat("ops has ", request.ops_size(), " entries; at most ",
                     kMaxBatchOps, " per request (EngineInfo.max_batch_ops)"));
  return absl::OkStatus();
}

}  // namespace cgacct
