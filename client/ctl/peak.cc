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
// Thread safety: runs on the main thread only.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"

namespace cgacct::ctl {
namespace {

using SessionStream = grpc::ClientReaderWriter<v1::SessionClientMessage,
                                               v1::SessionServerMessage>;

// Sends `message` and reads until the lease answer (expires_in_ms, no
// drain_id), answering any drain request with nothing to return (the
// session holds no page). False when the stream broke.
bool Exchange(SessionStream& stream, const v1::SessionClientMessage& message) {
  if (!stream.Write(message)) return false;
  v1::SessionServerMessage answer;
  while (stream.Read(&answer)) {
    if (answer.drain_id() == 0) return true;
    v1::SessionClientMessage nothing;
    nothing.set_drain_id(answer.drain_id());
    if (!stream.Write(nothing)) return false;
  }
  return false;
}

}  // namespace

int Peak(Ctl& ctl, const Invocation& inv) {
  v1::OpenSessionRequest open_session;
  open_session.set_client_name("cgacctctl peak");
  v1::OpenSessionResponse session;
  grpc::Status status = ctl.stub().OpenSession(ctl.Context().get(),
                                               open_session, &session);
  if (!status.ok()) return PrintRpcError("peak: OpenSession", status);
  const std::string& sid = session.session_id();
  // The lease, renewed every third of it (and at every read).
  grpc::ClientContext stream_context;  // no deadline: as long as we read
  std::unique_ptr<SessionStream> stream =
      ctl.stub().SessionStream(&stream_context);
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(sid);
  v1::SessionClientMessage keepalive;
  keepalive.set_keepalive(true);
  const absl::Duration renew =
      std::max(absl::Milliseconds(session.ttl_ms()) / 3, absl::Milliseconds(1));

  auto end = [&](int code) {
    v1::CloseSessionRequest close;  // closes the watermark with it
    close.set_session_id(sid);
    v1::CloseSessionResponse closed;
    (void)ctl.stub().CloseSession(ctl.Context().get(), close, &closed);
    stream_context.TryCancel();
    (void)stream->Finish();
    return code;
  };
  if (!Exchange(*stream, attach)) {
    return end(PrintRpcError(absl::StrCat("peak ", inv.path),
                             grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                          "the session's stream broke")));
  }

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
      if (left > absl::ZeroDuration() && !Exchange(*stream, keepalive)) break;
    }
    if (!Exchange(*stream, keepalive)) {
      return end(PrintRpcError(absl::StrCat("peak ", inv.path),
                               grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                            "the session's stream broke")));
    }
    status =
        ctl.stub().ReadPeakWatermark(ctl.Context().get(), read, &watermark);
    if (!status.ok()) {
      return end(PrintRpcError(absl::StrCat("peak ", inv.path), status));
    }
    if (ctl.json()) {
      std::cout << ProtoJson(watermark, /*pretty=*/false);
    } else {
      std::cout << watermark.peak_bytes() << "\n";
    }
    std::cout.flush();
  }
  return end(kExitOk);
}

}  // namespace cgacct::ctl
