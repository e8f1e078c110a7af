// cgacct-load's stat readers (--scenario=stat-reader, and half of
// seed-rstat): GetStats on --group with --flush, one call in flight per
// reader.
//
// Closed loop (the default): each reader sends its next call when the last
// one returns, latency from send to answer; the readers are asynchronous
// calls driven by --io_threads threads (ReaderDriver), or a blocking thread
// each with --io_threads=0 (RunStatReader). Open loop (--rate=N): N calls
// per second in total on a fixed schedule spread evenly over the readers
// (open_loop.h), a blocking thread each (RunStatReader); latency runs from
// each call's intended send time, as wrk2 measures it, so a server stall
// counts against every call it delayed.
//
// Thread safety: RunStatReader runs on its reader's own thread; a
// ReaderDriver is built and filled (Add) by one thread, then Run by one
// thread; the results are read after join().
#ifndef CGACCT_CLIENT_LOAD_STAT_READER_H_
#define CGACCT_CLIENT_LOAD_STAT_READER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/load/load_report.h"
#include "client/load/options.h"
#include "client/load/run_control.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::load {

// The bookkeeping of one GetStats answer that took `ns`: the live counters
// and errors (over the whole run, warm-up included: never hidden), and, if
// the call is `measured`, the sent count and the latency of a success.
void CountRead(const grpc::Status& status, uint64_t ns, bool measured,
               LiveCounters& live, IntervalRecorder& interval,
               WorkerResult& result);

// A stat reader on a blocking thread: GetStats on the group, closed loop,
// or with --rate its share of the rate (reader `index` of o.readers),
// sleeping (sleep_until) until each call is due. Open loop keeps a thread
// per reader: the asynchronous driver below could only wait for a due time
// with grpc::Alarm, whose timers fire on a millisecond grid, or take the
// send from a timer thread; both added 0.4-0.9 ms to the p50 at 1,000-4,000
// calls/s in side-by-side runs (tests/bench/RESULTS.md, "cgacct-load
// against h2load"). (Closed loop with this function is what
// --io_threads=0 selects.)
void RunStatReader(v1::Accounting::Stub& stub, const LoadOptions& o, int index,
                   RunControl& control, LiveCounters& live,
                   IntervalRecorder& interval, WorkerResult& result);

// The closed-loop stat readers: each reader is one GetStats call in flight
// at a time on its own stub (channel), the next sent when it returns.
// Readers are not threads: --io_threads threads each drive a share of them
// through one completion queue with asynchronous calls, as h2load drives its
// connections from one event loop. The thread that polls is the thread that
// handles the answer: no second thread woken per call, which is what the
// blocking stubs cost (tests/bench/RESULTS.md, "cgacct-load against
// h2load").
class ReaderDriver {
 public:
  ReaderDriver(const LoadOptions& o, RunControl& control);

  // Adds a reader calling through `stub`, its numbers going to `live`,
  // `interval` and `result`.
  void Add(v1::Accounting::Stub* stub, LiveCounters* live,
           IntervalRecorder* interval, WorkerResult* result);

  // Runs every reader until the run stops and its last call has returned.
  void Run();

 private:
  // One reader: its call and where its numbers go. Touched only by the
  // driver's thread (the results are read after join()).
  struct Reader {
    v1::Accounting::Stub* stub = nullptr;
    LiveCounters* live = nullptr;
    IntervalRecorder* interval = nullptr;
    WorkerResult* result = nullptr;
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GroupStats>> call;
    v1::GroupStats response;
    grpc::Status status;
    Clock::time_point sent;  // when the current call started
    // After UNAVAILABLE or DEADLINE_EXCEEDED: a 10 ms pause (grpc::Alarm's
    // millisecond grain does not matter here) before the next call.
    bool back_off = false;
    std::unique_ptr<grpc::Alarm> alarm;
  };

  void Send(Reader& r);
  // The call returned: its numbers.
  void Done(Reader& r);
  // The reader's next step after its call or pause: a pause, or a call.
  void Next(Reader& r);
  static void* Tag(Reader& r, bool alarm);

  const LoadOptions& o_;
  RunControl& control_;
  v1::GetStatsRequest request_;  // the same for every call: built once
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Reader>> readers_;
  int64_t pending_ = 0;  // calls and alarms not yet off cq_
};

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_STAT_READER_H_
