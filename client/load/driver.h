// The run driver of cgacct-load's stat-reader, hog, seed-rstat and reclaim
// scenarios (docs/DESIGN.md §6.2): connects, creates the groups, starts the
// workers (stat readers, hogs, writers and the reclaimer), runs the warm-up
// and the measured window with a progress line a second on stderr, stops
// and joins the workers, deletes the worker groups, reads the server's
// figures after the run, and writes the report (stdout, --json, --chart).
//
// seed-rstat has no file of its own: it is stat readers and hogs at once,
// the shape of the kernel benchmark behind "cgroup/rstat: avoid disabling
// irqs for O(num_cpu)" (400 stat readers + 400 hogs charging until OOM).
//
// Group lifecycle: GROUP (and missing ancestors) is created if missing and
// left in place; for hog scenarios its memory.max is set to --hog_max_bytes.
// Each hog owns GROUP/hog-i, so what it uncharges is exactly what it charged
// (a call that timed out is reconciled from the group's exact `anon`
// stat). At the end every hog uncharges what it still holds and its group is
// deleted; the report shows the pages the server reparented on deletion,
// which must be 0. A hog group left over by a killed run is emptied first.
// Run one cgacct-load per --group at a time: two runs on the same group share
// the hog groups and corrupt each other's books.
//
// Thread safety: RunLoad runs once per process, from main; the helpers below
// are pure.
#ifndef CGACCT_CLIENT_LOAD_DRIVER_H_
#define CGACCT_CLIENT_LOAD_DRIVER_H_

#include <cstdint>
#include <string>

#include "cgacct/v1/accounting.pb.h"
#include "client/load/load_report.h"
#include "client/load/options.h"
#include "client/load/run_control.h"

namespace cgacct::load {

// Runs the scenario `o` names and prints its report. Returns the exit
// status: 0 after a clean run; 1 when the server is unreachable or the
// set-up fails (one line on stderr); 3 when the run finished but some RPCs
// failed unexpectedly (or the worker groups' books disagree); 130 when
// interrupted (the report is still printed).
int RunLoad(const LoadOptions& o);

// The report's description of the run: what `o` asked for and what the
// server said of itself (`info`); the hogs charge through `hog_cpus` slots.
LoadReport ReportHeader(const LoadOptions& o, const v1::EngineInfo& info,
                        uint32_t hog_cpus);

// Adds one worker's results to the report: a stat reader's to the reads, a
// hog's or writer's to the charges. The first error seen is kept.
void AddWorkerResult(const WorkerResult& r, bool reader, LoadReport& report);

// The exit status of a finished run (0 or 3, 130 when `interrupted`), and
// the summary line it prints on stderr for 3 in *summary ("" otherwise).
int RunExitStatus(const LoadReport& report, bool interrupted,
                  std::string* summary);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_DRIVER_H_
