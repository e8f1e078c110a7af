// SessionStream (docs/DESIGN.md §4.14): a session's lease and its drain
// channel. The first client message attaches the stream to its session
// (attach_session_id); every attach and keepalive is answered with the
// lease's remaining ms; the registry (server/session_registry.h) sends drain
// requests through it (SessionStreamSink::Send) and ends it
// (SessionStreamSink::End) when the session closes or expires, a newer
// stream replaces it, or the server shuts down.
#include <grpcpp/grpcpp.h>

#include <deque>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/accounting_service.h"
#include "server/raw_request.h"
#include "server/session_registry.h"
#include "server/status.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;

// A stream refused before it starts (shed, unauthenticated, shutting down).
class RefusedSessionStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedSessionStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

// One SessionStream. Reads one message at a time; writes go through a queue
// (one write outstanding). Ending: End() (the registry) or a local error
// records the status; the stream finishes once the queue is written (a
// failed write, e.g. the client vanished, drops the rest).
//
// Lifetime: gRPC owns the reactor until OnDone, which detaches it from the
// registry (under the registry's mutex, which every registry call into a sink
// holds), then deletes it: after Detach the registry never calls it again.
//
// Thread safety: OnReadDone, OnWriteDone and the registry's Send/End may
// run concurrently; the queue and flags are guarded by mu_. StartWrite and
// Finish are called without mu_ (gRPC may run a reaction inline).
class AccountingService::SessionStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public SessionStreamSink {
 public:
  SessionStreamReactor(AccountingService& service,
                       grpc::CallbackServerContext* context,
                       CallLimiter::Permit permit, int64_t start_ns)
      : service_(service),
        registry_(*service.sessions_),
        identity_(AccountingService::CallerKey(context)),
        start_ns_(start_ns),
        permit_(std::move(permit)) {
    StartRead(&read_bytes_);
  }

  // SessionStreamSink (called under the registry's mutex).
  void Send(const v1::SessionServerMessage& message) override {
    Queue(message);
  }
  void End(absl::Status status) override { EndWith(std::move(status)); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed, or the call is over: the session stays
      // (its lease runs on; a new stream may attach).
      EndWith(absl::OkStatus());
      return;
    }
    ++nr_read_;
    v1::SessionClientMessage message;
    if (absl::Status s = ParseRequest(read_bytes_, &message); !s.ok()) {
      EndWith(absl::InvalidArgumentError(
          absl::StrCat("message ", nr_read_, ": ", s.message())));
      return;
    }
    if (session_id_.empty()) {
      if (message.attach_session_id().empty()) {
        EndWith(absl::InvalidArgumentError(
            "message 1: attach_session_id is empty; the first message on a "
            "SessionStream names the session to attach to"));
        return;
      }
      session_id_ = message.attach_session_id();
      absl::StatusOr<uint64_t> lease =
          registry_.Attach(identity_, session_id_, this);
      if (!lease.ok()) {
        EndWith(lease.status());
        return;
      }
      v1::SessionServerMessage answer;
      answer.set_expires_in_ms(*lease);
      Queue(answer);
    } else if (!message.attach_session_id().empty() &&
               message.attach_session_id() != session_id_) {
      EndWith(absl::InvalidArgumentError(absl::StrCat(
          "message ", nr_read_,
          ": attach_session_id names another session than the one this "
          "stream is attached to; open another stream for it")));
      return;
    }
    if (message.drain_id() != 0) {
      registry_.DrainAnswer(session_id_, this, message.drain_id(),
                            message.returned());
    }
    if (message.keepalive()) {
      absl::StatusOr<uint64_t> lease = registry_.KeepAlive(session_id_, this);
      if (!lease.ok()) {
        EndWith(lease.status());
        return;
      }
      v1::SessionServerMessage answer;
      answer.set_expires_in_ms(*lease);
      Queue(answer);
    }
    {
      absl::MutexLock l(&mu_);
      if (ending_) return;
    }
    StartRead(&read_bytes_);
  }

  void OnWriteDone(bool ok) override {
    bool write_next = false;
    bool finish = false;
    {
      absl::MutexLock l(&mu_);
      queue_.pop_front();
      if (!ok) {
        // The client is gone: nothing more will be written.
        queue_.clear();
        if (!ending_) {
          ending_ = true;
          status_ = absl::CancelledError("the client went away");
        }
      }
      if (!queue_.empty()) {
        write_next = true;
      } else {
        writing_ = false;
        finish = ShouldFinishLocked();
      }
    }
    if (write_next) {
      StartWrite(&queue_front());
    } else if (finish) {
      DoFinish();
    }
  }

  void OnDone() override {
    // gRPC calls OnDone after every other reaction has returned.
    if (!session_id_.empty()) registry_.Detach(session_id_, this);
    delete this;
  }

 private:
  grpc::ByteBuffer& queue_front() {
    absl::MutexLock l(&mu_);
    return queue_.front();
  }

  void Queue(const v1::SessionServerMessage& message) {
    grpc::ByteBuffer bytes;
    if (!SerializeResponse(message, &bytes).ok()) return;
    grpc::ByteBuffer* start = nullptr;
    {
      absl::MutexLock l(&mu_);
      if (ending_) return;
      queue_.push_back(std::move(bytes));
      if (!writing_) {
        writing_ = true;
        start = &queue_.front();  // deque: stable while only pushed back
      }
    }
    if (start != nullptr) StartWrite(start);
  }

  // Records the end (the first one wins) and finishes once writes are done.
  void EndWith(absl::Status status) {
    bool finish;
    {
      absl::MutexLock l(&mu_);
      if (ending_) return;
      ending_ = true;
      status_ = std::move(status);
      finish = ShouldFinishLocked();
    }
    if (finish) DoFinish();
  }

  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ending_ || writing_ || finished_) return false;
    finished_ = true;
    return true;
  }

  void DoFinish() {
    absl::Status status;
    {
      absl::MutexLock l(&mu_);
      status = status_;
    }
    const grpc::Status answer = ToGrpcStatus(status);
    service_.RecordRpc(RpcMethod::kSessionStream, start_ns_,
                       answer.error_code());
    permit_.Release();
    Finish(answer);
  }

  AccountingService& service_;
  SessionRegistry& registry_;
  const std::string identity_;
  const int64_t start_ns_;
  CallLimiter::Permit permit_;  // released when the stream finishes
  grpc::ByteBuffer read_bytes_;  // touched only by the read chain
  uint64_t nr_read_ = 0;         // likewise
  // Likewise (and OnDone): empty until the first message attached the
  // stream, then constant. The registry never reads it.
  std::string session_id_;

  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // queue_.front() is on the wire
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
AccountingService::SessionStream(grpc::CallbackServerContext* context) {
  const int64_t start_ns = clock_.NowNs();
  auto refuse = [&](const absl::Status& s) {
    const grpc::Status status = ToGrpcStatus(s);
    RecordRpc(RpcMethod::kSessionStream, start_ns, status.error_code());
    return new RefusedSessionStream(status);
  };
  if (absl::Status s = CheckCallable(*context); !s.ok()) return refuse(s);
  ShedReason reason;
  absl::StatusOr<CallLimiter::Permit> permit = limiter_.Acquire(
      CallLimiter::Kind::kStream, CallerKey(context), &reason);
  if (!permit.ok()) {
    MarkShed(context, reason);
    return refuse(permit.status());
  }
  if (absl::StatusOr<AuthCaller> caller = AuthenticateCall(*context);
      !caller.ok())
    return refuse(caller.status());
  return new SessionStreamReactor(*this, context, *std::move(permit), start_ns);
}

}  // namespace cgacct
