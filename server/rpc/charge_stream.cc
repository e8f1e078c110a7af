// ChargeStream (server/rpc/charge_stream.h).
#include "server/rpc/charge_stream.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/remote_stock.h"
#include "server/pipeline/batch.h"
#include "server/rpc/codec.h"
#include "server/rpc/peer.h"
#include "server/rpc/receive_guard.h"
#include "server/rpc/refused_reactors.h"
#include "server/rpc/status.h"

namespace cgacct {
namespace {

// A request or response buffer a stream keeps between messages is freed
// once used if its encoding outgrew this (so an idle stream that once carried
// a 4 MB batch does not keep 4 MB).
constexpr size_t kMaxRetainedMessageBytes = size_t{64} << 10;
// Responses are bounded per op (code, id, counts and a message of at most a
// few hundred bytes): their op count stands in for their size.
constexpr int kMaxRetainedResults = 256;

// Frees `message`'s memory (a swap with an empty one).
template <typename Message>
void FreeMessage(Message* message) {
  Message().Swap(message);
}

}  // namespace

// The ChargeStream reactor. One read and one write may be outstanding at
// once (gRPC's rule); requests are applied on the thread that completes the
// read, into whichever of the two response buffers is not on the wire.
//
//   read done -> apply into the free buffer ->
//     no write on the wire: write it, read the next request;
//     else: park it ("ready"), stop reading until the write completes.
//   write done -> a ready buffer: write it and resume reading;
//     else, if reads are over: Finish.
//
// So responses leave in request order, at most one waits, and the stream
// holds 1 request + 2 responses of memory whatever the client does; a buffer
// that grew past kMaxRetainedMessageBytes is freed once used.
//
// Limits (server/pipeline/call_limiter.h): the stream holds a stream permit
// of its caller's identity until it finishes, and each request an in-flight
// permit from its read until its response has been written (`permits_`, one
// per response buffer). A request over the in-flight limit or over
// kMaxBatchOps ops ends the stream with its error after the earlier
// responses; it is not applied.
// Cancellation (or a broken connection) fails the outstanding read/write;
// the reactor then finishes once nothing is outstanding.
//
// Thread safety: gRPC may run OnReadDone and OnWriteDone concurrently; the
// flags below are guarded by mu_, and Start*/Finish are called without it.
class ChargeStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `call`: admitted (holding the stream permit) and authenticated.
  ChargeStreamReactor(Pipeline& pipeline, ChargeStreams& streams,
                      grpc::CallbackServerContext* context, CallContext call)
      : pipeline_(pipeline),
        streams_(streams),
        context_(context),
        call_(std::move(call)),
        runner_(pipeline.NewBatchRunner(call_)) {
    const bool shutting_down = !streams_.Register(this);
    {
      absl::MutexLock l(&mu_);
      if (shutting_down) {
        // Shutdown began before this stream was registered: nothing read,
        // nothing applied.
        shutting_down_ = true;
        shutdown_end_ = true;
        finished_ = true;
      } else {
        read_outstanding_ = true;
      }
    }
    if (shutting_down) {
      DoFinish();
      return;
    }
    StartRead(&request_bytes_);
    // A BeginShutdown() that reached this stream before the read was
    // started left the finishing to here (Finish must not precede it).
    bool finish;
    {
      absl::MutexLock l(&mu_);
      started_ = true;
      finish = shutting_down_ && ShouldFinishLocked();
    }
    if (finish) DoFinish();
  }

  // ChargeStreams::BeginShutdown(): stop reading; the requests already read are
  // applied and answered, then the stream ends UNAVAILABLE saying how many were
  // (or OK if the client had already half-closed).
  void OnServerShutdown() {
    bool finish;
    {
      absl::MutexLock l(&mu_);
      if (finished_) return;
      shutting_down_ = true;
      if (!reads_done_ && status_.ok()) shutdown_end_ = true;
      if (!started_) return;  // the constructor finishes (after StartRead)
      finish = ShouldFinishLocked();
    }
    if (finish) DoFinish();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // Half-close by the client, or the call is over (the read can fail
      // before OnCancel runs: ask the context which).
      const bool cancelled = context_->IsCancelled();
      bool finish;
      {
        absl::MutexLock l(&mu_);
        read_outstanding_ = false;
        reads_done_ = true;
        if (cancelled && status_.ok() && !finished_) {
          std::optional<std::string> guard = GuardCancelReason(context_);
          status_ = guard ? absl::ResourceExhaustedError(*guard)
                          : absl::CancelledError("ChargeStream cancelled");
        }
        finish = ShouldFinishLocked();
      }
      if (finish) DoFinish();
      return;
    }
    // A large request is decoded and applied on the large-request pool, its
    // identity taking turns there with the others, so gRPC's few callback
    // threads stay free for everyone's small calls (LargeRequestPool). The
    // read stays outstanding meanwhile (the stream reads nothing more), and
    // queued_ keeps even a shutdown from finishing it.
    if (request_bytes_.Length() >= kLargeRequestBytes) {
      {
        // Until OnRequestRead takes it: a shutdown must not finish (and
        // gRPC then delete) the stream under the queued task.
        absl::MutexLock l(&mu_);
        queued_ = true;
      }
      pipeline_.large_request_pool().Run(call_.identity(),
                                         [this] { OnRequestRead(); });
      return;
    }
    OnRequestRead();
  }

  // A request was read into request_bytes_: admit, decode and apply it (on
  // the thread that read it, or a large-request thread).
  void OnRequestRead() {
    // The checks that need no lock first (they change nothing). The bytes
    // are parsed here (not by gRPC, which would report a failed read, like
    // a half-close): bytes that are no ChargeBatchRequest end the stream.
    // The message's stages before the ops: admission (an in-flight
    // permit), decoding; the batch's own checks run in the runner.
    CallLimiter::Permit permit;
    absl::Status refused;
    absl::Status undecodable;
    // An access control reload since the stream began: the caller is
    // authenticated again, and a caller no longer allowed ends the stream
    // (nothing of this request applied).
    bool reauthenticated = false;
    refused = pipeline_.Reauthenticate(call_, &reauthenticated);
    if (reauthenticated && refused.ok()) runner_->SetCaller(call_.caller());
    absl::StatusOr<CallLimiter::Permit> admitted =
        refused.ok() ? pipeline_.AdmitMessage(call_, request_bytes_.Length())
                     : absl::StatusOr<CallLimiter::Permit>(refused);
    if (admitted.ok()) {
      permit = *std::move(admitted);
      undecodable = ParseRequest(request_bytes_, &request_);
    } else {
      refused = admitted.status();
    }
    request_bytes_.Clear();
    int buffer = 0;
    bool stop = false;
    bool stop_finish = false;
    {
      absl::MutexLock l(&mu_);
      read_outstanding_ = false;
      queued_ = false;
      if (finished_ || shutting_down_ || broken_) {
        // Read after shutdown began (or the call broke): not applied.
        reads_done_ = true;
        stop = true;
      } else if (call_.DeadlinePassed()) {
        // Checked before anything of this request changes.
        reads_done_ = true;
        status_ = absl::DeadlineExceededError(
            absl::StrCat("ChargeStream deadline passed before request ",
                         applied_ + 1, " was applied; the ", applied_,
                         " requests answered before it were applied"));
        stop = true;
      } else if (!undecodable.ok()) {
        reads_done_ = true;
        if (status_.ok()) {
          status_ = absl::InvalidArgumentError(absl::StrCat(
              "request ", applied_ + 1, ": ", undecodable.message(), "; the ",
              applied_,
              " requests answered before it were applied, it was not"));
        }
        stop = true;
      } else if (!refused.ok()) {
        reads_done_ = true;
        if (status_.ok()) status_ = std::move(refused);
        stop = true;
      } else {
        applying_ = true;
        buffer = 1 - writing_;  // never the one on the wire; never "ready"
        permits_[buffer] = std::move(permit);
      }
      if (stop) {
        // Under mu_: once queued_ is false, a shutdown on another thread may
        // finish the stream (and gRPC delete it) as soon as mu_ is released
        // (issue 22's re-attack: "pure virtual method called", SIGTERM with
        // large messages queued, 1 run in 4).
        FreeMessage(&request_);
        stop_finish = ShouldFinishLocked();
      }
    }
    if (stop) {
      if (stop_finish) DoFinish();
      return;
    }
    ApplyAndAnswer(buffer, /*may_defer=*/true);
  }

  // Applies request_ into responses_[buffer] (applying_ is set), then sends
  // or parks the response as the class comment says. `may_defer`: on a
  // gRPC callback thread; a charge op that would wait for sessions' drain
  // answers hands the rest of the request to the pipeline's DrainWaitPool
  // (applying_ stays set meanwhile, so the stream neither reads nor
  // finishes), which calls this again with may_defer false.
  void ApplyAndAnswer(int buffer, bool may_defer) {
    absl::Status run;
    {
      RemoteDrainDeferral::Scope no_wait(/*enabled=*/may_defer);
      run = runner_->Run(request_, &responses_[buffer]);
    }
    if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(run))) {
      pipeline_.drain_wait_pool().Run(
          [this, buffer] { ApplyAndAnswer(buffer, /*may_defer=*/false); });
      return;
    }
    // The wire form of the response, while its buffer is ours (not on the
    // wire, not parked).
    if (run.ok()) {
      run = SerializeResponse(responses_[buffer], &response_bytes_[buffer]);
    }
    // The request is done with; a big one is not kept while the stream idles
    // (the next read parses into a fresh message).
    if (request_.ByteSizeLong() > kMaxRetainedMessageBytes) {
      FreeMessage(&request_);
    }
    bool write = false;
    bool read = false;
    bool finish = false;
    {
      absl::MutexLock l(&mu_);
      applying_ = false;
      if (run.ok()) ++applied_;
      if (!run.ok()) {
        // Refused as a whole (too many ops, a bad or conflicting
        // idempotency_key): nothing of this request was applied; the stream
        // ends with it after the earlier responses.
        reads_done_ = true;
        permits_[buffer].Release();
        if (status_.ok()) {
          status_ = absl::Status(
              run.code(),
              absl::StrCat("request ", applied_ + 1, ": ", run.message()));
        }
      } else if (broken_) {
        reads_done_ = true;
      } else if (!write_outstanding_) {
        write_outstanding_ = true;
        writing_ = buffer;
        write = true;
        if (!shutting_down_) {
          read_outstanding_ = read = true;
        } else {
          reads_done_ = true;
        }
      } else {
        ready_ = buffer;  // resumed by OnWriteDone
      }
      finish = ShouldFinishLocked();
    }
    if (write) StartWrite(&response_bytes_[buffer]);
    if (read) StartRead(&request_bytes_);
    if (finish) DoFinish();
  }

  void OnWriteDone(bool ok) override {
    bool write = false;
    bool read = false;
    bool finish = false;
    int buffer = -1;
    {
      absl::MutexLock l(&mu_);
      write_outstanding_ = false;
      // The buffer just written: nobody fills it before the next write
      // moves `writing_` (below, or in a later OnReadDone), so it is ours.
      permits_[writing_].Release();
      response_bytes_[writing_].Clear();
      if (responses_[writing_].results_size() > kMaxRetainedResults) {
        FreeMessage(&responses_[writing_]);
      }
      if (!ok) {
        // The call is dead: drop what waits; an outstanding read fails too.
        broken_ = true;
        ready_ = -1;
        if (!read_outstanding_) reads_done_ = true;
        if (status_.ok()) {
          status_ = absl::CancelledError("ChargeStream: write failed");
        }
      } else if (ready_ >= 0) {
        buffer = writing_ = ready_;
        ready_ = -1;
        write_outstanding_ = write = true;
        if (!reads_done_ && !shutting_down_) {
          read_outstanding_ = read = true;
        } else if (!read_outstanding_) {
          reads_done_ = true;
        }
      }
      finish = ShouldFinishLocked();
    }
    if (write) StartWrite(&response_bytes_[buffer]);
    if (read) StartRead(&request_bytes_);
    if (finish) DoFinish();
  }

  void OnCancel() override {
    absl::MutexLock l(&mu_);
    broken_ = true;
    if (status_.ok() && !finished_) {
      status_ = absl::CancelledError("ChargeStream cancelled");
    }
  }

  void OnDone() override {
    streams_.Unregister(this);
    delete this;
  }

 private:
  // Whether to Finish now (true once). Not while a request is being
  // applied or a response waits for the wire; a read may still be
  // outstanding only after shutdown began (Finish fails it: nothing read
  // after that point is applied).
  bool ShouldFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || queued_ || applying_ || write_outstanding_ ||
        ready_ >= 0) {
      return false;
    }
    if (!reads_done_ && !shutting_down_) return false;
    if (read_outstanding_ && !shutting_down_) return false;
    finished_ = true;
    return true;
  }

  void DoFinish() {
    absl::Status status;
    {
      absl::MutexLock l(&mu_);
      if (shutdown_end_ && status_.ok()) {
        status_ = absl::UnavailableError(absl::StrCat(
            "cgacctd is shutting down: the ", applied_,
            " requests answered on this stream were applied, nothing sent "
            "after them was; retry those on a new stream"));
      }
      status = status_;
    }
    const grpc::Status answer = AnswerStatus(context_, status);
    // Recorded before Finish so a client that sees the end sees it counted;
    // the stream permit goes back with it.
    pipeline_.EndCall(call_, status);
    Finish(answer);
  }

  Pipeline& pipeline_;
  ChargeStreams& streams_;
  grpc::CallbackServerContext* const context_;
  // Admitted and authenticated when the stream started; its permit is the
  // stream's, given back when the stream finishes (EndCall). Touched by
  // OnReadDone (deadline, identity) and DoFinish, never concurrently with
  // the EndCall in DoFinish (the last thing the reactor does).
  CallContext call_;
  // Touched only by the thread applying a request.
  std::unique_ptr<BatchRunner> runner_;
  grpc::ByteBuffer request_bytes_;        // owned by the outstanding read
  v1::ChargeBatchRequest request_;        // parsed from it by OnReadDone
  v1::ChargeBatchResponse responses_[2];  // see `writing_` and `ready_`
  grpc::ByteBuffer response_bytes_[2];    // responses_[i] serialized

  absl::Mutex mu_;
  bool read_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool write_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  bool applying_ ABSL_GUARDED_BY(mu_) = false;    // runner_ is running
  // A request read and handed to the large-request pool, not yet taken up
  // by OnRequestRead (which may never run before a shutdown reaches here).
  bool queued_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;  // no more requests
  bool broken_ ABSL_GUARDED_BY(mu_) = false;      // cancelled or write failed
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;  // BeginShutdown() seen
  bool shutdown_end_ ABSL_GUARDED_BY(mu_) = false;   // end UNAVAILABLE
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the first read was started
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;  // requests applied
  int writing_ ABSL_GUARDED_BY(mu_) = 1;  // buffer last handed to StartWrite
  int ready_ ABSL_GUARDED_BY(mu_) = -1;   // built, waiting for the wire
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  // The in-flight permit of the request each response buffer answers, held
  // until that response is written (or the reactor goes). Releasing one
  // takes the limiter's leaf mutex under mu_.
  CallLimiter::Permit permits_[2] ABSL_GUARDED_BY(mu_);
};

bool ChargeStreams::Register(ChargeStreamReactor* stream) {
  absl::MutexLock l(&mu_);
  if (shut_) return false;
  streams_.insert(stream);
  return true;
}

void ChargeStreams::Unregister(ChargeStreamReactor* stream) {
  absl::MutexLock l(&mu_);
  if (calling_ == stream && calling_thread_ != std::this_thread::get_id()) {
    auto not_calling = [this, stream]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return calling_ != stream;
    };
    mu_.Await(absl::Condition(&not_calling));
  }
  streams_.erase(stream);
}

void ChargeStreams::BeginShutdown() {
  absl::MutexLock l(&mu_);
  shut_ = true;
  // Each stream is called unlocked (it may Finish); Unregister() waits
  // while it is the one being called, so it stays alive.
  std::vector<ChargeStreamReactor*> streams(streams_.begin(), streams_.end());
  for (ChargeStreamReactor* stream : streams) {
    if (!streams_.contains(stream)) continue;
    calling_ = stream;
    calling_thread_ = std::this_thread::get_id();
    mu_.Unlock();
    stream->OnServerShutdown();
    mu_.Lock();
    calling_ = nullptr;
  }
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartChargeStream(
    Pipeline& pipeline, ChargeStreams& streams,
    grpc::CallbackServerContext* context) {
  CallContext call = BeginCall(pipeline, RpcMethod::kChargeStream, *context);
  // Admission first: an unauthenticated flood is shed under the anonymous
  // identity's limits.
  absl::Status refused = pipeline.Admit(call, Admission::kChargeStream);
  if (refused.ok()) refused = pipeline.Authenticate(call);
  if (!refused.ok()) {
    const grpc::Status answer = AnswerStatus(context, refused);
    pipeline.EndCall(call, refused);
    return new RefusedBidiReactor(answer);
  }
  return new ChargeStreamReactor(pipeline, streams, context, std::move(call));
}

}  // namespace cgacct
