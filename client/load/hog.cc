#include "client/load/hog.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/cli/grpc_util.h"
#include "client/load/server_calls.h"

namespace cgacct::load {

std::string HogPath(const LoadOptions& o, int i) {
  return absl::StrCat(o.group, "/hog-", i);
}

uint32_t HogSlotStep(uint32_t nr_slots, int hogs) {
  return nr_slots == static_cast<uint32_t>(hogs) ? 0
                                                 : static_cast<uint32_t>(hogs);
}

Hog::Hog(v1::Accounting::Stub& stub, const LoadOptions& o, std::string path,
         uint32_t first_slot, uint32_t step, uint32_t nr_slots,
         uint32_t nr_cpus, uint64_t page_size_bytes)
    : stub_(stub),
      o_(o),
      path_(std::move(path)),
      slot_(first_slot % nr_slots),
      step_(step % nr_slots),
      nr_slots_(nr_slots),
      nr_cpus_(nr_cpus),
      page_size_bytes_(page_size_bytes) {
  cpu_ = CpuOf(slot_);
}

void Hog::Run(RunControl& control, LiveCounters& live,
              IntervalRecorder& interval, WorkerResult& result) {
  v1::ChargeRequest request;
  request.set_path(path_);
  request.set_nr_pages(o_.hog_chunk_pages);
  request.set_kind(v1::PAGE_KIND_ANON);
  v1::ChargeResponse response;
  control.go.WaitForNotification();
  while (!control.stopping()) {
    request.set_cpu(cpu_);
    const TimedStatus call =
        TimedCharge(stub_, request, &response, o_.rpc_timeout);
    // Calls started in the warm-up change the books but no figure.
    const bool measured = control.Measured(call.sent);
    if (call.status.ok()) {
      if (measured) RecordCharge(call.ns, o_.hog_chunk_pages, interval, result);
      // A charge is all or nothing: what was asked is what is held.
      held_pages_ += o_.hog_chunk_pages;
      live.charges.fetch_add(1, std::memory_order_relaxed);
      NextSlot();
      if (response.throttle_us() > 0) {
        const uint64_t us = SleepThrottle(response.throttle_us());
        if (measured) result.throttle_us += us;
      }
    } else if (call.status.error_code() ==
               grpc::StatusCode::RESOURCE_EXHAUSTED) {
      OnRefused(measured, call.ns, live, interval, result);
    } else {
      if (measured) interval.Error();
      NoteError("Charge", call.status, live, result);
      if (IsAmbiguous(call.status.error_code())) unsure_ = true;
    }
  }
  ReleaseAll(live, result);
}

void Hog::NextSlot() {
  if (step_ == 0) return;
  slot_ = (slot_ + step_) % nr_slots_;
  cpu_ = CpuOf(slot_);
}

void Hog::OnRefused(bool measured, uint64_t ns, LiveCounters& live,
                    IntervalRecorder& interval, WorkerResult& result) {
  // A chunk of <= 8 pages: the kernel hog is OOM-killed. A costlier chunk:
  // its allocation fails with ENOMEM (no OOM, only `max`), and the hog
  // frees what it holds. Either way: uncharge all.
  if (measured) {
    RecordLatency(ns, interval, result);
    if (ClassifyRefusedCharge(o_.hog_chunk_pages) == HogRefusal::kOomKill) {
      ++result.ooms;
    } else {
      ++result.costly_enomems;
    }
  }
  live.ooms.fetch_add(1, std::memory_order_relaxed);
  if (ReleaseAll(live, result) && measured) ++result.cycles;
}

bool Hog::ReleaseAll(LiveCounters& live, WorkerResult& result) {
  uint64_t nr_pages = held_pages_;
  if (unsure_) {
    // A call timed out: the group's exact stats say what it really holds.
    absl::StatusOr<uint64_t> anon =
        ReadStatPages(stub_, path_, page_size_bytes_, o_.rpc_timeout);
    if (anon.ok()) nr_pages = *anon;
  }
  if (nr_pages == 0) {
    held_pages_ = 0;
    unsure_ = false;
    return true;
  }
  const grpc::Status status = UnchargePages(
      stub_, path_, nr_pages, v1::PAGE_KIND_ANON, cpu_, o_.rpc_timeout);
  if (!status.ok()) {
    NoteError("Uncharge", status, live, result);
    unsure_ = true;  // reconcile from the stats next time
    return false;
  }
  held_pages_ = 0;
  unsure_ = false;
  return true;
}

uint32_t Hog::CpuOf(uint32_t slot) const {
  return static_cast<uint32_t>(uint64_t{slot} * nr_cpus_ / nr_slots_);
}

}  // namespace cgacct::load
