// SessionStream (docs/DESIGN.md §4.14): a session's lease and its drain
// channel, served on gRPC's async API from a completion queue of its own
// and one dedicated thread (SessionStreams), so that drain answers are read
// even while every callback thread is busy (see session_stream.cc).
//
// The first client message attaches the stream to its session
// (attach_session_id; a newer stream replaces an older one, which ends
// ABORTED); every attach and keepalive is answered with the lease's
// remaining ms and `paced`. Drain requests go out with a drain_id; the
// answer's returned pages are uncharged for the session.
//
// The server paces the stream: it asks for a keepalive (keepalive_request)
// a third of the lease after each renewal, and reads the stream only while
// it awaits an answer (the attach, the keepalive it asked for, drain
// answers), each read through the caller identity's session read slots
// (CallLimiter::ReadPool::kSession). gRPC 1.51 buffers a whole message of up
// to --max_message_bytes for every read pending, whatever the HTTP/2 window;
// a read pending on every open stream let one identity's 256 streams hold
// ~1 GB (issue 22). Unread, a stream buffers at most HTTP/2's initial window. Ends: OK on client half-close or
// CloseSession; NOT_FOUND the session is unknown or expired;
// INVALID_ARGUMENT a message that does not parse, is larger than
// kMaxSessionMessageBytes, or a first message without attach_session_id;
// DEADLINE_EXCEEDED no message within kSessionAnswerTimeout of a read; ABORTED replaced; UNAVAILABLE shutdown.
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_RPC_SESSION_STREAM_H_
#define CGACCT_SERVER_RPC_SESSION_STREAM_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/async_stream.h>

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/pipeline/pipeline.h"

namespace cgacct {

// The largest SessionStream message cgacctd parses (an attach, a keepalive,
// or a drain answer listing the (group, kind) pairs its stock held: ~2,000
// of 100-byte paths); a larger one ends the stream INVALID_ARGUMENT.
inline constexpr size_t kMaxSessionMessageBytes = 256 * 1024;
// SessionStream messages parsed on the SessionStreams thread, which serves
// every identity's sessions: up to this size (an attach, a keepalive, a
// drain answer of a few dozen holdings). Larger ones are parsed and handled
// on the large-request threads, identities in turn; a first message (the
// attach) larger than this ends the stream INVALID_ARGUMENT unparsed.
inline constexpr size_t kSessionInlineMessageBytes = 4096;
// How long a SessionStream read may wait for its message (the attach, the
// answer to a keepalive or drain request) before the stream ends
// DEADLINE_EXCEEDED (the session's lease runs on): a hung client does not
// hold one of its identity's session read slots for the rest of its lease.
inline constexpr absl::Duration kSessionAnswerTimeout = absl::Seconds(1);

// The SessionStream calls of one server: their completion queue and thread.
// Use: RegisterOn(builder) before BuildAndStart; Start() once the server
// started (without it SessionStream calls are never answered); Stop() after
// grpc::Server::Shutdown() returned and BEFORE the grpc::Server is destroyed
// (the queue's last completions, the calls requested but never matched,
// refer to the server object). Stop() is idempotent; the destructor calls
// it, which is only safe if the server object is still alive.
class SessionStreams {
 public:
  // Asks gRPC for the next SessionStream call on `cq` with `tag` (the
  // generated WithRawMethod_SessionStream::RequestSessionStream).
  using RequestFn = absl::AnyInvocable<void(
      grpc::ServerContext* context,
      grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream,
      grpc::ServerCompletionQueue* cq, void* tag) const>;

  SessionStreams(Pipeline& pipeline, RequestFn request);
  ~SessionStreams();
  SessionStreams(const SessionStreams&) = delete;
  SessionStreams& operator=(const SessionStreams&) = delete;

  void RegisterOn(grpc::ServerBuilder& builder);
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Requests the next call (not after Stop() began). Called by a call when
  // it is matched.
  void Await() ABSL_LOCKS_EXCLUDED(mu_);
  // Sets `alarm` to deliver `tag` on the queue at `at`; false (nothing set)
  // once Stop() began.
  bool SetAlarm(grpc::Alarm& alarm, absl::Time at, void* tag)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `start`, which starts one operation on a call of the queue (a
  // Read, Write or Finish), unless Stop() began: false then (gRPC aborts on
  // an operation started on a queue already shut down; the call was
  // cancelled by the server's shutdown anyway).
  template <typename F>
  bool StartOp(F start) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (shut_) return false;
    start();
    return true;
  }

 private:
  // thread_: dispatches cq_'s completions until it is shut down and drained.
  void Loop();

  Pipeline& pipeline_;
  const RequestFn request_;
  // Set once by RegisterOn(), before serving.
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  // mu_ orders requesting a call on cq_ against shutting it down (gRPC
  // aborts on a request to a queue already shut down).
  absl::Mutex mu_;
  std::thread thread_;  // started and taken under mu_
  bool shut_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_SESSION_STREAM_H_
