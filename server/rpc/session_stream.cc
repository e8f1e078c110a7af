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

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/codec.h"
#include "server/rpc/peer.h"
#include "server/rpc/receive_guard.h"
#include "server/rpc/status.h"
#include "server/sessions/session_registry.h"

namespace cgacct {

// One SessionStream call, from the request for it (AwaitSessionStream) to
// its end. Reads one message at a time, and only while it awaits an answer
// (the attach, a keepalive it asked for, drain answers), each read taking
// one of the caller identity's session read slots for as long as it is
// pending; writes go through a queue (one write outstanding). A third of the
// lease after each renewal an alarm asks the client for a keepalive. Ending:
// End() (the registry) or a local error records the status and cancels the
// alarm; the call finishes once the queue is written (a failed write, e.g.
// the client vanished, drops the rest).
//
// Completions arrive on the SessionStreams thread only (Proceed); the
// registry's Send/End run on other threads (under the registry's mutex), and
// so may a read slot's grant (on the thread that freed the slot, through
// gate_). Starting a Read, Write, Finish or the alarm happens under mu_
// (async operations never complete inline, so nothing re-enters). Lock
// order: the registry's mutex, then gate_->mu, then mu_, then the limiter's
// and SessionStreams' (leaves). A message larger than
// kSessionInlineMessageBytes is parsed and handled on a large-request
// thread (the read chain moves there; the next read starts when it is
// done). Lifetime: reference counted (refs_): the completion queue's side
// drops its reference (MaybeDelete, on the service's thread) once the
// Finish and the done tag completed, no read or alarm is outstanding, and
// gate_ no longer points here, after Detach (under the registry's mutex,
// which every registry call into a sink holds: after it the registry never
// calls it again); a large-request task holds one until it is done. The
// last drop deletes it.
class SessionStreamCall final : public SessionStreamSink {
 public:
  enum class Event { kNew, kRead, kWrite, kFinish, kAlarm, kDone };
  // A completion queue tag.
  struct Tag {
    SessionStreamCall* call;
    Event event;
  };

  SessionStreamCall(SessionStreams& server, Pipeline& pipeline)
      : server_(server),
        pipeline_(pipeline),
        registry_(pipeline.sessions()),
        stream_(&context_),
        gate_(std::make_shared<Gate>(this)) {
    // Without a read pending the call would not see the client go away (or
    // the server's shutdown cancel it): the done tag says so.
    context_.AsyncNotifyWhenDone(&done_tag_);
  }

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
      case Event::kAlarm:
        return OnAlarm(ok);
      case Event::kDone:
        return OnDone();
    }
  }

  // SessionStreamSink (called under the registry's mutex). A drain request
  // awaits its answer: the stream reads until it came.
  void Send(const v1::SessionServerMessage& message) override {
    absl::MutexLock l(&mu_);
    if (!QueueMessageLocked(message)) return;
    if (message.drain_id() != 0) ++drains_awaited_;
    MaybeReadLocked();
  }
  void End(absl::Status status) override { EndWith(std::move(status)); }

 private:
  // What a read slot's grant reaches: this call until MaybeDelete, then
  // nothing (the grant gives the slot back).
  struct Gate {
    explicit Gate(SessionStreamCall* c) : call(c) {}
    absl::Mutex mu;
    SessionStreamCall* call ABSL_GUARDED_BY(mu);
  };

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
    MaybeReadLocked();  // the attach
  }

  // The read's slot goes to the identity's next waiting read once this
  // read's bytes are dropped (parsed, or refused unparsed), not before: the
  // next read may take a message of up to --max_message_bytes, so giving
  // the slot up first let one identity hold twice its slots' worth (issue
  // 22's re-attack at a54c733, row St2: 200 churning SessionStreams
  // sending 4 MB took cgacctd to 423-499 MB).
  void EndSlot() {
    pipeline_.limiter().EndRead(call_.identity(),
                                CallLimiter::ReadPool::kSession);
  }

  void OnRead(bool ok) {
    bool done;
    {
      absl::MutexLock l(&mu_);
      reading_ = false;
      // Until HandleMessage is done with read_bytes_: no read may start
      // into it (a drain request, Send(), starts reads from other threads;
      // the re-attack lost answers over 4 KiB handled on the pool that way).
      handling_ = true;
      done = finish_done_;
    }
    if (done || !ok) {
      read_bytes_.Clear();
      EndSlot();
      {
        absl::MutexLock l(&mu_);
        handling_ = false;
      }
      if (done) {
        // The call is over (OnFinish saw this read outstanding): this was
        // the read it failed.
        MaybeDelete();
        return;
      }
      // The client half-closed, or the call is over: the session stays (its
      // lease runs on; a new stream may attach). A read the receive guard
      // cancelled ended RESOURCE_EXHAUSTED for the client: said so here.
      std::optional<std::string> guard = GuardCancelReason(&context_);
      EndWith(guard ? absl::ResourceExhaustedError(*guard) : absl::OkStatus());
      return;
    }
    ++nr_read_;
    // A session's messages are small (an attach, a keepalive, a drain
    // answer listing what its stock held). This thread serves every
    // identity's sessions, so it parses only small ones: a larger one is
    // parsed and handled on the large-request threads, identities in turn
    // (one tenant's 256 KiB answers must not hold up another's keepalives),
    // and one past kMaxSessionMessageBytes, or a first message (an attach)
    // past kSessionInlineMessageBytes, is not parsed at all.
    const size_t message_bytes = read_bytes_.Length();
    const size_t bound = session_id_.empty() ? kSessionInlineMessageBytes
                                             : kMaxSessionMessageBytes;
    if (message_bytes > bound) {
      read_bytes_.Clear();
      EndSlot();
      {
        absl::MutexLock l(&mu_);
        handling_ = false;
      }
      EndWith(absl::InvalidArgumentError(absl::StrCat(
          "message ", nr_read_, ": ", message_bytes, " bytes; ",
          session_id_.empty() ? "the first SessionStream message (the "
                                "attach) may be at most "
                              : "a SessionStream message may be at most ",
          bound, " bytes")));
      return;
    }
    if (message_bytes > kSessionInlineMessageBytes) {
      // The task holds a reference: the call outlives it even if the stream
      // ends meanwhile (an ended call starts nothing: every operation is
      // started only while !ending_).
      refs_.fetch_add(1, std::memory_order_relaxed);
      pipeline_.large_request_pool().Run(call_.identity(), [this] {
        HandleMessage();
        Unref();
      });
      return;
    }
    HandleMessage();
  }

  // Parses and acts on the message read (on the service's thread, or a
  // large-request thread: the read chain, one at a time), then reads the
  // next if one is awaited.
  void HandleMessage() {
    HandleMessageBody();
    absl::MutexLock l(&mu_);
    handling_ = false;
    MaybeReadLocked();
  }

  void HandleMessageBody() {
    v1::SessionClientMessage message;
    absl::Status parsed = ParseRequest(read_bytes_, &message);
    // Not kept until the next read: the stream may wait a third of a lease
    // for it.
    read_bytes_.Clear();
    EndSlot();
    if (!parsed.ok()) {
      EndWith(absl::InvalidArgumentError(
          absl::StrCat("message ", nr_read_, ": ", parsed.message())));
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
      {
        absl::MutexLock l(&mu_);
        attach_awaited_ = false;
      }
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
      {
        absl::MutexLock l(&mu_);
        if (drains_awaited_ > 0) --drains_awaited_;
      }
      registry_.DrainAnswer(session_id_, this, message.drain_id(),
                            message.returned());
    }
    if (message.keepalive()) {
      {
        absl::MutexLock l(&mu_);
        keepalive_requested_ = false;
      }
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
  }

  // Answers an attach or keepalive with the lease's remaining ms (true), and
  // sets the alarm that asks for the next keepalive; or ends the stream with
  // the registry's refusal (false).
  bool AnswerLease(const absl::StatusOr<uint64_t>& lease) {
    if (!lease.ok()) {
      EndWith(lease.status());
      return false;
    }
    v1::SessionServerMessage answer;
    answer.set_expires_in_ms(*lease);
    answer.set_paced(true);
    const absl::Time now = absl::Now();
    absl::MutexLock l(&mu_);
    if (!QueueMessageLocked(answer)) return true;
    lease_known_ = true;
    lease_ends_ = now + absl::Milliseconds(*lease);
    ask_at_ = now + absl::Milliseconds(*lease) / 3;
    ArmAlarmLocked();
    return true;
  }

  // The alarm (set for the earlier of the two, cancelled and set again when
  // that moves earlier): asks for a keepalive once a third of the lease has
  // passed since the last renewal; ends the stream when a read pending has
  // waited kSessionAnswerTimeout for its message (a client that asked to be
  // read, or was asked, and sends nothing: its read slot is not held for
  // the rest of its lease).
  void OnAlarm(bool ok) {
    {
      absl::MutexLock l(&mu_);
      alarm_pending_ = false;
      if (!ending_) {
        const absl::Time now = absl::Now();
        if (reading_ && now >= read_deadline_) {
          EndLocked(absl::DeadlineExceededError(absl::StrCat(
              "no message came within ",
              absl::FormatDuration(kSessionAnswerTimeout),
              " of the server's read (an attach, or the answer to its "
              "keepalive or drain request); the session's lease runs on: "
              "attach a new stream")));
          MaybeFinishLocked();
        } else {
          if (ok && lease_known_ && !keepalive_requested_ && now >= ask_at_)
            AskKeepaliveLocked(now);
          ArmAlarmLocked();
        }
      }
    }
    MaybeDelete();
  }

  void AskKeepaliveLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::SessionServerMessage ask;
    ask.set_keepalive_request(true);
    ask.set_paced(true);
    ask.set_expires_in_ms(static_cast<uint64_t>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(lease_ends_ - now))));
    if (!QueueMessageLocked(ask)) return;
    keepalive_requested_ = true;
    MaybeReadLocked();
  }

  // The call is done (delivered once for a matched call): cancelled by the
  // client, its deadline or the server's shutdown, or finished.
  void OnDone() {
    {
      absl::MutexLock l(&mu_);
      done_seen_ = true;
      if (context_.IsCancelled()) {
        std::optional<std::string> guard = GuardCancelReason(&context_);
        EndLocked(guard ? absl::ResourceExhaustedError(*guard)
                        : absl::CancelledError("the call was cancelled"));
        MaybeFinishLocked();
      }
    }
    MaybeDelete();
  }

  void OnWrite(bool ok) {
    absl::MutexLock l(&mu_);
    queue_.pop_front();
    if (!ok) {
      // The client is gone: nothing more will be written.
      queue_.clear();
      EndLocked(absl::CancelledError("the client went away"));
    }
    writing_ = false;
    if (!queue_.empty()) StartWriteLocked();
    MaybeFinishLocked();
  }

  // Writes queue_.front(); at shutdown drops the queue instead.
  void StartWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = server_.StartOp([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      stream_.Write(queue_.front(), &write_tag_);
    });
    if (!writing_) queue_.clear();
  }

  void OnFinish() {
    // Detach first (the registry's mutex, never held with mu_ here): after
    // it the registry never calls this sink again.
    if (!session_id_.empty()) registry_.Detach(session_id_, this);
    {
      absl::MutexLock l(&mu_);
      finish_done_ = true;
    }
    // A read still outstanding fails now that the call is over; its
    // completion (on this thread, later) deletes, as does a cancelled
    // alarm's.
    MaybeDelete();
  }

  // Drops the completion queue's reference once nothing can reach the call
  // from there any more (on the service's thread; no lock held).
  void MaybeDelete() {
    uint64_t ticket;
    {
      absl::MutexLock l(&mu_);
      if (!finish_done_ || !done_seen_ || reading_ || alarm_pending_ ||
          deleting_) {
        return;
      }
      deleting_ = true;
      ticket = slot_ticket_;
    }
    // Done already when the Finish completed (OnFinish); not when the queue
    // was shut down before it could start.
    if (!session_id_.empty()) registry_.Detach(session_id_, this);
    {
      // A grant running now finishes first (it sees ending_ and gives its
      // slot back); a later one finds no call.
      absl::MutexLock g(&gate_->mu);
      gate_->call = nullptr;
    }
    if (ticket != 0) {
      pipeline_.limiter().CancelRead(call_.identity(), ticket,
                                     CallLimiter::ReadPool::kSession);
    }
    Unref();
  }

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // The stream awaits an answer from the client.
  bool AwaitsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return attach_awaited_ || keepalive_requested_ || drains_awaited_ > 0;
  }

  // Starts a read, or waits for one of the identity's session read slots,
  // if the stream awaits an answer and has no read going.
  void MaybeReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_ || reading_ || handling_ || slot_ticket_ != 0 ||
        !AwaitsLocked()) {
      return;
    }
    const uint64_t ticket = pipeline_.limiter().BeginRead(
        call_.identity(),
        [gate = gate_, limiter = &pipeline_.limiter(),
         identity = call_.identity()] {
          bool used = false;
          {
            absl::MutexLock g(&gate->mu);
            if (gate->call != nullptr) used = gate->call->OnSlot();
          }
          if (!used) limiter->EndRead(identity, CallLimiter::ReadPool::kSession);
        },
        CallLimiter::ReadPool::kSession);
    if (ticket == 0) {
      // Not started only at shutdown: the slot is not given back then (the
      // limiter goes with the server).
      (void)StartReadLocked();
    } else {
      slot_ticket_ = ticket;
    }
  }

  // A session read slot came (on the thread of the read that freed it, under
  // gate_->mu): true if the read started, false to give the slot back.
  bool OnSlot() {
    absl::MutexLock l(&mu_);
    slot_ticket_ = 0;
    if (ending_ || reading_ || handling_ || !AwaitsLocked()) return false;
    return StartReadLocked();
  }

  // False if the queue is shut down (nothing started). The message must
  // come within kSessionAnswerTimeout (the alarm).
  bool StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reading_ = server_.StartOp([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      stream_.Read(&read_bytes_, &read_tag_);
    });
    if (reading_) {
      read_deadline_ = absl::Now() + kSessionAnswerTimeout;
      ArmAlarmLocked();
    }
    return reading_;
  }

  // Sets the alarm for the earliest of: the next keepalive request, the
  // pending read's deadline; or, set for later than that, cancels it (its
  // completion sets it again).
  void ArmAlarmLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return;
    absl::Time at = absl::InfiniteFuture();
    if (lease_known_ && !keepalive_requested_) at = ask_at_;
    if (reading_) at = std::min(at, read_deadline_);
    if (at == absl::InfiniteFuture()) return;
    if (alarm_pending_) {
      if (at < alarm_at_) alarm_.Cancel();
      return;
    }
    alarm_pending_ = server_.SetAlarm(alarm_, at, &alarm_tag_);
    alarm_at_ = at;
  }

  // Queues `message` for the client: false (nothing queued) once the
  // stream is ending, or if it does not serialize.
  bool QueueMessageLocked(const v1::SessionServerMessage& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return false;
    grpc::ByteBuffer bytes;
    if (!SerializeResponse(message, &bytes).ok()) return false;
    queue_.push_back(std::move(bytes));
    if (!writing_) StartWriteLocked();
    return true;
  }

  // Records the end (the first one wins) and finishes once writes are done.
  void EndWith(absl::Status status) {
    absl::MutexLock l(&mu_);
    EndLocked(std::move(status));
    MaybeFinishLocked();
  }

  // Records the end (the first one wins): no more reads or alarms; a read
  // still waiting for a slot gives up its place.
  void EndLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return;
    ending_ = true;
    status_ = std::move(status);
    if (alarm_pending_) alarm_.Cancel();  // its tag comes, !ok
    if (slot_ticket_ != 0 &&
        pipeline_.limiter().CancelRead(call_.identity(), slot_ticket_,
                                       CallLimiter::ReadPool::kSession)) {
      slot_ticket_ = 0;
    }
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ending_ || writing_ || finishing_) return;
    finishing_ = true;
    const grpc::Status answer = AnswerStatus(&context_, status_);
    // Recorded once; the stream permit goes back with it.
    pipeline_.EndCall(call_, status_);
    // At shutdown nothing is sent: the call is over as if finished (the
    // done tag still comes; MaybeDelete detaches).
    if (!server_.StartOp([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          stream_.Finish(answer, &finish_tag_);
        })) {
      finish_done_ = true;
    }
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
  Tag alarm_tag_{this, Event::kAlarm};
  Tag done_tag_{this, Event::kDone};
  // Shared with the read slot grants this call is waiting for.
  const std::shared_ptr<Gate> gate_;
  // Set by OnNew before the first read, then read by the read chain and,
  // under mu_, ended by MaybeFinishLocked (its permit).
  CallContext call_;
  grpc::ByteBuffer read_bytes_;  // touched only by the read chain
  uint64_t nr_read_ = 0;         // likewise
  // Likewise (and OnFinish): empty until the first message attached the
  // stream, then constant. The registry never reads it.
  std::string session_id_;

  absl::Mutex mu_;
  grpc::Alarm alarm_ ABSL_GUARDED_BY(mu_);
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // queue_.front() is on the wire
  // A Read is outstanding (it holds a session read slot).
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  // The message read is being handled (read_bytes_ in use): no read starts.
  bool handling_ ABSL_GUARDED_BY(mu_) = false;
  // Waiting for a session read slot (CallLimiter ticket), or 0.
  uint64_t slot_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  // What the stream awaits from the client.
  bool attach_awaited_ ABSL_GUARDED_BY(mu_) = true;
  bool keepalive_requested_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t drains_awaited_ ABSL_GUARDED_BY(mu_) = 0;
  // The alarm is set (its tag not yet delivered).
  bool alarm_pending_ ABSL_GUARDED_BY(mu_) = false;
  // When the alarm is set for (while alarm_pending_).
  absl::Time alarm_at_ ABSL_GUARDED_BY(mu_);
  // A lease was answered; when it ends, and when to ask for a keepalive.
  bool lease_known_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time lease_ends_ ABSL_GUARDED_BY(mu_);
  absl::Time ask_at_ ABSL_GUARDED_BY(mu_);
  // While reading_: when its message must have come.
  absl::Time read_deadline_ ABSL_GUARDED_BY(mu_);
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;    // Finish started
  bool finish_done_ ABSL_GUARDED_BY(mu_) = false;  // Finish completed
  bool deleting_ ABSL_GUARDED_BY(mu_) = false;     // MaybeDelete decided
  bool done_seen_ ABSL_GUARDED_BY(mu_) = false;    // done_tag_ delivered
  // One for the completion queue's side (dropped by MaybeDelete) and one
  // per message handed to the large-request threads: the last drop deletes.
  std::atomic<int> refs_{1};
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

bool SessionStreams::SetAlarm(grpc::Alarm& alarm, absl::Time at,
                              void* tag) {
  absl::MutexLock l(&mu_);
  if (shut_ || cq_ == nullptr) return false;
  alarm.Set(cq_.get(), absl::ToChronoTime(at), tag);
  return true;
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
