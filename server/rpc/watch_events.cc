// WatchEvents: a server stream of one group's memory.events and
// memory.events.local (docs/DESIGN.md §4).
//
// Each stream is a WatchEventsReactor subscribed to the EventsHub under
// the group's id. It holds one EventsUpdate buffer and two flags: a write in
// flight, and "changed meanwhile". A change noted while a write is in flight
// only sets the flag; when the write completes the reactor reads the latest
// counts and writes again if they differ from what it sent. So a slow reader
// gets the newest counts and never a backlog, and the memory of a stream is
// constant whatever the event rate. The method is registered as a bidi
// stream on the server (grpc::Service::MarkMethodStreamed; the wire and
// clients are unchanged), so its request is read once the call is admitted
// and authenticated, through the caller's read slots, as a unary call's
// (server/rpc/unary.h): gRPC's server-streaming path read it first.
#include "server/rpc/watch_events.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/group_path.h"
#include "server/common/wire.h"
#include "server/rpc/codec.h"
#include "server/rpc/peer.h"
#include "server/rpc/refused_reactors.h"
#include "server/rpc/status.h"
#include "server/rpc/unary.h"

namespace cgacct {
namespace {

bool SameEvents(const MemoryEvents& a, const MemoryEvents& b) {
  return a.low == b.low && a.high == b.high && a.max == b.max &&
         a.oom == b.oom && a.oom_kill == b.oom_kill &&
         a.oom_group_kill == b.oom_group_kill &&
         a.sock_throttled == b.sock_throttled;
}

class WatchEventsReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public EventsHub::Watcher {
 public:
  // The stages before the request: admission (a stream permit, shutdown,
  // the deadline) and authentication; then the read, through a read slot
  // of the caller's (CallLimiter::BeginRead).
  WatchEventsReactor(Pipeline& pipeline, EventsHub* hub,
                     grpc::CallbackServerContext* context)
      : pipeline_(pipeline),
        hub_(hub),
        context_(context),
        call_(BeginCall(pipeline, RpcMethod::kWatchEvents, *context)) {
    absl::Status status = pipeline_.Admit(call_, Admission::kStream);
    if (status.ok()) status = pipeline_.Authenticate(call_);
    if (!status.ok()) {
      // A shed stream's trailer (cgacct-shed) goes on the context here, on
      // the thread that owns the call; EndStream converts the status again.
      (void)AnswerStatus(context_, status);
      EndStream(std::move(status));
      return;
    }
    read_.Begin(pipeline_.limiter(), call_.identity(), this, &request_bytes_);
  }

  // The request: decoding, validation, read access, the group resolved;
  // then the subscription and the current counts.
  void OnReadDone(bool ok) override {
    read_.End(pipeline_.limiter());
    if (!ok) request_bytes_.Clear();
    v1::WatchEventsRequest request;
    // The read may have waited: shutdown and the deadline again.
    absl::Status status = ok ? pipeline_.ShutdownOrDeadline(call_)
                             : UnreadStatus(call_, context_);
    if (status.ok()) status = ParseRequest(request_bytes_, &request);
    request_bytes_.Clear();
    absl::StatusOr<GroupHandle> group =
        status.ok() ? pipeline_.ResolveWatch(call_, request)
                    : absl::StatusOr<GroupHandle>(status);
    if (group.ok() && hub_ == nullptr)
      group = absl::UnavailableError(
          "WatchEvents is not served by this server (no events hub)");
    if (!group.ok()) {
      EndStream(group.status());
      return;
    }
    {
      absl::MutexLock l(&mu_);
      if (finish_called_) return;  // cancelled meanwhile
      group_ = *group;
      path_ = request.path();
      subscribed_ = true;
    }
    // OnDone() unsubscribes whether or not this succeeded (idempotent).
    if (!hub_->Subscribe(group_.id(), this)) {
      EndStream(absl::UnavailableError("server shutting down"));
      return;
    }
    SendLatest();
  }

  // EventsHub::Watcher (notifier thread).
  void OnEventsChanged() override {
    // An access control reload reaches the stream here (the hub tells every
    // watcher after one): the caller must still be allowed to read.
    if (absl::Status s = pipeline_.RecheckWatch(call_, path_); !s.ok()) {
      EndStream(std::move(s));
      return;
    }
    SendLatest();
  }
  void OnGroupDeleted() override { EndStream(Deleted()); }
  void OnShutdown() override {
    EndStream(absl::UnavailableError("server shutting down"));
  }

  // grpc::ServerWriteReactor (gRPC threads).
  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    bool again = false;
    {
      absl::MutexLock l(&mu_);
      write_in_flight_ = false;
      if (!ok && !pending_finish_) {
        // The stream is broken (client gone); OnCancel and OnDone follow.
        pending_finish_ = absl::CancelledError("write failed: client gone");
      }
      if (pending_finish_) {
        finish = TakeFinishLocked(*std::move(pending_finish_));
      } else {
        again = changed_;
        changed_ = false;
      }
    }
    if (finish) Finish(*finish);
    if (again) SendLatest();
  }
  void OnCancel() override {
    // Waiting for a read slot: it will never read.
    read_.Cancel(pipeline_.limiter());
    // Its deadline, or the client.
    absl::Status status = CancelledAtDeadline(call_)
                              ? UnreadStatus(call_, context_)
                              : absl::CancelledError("cancelled by the client");
    EndStream(std::move(status));
  }
  void OnDone() override {
    absl::Status status;
    bool subscribed;
    {
      absl::MutexLock l(&mu_);
      status = final_;
      subscribed = subscribed_;
    }
    if (subscribed) hub_->Unsubscribe(group_.id(), this);
    pipeline_.EndCall(call_, status);
    delete this;
  }

 private:
  absl::Status Deleted() const {
    return absl::NotFoundError(
        absl::StrCat("path ", QuotePath(path_), " was deleted"));
  }

  // Reads the latest counts and writes them if they changed since the last
  // write (the first read is always written). With a write in flight, only
  // notes that it must read again when the write completes. gRPC is called
  // outside mu_ (a reaction may run inline).
  void SendLatest() {
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      absl::MutexLock l(&mu_);
      if (finish_called_ || pending_finish_) return;
      if (write_in_flight_) {
        changed_ = true;
        return;
      }
      absl::StatusOr<GroupEvents> now = pipeline_.engine().GetEvents(group_);
      if (!now.ok()) {
        // Deleted between the notification and this read.
        finish = TakeFinishLocked(Deleted());
      } else if (!sent_any_ || !SameEvents(now->events, sent_.events) ||
                 !SameEvents(now->events_local, sent_.events_local)) {
        sent_ = *now;
        sent_any_ = true;
        update_.Clear();
        update_.set_path(path_);
        EventsToProto(now->events, update_.mutable_events());
        EventsToProto(now->events_local, update_.mutable_events_local());
        if (absl::Status s = SerializeResponse(update_, &update_bytes_);
            !s.ok()) {
          finish = TakeFinishLocked(s);
        } else {
          write_in_flight_ = true;
          write = true;
        }
      }
    }
    if (finish) Finish(*finish);
    // update_bytes_ is not touched again until OnWriteDone clears
    // write_in_flight_.
    if (write) StartWrite(&update_bytes_);
  }

  // Ends the stream with `status` once; with a write in flight, when the
  // write completes.
  void EndStream(absl::Status status) {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock l(&mu_);
      if (finish_called_) return;
      if (write_in_flight_) {
        if (!pending_finish_) pending_finish_ = std::move(status);
        return;
      }
      finish = TakeFinishLocked(std::move(status));
    }
    if (finish) Finish(*finish);
  }

  // The status to Finish() with, exactly once (nullopt if already taken),
  // converted once (AnswerStatus: a shed stream's trailer too).
  std::optional<grpc::Status> TakeFinishLocked(absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_called_) return std::nullopt;
    finish_called_ = true;
    pending_finish_.reset();
    final_ = status;
    return ToGrpcStatus(status);
  }

  Pipeline& pipeline_;
  EventsHub* const hub_;  // null: refused once the request is read
  grpc::CallbackServerContext* const context_;
  // Holds the caller's stream permit (--max_streams_per_identity), given
  // back by EndCall in OnDone(). Touched by OnEventsChanged (the hub's
  // notifier thread) and OnDone, which runs after Unsubscribe() waited for
  // any callback: never at once.
  CallContext call_;
  SlotRead read_;
  grpc::ByteBuffer request_bytes_;  // OnReadDone's until it is parsed
  // Set once by OnReadDone before the subscription (under mu_, which the
  // hub's callbacks and OnDone take after it).
  GroupHandle group_;
  std::string path_;

  absl::Mutex mu_;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // a change during the write
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool subscribed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  GroupEvents sent_ ABSL_GUARDED_BY(mu_);  // the counts last written
  // The write's buffer: filled under mu_ only while no write is in flight,
  // read by gRPC during the write.
  v1::EventsUpdate update_;
  grpc::ByteBuffer update_bytes_;            // update_ serialized, on the wire
  absl::Status final_ ABSL_GUARDED_BY(mu_);  // what the stream ended with
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartWatchEvents(
    Pipeline& pipeline, EventsHub* hub, grpc::CallbackServerContext* context) {
  return new WatchEventsReactor(pipeline, hub, context);
}

}  // namespace cgacct
