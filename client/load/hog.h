// cgacct-load's memory hogs (--scenario=hog, and half of seed-rstat): each
// hog charges ANON pages in --hog_chunk_pages chunks into its own group
// GROUP/hog-i until the group's memory.max refuses a charge, then uncharges
// all it holds and starts again (a "cycle"). A refused charge of at most
// 8 pages is an OOM kill of the hog, a costlier one an ENOMEM without OOM
// (ClassifyRefusedCharge()).
//
// Thread safety: a Hog is thread-compatible: one thread runs it.
#ifndef CGACCT_CLIENT_LOAD_HOG_H_
#define CGACCT_CLIENT_LOAD_HOG_H_

#include <cstdint>
#include <string>

#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/load/load_report.h"
#include "client/load/options.h"
#include "client/load/run_control.h"

namespace cgacct::load {

// GROUP/hog-i, hog i's own group.
std::string HogPath(const LoadOptions& o, int i);

// The step between a hog's slots: 0 (each hog stays on a slot of its own)
// when there are as many slots as hogs, else the number of hogs, so that
// together they charge through every one of the `nr_slots` slots.
uint32_t HogSlotStep(uint32_t nr_slots, int hogs);

// One memory hog, charging into its own group. Its k-th charge goes through
// slot (first_slot + k * step) mod nr_slots, slot j being per-CPU slot
// j * nr_cpus / nr_slots; it uncharges through the slot of its last charge.
class Hog {
 public:
  Hog(v1::Accounting::Stub& stub, const LoadOptions& o, std::string path,
      uint32_t first_slot, uint32_t step, uint32_t nr_slots, uint32_t nr_cpus,
      uint64_t page_size_bytes);

  // Charges until OOM, uncharges everything, repeats until stopped; then
  // uncharges what it still holds.
  void Run(RunControl& control, LiveCounters& live, IntervalRecorder& interval,
           WorkerResult& result);

  // The CPU of the slot the next charge goes through.
  uint32_t cpu() const { return cpu_; }

  // Moves on to the next slot (nothing when step is 0).
  void NextSlot();

 private:
  // A charge was refused at memory.max: counted as an OOM kill or a costly
  // ENOMEM, then everything uncharged.
  void OnRefused(bool measured, uint64_t ns, LiveCounters& live,
                 IntervalRecorder& interval, WorkerResult& result);

  // Uncharges every page this hog holds; false if that failed (retried at
  // the next OOM or at the end).
  bool ReleaseAll(LiveCounters& live, WorkerResult& result);

  uint32_t CpuOf(uint32_t slot) const;

  v1::Accounting::Stub& stub_;
  const LoadOptions& o_;
  const std::string path_;
  uint32_t slot_;        // current slot
  const uint32_t step_;  // 0: the hog stays on one slot
  const uint32_t nr_slots_;
  const uint32_t nr_cpus_;
  uint32_t cpu_ = 0;  // the current slot's CPU
  const uint64_t page_size_bytes_;
  uint64_t held_pages_ = 0;  // ANON pages charged and not yet uncharged
  bool unsure_ = false;      // a call's outcome is unknown: re-read the stats
};

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_HOG_H_
