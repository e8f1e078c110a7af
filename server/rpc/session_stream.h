// SessionStream (docs/DESIGN.md §4.14): a session's lease and its drain
// channel, served on gRPC's async API from a completion queue of its own
// and one dedicated thread (SessionStreams), so that drain answers are read
// even while every callback thread is busy (see session_stream.cc).
//
// The first client message attaches the stream to its session
// (attach_session_id; a newer stream replaces an older one, which ends
// ABORTED); every attach and keepalive is answered with the lease's
// remaining ms. Drain requests go out with a drain_id; the answer's returned
// pages are uncharged for the session. Ends: OK on client half-close or
// CloseSession; NOT_FOUND the session is unknown or expired;
// INVALID_ARGUMENT a message that does not parse or a first message without
// attach_session_id; ABORTED replaced; UNAVAILABLE shutdown.
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_RPC_SESSION_STREAM_H_
#define CGACCT_SERVER_RPC_SESSION_STREAM_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/async_stream.h>

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "server/pipeline/pipeline.h"

namespace cgacct {

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
