// ChargeStream: ChargeBatch over a bidirectional stream (docs/DESIGN.md
// §4.6), and the registry of open streams that shutdown tells.
//
// One ChargeBatchResponse per request, in order, each exactly what
// ChargeBatch would answer (the pipeline's BatchRunner, one per stream: its
// handle cache lives as long as the stream). The server reads the next
// request while the previous response is being written (at most one
// response waits behind the one on the wire). The stream ends OK when the
// client half-closes and every response is written; a request refused as a
// whole (more than kMaxBatchOps ops, a bad idempotency_key, over the
// in-flight limit, bytes that do not parse) ends it with that error after
// the responses to the earlier requests (it is not applied). A request or
// response buffer grown past 64 KiB is freed once used, so an idle stream
// holds little memory.
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_RPC_CHARGE_STREAM_H_
#define CGACCT_SERVER_RPC_CHARGE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/pipeline/pipeline.h"

namespace cgacct {

class ChargeStreamReactor;

// The open ChargeStreams: BeginShutdown() tells each to stop reading, answer
// what it has read and end UNAVAILABLE.
class ChargeStreams {
 public:
  ChargeStreams() = default;
  ChargeStreams(const ChargeStreams&) = delete;
  ChargeStreams& operator=(const ChargeStreams&) = delete;

  // A new stream; false: shutdown has begun (the stream must end at once).
  bool Register(ChargeStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // A stream that ended. Waits while BeginShutdown() is telling it.
  void Unregister(ChargeStreamReactor* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells every open stream; returns once each was told. Idempotent.
  void BeginShutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<ChargeStreamReactor*> streams_ ABSL_GUARDED_BY(mu_);
  bool shut_ ABSL_GUARDED_BY(mu_) = false;
  // The stream BeginShutdown() is telling (unlocked), and on which thread.
  ChargeStreamReactor* calling_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread::id calling_thread_ ABSL_GUARDED_BY(mu_);
};

// A ChargeStream call of `context`: admitted (a stream permit) and
// authenticated, or ended at once with the refusal.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartChargeStream(
    Pipeline& pipeline, ChargeStreams& streams,
    grpc::CallbackServerContext* context);

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_CHARGE_STREAM_H_
