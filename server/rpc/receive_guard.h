// The receive guard: --max_message_bytes enforced while a message is being
// received, not only once it is in (docs/DESIGN.md §4.10).
//
// gRPC 1.51 compares a message's size with the server's limit only after it
// has taken the whole message, and it grants the stream HTTP/2 window for
// all of it, whatever the message's 5-byte prefix announces: one token
// holder's four 500 MB ChargeBatches (each refused "Received message larger
// than max" once in) took cgacctd to 2 GB, and nothing before this guard saw
// those bytes (issue 22's round after 24a4222). The per-identity read slots
// (server/pipeline/call_limiter.h) bound how many reads are pending, which
// bounds memory only if each read takes at most one message of
// --max_message_bytes.
//
// The guard watches each connection of its port, from the kernel's side:
// tcp_info's tcpi_bytes_received, sampled every --receive_guard_interval
// from the process's own descriptors (getsockopt(TCP_INFO)). From each
// sample's growth it takes away what the connection's reads delivered and allowances for headers, framing and failed reads
// (granted from a bucket of one message a second), keeping an
// estimate of the bytes gRPC has read and not yet delivered (the socket's
// receive queue is the kernel's; never below zero, leaking
// kLeakBytesPerSecond). When that estimate passes what the
// connection may legitimately hold (one message of --max_message_bytes per
// pending read, one HTTP/2 stream window per stream the connection may
// open, plus a slack), it cancels those reads' calls with
// RESOURCE_EXHAUSTED (grpc_call_cancel_with_status): gRPC then drops what it
// buffered for them. A message over the limit costs at most the limit, the
// slack, and what arrives in one interval before the guard sees it, unless
// it arrives no faster than the leak plus the allowance bucket (docs/
// DESIGN.md §4.10 lists what the guard does not cover). A connection that
// has read more than its calls can account for, with or without a call (an
// endless HTTP/2 header block), is closed (see "Connections, not only
// reads" below).
//
// The calls watched are cgacct.v1.Accounting's (its messages are raw
// bytes, so what a read delivered is known), health's and reflection's,
// and on --listen only with access control:
// then every Accounting request is read after its call is admitted (server/
// rpc/unary.h), so each pending read is seen. Without access control gRPC
// reads unary requests before any hook runs, and every caller is one
// identity: --listen's guard is off (--health_listen's is on).
//
// Thread safety: thread-safe. The sampling thread and the interceptor's
// hooks share one mutex (a leaf lock: nothing is called under it; calls are
// cancelled after it is released, each read's state machine keeping its call
// alive until the cancel has returned).
#ifndef CGACCT_SERVER_RPC_RECEIVE_GUARD_H_
#define CGACCT_SERVER_RPC_RECEIVE_GUARD_H_

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cgacct {

// Bytes received so far on TCP connections, by peer address as gRPC spells
// it (grpc::ServerContext::peer(): "ipv4:127.0.0.1:5000", "ipv6:[::1]:5000").
class ReceivedBytesSource {
 public:
  virtual ~ReceivedBytesSource() = default;
  // Replaces *bytes_by_peer with one entry per established connection the
  // source covers. Errors: what the kernel answered.
  virtual absl::Status Sample(
      absl::flat_hash_map<std::string, uint64_t>* bytes_by_peer) = 0;
  // Ends the connection of `peer` listed by the last Sample(): shuts its
  // socket down both ways (shutdown(2), so gRPC reads an end of stream and
  // drops the connection with all it holds, as if its client had gone).
  // Errors: NOT_FOUND if that connection is no longer open.
  virtual absl::Status Close(absl::string_view peer) = 0;
};

// Why a receive guard cancelled the call of `context`, if one did: its
// RESOURCE_EXHAUSTED message, the status the client received (the call's
// handler sees only a failed read or a cancelled context, and would answer
// CANCELLED or INVALID_ARGUMENT, which grpc_server_handled_total and the
// pipeline's metrics then counted). Valid until the call ends. Thread-safe.
std::optional<std::string> GuardCancelReason(
    const grpc::ServerContextBase* context);

// `peer` (grpc::ServerContext::peer()) spelt as ReceivedBytesSource does:
// gRPC 1.51 escapes an IPv6 address's brackets ("ipv6:%5B::1%5D:5000"),
// which become "ipv6:[::1]:5000".
std::string CanonicalPeer(absl::string_view peer);

// tcp_info's tcpi_bytes_received, less the receive queue (SIOCINQ), of
// this process's established TCP connections (IPv4 and IPv6) whose local
// port is `local_port`: each pass lists /proc/self/fd and reads
// getsockopt(TCP_INFO) of those sockets (a descriptor's port and peer are
// read once, again when its inode changes). IPv4-mapped IPv6 peers are
// spelt ipv4, as gRPC does.
// Close() shuts down a dup(2) of the listed socket's descriptor whose inode
// it has checked again (the descriptor may have been closed and its number
// reused meanwhile; shutdown(2) acts on the socket, whichever descriptor
// names it). A pass: 12 us with no connection, 0.29 ms with 100, 6.1 ms
// with 1,000 (a NETLINK_SOCK_DIAG dump, which walks the kernel's whole TCP
// hash table: 2.4, 2.3 and 6.1 ms; tests/bench/RESULTS.md). Sample()
// errors: UNAVAILABLE if /proc/self/fd cannot be listed. Not thread-safe:
// one sampler.
std::unique_ptr<ReceivedBytesSource> NewSocketSource(uint16_t local_port);

// This process's resident memory in bytes (/proc/self/statm's resident
// pages times the page size: one read of that file); nullopt if it cannot
// be read. Thread-safe.
std::optional<uint64_t> ProcessResidentBytes();

class ReceiveGuard {
 public:
  // Allowances for what is received besides the messages' own bytes: per
  // message delivered (its 5-byte gRPC prefix, HTTP/2 DATA frame headers,
  // TLS records) plus kAllowancePer16KiB for each 16 KiB of it; per call
  // (its HEADERS, plus kAllowancePerMetadataEntry and the size of each
  // metadata entry); per message sent (the WINDOW_UPDATE it may cause). A
  // failed read (its client cancelled, its deadline passed) had received an
  // unknown part of its message, which gRPC drops: allowed up to one
  // --max_message_bytes.
  static constexpr uint64_t kAllowancePerMessage = 64;
  static constexpr uint64_t kAllowancePer16KiB = 64;
  static constexpr uint64_t kAllowancePerCall = 1024;
  static constexpr uint64_t kAllowancePerMetadataEntry = 32;
  // What one read of the two unauthenticated services may take: a
  // grpc.health.v1 request (a service name; cgacctd's own health service,
  // server/rpc/health_service.h, refuses one larger) and a
  // grpc.reflection.v1alpha request (a file or symbol name; its messages
  // are deserialized before the interceptor sees them, so each read is
  // allowed this much from the bucket instead of its exact size).
  static constexpr uint64_t kHealthRequestMaxBytes = 4096;
  static constexpr uint64_t kReflectionRequestMaxBytes = 4096;
  // None of those is measured (HPACK shrinks headers to a few bytes: a
  // header indexed once and repeated cost ~17 bytes a call on the wire and
  // earned ~8 KB; tiny messages cost less than their allowance), so all of
  // them are granted from one bucket per connection that holds, and refills
  // at, one message of the largest limit a read of the connection has had
  // a second (kUnprovenAllowanceBytes until its first read): a client can
  // hide at most that much per second of an oversized message behind them
  // (the re-attacks at 68c24d2 hid 80 MB/s through metadata), and an
  // honest client's framing and occasional failed uploads fit in it.
  static constexpr double kAllowanceBucketsPerSecond = 1.0;
  // The bucket of a connection none of whose reads may take more than
  // this (none has started, or only health and reflection reads): with
  // access control an Accounting read starts only once its caller is
  // authenticated, so an unauthenticated client's bucket stays this small
  // (at one --max_message_bytes, one that kept a health read pending could
  // hide 4 MiB/s of it behind refused calls).
  static constexpr uint64_t kUnprovenAllowanceBytes = 4096;
  // What else a connection may receive (PINGs, SETTINGS), per second. It
  // is also how fast a message may grow unseen: a client sending a message
  // at this rate or slower is not caught (16 KiB/s: 58 MB an hour per
  // pending read).
  static constexpr uint64_t kLeakBytesPerSecond = 16 * 1024;
  // HTTP/2 window of a stream without a read pending (cgacctd's
  // GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES).
  static constexpr uint64_t kStreamWindowBytes = 65535;

  // Connections, not only reads. What gRPC reads of a connection that no
  // read takes is not always a message: a header block that never ends (an
  // HTTP/2 CONTINUATION flood, which gRPC 1.51 buffers whole before it
  // makes a call: 38 MB sent took cgacctd to 3.7-4.2 GB), streams reset
  // before gRPC hands them over, frames of unknown types. No call has them
  // to cancel. So the guard follows every connection of its port, with or
  // without a call, and keeps a second estimate per connection, its
  // unclaimed bytes: received, less the same credits and a slower leak
  // (kUnclaimedLeakBytesPerSecond), but never
  // forgotten for want of a pending read (only once the guard has cancelled
  // reads, whose calls' buffers gRPC then drops). A connection whose
  // unclaimed bytes pass what gRPC may hold for its calls (each pending
  // read's message, each open call's stream window) plus
  // kUnclaimedSlackBytes at kOverPasses passes in a row, growing at the
  // last (a burst of new streams' first windows is bounded and waits for
  // its calls' first hooks, which a loaded machine can delay by passes), no
  // call having started
  // between them (while a header block is open HTTP/2 allows no other
  // frame, so no call can start; a call that starts caps the count at the
  // bound: what is over it then is the requests of calls refused before
  // their request was read, which gRPC drops), has its pending reads
  // cancelled as above if it has any, and is closed if it has none
  // (ReceivedBytesSource::Close) or had reads cancelled less than
  // kRecancelAfter before, provided the process's memory shows it ("Memory
  // evidence"; always when the memory is not known). The bound
  // is tight because the bytes are not what they cost: HPACK lets one byte
  // on the wire name a header of ~100 bytes in its table.
  static constexpr uint64_t kUnclaimedSlackBytes = 64 * 1024;
  // The unclaimed count's leak. What a connection receives that no credit
  // covers, besides header blocks, is PINGs and SETTINGS (an honest
  // client's keepalive: 17 bytes every 10 s or more); at the reads' 16 KiB/s
  // an endless header block dripped just under it grew cgacctd without end
  // (4 connections at 12 KB/s: +50 MB in 15 s, ~70 bytes decoded a byte).
  // At this rate a drip is closed unless slower than it, where it decodes
  // to ~9 KB/s a connection.
  static constexpr uint64_t kUnclaimedLeakBytesPerSecond = 128;
  static constexpr uint32_t kOverPasses = 3;
  // A connection over a bound again within this long of the guard
  // cancelling its reads is closed instead: cancelled reads reset the
  // counts, so a client restarting reads could otherwise go on flooding.
  static constexpr absl::Duration kRecancelAfter = absl::Seconds(10);

  // Memory evidence. Not every byte over the bound costs memory: gRPC drops
  // the requests of calls refused before their read (shed, unauthenticated)
  // and streams reset, and a loaded machine can keep every call's first
  // hook waiting for passes while such bytes arrive (4 connections of 100
  // concurrent refused 4 MB requests under one CPU hog: one closed with its
  // 100 calls in 2 runs of 4; an identity being shed, 40 connections x 16
  // concurrent 1 MB requests: 1-3 connections closed in 4 runs of 5). So
  // when the process's resident memory is known, a connection over its
  // bound is acted on only if the memory shows it: from the pass it first
  // went over its bound without its reads' messages (its "tight" bound:
  // its calls' windows and kUnclaimedSlackBytes), the guard keeps the
  // resident memory and the bytes connections received, and the memory must
  // have grown more than those bytes explain plus kMemorySlackBytes: the
  // bytes of connections under their tight bounds kHonestCostPerWireByte
  // each, those of connections over theirs (the bytes in question) one
  // each. A flood is then cut at ~32 MiB of the process's memory rather than
  // at its bytes. Memory is not attributed to connections, so this only
  // ever holds an action back. (Closing a connection with a read pending on
  // this evidence alone, the endless header block behind an authenticated
  // read, was tried and withdrawn: another tenant's ListGroups answers grew
  // the memory 36-81 MB and honest uploads at 0.2-1 MB/s were closed, and
  // the attacker's own traffic or 16 reads under the slack evaded it.)
  static constexpr uint64_t kHonestCostPerWireByte = 4;
  static constexpr uint64_t kMemorySlackBytes = uint64_t{32} << 20;

  // Parked header blocks. Under its bound, a header block left open costs
  // what it decodes to for as long as its connection stays (200 unproven
  // connections each sending 60 KB of one and waiting held 835 MB), and no
  // call can start on that connection meanwhile. A connection is parked
  // when its unclaimed bytes are over its bound less kUnclaimedSlackBytes
  // plus kParkedSlackBytes with no call started, kParkedPasses passes in a
  // row (a call that starts caps the count at that: what is over it then
  // was dropped by gRPC with refused calls). A host may have
  // kMaxParkedConnectionsPerHost parked connections; past that, those with
  // the most unclaimed bytes are closed. A burst of new streams' first
  // windows is parked only until its calls' first hooks run (a loaded
  // machine delayed them by passes, so kParkedPasses is kOverPasses), and
  // only past 16 connections of one host delayed that long is one closed
  // (behind the front proxy every client is 127.0.0.1). Each pass more
  // costs: 100 connections each opened with 60 KB of a header block peaked
  // at +117 MB closed at two passes, +280 MB at ten.
  static constexpr uint64_t kParkedSlackBytes = 8 * 1024;
  static constexpr uint32_t kParkedPasses = 3;
  static constexpr size_t kMaxParkedConnectionsPerHost = 16;

  struct Options {
    // The largest message a cgacct.v1.Accounting read may take (and the
    // allowance bucket's size).
    uint64_t max_message_bytes = 4u << 20;
    // What the cancel message calls that limit.
    std::string limit_name = "--max_message_bytes";
    // What a connection's streams may have received besides their pending
    // reads' messages: --max_concurrent_streams_per_connection x
    // kStreamWindowBytes.
    uint64_t stream_window_bytes_per_connection = 100 * kStreamWindowBytes;
    // Added to what a connection's calls may hold.
    uint64_t slack_bytes = 1u << 20;
    // Between two samples.
    absl::Duration interval = absl::Milliseconds(20);
    // The allowance bucket's clock (tests give their own).
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // The process's resident memory, read by the sampler at each pass
    // ("Memory evidence"); nullopt when unknown (no evidence is asked).
    std::function<std::optional<uint64_t>()> resident_bytes =
        ProcessResidentBytes;
  };

  // `on_cancel` (may be empty) is run once per read cancelled, and
  // `on_close` (may be empty) once per connection closed, on the sampling
  // thread (metrics' counts).
  ReceiveGuard(Options options, std::function<void()> on_cancel,
               std::function<void()> on_close = nullptr);
  ReceiveGuard(const ReceiveGuard&) = delete;
  ReceiveGuard& operator=(const ReceiveGuard&) = delete;
  // Stops the sampling thread. Interceptors made by InterceptorFactory()
  // must be gone (the server shut down and destroyed).
  ~ReceiveGuard();

  // Starts the sampling thread on `source` (once). It samples every
  // interval whether or not a read is pending (a connection without a call
  // can flood too), or every 4 passes' time if a pass takes longer than a
  // quarter interval (the guard takes at most ~20% of a core whatever the
  // number of connections).
  void Start(std::unique_ptr<ReceivedBytesSource> source);

  // An interceptor factory for grpc::ServerBuilder::experimental()
  // .SetInterceptorCreators() that reports cgacct.v1.Accounting calls'
  // reads to this guard. The guard must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory();

  // The calls' side, used by the interceptor (and tests). `peer` is the
  // call's connection (grpc::ServerContext::peer()).
  //
  // A call opened on `peer`; CallEnded() when it ends, saying whether it
  // started a read (one that did not, refused or shed before its request
  // was read, is allowed its stream's window from the bucket: the bytes of
  // its request gRPC had taken, and drops).
  void CallStarted(absl::string_view peer);
  void CallEnded(absl::string_view peer, bool read_started = true);
  // Received or sent bytes the allowances cover (metadata, framing).
  void Allow(absl::string_view peer, uint64_t bytes);
  // A read started on `peer`, of a message of at most `max_bytes` (0: the
  // options' max_message_bytes); `cancel(message)` cancels its call with
  // RESOURCE_EXHAUSTED and `message` (any thread; it may run ReadEnded of
  // this read before it returns). Returns the read's handle.
  uint64_t ReadStarted(absl::string_view peer,
                       std::function<void(const std::string&)> cancel,
                       uint64_t max_bytes = 0);
  // How a read ended: with a message of known size, with none (its client
  // cancelled, its deadline passed), or with a message whose size the
  // interceptor cannot see (a protobuf-typed method's, deserialized).
  enum class ReadEnd { kDelivered, kFailed, kSizeUnknown };
  // The read `handle` ended, having delivered `delivered_bytes` (kDelivered
  // only). A failed read, or one of unknown size, is allowed its
  // `max_bytes` from the bucket (see the allowances). After it returns, the
  // read's `cancel` is not running and will not run.
  void ReadEnded(uint64_t handle, uint64_t delivered_bytes,
                 ReadEnd end = ReadEnd::kDelivered);

  // One sampling pass (the thread's body; tests call it directly):
  // BeginSample() takes the allowances and deliveries so far, the caller
  // then samples the kernel's counts, and Check() compares at `now`. (Taken
  // before the sample, every delivery counted has its bytes in it: a read
  // that ends between the two is counted at the next pass.) Check cancels
  // what it must and returns how many reads; the connections to close (see
  // "Connections, not only reads") go to `*to_close` (the caller closes
  // them and counts each with ConnectionClosed()), or are only logged if
  // it is null. A connection listed for the first time is counted from its
  // first byte: the sampler runs all along, so it opened since the last
  // pass. `resident_bytes` is the process's resident memory at the sample
  // ("Memory evidence"; nullopt: unknown, none is asked).
  void BeginSample();
  int Check(const absl::flat_hash_map<std::string, uint64_t>& bytes_by_peer,
            absl::Time now, std::vector<std::string>* to_close = nullptr,
            std::optional<uint64_t> resident_bytes = std::nullopt);
  // Counts one connection of `*to_close` closed (closed(), `on_close`).
  void ConnectionClosed();

  // Reads cancelled and connections closed so far.
  uint64_t cancelled() const {
    return cancelled_.load(std::memory_order_relaxed);
  }
  uint64_t closed() const { return closed_.load(std::memory_order_relaxed); }
  const Options& options() const { return options_; }

 private:
  // A pending read. `state` keeps the call alive while the sampler cancels
  // it: ReadEnded waits for kCancelling to end unless it runs inside that
  // cancel (on the sampling thread, which gRPC may use to deliver the failed
  // read).
  struct Read {
    enum State : int { kPending, kCancelling, kEnded };
    std::function<void(const std::string&)> cancel;
    uint64_t max_bytes = 0;  // the largest message it may take
    std::atomic<int> state{kPending};
  };
  struct Connection {
    uint32_t open_calls = 0;
    absl::flat_hash_map<uint64_t, std::shared_ptr<Read>> reads;
    // Sampling state, valid while have_sample: the kernel's count at the
    // last sample, the allowance and deliveries since, and the estimate.
    bool have_sample = false;
    uint64_t last_bytes = 0;
    absl::Time last_time;
    uint64_t credit_bytes = 0;          // since BeginSample()
    uint64_t sampled_credit_bytes = 0;  // taken by BeginSample()
    // Reads pending at BeginSample() plus those started since, and the sum
    // of their max_bytes.
    uint64_t reads_since_begin = 0;
    uint64_t read_bytes_since_begin = 0;
    // The sum of the pending reads' max_bytes.
    uint64_t pending_read_bytes = 0;
    uint64_t held_bytes = 0;
    // The unclaimed bytes ("Connections, not only reads"), whether they
    // were over the bound at the last pass, and when the guard last
    // cancelled the connection's reads.
    uint64_t unclaimed_bytes = 0;
    uint32_t over_passes = 0;  // passes in a row over the bound
    uint64_t unclaimed_at_last_pass = 0;
    bool call_started = false;  // since the last pass
    // "Memory evidence": whether the connection was over its tight bound
    // at the last pass, and the process's resident memory, wire_bytes_ and
    // suspect_wire_bytes_ at the pass before it went over (resident
    // nullopt: unknown then).
    bool tight_over = false;
    uint32_t parked_passes = 0;  // passes in a row parked
    std::optional<uint64_t> resident_at_tight_over;
    uint64_t wire_at_tight_over = 0;
    uint64_t suspect_wire_at_tight_over = 0;  // suspect_wire_bytes_ then
    absl::Time last_cancel = absl::InfinitePast();
    // The allowance bucket (kAllowanceBucketsPerSecond): its size (the
    // largest max_bytes of the connection's reads so far, at least
    // kUnprovenAllowanceBytes, at most max_message_bytes), the bytes it may
    // grant now, and when it was last filled.
    uint64_t allowance_cap_bytes = 0;  // 0: not set yet
    double allowance_bytes = 0;
    absl::Time allowance_time = absl::InfinitePast();
  };
  struct ReadHandle {
    std::string peer;
  };

  void Run();
  // Zeroes `connection`'s counts and passes (after the guard acted on it,
  // or when it is first listed): what arrives from then on is counted
  // afresh.
  static void ForgetCounts(Connection& connection);
  void MaybeEraseLocked(const std::string& peer, Connection& connection)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops following the connections `listed` does not list (every one if
  // null): a later listing counts one as new. One with no call and no read
  // is forgotten.
  void UnfollowLocked(
      const absl::flat_hash_map<std::string, uint64_t>* listed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "Parked header blocks": closes (adds to *to_close, or only reports
  // if it is null) each host's parked connections past
  // kMaxParkedConnectionsPerHost. Check()'s, at the end of a pass.
  void CloseParkedLocked(absl::Time now, std::vector<std::string>* to_close)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `message` to stderr, one line a second at most (Check's, so the
  // sampling thread's): a client can make the guard act as often as it
  // likes; each action is counted in a metric.
  void Report(const std::string& message, absl::Time now);
  // Credits `connection` with up to `bytes` from its allowance bucket.
  void AllowLocked(Connection& connection, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const std::function<void()> on_cancel_;
  const std::function<void()> on_close_;
  std::unique_ptr<ReceivedBytesSource> source_;  // the sampling thread's
  // The stderr lines' rate limit (Check's, so the sampling thread's): when
  // the last was written, and the cancels not written since.
  absl::Time last_report_ = absl::InfinitePast();
  uint64_t unreported_ = 0;
  std::atomic<uint64_t> cancelled_{0};
  std::atomic<uint64_t> closed_{0};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Connection> connections_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, ReadHandle> handles_ ABSL_GUARDED_BY(mu_);
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Set when a pass could not sample: the next Check() counts the
  // connections it lists from their present count, not from 0.
  bool resync_ ABSL_GUARDED_BY(mu_) = false;
  // The growth of every listed connection's received bytes, summed over
  // all passes ("Memory evidence").
  uint64_t wire_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The part of it received by connections over their tight bound.
  uint64_t suspect_wire_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The resident memory Check() was last given.
  std::optional<uint64_t> last_resident_bytes_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_RECEIVE_GUARD_H_
