#include "client/lib/session_link.h"

#include <algorithm>

namespace cgacct::client::internal {

SessionLink::SessionLink(Rpcs& rpcs, Handler& handler,
                         const std::atomic<bool>& closed)
    : rpcs_(rpcs), handler_(handler), closed_(closed) {}

SessionLink::~SessionLink() { Stop(); }

std::pair<std::string, uint64_t> SessionLink::Session() const {
  absl::MutexLock l(&session_mu_);
  return {session_id_, generation_};
}

bool SessionLink::IsCurrent(uint64_t gen) const {
  absl::MutexLock l(&session_mu_);
  return generation_ == gen;
}

void SessionLink::Replace(const v1::OpenSessionResponse& opened) {
  absl::MutexLock l(&session_mu_);
  session_id_ = opened.session_id();
  ttl_ms_ = opened.ttl_ms();
  ++generation_;
  last_answer_ns_.store(SteadyNanos(), std::memory_order_relaxed);
}

int64_t SessionLink::SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Duration SessionLink::Detached() const {
  const int64_t since = detached_since_ns_.load(std::memory_order_relaxed);
  return since == 0 ? absl::ZeroDuration()
                    : absl::Nanoseconds(SteadyNanos() - since);
}

absl::Duration SessionLink::Silence() const {
  return absl::Nanoseconds(SteadyNanos() -
                           last_answer_ns_.load(std::memory_order_relaxed));
}

uint32_t SessionLink::ttl_ms() const {
  absl::MutexLock l(&session_mu_);
  return ttl_ms_;
}

void SessionLink::Start(absl::Duration attach_wait) {
  stream_thread_ = std::thread([this] { StreamLoop(); });
  keepalive_thread_ = std::thread([this] { KeepaliveLoop(); });
  // Drain requests reach the process only once the stream is attached:
  // wait for the server's first answer (at most attach_wait; past it the
  // stream thread keeps trying).
  absl::MutexLock l(&stream_mu_);
  stream_mu_.AwaitWithTimeout(absl::Condition(&attached_once_), attach_wait);
}

void SessionLink::Stop() {
  {
    absl::MutexLock l(&stream_mu_);
    stream_stop_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  if (stream_thread_.joinable()) stream_thread_.join();
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
}

void SessionLink::Reattach() {
  absl::MutexLock l(&stream_mu_);
  if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
}

bool SessionLink::WriteDrainAnswer(uint64_t drain_id,
                                   const std::vector<Returned>& returned) {
  v1::SessionClientMessage answer;
  answer.set_drain_id(drain_id);
  for (const Returned& r : returned) {
    v1::SessionHolding* h = answer.add_returned();
    h->set_path(r.path);
    h->set_kind(static_cast<v1::PageKind>(r.kind));
    h->set_nr_pages(r.nr_pages);
  }
  absl::MutexLock l(&stream_mu_);
  return stream_ != nullptr && stream_->Write(answer);
}

void SessionLink::StreamLoop() {
  int backoff_ms = 50;
  while (!closed_.load()) {
    auto [sid, gen] = Session();
    {
      absl::MutexLock l(&stream_mu_);
      if (stream_stop_) break;
    }
    grpc::ClientContext context;
    std::unique_ptr<Rpcs::SessionStream> rw = rpcs_.OpenStream(&context);
    {
      absl::MutexLock l(&stream_mu_);
      stream_ctx_ = &context;
      stream_ = rw.get();
      paced_ = false;
      if (stream_stop_) context.TryCancel();
    }
    v1::SessionClientMessage attach;
    attach.set_attach_session_id(sid);
    bool ok;
    {
      absl::MutexLock l(&stream_mu_);
      ok = rw->Write(attach);
    }
    v1::SessionServerMessage msg;
    bool got_any = false;
    while (ok && rw->Read(&msg)) {
      if (!got_any) {
        absl::MutexLock l(&stream_mu_);
        attached_once_ = true;
      }
      got_any = true;
      backoff_ms = 50;
      last_answer_ns_.store(SteadyNanos(),
                            std::memory_order_relaxed);
      detached_since_ns_.store(0, std::memory_order_relaxed);
      if (msg.paced() || msg.keepalive_request()) {
        absl::MutexLock l(&stream_mu_);
        paced_ = true;
        if (msg.keepalive_request()) {
          v1::SessionClientMessage keepalive;
          keepalive.set_keepalive(true);
          ok = rw->Write(keepalive);
        }
      }
      if (msg.drain_id() != 0) handler_.OnDrainRequest(msg);
    }
    {
      absl::MutexLock l(&stream_mu_);
      stream_ctx_ = nullptr;
      stream_ = nullptr;
    }
    int64_t attached = 0;
    detached_since_ns_.compare_exchange_strong(attached, SteadyNanos(),
                                               std::memory_order_relaxed);
    grpc::Status status = rw->Finish();
    if (closed_.load()) break;
    if (!IsCurrent(gen)) continue;  // reopened meanwhile: re-attach
    if (SessionGone(status)) {
      grpc::Status s = handler_.OnSessionGone(gen);
      if (s.ok()) continue;
      status = s;
    }
    reattached_.fetch_add(1, std::memory_order_relaxed);
    handler_.OnStreamBroken(status);
    absl::MutexLock l(&stream_mu_);
    stream_mu_.AwaitWithTimeout(absl::Condition(&stream_stop_),
                                absl::Milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 1000);
  }
}

void SessionLink::KeepaliveLoop() {
  uint32_t ttl;
  {
    absl::MutexLock l(&session_mu_);
    ttl = ttl_ms_;
  }
  const absl::Duration period =
      absl::Milliseconds(std::max<uint32_t>(ttl / 3, 10));
  for (;;) {
    {
      absl::MutexLock l(&stream_mu_);
      if (stream_mu_.AwaitWithTimeout(absl::Condition(&stream_stop_), period)) {
        return;
      }
      if (stream_ != nullptr && !paced_) {
        v1::SessionClientMessage keepalive;
        keepalive.set_keepalive(true);
        stream_->Write(keepalive);
      }
    }
    // Outside stream_mu_: the handler may take locks that come before it.
    handler_.AfterKeepalive();
  }
}

}  // namespace cgacct::client::internal
