// grpc.health.v1 served by cgacctd (server/rpc/health_service.h).
#include "server/rpc/health_service.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/rpc/codec.h"
#include "server/rpc/receive_guard.h"
#include "server/rpc/status.h"

namespace cgacct {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr char kCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kWatch[] = "/grpc.health.v1.Health/Watch";

// The request of a health call, read: its size bounded, then parsed.
absl::Status ParseHealthRequest(bool ok, const grpc::ByteBuffer& bytes,
                                const grpc::ServerContextBase* context,
                                HealthCheckRequest* request) {
  if (!ok) {
    if (std::optional<std::string> guard = GuardCancelReason(context))
      return absl::ResourceExhaustedError(*guard);
    return absl::InvalidArgumentError(
        "request: the call carried no grpc.health.v1.HealthCheckRequest");
  }
  if (bytes.Length() > ReceiveGuard::kHealthRequestMaxBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request: a grpc.health.v1.HealthCheckRequest of ", bytes.Length(),
        " bytes is larger than the ", ReceiveGuard::kHealthRequestMaxBytes,
        " a health request may be"));
  }
  return ParseRequest(bytes, request);
}

// The client host of a call: its peer without the port ("ipv4:10.0.0.1",
// "ipv6:[::1]"), "" when unknown.
std::string PeerHost(const grpc::ServerContextBase* context) {
  std::string peer = CanonicalPeer(context->peer());
  const size_t colon = peer.rfind(':');
  const size_t kind = peer.find(':');
  if (colon == std::string::npos || colon == kind) return peer;
  peer.resize(colon);
  return peer;
}

// A health call's place among its client host's open calls
// (HealthStatuses::BeginCall): taken when the call starts, given back when
// the reactor holding it is destroyed. Used by one reactor.
class CallSlot {
 public:
  CallSlot(HealthStatuses& statuses, const grpc::ServerContextBase* context,
           HealthStatuses::CallKind kind)
      : statuses_(statuses),
        host_(PeerHost(context)),
        kind_(kind),
        taken_(statuses_.BeginCall(host_, kind_)) {}
  CallSlot(const CallSlot&) = delete;
  CallSlot& operator=(const CallSlot&) = delete;
  ~CallSlot() {
    if (taken_) statuses_.EndCall(host_, kind_);
  }

  bool taken() const { return taken_; }
  // Why the call was refused (when !taken()).
  grpc::Status Refusal() const {
    return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "too many health ",
        kind_ == HealthStatuses::CallKind::kWatch ? "Watch" : "Check",
        " calls open (", HealthStatuses::kMaxCallsPerHost,
        " per client host, ", HealthStatuses::kMaxWatches,
        " Watches in all); ", host_, " is at its share")));
  }

 private:
  HealthStatuses& statuses_;
  const std::string host_;
  const HealthStatuses::CallKind kind_;
  const bool taken_;
};

// Check: one read, then one write and OK, or an error.
class HealthCheckCall final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  HealthCheckCall(HealthStatuses& statuses,
                  const grpc::ServerContextBase* context)
      : statuses_(statuses),
        context_(context),
        slot_(statuses, context, HealthStatuses::CallKind::kCheck) {
    if (!slot_.taken()) {
      Finish(slot_.Refusal());
      return;
    }
    StartRead(&request_bytes_);
  }

  void OnReadDone(bool ok) override {
    HealthCheckRequest request;
    absl::Status status =
        ParseHealthRequest(ok, request_bytes_, context_, &request);
    request_bytes_.Clear();
    std::optional<HealthStatus> serving;
    if (status.ok()) {
      serving = statuses_.Get(request.service());
      if (!serving.has_value()) {
        // gRPC's default service answers NOT_FOUND for a name it does not
        // serve.
        // (The name quoted up to 64 bytes: a request may carry 4 KB.)
        const absl::string_view name = request.service();
        status = absl::NotFoundError(absl::StrCat(
            "service: \"", absl::CHexEscape(name.substr(0, 64)),
            name.size() > 64 ? "\"... (" : "\" (",
            name.size() > 64 ? absl::StrCat(name.size(), " bytes) ") : "",
            "is not served here (\"\" and \"cgacct.v1.Accounting\" are)"));
      }
    }
    if (status.ok()) {
      HealthCheckResponse response;
      response.set_status(*serving);
      status = SerializeResponse(response, &response_bytes_);
    }
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    StartWriteAndFinish(&response_bytes_, grpc::WriteOptions(),
                        grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  HealthStatuses& statuses_;
  const grpc::ServerContextBase* const context_;
  CallSlot slot_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
};

// Watch: one read, then the status and each change of it. One write in
// flight at a time; a change meanwhile is sent when it completes if it is
// still not what was sent (so a slow reader gets the latest, no backlog).
class HealthWatchCall final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public HealthStatuses::Watcher {
 public:
  HealthWatchCall(HealthStatuses& statuses,
                  const grpc::ServerContextBase* context)
      : statuses_(statuses),
        context_(context),
        slot_(statuses, context, HealthStatuses::CallKind::kWatch) {
    if (!slot_.taken()) {
      EndWith(slot_.Refusal());
      return;
    }
    StartRead(&request_bytes_);
  }

  void OnReadDone(bool ok) override {
    HealthCheckRequest request;
    absl::Status status =
        ParseHealthRequest(ok, request_bytes_, context_, &request);
    request_bytes_.Clear();
    if (!status.ok()) {
      EndWith(ToGrpcStatus(status));
      return;
    }
    {
      absl::MutexLock l(&mu_);
      if (finishing_) return;  // cancelled meanwhile
      watching_ = true;
    }
    HealthStatus now;
    const bool added = statuses_.AddWatcher(this, request.service(), &now);
    {
      absl::MutexLock l(&mu_);
      // A change told between AddWatcher and here is newer than `now`.
      if (!latest_.has_value()) latest_ = now;
      if (!added) ending_ = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                         "server shutting down");
    }
    Send();
  }

  // HealthStatuses::Watcher (any thread, outside the statuses' lock).
  void OnHealthChanged(HealthStatus status) override {
    {
      absl::MutexLock l(&mu_);
      latest_ = status;
    }
    Send();
  }
  void OnHealthShutdown() override {
    EndWith(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         "server shutting down"));
  }
  void Ref() override { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() override {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // grpc::ServerBidiReactor (gRPC's threads).
  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock l(&mu_);
      write_in_flight_ = false;
      if (!ok && !ending_.has_value()) {
        ending_ = grpc::Status(grpc::StatusCode::CANCELLED,
                               "write failed: client gone");
      }
    }
    Send();
  }
  void OnCancel() override {
    EndWith(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    bool watching;
    {
      absl::MutexLock l(&mu_);
      watching = watching_;
    }
    if (watching) statuses_.RemoveWatcher(this);
    Unref();
  }

 private:
  // Ends the stream with `status` once the write in flight (and, if the
  // status changed meanwhile, one more) is done.
  void EndWith(grpc::Status status) {
    {
      absl::MutexLock l(&mu_);
      if (!ending_.has_value()) ending_ = std::move(status);
    }
    Send();
  }

  // With no write in flight: writes the latest status if it is not what was
  // sent, else finishes if the stream is ending. gRPC is called outside mu_
  // (a reaction may run inline).
  void Send() {
    bool write = false;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock l(&mu_);
      if (finishing_ || write_in_flight_) return;
      const bool failed = ending_.has_value() &&
                          ending_->error_code() == grpc::StatusCode::CANCELLED;
      if (!failed && latest_.has_value() &&
          (!sent_.has_value() || *sent_ != *latest_)) {
        HealthCheckResponse response;
        response.set_status(*latest_);
        if (SerializeResponse(response, &response_bytes_).ok()) {
          sent_ = latest_;
          write_in_flight_ = true;
          write = true;
        } else {
          ending_ = grpc::Status(grpc::StatusCode::INTERNAL,
                                 "the status could not be serialized");
        }
      }
      if (!write && ending_.has_value()) {
        finishing_ = true;
        finish = std::move(ending_);
      }
    }
    if (write) StartWrite(&response_bytes_);
    if (finish.has_value()) Finish(*finish);
  }

  HealthStatuses& statuses_;
  const grpc::ServerContextBase* const context_;
  CallSlot slot_;
  // One reference for gRPC's side (given back in OnDone), one per
  // notification under way.
  std::atomic<int> refs_{1};
  grpc::ByteBuffer request_bytes_;  // the read's (one read, then unused)
  absl::Mutex mu_;
  // The write buffer: set under mu_ while no write is in flight, then
  // gRPC's until OnWriteDone.
  grpc::ByteBuffer response_bytes_;
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<HealthStatus> latest_ ABSL_GUARDED_BY(mu_);
  std::optional<HealthStatus> sent_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> ending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

HealthStatuses::HealthStatuses(std::vector<std::string> services) {
  absl::MutexLock l(&mu_);
  serving_[""] = false;
  for (std::string& service : services) serving_[std::move(service)] = false;
}

HealthStatus HealthStatuses::StatusLocked(absl::string_view service) const {
  if (shut_down_) return HealthCheckResponse::NOT_SERVING;
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING
                    : HealthCheckResponse::NOT_SERVING;
}

template <typename Notify>
void HealthStatuses::NotifyAll(Notify notify) {
  std::vector<std::pair<Watcher*, HealthStatus>> told;
  {
    absl::MutexLock l(&mu_);
    told.reserve(watchers_.size());
    for (const auto& [watcher, service] : watchers_) {
      watcher->Ref();
      told.emplace_back(watcher, StatusLocked(service));
    }
  }
  for (auto& [watcher, status] : told) {
    notify(watcher, status);
    watcher->Unref();
  }
}

void HealthStatuses::SetServing(bool serving) {
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    for (auto& [service, is_serving] : serving_) is_serving = serving;
  }
  NotifyAll([](Watcher* w, HealthStatus status) { w->OnHealthChanged(status); });
}

void HealthStatuses::Shutdown() {
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  NotifyAll([](Watcher* w, HealthStatus status) {
    w->OnHealthChanged(status);
    w->OnHealthShutdown();
  });
}

std::optional<HealthStatus> HealthStatuses::Get(
    absl::string_view service) const {
  absl::MutexLock l(&mu_);
  if (!serving_.contains(service)) return std::nullopt;
  return StatusLocked(service);
}

bool HealthStatuses::AddWatcher(Watcher* watcher, const std::string& service,
                                HealthStatus* status) {
  absl::MutexLock l(&mu_);
  *status = StatusLocked(service);
  if (shut_down_) return false;
  watchers_[watcher] = service;
  return true;
}

void HealthStatuses::RemoveWatcher(Watcher* watcher) {
  absl::MutexLock l(&mu_);
  watchers_.erase(watcher);
}

bool HealthStatuses::BeginCall(const std::string& host, CallKind kind) {
  absl::MutexLock l(&mu_);
  std::pair<int, int>& open = calls_by_host_[host];
  int& mine = kind == CallKind::kCheck ? open.first : open.second;
  if (mine >= kMaxCallsPerHost ||
      (kind == CallKind::kWatch && watches_ >= kMaxWatches)) {
    if (open.first == 0 && open.second == 0) calls_by_host_.erase(host);
    return false;
  }
  ++mine;
  if (kind == CallKind::kWatch) ++watches_;
  return true;
}

void HealthStatuses::EndCall(const std::string& host, CallKind kind) {
  absl::MutexLock l(&mu_);
  auto it = calls_by_host_.find(host);
  if (it == calls_by_host_.end()) return;
  int& mine = kind == CallKind::kCheck ? it->second.first : it->second.second;
  if (mine > 0) --mine;
  if (kind == CallKind::kWatch && watches_ > 0) --watches_;
  if (it->second.first == 0 && it->second.second == 0)
    calls_by_host_.erase(it);
}

HealthService::HealthService(HealthStatuses& statuses) {
  HealthStatuses* s = &statuses;
  AddMethod(new grpc::internal::RpcServiceMethod(
      kCheck, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodRawCallback(
      0, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer,
                                                 grpc::ByteBuffer>(
             [s](grpc::CallbackServerContext* context) {
               return new HealthCheckCall(*s, context);
             }));
  AddMethod(new grpc::internal::RpcServiceMethod(
      kWatch, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodRawCallback(
      1, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer,
                                                 grpc::ByteBuffer>(
             [s](grpc::CallbackServerContext* context) {
               return new HealthWatchCall(*s, context);
             }));
}

}  // namespace cgacct
