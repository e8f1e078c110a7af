// The adapters of the unary methods of cgacct.v1.Accounting, from raw
// bytes on gRPC's callback API to the pipeline and back (docs/DESIGN.md
// §2.4). Every unary call passes
//
//   BeginCall (caller authenticated once) -> Admit -> Authenticate
//   -> decode (ParseRequest) -> the pipeline's body -> encode -> EndCall
//   (recorded once) -> the status converted once -> Finish
//
// in one of two ways:
//  - Unary / DeferrableUnary, gRPC's unary path, on a server without access
//    control (every caller one identity): gRPC reads the whole request (up
//    to --max_message_bytes) before the handler runs;
//  - UnaryCall, with access control: the method is registered as gRPC's
//    "streamed unary" (the server side of a unary method served as a bidi
//    stream of one read and one write, grpc::Service::MarkMethodStreamed;
//    the wire and every client are unchanged), and the request is read only
//    after the call is admitted and authenticated, with at most
//    --max_in_flight_bytes_per_identity / (4 x --max_message_bytes) (4)
//    requests of one identity being read at once (CallLimiter::BeginRead; a call past
//    that waits for a slot, its stream holding at most HTTP/2's initial
//    window). On gRPC's unary path one tenant's 200 concurrent 4 MiB
//    requests held ~1 GB that no per-identity bound saw, and an
//    unauthenticated caller's requests were read before they were refused
//    (issue 22's attack round, rows 11a and 12). It costs an extra batch per
//    call (tests/bench/RESULTS.md, "Unary calls read after admission").
//
// With access control, a request of kLargeRequestBytes or more is decoded
// and run on the pipeline's LargeRequestPool (identities in turn), not on
// gRPC's callback threads, and keeps its read slot until answered.
//
// A deferrable body (Charge, ChargeBatch) runs inside a
// RemoteDrainDeferral::Scope; when it comes back IsRemoteDrainDeferred()
// the call moves to a DrainWaitPool thread, which runs the body again (it
// may wait there) and finishes the call.
//
// Thread safety: the functions are thread-safe; one call's state is used by
// one thread at a time (gRPC runs a reactor's callbacks one at a time; a
// read-slot hand-over or a deferral passes the call to another thread, and
// the first does not touch it again).
#ifndef CGACCT_SERVER_RPC_UNARY_H_
#define CGACCT_SERVER_RPC_UNARY_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/remote_stock.h"
#include "server/pipeline/call.h"
#include "server/pipeline/pipeline.h"
#include "server/rpc/codec.h"
#include "server/rpc/peer.h"
#include "server/rpc/receive_guard.h"
#include "server/rpc/forwarder.h"
#include "server/rpc/status.h"

namespace cgacct {

namespace rpc_internal {

// Ends `call` in the pipeline with `status` (recorded once, permit given
// back), converts the status once and finishes the call on `reactor` (null:
// the context's DefaultReactor(), which must not have been taken before).
grpc::ServerUnaryReactor* FinishUnary(
    Pipeline& pipeline, grpc::CallbackServerContext* context, CallContext& call,
    const absl::Status& status, grpc::ServerUnaryReactor* reactor = nullptr);

// Cluster mode: when `forwarder` says `status` (a routing refusal) goes to
// the shard's owner, sends `request` there and finishes the call with the
// owner's answer (its response into *response_bytes) on `reactor` (null:
// the context's DefaultReactor()); returns the reactor. Null when the call
// is answered here.
grpc::ServerUnaryReactor* MaybeForward(
    Forwarder* forwarder, Pipeline& pipeline,
    grpc::CallbackServerContext* context, CallContext& call,
    const absl::Status& status, const google::protobuf::Message& request,
    grpc::ByteBuffer* response_bytes,
    grpc::ServerUnaryReactor* reactor = nullptr);

// Cluster mode, a GetStats above the shard roots whose answer misses
// shards other nodes own (Forwarder::StatsFanOutWanted()): asks their
// owners (Forwarder::FanOutStats()) and finishes the call with the sums on
// the context's DefaultReactor(), which it returns.
grpc::ServerUnaryReactor* FanOutStats(Forwarder& forwarder, Pipeline& pipeline,
                                      grpc::CallbackServerContext* context,
                                      CallContext& call,
                                      const v1::GetStatsRequest& request,
                                      v1::GroupStats response,
                                      grpc::ByteBuffer* response_bytes);

// The stages before the body: admission, authentication, decoding.
template <typename Request>
absl::Status Prologue(Pipeline& pipeline, CallContext& call,
                      Admission admission, const grpc::ByteBuffer& bytes,
                      Request* request) {
  absl::Status status = pipeline.Admit(call, admission, bytes.Length());
  if (status.ok()) status = pipeline.Authenticate(call);
  // A call reset before its request arrived (an HTTP/2 rapid-reset flood)
  // gets here with no message: INVALID_ARGUMENT "... carried no request
  // message" (counted, answered to nobody).
  if (status.ok()) status = ParseRequest(bytes, request);
  return status;
}

}  // namespace rpc_internal

// A unary call whose body is `(pipeline.*body)(call, request, response)`.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* Unary(
    Pipeline& pipeline, Forwarder* forwarder,
    grpc::CallbackServerContext* context, RpcMethod method,
    Admission admission, const grpc::ByteBuffer* request_bytes,
    grpc::ByteBuffer* response_bytes,
    absl::Status (Pipeline::*body)(CallContext&, const Request&, Response*)) {
  CallContext call = BeginCall(pipeline, method, *context);
  Request request;
  absl::Status status = rpc_internal::Prologue(pipeline, call, admission,
                                               *request_bytes, &request);
  if (status.ok()) {
    Response response;
    status = (pipeline.*body)(call, request, &response);
    if constexpr (std::is_same_v<Response, v1::GroupStats>) {
      if (status.ok() && forwarder != nullptr &&
          forwarder->StatsFanOutWanted(*context, request, response))
        return rpc_internal::FanOutStats(*forwarder, pipeline, context, call,
                                         request, std::move(response),
                                         response_bytes);
    }
    if (status.ok()) status = SerializeResponse(response, response_bytes);
  }
  if (!status.ok()) {
    if (grpc::ServerUnaryReactor* forwarded = rpc_internal::MaybeForward(
            forwarder, pipeline, context, call, status, request,
            response_bytes))
      return forwarded;
  }
  return rpc_internal::FinishUnary(pipeline, context, call, status);
}

// A unary call whose body `(pipeline.*body)(call, request, response, run)`
// may be deferred (see the file comment); `Run` carries its state.
template <typename Request, typename Response, typename Run>
grpc::ServerUnaryReactor* DeferrableUnary(
    Pipeline& pipeline, Forwarder* forwarder,
    grpc::CallbackServerContext* context, RpcMethod method,
    const grpc::ByteBuffer* request_bytes, grpc::ByteBuffer* response_bytes,
    absl::Status (Pipeline::*body)(CallContext&, const Request&, Response*,
                                   Run*)) {
  CallContext call = BeginCall(pipeline, method, *context);
  Request request;
  absl::Status status = rpc_internal::Prologue(
      pipeline, call, Admission::kMessage, *request_bytes, &request);
  if (!status.ok())
    return rpc_internal::FinishUnary(pipeline, context, call, status);
  Response response;
  Run run;
  {
    RemoteDrainDeferral::Scope no_wait;  // a gRPC callback thread
    status = (pipeline.*body)(call, request, &response, &run);
  }
  if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(status))) {
    // Taken once: DefaultReactor() constructs the reactor anew.
    grpc::ServerUnaryReactor* const reactor = context->DefaultReactor();
    pipeline.drain_wait_pool().Run(
        [&pipeline, context, reactor, body, response_bytes,
         call = std::move(call), request = std::move(request),
         response = std::move(response), run = std::move(run)]() mutable {
          absl::Status s = (pipeline.*body)(call, request, &response, &run);
          if (s.ok()) s = SerializeResponse(response, response_bytes);
          rpc_internal::FinishUnary(pipeline, context, call, s, reactor);
        });
    return reactor;
  }
  if (status.ok()) status = SerializeResponse(response, response_bytes);
  if (!status.ok()) {
    if (grpc::ServerUnaryReactor* forwarded = rpc_internal::MaybeForward(
            forwarder, pipeline, context, call, status, request,
            response_bytes))
      return forwarded;
  }
  return rpc_internal::FinishUnary(pipeline, context, call, status);
}


// The Run of a body that is never deferred.
struct NoRun {};

// One request read through its caller's read slots (CallLimiter::
// BeginRead), for a bidi reactor that reads one message: Begin() once the
// call is admitted and authenticated, End() first thing in OnReadDone(),
// Cancel() in OnCancel(). Thread safety: as the reactor's callbacks.
class SlotRead {
 public:
  // Starts `reactor`'s read into `*into` now, or when one of `identity`'s
  // reads ends (on that thread; gRPC holds a read started before the
  // reactor is bound until it is).
  template <typename Reactor>
  void Begin(CallLimiter& limiter, std::string identity, Reactor* reactor,
             grpc::ByteBuffer* into) {
    identity_ = std::move(identity);
    const uint64_t ticket = limiter.BeginRead(
        identity_, [reactor, into] { reactor->StartRead(into); });
    ticket_.store(ticket, std::memory_order_release);
    if (ticket == 0) reactor->StartRead(into);
  }
  // The read ended (OnReadDone): its slot goes to the next waiting read.
  void End(CallLimiter& limiter) { limiter.EndRead(identity_); }
  // The call was cancelled: true if it was still waiting for a slot (it
  // will never read; the reactor answers it now), false if its read started
  // (OnReadDone ends it) or it never began one.
  bool Cancel(CallLimiter& limiter) {
    const uint64_t ticket = ticket_.load(std::memory_order_acquire);
    return ticket != 0 && limiter.CancelRead(identity_, ticket);
  }

 private:
  std::string identity_;  // the caller's
  // The ticket while it waited for a slot (0: it did not wait).
  std::atomic<uint64_t> ticket_{0};
};

// A call gRPC cancelled at its deadline: the deadline has passed, or is
// within 20 ms (gRPC's timer runs on its own clock, which can be a little
// ahead of the system clock the deadline is read with).
inline bool CancelledAtDeadline(const CallContext& call) {
  return call.deadline != std::chrono::system_clock::time_point::max() &&
         call.deadline <=
             std::chrono::system_clock::now() + std::chrono::milliseconds(20);
}

// Why a call ends unanswered by its body: its deadline passed (or gRPC
// cancelled it at its deadline: DEADLINE_EXCEEDED) or the client cancelled
// it (CANCELLED), `when` (e.g. "before its request was read"), nothing
// applied; OK if the call is still live. Thread-safe as the context's
// IsCancelled().
inline absl::Status GoneStatus(const CallContext& call,
                               grpc::CallbackServerContext* context,
                               absl::string_view when) {
  if (call.DeadlinePassed() ||
      (context->IsCancelled() && CancelledAtDeadline(call))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the call's deadline passed ", when, "; nothing was applied"));
  }
  if (context->IsCancelled()) {
    // The receive guard's RESOURCE_EXHAUSTED is what the client got.
    if (std::optional<std::string> reason = GuardCancelReason(context))
      return absl::ResourceExhaustedError(*reason);
    return absl::CancelledError(
        absl::StrCat("the call was cancelled ", when, "; nothing was applied"));
  }
  return absl::OkStatus();
}

// Why a call that was admitted ends before its request was read (the read
// failed, or it was cancelled while waiting for a read slot): as
// GoneStatus, or, the call still live, the client half-closed without a
// message (OK: the caller's decoding then says INVALID_ARGUMENT "...
// carried no request message"). Thread-safe as the context's IsCancelled.
inline absl::Status UnreadStatus(const CallContext& call,
                                 grpc::CallbackServerContext* context) {
  return GoneStatus(call, context, "before its request was read");
}

// One unary call of a method whose body is `body(pipeline, call, request,
// response, run)`. Created by gRPC's bidi handler for the method; deletes
// itself when gRPC is done with it.
template <typename Request, typename Response, typename Run = NoRun>
class UnaryCall final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  using Body = absl::Status (*)(Pipeline&, CallContext&, const Request&,
                                Response*, Run*);
  static constexpr bool kDeferrable = !std::is_same_v<Run, NoRun>;

  UnaryCall(Pipeline& pipeline, Forwarder* forwarder,
            grpc::CallbackServerContext* context, RpcMethod method,
            Admission admission, Body body)
      : pipeline_(pipeline),
        forwarder_(forwarder),
        method_(method),
        context_(context),
        body_(body),
        call_(BeginCall(pipeline, method, *context)) {
    absl::Status status = pipeline_.Admit(call_, admission, 0);
    if (status.ok()) status = pipeline_.Authenticate(call_);
    if (!status.ok()) {
      Answer(status);
      return;
    }
    read_.Begin(pipeline_.limiter(), call_.identity(), this, &request_bytes_);
  }

  void OnReadDone(bool ok) override {
    // A large request (kLargeRequestBytes) is decoded and run on the
    // pipeline's LargeRequestPool, callers' identities taking turns there,
    // and keeps its read slot until it is answered: its parse and
    // body are most of its cost, so gRPC's few callback threads stay free
    // for everyone's small calls and an identity has at most as many large
    // requests running as it has slots (issue 22's re-attack, row 11a: one
    // tenant's 200 concurrent 4 MB batches took another tenant's GetStats
    // from 1 to 19 ms p50 on 2 cores, run on gRPC's threads). Small
    // requests give the slot up now and run here.
    if (ok && request_bytes_.Length() >= kLargeRequestBytes) {
      hold_slot_ = true;
      pipeline_.large_request_pool().Run(call_.identity(), [this] {
        // Nobody waits for the answer any more: not run.
        absl::Status gone = GoneStatus(
            call_, context_, "while its request waited for a large-request "
                             "thread");
        if (!gone.ok()) {
          Answer(std::move(gone));
          return;
        }
        Handle(/*ok=*/true);
      });
      return;
    }
    read_.End(pipeline_.limiter());
    Handle(ok);
  }

  // Cancelled (the deadline, the client, shutdown) while waiting for a read
  // slot: answered here, as it will never read. Otherwise the read, pending
  // or done, ends the call.
  void OnCancel() override {
    if (read_.Cancel(pipeline_.limiter())) {
      absl::Status status = UnreadStatus(call_, context_);
      Answer(status.ok() ? absl::CancelledError("cancelled") : status);
    }
  }

  void OnDone() override { delete this; }

 private:
  // The read request from its admission in bytes to the answer, on a gRPC
  // callback thread or a large-request thread. Not ok: the client
  // half-closed without a message, or the call was cancelled (an HTTP/2
  // rapid-reset flood): INVALID_ARGUMENT "... carried no request message"
  // (counted, answered to nobody if cancelled).
  void Handle(bool ok) {
    if (!ok) request_bytes_.Clear();
    absl::Status status =
        ok ? pipeline_.AdmitBytes(call_, request_bytes_.Length())
           : UnreadStatus(call_, context_);
    if (status.ok()) status = ParseRequest(request_bytes_, &request_);
    request_bytes_.Clear();
    if (!status.ok()) {
      Answer(status);
      return;
    }
    if constexpr (kDeferrable) {
      {
        // Either kind of thread serves other calls: no network wait here.
        RemoteDrainDeferral::Scope no_wait;
        status = body_(pipeline_, call_, request_, &response_, &run_);
      }
      if (ABSL_PREDICT_FALSE(IsRemoteDrainDeferred(status))) {
        pipeline_.drain_wait_pool().Run([this] {
          Answer(body_(pipeline_, call_, request_, &response_, &run_));
        });
        return;
      }
    } else {
      status = body_(pipeline_, call_, request_, &response_, &run_);
    }
    Answer(status);
  }

  // Ends the call in the pipeline with `status` (recorded once, permit
  // given back), converts it once and finishes: with the response when OK.
  void Answer(absl::Status status) {
    if constexpr (std::is_same_v<Response, v1::GroupStats>) {
      if (status.ok() && !fanned_out_ && forwarder_ != nullptr &&
          forwarder_->StatsFanOutWanted(*context_, request_, response_)) {
        // The sums above the shard roots, from their owners; answered
        // after (its slot held until then, as a forward's).
        fanned_out_ = true;
        forwarder_->FanOutStats(*context_, request_, &response_,
                                [this] { Answer(absl::OkStatus()); });
        return;
      }
    }
    if (status.ok()) status = SerializeResponse(response_, &response_bytes_);
    if (!status.ok() && forwarder_ != nullptr) {
      if (std::optional<std::string> owner =
              forwarder_->Target(status, *context_)) {
        // The owner's answer is the caller's (its slot held until then).
        forwarder_->Forward(
            *owner, method_, *context_, request_,
            [this](const grpc::Status& answer, grpc::ByteBuffer bytes) {
              pipeline_.EndCall(call_, absl::Status(static_cast<absl::StatusCode>(
                                                        answer.error_code()),
                                                    answer.error_message()));
              if (hold_slot_) {
                hold_slot_ = false;
                read_.End(pipeline_.limiter());
              }
              if (answer.ok()) {
                response_bytes_ = std::move(bytes);
                StartWriteAndFinish(&response_bytes_, grpc::WriteOptions(),
                                    answer);
              } else {
                Finish(answer);
              }
            });
        return;
      }
    }
    const grpc::Status answer = AnswerStatus(context_, status);
    pipeline_.EndCall(call_, status);
    if (hold_slot_) {
      hold_slot_ = false;
      read_.End(pipeline_.limiter());  // the next waiting read starts
    }
    if (answer.ok()) {
      StartWriteAndFinish(&response_bytes_, grpc::WriteOptions(), answer);
    } else {
      Finish(answer);
    }
  }

  Pipeline& pipeline_;
  Forwarder* const forwarder_;  // null: single-node mode
  const RpcMethod method_;
  grpc::CallbackServerContext* const context_;
  const Body body_;
  CallContext call_;
  SlotRead read_;
  // A large request: its slot ends with Answer. Written before the hand-over
  // to the large-request pool, read after it (the pool's mutex orders them).
  bool hold_slot_ = false;
  // A GetStats above the shard roots went to the owners (Answer() again
  // when they answered).
  bool fanned_out_ = false;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
  Request request_;
  Response response_;
  Run run_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_UNARY_H_
