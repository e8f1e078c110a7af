// WatchEvents: a server stream of one group's memory.events and
// memory.events.local (docs/DESIGN.md §4).
//
// Each stream is a WatchEventsReactor subscribed to the EventsWatchHub under
// the group's id. It holds one EventsUpdate buffer and two flags: a write in
// flight, and "changed meanwhile". A change noted while a write is in flight
// only sets the flag; when the write completes the reactor reads the latest
// counts and writes again if they differ from what it sent. So a slow reader
// gets the newest counts and never a backlog, and the memory of a stream is
// constant whatever the event rate.
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/group_path.h"
#include "server/accounting_service.h"
#include "server/status.h"
#include "server/wire.h"

namespace cgacct {


namespace {

// A stream that ends at once with `status`.
class FinishedWriteReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FinishedWriteReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

bool SameEvents(const MemoryEvents& a, const MemoryEvents& b) {
  return a.low == b.low && a.high == b.high && a.max == b.max &&
         a.oom == b.oom && a.oom_kill == b.oom_kill &&
         a.oom_group_kill == b.oom_group_kill &&
         a.sock_throttled == b.sock_throttled;
}

}  // namespace

class AccountingService::WatchEventsReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
      public EventsWatchHub::Watcher {
 public:
  WatchEventsReactor(AccountingService* service, GroupHandle group,
                     std::string path, CallLimiter::Permit permit,
                     int64_t start_ns)
      : service_(service),
        group_(group),
        path_(std::move(path)),
        permit_(std::move(permit)),
        start_ns_(start_ns) {}

  // Subscribes, then sends the current counts. Called once, right after
  // construction, before the reactor is returned to gRPC.
  void Start() {
    // OnDone() unsubscribes whether or not this succeeded (idempotent).
    if (!service_->events_hub_->Subscribe(group_.id(), this)) {
      EndStream(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
      return;
    }
    SendLatest();
  }

  // EventsWatchHub::Watcher (notifier thread).
  void OnEventsChanged() override { SendLatest(); }
  void OnGroupDeleted() override { EndStream(Deleted()); }
  void OnShutdown() override {
    EndStream(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down"));
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
        pending_finish_ = grpc::Status(grpc::StatusCode::CANCELLED,
                                       "write failed: client gone");
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
    EndStream(
        grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }
  void OnDone() override {
    service_->events_hub_->Unsubscribe(group_.id(), this);
    grpc::StatusCode code;
    {
      absl::MutexLock l(&mu_);
      code = final_code_;
    }
    service_->RecordRpc(RpcMethod::kWatchEvents, start_ns_, code);
    delete this;
  }

 private:
  grpc::Status Deleted() const {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
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
      absl::StatusOr<GroupEvents> now = service_->engine_.GetEvents(group_);
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
          finish = TakeFinishLocked(ToGrpcStatus(s));
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
  void EndStream(grpc::Status status) {
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

  // The status to Finish() with, exactly once (nullopt if already taken).
  std::optional<grpc::Status> TakeFinishLocked(grpc::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_called_) return std::nullopt;
    finish_called_ = true;
    pending_finish_.reset();
    final_code_ = status.error_code();
    return status;
  }

  AccountingService* const service_;
  const GroupHandle group_;
  const std::string path_;
  // The caller's stream slot (--max_streams_per_identity), given back when
  // the reactor is deleted in OnDone().
  CallLimiter::Permit permit_;
  const int64_t start_ns_;

  absl::Mutex mu_;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // a change during the write
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  GroupEvents sent_ ABSL_GUARDED_BY(mu_);  // the counts last written
  // The write's buffer: filled under mu_ only while no write is in flight,
  // read by gRPC during the write.
  v1::EventsUpdate update_;
  grpc::ByteBuffer update_bytes_;  // update_ serialized, on the wire
  grpc::StatusCode final_code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* AccountingService::WatchEvents(
    grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request_bytes) {
  const int64_t start_ns = clock_.NowNs();
  auto fail = [&](const absl::Status& error) {
    const grpc::Status status = ToGrpcStatus(error);
    RecordRpc(RpcMethod::kWatchEvents, start_ns, status.error_code());
    return new FinishedWriteReactor(status);
  };
  if (events_hub_ == nullptr)
    return fail(absl::UnavailableError(
        "WatchEvents is not served by this server (no events hub)"));
  v1::WatchEventsRequest parsed;
  if (absl::Status s = ParseRequest(*request_bytes, &parsed); !s.ok())
    return fail(s);
  const v1::WatchEventsRequest* const request = &parsed;
  if (absl::Status s = AuthorizeCall(*context, Access::kRead, request->path());
      !s.ok())
    return fail(s);
  absl::StatusOr<GroupHandle> group = engine_.ResolveGroup(request->path());
  if (!group.ok()) return fail(group.status());
  // A watch is a stream: it counts against the caller's streams.
  ShedReason reason;
  absl::StatusOr<CallLimiter::Permit> permit = limiter_.Acquire(
      CallLimiter::Kind::kStream, CallerKey(context), &reason);
  if (!permit.ok()) {
    MarkShed(context, reason);
    return fail(permit.status());
  }
  auto* reactor = new WatchEventsReactor(this, *group, request->path(),
                                         *std::move(permit), start_ns);
  reactor->Start();
  return reactor;
}

}  // namespace cgacct
