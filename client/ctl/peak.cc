// cgacctctl peak PATH: memory.peak through an open file (Linux 6.12+), as a
// memcg engineer uses it: write to memory.peak (a watermark of one's own
// starts at the current usage), then read it back through the same file.
// The open file is a peak watermark (OpenPeakWatermark), owned by a session
// cgacctctl opens for it and keeps alive on a SessionStream; closing the
// watermark and the session at the end (or the lease running out, if
// cgacctctl is killed) closes the file. Prints the watermark after every
// --delay, -n times (0: until interrupted): text, the bytes as memory.peak
// prints them; --json, one PeakWatermark object per line.
//
// Thread safety: the main thread, and one thread that reads the session's
// stream (answering keepalive and drain requests) while the main thread
// sleeps; writes on the stream are serialised by a mutex.
#include <algorithm>
#include <atomic>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"

namespace cgacct::ctl {
namespace {

using SessionStream = grpc::ClientReaderWriter<v1::SessionClientMessage,
                                               v1::SessionServerMessage>;

// The session's stream: attached, then read by a thread of its own that
// answers the server's keepalive requests (a server that paces the stream)
// and drain requests (with nothing: the session holds no page). Keepalive()
// sends one unasked, for a server that does not pace the stream.
class SessionLease {
 public:
  explicit SessionLease(std::unique_ptr<SessionStream> stream)
      : stream_(std::move(stream)) {}
  ~SessionLease() {
    if (reader_.joinable()) reader_.join();
  }

  // Attaches to `session_id` and waits for the lease answer; false when the
  // stream broke. Then starts the reader.
  bool Attach(const std::string& session_id) {
    v1::SessionClientMessage attach;
    attach.set_attach_session_id(session_id);
    v1::SessionServerMessage answer;
    if (!Write(attach) || !stream_->Read(&answer)) return false;
    paced_.store(answer.paced());
    reader_ = std::thread([this] { Read(); });
    return true;
  }
  // A keepalive unasked, unless the server paces the stream; false once
  // the stream broke.
  bool Keepalive() {
    if (broken_.load()) return false;
    if (paced_.load()) return true;
    v1::SessionClientMessage keepalive;
    keepalive.set_keepalive(true);
    return Write(keepalive);
  }
  bool broken() const { return broken_.load(); }
  // After the call was cancelled: the reader ends; the stream's status.
  grpc::Status Finish() {
    if (reader_.joinable()) reader_.join();
    return stream_->Finish();
  }

 private:
  void Read() {
    v1::SessionServerMessage message;
    while (stream_->Read(&message)) {
      if (message.paced()) paced_.store(true);
      if (message.keepalive_request()) {
        v1::SessionClientMessage keepalive;
        keepalive.set_keepalive(true);
        if (!Write(keepalive)) break;
      }
      if (message.drain_id() != 0) {
        v1::SessionClientMessage nothing;
        nothing.set_drain_id(message.drain_id());
        if (!Write(nothing)) break;
      }
    }
    broken_.store(true);
  }
  bool Write(const v1::SessionClientMessage& message) {
    absl::MutexLock l(&write_mu_);
    return stream_->Write(message);
  }

  const std::unique_ptr<SessionStream> stream_;
  absl::Mutex write_mu_;  // one Write at a time
  std::atomic<bool> paced_{false};
  std::atomic<bool> broken_{false};
  std::thread reader_;
};

}  // namespace

int Peak(Ctl& ctl, const Invocation& inv) {
  v1::OpenSessionRequest open_session;
  open_session.set_client_name("cgacctctl peak");
  v1::OpenSessionResponse session;
  grpc::Status status = ctl.stub().OpenSession(ctl.Context().get(),
                                               open_session, &session);
  if (!status.ok()) return PrintRpcError("peak: OpenSession", status);
  const std::string& sid = session.session_id();
  // The lease: renewed when the server asks (or every third of it).
  grpc::ClientContext stream_context;  // no deadline: as long as we read
  SessionLease lease(ctl.stub().SessionStream(&stream_context));
  const absl::Duration renew =
      std::max(absl::Milliseconds(session.ttl_ms()) / 3, absl::Milliseconds(1));

  auto end = [&](int code) {
    v1::CloseSessionRequest close;  // closes the watermark with it
    close.set_session_id(sid);
    v1::CloseSessionResponse closed;
    (void)ctl.stub().CloseSession(ctl.Context().get(), close, &closed);
    stream_context.TryCancel();
    (void)lease.Finish();
    return code;
  };
  const auto broke = [&] {
    return end(PrintRpcError(absl::StrCat("peak ", inv.path),
                             grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                          "the session's stream broke")));
  };
  if (!lease.Attach(sid)) return broke();

  v1::OpenPeakWatermarkRequest open;
  open.set_path(inv.path);
  open.set_session_id(sid);
  v1::PeakWatermark watermark;
  status = ctl.stub().OpenPeakWatermark(ctl.Context().get(), open, &watermark);
  if (!status.ok()) {
    return end(PrintRpcError(absl::StrCat("peak ", inv.path), status));
  }
  v1::PeakWatermarkRequest read;
  read.set_watermark_id(watermark.watermark_id());
  for (int printed = 0; inv.iterations == 0 || printed < inv.iterations;
       ++printed) {
    // Sleep --delay, keeping the lease alive meanwhile.
    for (absl::Duration left = inv.delay; left > absl::ZeroDuration();) {
      const absl::Duration step = std::min(left, renew);
      absl::SleepFor(step);
      left -= step;
      if (!lease.Keepalive()) break;
    }
    if (lease.broken()) return broke();
    status =
        ctl.stub().ReadPeakWatermark(ctl.Context().get(), read, &watermark);
    if (!status.ok()) {
      return end(PrintRpcError(absl::StrCat("peak ", inv.path), status));
    }
    if (ctl.json()) {
      PrintJson({{"path", watermark.path()},
                 {"watermark_id", watermark.watermark_id()},
                 {"memory.peak", watermark.peak_bytes()}},
                /*pretty=*/false);
    } else {
      std::cout << watermark.peak_bytes() << "\n";
    }
    std::cout.flush();
  }
  return end(kExitOk);
}

}  // namespace cgacct::ctl
