// The session of one cgacct::client::Client and its link to the server:
// the current session id and its generation, the SessionStream attached to
// it (re-attached when it breaks, backing off 50 ms doubling to 1 s), and
// its keepalives: sent when the server asks (keepalive_request, from a
// server that paces the stream: `paced` in its lease answers), else every
// ttl/3. The stream thread passes drain requests and a lost session to the
// Handler (the Client) and answers keepalive requests; the keepalive thread
// calls Handler::AfterKeepalive() every ttl/3 (after its keepalive, if the
// server does not pace the stream), outside every lock of the link.
//
// Locks: session_mu_ (the id, generation and ttl) and stream_mu_ (the
// attached stream; writes on it are serialised under it). Neither is held
// while calling the Handler, except that stream_mu_ is never held with
// session_mu_ taken after it. In the Client's lock order (client.cc)
// session_mu_ comes after rpc_mu_ and stream_mu_ last.
//
// Thread safety: thread-safe. Internal to the library (not installed).
#ifndef CGACCT_CLIENT_LIB_SESSION_LINK_H_
#define CGACCT_CLIENT_LIB_SESSION_LINK_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/lib/rpcs.h"
#include "client/lib/stock.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::client::internal {

class SessionLink {
 public:
  // What the link's threads hand back to the Client. Called from the stream
  // thread (OnDrainRequest, OnSessionGone, OnStreamBroken) or the keepalive
  // thread (AfterKeepalive), never with a lock of the link held.
  class Handler {
   public:
    virtual ~Handler() = default;
    // The server asked for the stock of msg.drain_path()'s subtree.
    virtual void OnDrainRequest(const v1::SessionServerMessage& msg) = 0;
    // The stream found session generation `gen` gone: open a new session
    // (OK once there is one; the stream then attaches to it).
    virtual grpc::Status OnSessionGone(uint64_t gen) = 0;
    // The stream broke with `status` and is about to be re-attached.
    virtual void OnStreamBroken(const grpc::Status& status) = 0;
    // After each keepalive.
    virtual void AfterKeepalive() = 0;
  };

  // `rpcs`, `handler` and `closed` (the Client's: once set, the stream
  // thread ends at its next step) must outlive the link.
  SessionLink(Rpcs& rpcs, Handler& handler, const std::atomic<bool>& closed);
  ~SessionLink();  // Stop()s

  // The current session id and its generation (1 for the first session,
  // + 1 at each Replace()).
  std::pair<std::string, uint64_t> Session() const
      ABSL_LOCKS_EXCLUDED(session_mu_);

  // Whether `gen` is still the current generation.
  bool IsCurrent(uint64_t gen) const ABSL_LOCKS_EXCLUDED(session_mu_);

  // Makes `opened` the current session (the next generation).
  void Replace(const v1::OpenSessionResponse& opened)
      ABSL_LOCKS_EXCLUDED(session_mu_);

  // Starts the stream and keepalive threads on the current session and
  // waits until the server answered the attach or `attach_wait` passed
  // (the stream thread keeps trying).
  void Start(absl::Duration attach_wait) ABSL_LOCKS_EXCLUDED(stream_mu_);

  // Stops and joins both threads. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(stream_mu_);

  // Cancels the attached stream, so that the stream thread attaches again
  // (to the session current then).
  void Reattach() ABSL_LOCKS_EXCLUDED(stream_mu_);

  // Writes the answer to drain `drain_id` carrying `returned`; false if the
  // stream is gone.
  bool WriteDrainAnswer(uint64_t drain_id,
                        const std::vector<Returned>& returned)
      ABSL_LOCKS_EXCLUDED(stream_mu_);

  // Times the stream broke and was re-attached.
  uint64_t reattached() const { return reattached_.load(); }

  // How long the server has said nothing on the stream: since its last
  // message, or since the session was opened or replaced, whichever came
  // last. A server asks for a keepalive every ttl / 3 (the lease answer
  // paces the stream), so more than that says it is stopped, dead or cut
  // off. Never blocks.
  absl::Duration Silence() const;
  // How long the stream has been broken (ended and not yet answering again
  // on a new attach); zero while it is attached. Never blocks.
  absl::Duration Detached() const;
  // The current session's lease (its OpenSession answer), milliseconds.
  uint32_t ttl_ms() const ABSL_LOCKS_EXCLUDED(session_mu_);

 private:
  void StreamLoop() ABSL_LOCKS_EXCLUDED(stream_mu_);
  void KeepaliveLoop() ABSL_LOCKS_EXCLUDED(stream_mu_);

  Rpcs& rpcs_;
  Handler& handler_;
  const std::atomic<bool>& closed_;

  mutable absl::Mutex session_mu_;
  std::string session_id_ ABSL_GUARDED_BY(session_mu_);
  uint64_t generation_ ABSL_GUARDED_BY(session_mu_) = 0;
  uint32_t ttl_ms_ ABSL_GUARDED_BY(session_mu_) = 0;

  absl::Mutex stream_mu_;
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(stream_mu_) = nullptr;
  Rpcs::SessionStream* stream_ ABSL_GUARDED_BY(stream_mu_) = nullptr;
  bool stream_stop_ ABSL_GUARDED_BY(stream_mu_) = false;
  // Set when the server first answered an attach (Start waits for it).
  bool attached_once_ ABSL_GUARDED_BY(stream_mu_) = false;
  // The attached stream's server paces it: keepalives only when asked.
  bool paced_ ABSL_GUARDED_BY(stream_mu_) = false;

  std::thread stream_thread_;
  std::thread keepalive_thread_;

  // Statistics: relaxed.
  std::atomic<uint64_t> reattached_{0};
  // When the server last said something (Silence()): SteadyNanos() of its
  // last message, or of the last Replace(); relaxed.
  static int64_t SteadyNanos();
  std::atomic<int64_t> last_answer_ns_{SteadyNanos()};
  // SteadyNanos() when the attached stream ended, 0 while one answers
  // (Detached()); relaxed.
  std::atomic<int64_t> detached_since_ns_{0};
};

}  // namespace cgacct::client::internal

#endif  // CGACCT_CLIENT_LIB_SESSION_LINK_H_
