// SessionStream (docs/DESIGN.md §4.14): a session's lease and its drain
// channel. The first client message attaches the stream to its session
// (attach_session_id); every attach and keepalive is answered with the
// lease's remaining ms; the registry (server/session_registry.h) sends drain
// requests through it (SessionStreamSink::Send) and ends it
// (SessionStreamSink::End) when the session closes or expires, a newer
// stream replaces it, or the server shuts down.
//
// Served on gRPC's async API, from a completion queue of its own driven by
// one dedicated thread (SessionStreams), not on the callback API: a charge at
// memory.max waiting for drain answers (SessionRegistry::DrainRemoteStock)
// blocks the callback thread it runs on, and with as many such charges as gRPC
// has callback threads no callback would run to read the answers they wait for
// (each charge then waited the whole --session_drain_timeout_ms). This thread
// never charges and never waits for a drain: it only parses messages and takes
// the registry's mutex, which a waiting charge does not hold (its CondVar wait
// releases it).
#include "server/rpc/session_stream.h"

#include <deque>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/codec.h"
#include "server/rpc/peer.h"
#include "server/rpc/status.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

// One SessionStream call, from the request for it (AwaitSessionStream) to
// its end. Reads one message at a time; writes go through a queue (one write
// outstanding). Ending: End() (the registry) or a local error records the
// status; the call finishes once the queue is written (a failed write, e.g.
// the client vanished, drops the rest).
//
// Completions arrive on the SessionStreams thread only (Proceed); the
// registry's Send/End run on other threads (under the registry's mutex).
// Starting a Write or Finish happens under mu_ (async operations never complete
// inline, so nothing re-enters). Lifetime: deleted on the service's thread once
// the Finish completed and no read is outstanding, after Detach (under the
// registry's mutex, which every registry call into a sink holds): after
// Detach the registry never calls it again.
class SessionStreamCall final : public SessionStreamSink {
 public:
  enum class Event { kNew, kRead, kWrite, kFinish };
  // A completion queue tag.
  struct Tag {
    SessionStreamCall* call;
    Event event;
  };

  SessionStreamCall(SessionStreams& server, Pipeline& pipeline)
      : server_(server),
        pipeline_(pipeline),
        registry_(pipeline.sessions()),
        stream_(&context_) {}

  // Requests the next SessionStream call on `cq` (the caller holds the
  // server's mu_, the queue is not shut down).
  void Request(const SessionStreams::RequestFn& request,
               grpc::ServerCompletionQueue* cq) {
    request(&context_, &stream_, cq, &new_tag_);
  }

  // A completion of `event` (on the service's thread). May delete this.
  void Proceed(Event event, bool ok) {
    switch (event) {
      case Event::kNew:
        return OnNew(ok);
      case Event::kRead:
        return OnRead(ok);
      case Event::kWrite:
        return OnWrite(ok);
      case Event::kFinish:
        return OnFinish();
    }
  }

  // SessionStreamSink (called under the registry's mutex).
  void Send(const v1::SessionServerMessage& message) override {
    Queue(message);
  }
  void End(absl::Status status) override { EndWith(std::move(status)); }

 private:
  void OnNew(bool ok) {
    if (!ok) {  // the server is shutting down: no call came
      delete this;
      return;
    }
    server_.Await();  // the next call
    // The stages every call passes: admission (a stream permit, shutdown,
    // the deadline), authentication; then its messages.
    call_ = BeginCall(pipeline_, RpcMethod::kSessionStream, context_);
    absl::Status refused = pipeline_.Admit(call_, Admission::kStream);
    if (refused.ok()) refused = pipeline_.Authenticate(call_);
    if (!refused.ok()) {
      EndWith(refused);
      return;
    }
    absl::MutexLock l(&mu_);
    StartReadLocked();
  }

  void OnRead(bool ok) {
    bool done;
    {
      absl::MutexLock l(&mu_);
      reading_ = false;
      done = finish_done_;
    }
    if (done) {
      // The call is over (OnFinish saw this read outstanding): this was the
      // read it failed; nothing else refers to this call any more.
      delete this;
      return;
    }
    if (!ok) {
      // The client half-closed, or the call is over: the session stays (its
      // lease runs on; a new stream may attach).
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
      if (!AnswerLease(registry_.Attach(call_.identity(), session_id_, this)))
        return;
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
      // An access control reload reaches the session's stream at its next
      // keepalive: a caller no longer allowed ends it.
      bool reauthenticated = false;
      if (absl::Status s = pipeline_.Reauthenticate(call_, &reauthenticated);
          !s.ok()) {
        EndWith(std::move(s));
        return;
      }
      if (!AnswerLease(registry_.KeepAlive(session_id_, this))) return;
    }
    absl::MutexLock l(&mu_);
    if (!ending_) StartReadLocked();
  }

  // Answers an attach or keepalive with the lease's remaining ms (true), or
  // ends the stream with the registry's refusal (false).
  bool AnswerLease(const absl::StatusOr<uint64_t>& lease) {
    if (!lease.ok()) {
      EndWith(lease.status());
      return false;
    }
    v1::SessionServerMessage answer;
    answer.set_expires_in_ms(*lease);
    Queue(answer);
    return true;
  }

  void OnWrite(bool ok) {
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
      stream_.Write(queue_.front(), &write_tag_);
    } else {
      writing_ = false;
      MaybeFinishLocked();
    }
  }

  void OnFinish() {
    // Detach first (the registry's mutex, never held with mu_ here): after
    // it the registry never calls this sink again.
    if (!session_id_.empty()) registry_.Detach(session_id_, this);
    bool reading;
    {
      absl::MutexLock l(&mu_);
      finish_done_ = true;
      reading = reading_;
    }
    // A read still outstanding fails now that the call is over; its
    // completion (on this thread, later) deletes.
    if (!reading) delete this;
  }

  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reading_ = true;
    stream_.Read(&read_bytes_, &read_tag_);
  }

  void Queue(const v1::SessionServerMessage& message) {
    grpc::ByteBuffer bytes;
    if (!SerializeResponse(message, &bytes).ok()) return;
    absl::MutexLock l(&mu_);
    if (ending_) return;
    queue_.push_back(std::move(bytes));
    if (!writing_) {
      writing_ = true;
      stream_.Write(queue_.front(), &write_tag_);
    }
  }

  // Records the end (the first one wins) and finishes once writes are done.
  void EndWith(absl::Status status) {
    absl::MutexLock l(&mu_);
    if (ending_) return;
    ending_ = true;
    status_ = std::move(status);
    MaybeFinishLocked();
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ending_ || writing_ || finishing_) return;
    finishing_ = true;
    const grpc::Status answer = AnswerStatus(&context_, status_);
    // Recorded once; the stream permit goes back with it.
    pipeline_.EndCall(call_, status_);
    stream_.Finish(answer, &finish_tag_);
  }

  SessionStreams& server_;
  Pipeline& pipeline_;
  SessionRegistry& registry_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_;
  Tag new_tag_{this, Event::kNew};
  Tag read_tag_{this, Event::kRead};
  Tag write_tag_{this, Event::kWrite};
  Tag finish_tag_{this, Event::kFinish};
  // Set by OnNew before the first read, then read by the read chain and,
  // under mu_, ended by MaybeFinishLocked (its permit).
  CallContext call_;
  grpc::ByteBuffer read_bytes_;  // touched only by the read chain
  uint64_t nr_read_ = 0;         // likewise
  // Likewise (and OnFinish): empty until the first message attached the
  // stream, then constant. The registry never reads it.
  std::string session_id_;

  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // queue_.front() is on the wire
  bool reading_ ABSL_GUARDED_BY(mu_) = false;  // a Read is outstanding
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;    // Finish started
  bool finish_done_ ABSL_GUARDED_BY(mu_) = false;  // Finish completed
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

SessionStreams::SessionStreams(Pipeline& pipeline, RequestFn request)
    : pipeline_(pipeline), request_(std::move(request)) {}

SessionStreams::~SessionStreams() { Stop(); }

void SessionStreams::RegisterOn(grpc::ServerBuilder& builder) {
  cq_ = builder.AddCompletionQueue();
}

void SessionStreams::Start() {
  absl::MutexLock l(&mu_);
  if (cq_ == nullptr || shut_ || thread_.joinable()) return;
  // Two calls requested ahead: one is matched while the thread handles the
  // other's arrival.
  for (int i = 0; i < 2; ++i)
    (new SessionStreamCall(*this, pipeline_))->Request(request_, cq_.get());
  thread_ = std::thread([this] { Loop(); });
}

void SessionStreams::Await() {
  absl::MutexLock l(&mu_);
  if (shut_) return;
  (new SessionStreamCall(*this, pipeline_))->Request(request_, cq_.get());
}

void SessionStreams::Loop() {
  void* tag = nullptr;
  bool ok = false;
  while (cq_->Next(&tag, &ok)) {
    auto* t = static_cast<SessionStreamCall::Tag*>(tag);
    t->call->Proceed(t->event, ok);
  }
}

void SessionStreams::Stop() {
  std::thread thread;
  {
    absl::MutexLock l(&mu_);
    if (cq_ == nullptr || shut_) return;
    shut_ = true;
    cq_->Shutdown();
    thread = std::move(thread_);
  }
  if (thread.joinable()) {
    thread.join();
  } else {
    Loop();  // never started: drain the queue here
  }
}

}  // namespace cgacct
