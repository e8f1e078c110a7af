// cgacct-load --scenario=netperf (docs/DESIGN.md §6.2): the shape of the
// benchmark behind "memcg: optimize charge codepath" (2022) through the
// service.
//
// --streams workers, each on its own connection, charge and uncharge
// --pages ANON pages (3: a 10K send) in a closed loop, in
//   --hierarchy=root  GROUP, a group directly under the root, or
//   --hierarchy=deep  GROUP/mid/leaf, three levels down, with memory.min and
//                     memory.low on GROUP (--protection_bytes; default half
//                     of all streams' resident pages, so usage stays above
//                     it: the case part (A) of the kernel series targets).
// Each stream first charges --resident_pages (its "socket buffer" that stays
// charged) and uncharges them at the end.
//   --rpc=stream  one ChargeStream per stream; each message carries --batch
//                 ops (charge, uncharge, charge, ...; --batch even), one
//                 message in flight per stream;
//   --rpc=batch   the same messages as unary ChargeBatch calls;
//   --rpc=unary   unary Charge and Uncharge calls, one op each;
//   --rpc=library one cgacct::client::Client (one session) shared by
//                 --streams threads, each charging and uncharging through
//                 the library's per-CPU stock (a "message" is --batch ops
//                 timed together); the report adds charges/s, stock hits
//                 and the server's Charge+Uncharge RPCs per charge
//                 (grpc_server_handled_total scraped before and after).
// The report (netperf_report.h): ops/s (every charge and every uncharge is
// an op), messages/s, ops per message, latency per message (round trip), op
// errors, and the ANON pages left in the group after the run (0 when the
// books agree).
//
// Thread safety: RunNetperf runs once per process, from main.
#ifndef CGACCT_CLIENT_LOAD_NETPERF_H_
#define CGACCT_CLIENT_LOAD_NETPERF_H_

#include <cstdint>
#include <string>

#include "client/load/options.h"

namespace cgacct::load {

// Runs the scenario and prints its report. Returns the process exit code:
// 0 clean, 1 set-up failed, 3 op errors or books that do not balance, 130
// interrupted.
int RunNetperf(const NetperfOptions& o);

// memory.min = memory.low of GROUP with --hierarchy=deep: --protection_bytes,
// or half of all streams' resident pages; 0 with --hierarchy=root.
uint64_t NetperfProtectionBytes(const NetperfOptions& o,
                                uint64_t page_size_bytes);

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_NETPERF_H_
