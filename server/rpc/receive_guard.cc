// The receive guard (server/rpc/receive_guard.h).
#include "server/rpc/receive_guard.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/common/log_line.h"

namespace cgacct {
namespace {

// The calls a guard cancelled and why, until each ends (GuardCancelReason).
absl::Mutex cancelled_calls_mu;
absl::flat_hash_map<const grpc::ServerContextBase*, std::string>&
CancelledCalls() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cancelled_calls_mu) {
  static auto* calls =
      new absl::flat_hash_map<const grpc::ServerContextBase*, std::string>();
  return *calls;
}

// The read whose cancel the sampling thread is running, if any: a ReadEnded
// of that read on this thread runs inside the cancel (gRPC delivering the
// failed read inline) and must not wait for it.
thread_local const void* cancelling_read = nullptr;

using HookPoint = grpc::experimental::InterceptionHookPoints;

// What a watched method's reads are: their largest message, and whether
// the interceptor sees that message as raw bytes (its size exact).
struct WatchedMethod {
  uint64_t max_bytes;  // 0: the guard's max_message_bytes
  bool raw;
};

// The methods whose requests are read after the call has started (so a
// read's start is seen): cgacct.v1.Accounting's (with access control) and
// grpc.health.v1's, both registered raw, and reflection's (a sync stream).
std::optional<WatchedMethod> Watched(absl::string_view method) {
  if (absl::StartsWith(method, "/cgacct.v1.Accounting/"))
    return WatchedMethod{0, true};
  if (absl::StartsWith(method, "/grpc.health.v1.Health/"))
    return WatchedMethod{ReceiveGuard::kHealthRequestMaxBytes, true};
  if (absl::StartsWith(method, "/grpc.reflection.v1alpha.ServerReflection/"))
    return WatchedMethod{ReceiveGuard::kReflectionRequestMaxBytes, false};
  return std::nullopt;
}

// One watched call's interceptor: created when the call starts (a callback
// method's) or when its context is made ready for one (a sync or async
// method's: gRPC 1.51 makes those interceptors before the call has a peer,
// which every sync and async call then lacked: the reflection stream's and
// SessionStream's reads went unwatched), deleted by gRPC when it ends. The
// call joins its connection at its first hook with a peer. The hooks of a
// call run one at a time, so `peer_` and `read_` are touched by one thread
// at a time (the hooks, then the destructor); the other members are
// constant.
class ReceiveGuardInterceptor final : public grpc::experimental::Interceptor {
 public:
  ReceiveGuardInterceptor(ReceiveGuard* guard, grpc::ServerContextBase* context,
                          WatchedMethod method)
      : guard_(guard), context_(context), method_(method) {}
  ~ReceiveGuardInterceptor() override {
    if (read_ != 0)
      guard_->ReadEnded(read_, 0, ReceiveGuard::ReadEnd::kFailed);
    if (!peer_.empty()) guard_->CallEnded(peer_, read_started_);
    // (ReadEnded above waited for a cancel under way: none runs now.)
    if (cancelled_.load(std::memory_order_acquire)) {
      absl::MutexLock lock(&cancelled_calls_mu);
      CancelledCalls().erase(context_);
    }
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (peer_.empty() && context_->c_call() != nullptr) {
      peer_ = CanonicalPeer(context_->peer());
      if (!peer_.empty()) guard_->CallStarted(peer_);
    }
    if (peer_.empty()) {
      methods->Proceed();
      return;
    }
    if (methods->QueryInterceptionHookPoint(
            HookPoint::POST_RECV_INITIAL_METADATA)) {
      uint64_t bytes = 0;
      for (const auto& [key, value] : *methods->GetRecvInitialMetadata()) {
        bytes += key.size() + value.size() +
                 ReceiveGuard::kAllowancePerMetadataEntry;
      }
      guard_->Allow(peer_, bytes);
    }
    const bool read_done =
        methods->QueryInterceptionHookPoint(HookPoint::POST_RECV_MESSAGE);
    // gRPC 1.51 marks PRE_RECV_MESSAGE only on hijacked calls; a read's
    // batch shows before it is started as the one whose message is set and
    // that is not done (its POST_RECV_MESSAGE pass comes when it is).
    if (!read_done && read_ == 0 && methods->GetRecvMessage() != nullptr) {
      grpc_call* call = context_->c_call();
      read_started_ = true;
      read_ = guard_->ReadStarted(
          peer_,
          [this, call](const std::string& message) {
            {
              absl::MutexLock lock(&cancelled_calls_mu);
              CancelledCalls().emplace(context_, message);
            }
            cancelled_.store(true, std::memory_order_release);
            grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                         message.c_str(), nullptr);
          },
          method_.max_bytes);
    }
    if (read_done && read_ != 0) {
      // A raw method's message is a grpc::ByteBuffer; a typed one's is its
      // deserialized request. Null when the read failed.
      const void* message = methods->GetRecvMessage();
      if (message == nullptr) {
        guard_->ReadEnded(read_, 0, ReceiveGuard::ReadEnd::kFailed);
      } else if (method_.raw) {
        guard_->ReadEnded(
            read_, static_cast<const grpc::ByteBuffer*>(message)->Length());
      } else {
        guard_->ReadEnded(read_, 0, ReceiveGuard::ReadEnd::kSizeUnknown);
      }
      read_ = 0;
    }
    if (methods->QueryInterceptionHookPoint(HookPoint::PRE_SEND_MESSAGE)) {
      guard_->Allow(peer_, ReceiveGuard::kAllowancePerMessage);
    }
    methods->Proceed();
  }

 private:
  ReceiveGuard* const guard_;
  grpc::ServerContextBase* const context_;
  const WatchedMethod method_;
  std::string peer_;   // "" until the call has one
  // Set by the guard's cancel (the sampling thread) once the call is in
  // CancelledCalls(); the destructor then takes it out.
  std::atomic<bool> cancelled_{false};
  uint64_t read_ = 0;  // the pending read's handle, 0 if none
  bool read_started_ = false;  // whether the call ever started a read
};

class ReceiveGuardInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ReceiveGuardInterceptorFactory(ReceiveGuard* guard)
      : guard_(guard) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (info->method() == nullptr || info->server_context() == nullptr)
      return nullptr;
    const std::optional<WatchedMethod> method = Watched(info->method());
    if (!method.has_value()) return nullptr;
    return new ReceiveGuardInterceptor(guard_, info->server_context(), *method);
  }

 private:
  ReceiveGuard* const guard_;
};

}  // namespace

std::optional<std::string> GuardCancelReason(
    const grpc::ServerContextBase* context) {
  absl::MutexLock lock(&cancelled_calls_mu);
  auto it = CancelledCalls().find(context);
  if (it == CancelledCalls().end()) return std::nullopt;
  return it->second;
}

std::string CanonicalPeer(absl::string_view peer) {
  return absl::StrReplaceAll(peer, {{"%5B", "["}, {"%5D", "]"},
                                    {"%5b", "["}, {"%5d", "]"}});
}

ReceiveGuard::ReceiveGuard(Options options, std::function<void()> on_cancel,
                           std::function<void()> on_close)
    : options_(options),
      on_cancel_(std::move(on_cancel)),
      on_close_(std::move(on_close)) {}

ReceiveGuard::~ReceiveGuard() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ReceiveGuard::Start(std::unique_ptr<ReceivedBytesSource> source) {
  source_ = std::move(source);
  thread_ = std::thread([this] { Run(); });
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ReceiveGuard::InterceptorFactory() {
  return std::make_unique<ReceiveGuardInterceptorFactory>(this);
}

void ReceiveGuard::CallStarted(absl::string_view peer) {
  absl::MutexLock lock(&mu_);
  Connection& connection = connections_[peer];
  ++connection.open_calls;
  connection.call_started = true;
  AllowLocked(connection, kAllowancePerCall);
}

void ReceiveGuard::CallEnded(absl::string_view peer, bool read_started) {
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(peer);
  if (it == connections_.end()) return;
  Connection& connection = it->second;
  if (connection.open_calls > 0) --connection.open_calls;
  // Its END_STREAM or RST_STREAM; and, for a call refused or shed before
  // its request was read, what its stream's window had taken of that
  // request, which gRPC drops with the call.
  AllowLocked(connection, kAllowancePerMessage +
                              (read_started ? 0 : kStreamWindowBytes));
  MaybeEraseLocked(it->first, connection);
}

void ReceiveGuard::Allow(absl::string_view peer, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(peer);
  if (it != connections_.end()) AllowLocked(it->second, bytes);
}

uint64_t ReceiveGuard::ReadStarted(
    absl::string_view peer, std::function<void(const std::string&)> cancel,
    uint64_t max_bytes) {
  auto read = std::make_shared<Read>();
  read->cancel = std::move(cancel);
  read->max_bytes = max_bytes != 0 ? max_bytes : options_.max_message_bytes;
  absl::MutexLock lock(&mu_);
  const uint64_t handle = next_handle_++;
  Connection& connection = connections_[peer];
  // A read of a larger limit sizes the connection's bucket (filled: its
  // caller is authenticated, or the limit is a health request's).
  if (read->max_bytes > connection.allowance_cap_bytes &&
      connection.allowance_cap_bytes != 0) {
    connection.allowance_cap_bytes =
        std::min(read->max_bytes, options_.max_message_bytes);
    connection.allowance_bytes =
        static_cast<double>(connection.allowance_cap_bytes);
  } else if (connection.allowance_cap_bytes == 0) {
    connection.allowance_cap_bytes = std::min(
        std::max(read->max_bytes, kUnprovenAllowanceBytes),
        options_.max_message_bytes);
  }
  ++connection.reads_since_begin;
  connection.read_bytes_since_begin += read->max_bytes;
  connection.pending_read_bytes += read->max_bytes;
  connection.reads.emplace(handle, std::move(read));
  handles_.emplace(handle, ReadHandle{std::string(peer)});
  return handle;
}

void ReceiveGuard::ReadEnded(uint64_t handle, uint64_t delivered_bytes,
                             ReadEnd end) {
  std::shared_ptr<Read> read;
  {
    absl::MutexLock lock(&mu_);
    auto h = handles_.find(handle);
    if (h == handles_.end()) return;
    auto it = connections_.find(h->second.peer);
    handles_.erase(h);
    if (it == connections_.end()) return;
    Connection& connection = it->second;
    auto r = connection.reads.find(handle);
    uint64_t max_bytes = options_.max_message_bytes;
    if (r != connection.reads.end()) {
      read = std::move(r->second);
      connection.reads.erase(r);
      max_bytes = read->max_bytes;
      connection.pending_read_bytes -= max_bytes;
    }
    // The message's own bytes exactly and its framing from the bucket; for
    // a failed read the unknown part of its message it had received, for a
    // message of unknown size the message, each up to its max_bytes from
    // the bucket.
    if (end == ReadEnd::kDelivered) {
      connection.credit_bytes += delivered_bytes;
      AllowLocked(connection, kAllowancePerMessage +
                                  (delivered_bytes / (16 * 1024) + 1) *
                                      kAllowancePer16KiB);
    } else {
      AllowLocked(connection, max_bytes + kAllowancePerMessage);
    }
    MaybeEraseLocked(it->first, connection);
  }
  if (read == nullptr) return;
  int expected = Read::kPending;
  if (read->state.compare_exchange_strong(expected, Read::kEnded)) return;
  // The sampler is cancelling this read's call: unless this is that cancel
  // delivering the failed read inline, wait for it to return.
  if (cancelling_read == read.get()) return;
  while (read->state.load() == Read::kCancelling) std::this_thread::yield();
}

void ReceiveGuard::AllowLocked(Connection& connection, uint64_t bytes) {
  const absl::Time now = options_.clock();
  if (connection.allowance_cap_bytes == 0) {
    connection.allowance_cap_bytes =
        std::min(kUnprovenAllowanceBytes, options_.max_message_bytes);
  }
  const double cap = static_cast<double>(connection.allowance_cap_bytes);
  if (connection.allowance_time == absl::InfinitePast()) {
    connection.allowance_bytes = cap;  // a new connection: full
  } else if (now > connection.allowance_time) {
    connection.allowance_bytes = std::min(
        cap, connection.allowance_bytes +
                 absl::ToDoubleSeconds(now - connection.allowance_time) *
                     kAllowanceBucketsPerSecond * cap);
  }
  connection.allowance_time = std::max(connection.allowance_time, now);
  const uint64_t granted = std::min<uint64_t>(
      bytes, static_cast<uint64_t>(connection.allowance_bytes));
  connection.allowance_bytes -= static_cast<double>(granted);
  connection.credit_bytes += granted;
}

void ReceiveGuard::MaybeEraseLocked(const std::string& peer,
                                    Connection& connection) {
  // A connection the sampler follows stays until a sample no longer lists
  // it (its unclaimed bytes outlive its calls).
  if (connection.open_calls == 0 && connection.reads.empty() &&
      !connection.have_sample) {
    connections_.erase(peer);
  }
}

void ReceiveGuard::ForgetCounts(Connection& connection) {
  connection.held_bytes = 0;
  connection.unclaimed_bytes = 0;
  connection.over_passes = 0;
  connection.tight_over = false;
  connection.parked_passes = 0;
}

void ReceiveGuard::UnfollowLocked(
    const absl::flat_hash_map<std::string, uint64_t>* listed) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (listed == nullptr || !listed->contains(it->first)) {
      it->second.have_sample = false;
      if (it->second.open_calls == 0 && it->second.reads.empty()) {
        connections_.erase(it++);
        continue;
      }
    }
    ++it;
  }
}

void ReceiveGuard::Report(const std::string& message, absl::Time now) {
  if (now - last_report_ >= absl::Seconds(1)) {
    LogLine(absl::StrCat("receive guard: ", message,
                         unreported_ == 0
                             ? ""
                             : absl::StrCat(" (and ", unreported_,
                                            " connection(s) since the last "
                                            "line)")));
    last_report_ = now;
    unreported_ = 0;
  } else {
    ++unreported_;
  }
}

void ReceiveGuard::ConnectionClosed() {
  closed_.fetch_add(1, std::memory_order_relaxed);
  if (on_close_) on_close_();
}

void ReceiveGuard::BeginSample() {
  absl::MutexLock lock(&mu_);
  for (auto& [peer, connection] : connections_) {
    connection.sampled_credit_bytes += connection.credit_bytes;
    connection.credit_bytes = 0;
    connection.reads_since_begin = connection.reads.size();
    connection.read_bytes_since_begin = connection.pending_read_bytes;
  }
}

std::optional<uint64_t> ProcessResidentBytes() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return std::nullopt;
  unsigned long long size_pages = 0, resident_pages = 0;
  const int read = std::fscanf(file, "%llu %llu", &size_pages, &resident_pages);
  std::fclose(file);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  if (read != 2 || page_bytes <= 0) return std::nullopt;
  return uint64_t{resident_pages} * static_cast<uint64_t>(page_bytes);
}

int ReceiveGuard::Check(
    const absl::flat_hash_map<std::string, uint64_t>& bytes_by_peer,
    absl::Time now, std::vector<std::string>* to_close,
    std::optional<uint64_t> resident_bytes) {
  struct Victim {
    std::shared_ptr<Read> read;
    std::string message;
  };
  std::vector<Victim> victims;
  {
    absl::MutexLock lock(&mu_);
    const bool resync = resync_;
    resync_ = false;
    // A connection the sample does not list has ended (or is not TCP).
    UnfollowLocked(&bytes_by_peer);
    // "Memory evidence": where the window of a connection first over its
    // tight bound at this pass starts (the previous pass; what connections
    // receive is added below, each as it is counted).
    const uint64_t wire_before = wire_bytes_;
    const uint64_t suspect_wire_before = suspect_wire_bytes_;
    const std::optional<uint64_t> resident_before = last_resident_bytes_;
    last_resident_bytes_ = resident_bytes;
    for (const auto& [peer, bytes] : bytes_by_peer) {
      Connection& connection = connections_[peer];
      if (!connection.have_sample) {
        // Opened since the last pass (the sampler runs all along): counted
        // from its first byte, with the credits its calls had so far; after
        // passes that could not sample, from now.
        connection.have_sample = true;
        connection.last_bytes = resync ? bytes : 0;
        connection.last_time = now;
        ForgetCounts(connection);
      }
      const double seconds =
          std::max(0.0, absl::ToDoubleSeconds(now - connection.last_time));
      const uint64_t leak =
          static_cast<uint64_t>(seconds * kLeakBytesPerSecond);
      // The two counts the source subtracts are not read at one instant:
      // the difference may step back a little.
      const uint64_t growth =
          bytes > connection.last_bytes ? bytes - connection.last_bytes : 0;
      wire_bytes_ += growth;
      const uint64_t taken = connection.sampled_credit_bytes + leak;
      const uint64_t grown = connection.held_bytes + growth;
      connection.held_bytes = grown > taken ? grown - taken : 0;
      const uint64_t unclaimed = connection.unclaimed_bytes + growth;
      const uint64_t unclaimed_taken =
          connection.sampled_credit_bytes +
          static_cast<uint64_t>(seconds * kUnclaimedLeakBytesPerSecond);
      connection.unclaimed_bytes =
          unclaimed > unclaimed_taken ? unclaimed - unclaimed_taken : 0;
      connection.last_bytes = std::max(connection.last_bytes, bytes);
      connection.last_time = now;
      connection.sampled_credit_bytes = 0;
      // Every stream of the connection may have its window's worth in,
      // whether gRPC has handed its call over or not (streams it has not
      // are invisible here), and each read a whole message: each read
      // pending at BeginSample() or started since (one that ended between
      // BeginSample() and now has its bytes in the sample and its delivery
      // counted at the next pass).
      const uint64_t pending = std::max<uint64_t>(
          connection.reads_since_begin, connection.reads.size());
      const uint64_t may_hold = std::max(connection.read_bytes_since_begin,
                                         connection.pending_read_bytes) +
                                options_.stream_window_bytes_per_connection +
                                options_.slack_bytes;
      if (pending == 0) {
        // No read since the last pass: nothing of it can be held (what a
        // read that failed had received is gone with it). The unclaimed
        // bytes stay.
        connection.held_bytes = 0;
      }
      // Bytes no call took are what gRPC cannot have handed over yet: each
      // pending read's message, each open call's stream window, and a
      // little more for streams whose calls are not open yet. Not every
      // stream's window whatever the calls: each byte of an endless header
      // block can decode to ~100 bytes of metadata (acted on only after
      // kOverPasses passes over it, below).
      const uint64_t reads_may_hold = std::max(
          connection.read_bytes_since_begin, connection.pending_read_bytes);
      const uint64_t tight_at =
          std::min<uint64_t>(
              uint64_t{connection.open_calls} * kStreamWindowBytes,
              options_.stream_window_bytes_per_connection) +
          kUnclaimedSlackBytes;
      const uint64_t close_at = reads_may_hold + tight_at;
      // "Parked header blocks": the bound less its slack, plus
      // kParkedSlackBytes.
      const uint64_t parked_at =
          close_at - kUnclaimedSlackBytes + kParkedSlackBytes;
      // A call that started since the last pass means no header block was
      // left open across it (HTTP/2 allows nothing but CONTINUATION frames
      // while one is): what is over the bound then is the bodies of calls
      // refused before their request was read (shed, unauthenticated),
      // which gRPC drops. Not counted past the parked bound (so that an
      // honest connection's leftovers do not make it look parked).
      const bool call_started = connection.call_started;
      if (call_started) {
        connection.call_started = false;
        connection.unclaimed_bytes =
            std::min(connection.unclaimed_bytes, parked_at);
      }
      connection.parked_passes =
          !call_started && connection.unclaimed_bytes > parked_at
              ? connection.parked_passes + 1
              : 0;
      // Over at kOverPasses passes in a row, and more since the last: still
      // arriving (a burst of new streams' first windows is bounded, and
      // waits for its calls' first hooks, which a loaded machine can delay
      // by passes).
      const bool unclaimed_over = connection.unclaimed_bytes > close_at;
      connection.over_passes = unclaimed_over ? connection.over_passes + 1 : 0;
      const bool growing =
          connection.unclaimed_bytes > connection.unclaimed_at_last_pass;
      const bool over_twice =
          connection.over_passes >= kOverPasses && growing;
      connection.unclaimed_at_last_pass = connection.unclaimed_bytes;
      const bool reads_over =
          !connection.reads.empty() && connection.held_bytes > may_hold;
      // "Memory evidence": from the pass the connection went over its bound
      // without its reads' messages.
      if (connection.unclaimed_bytes > tight_at) {
        suspect_wire_bytes_ += growth;
        if (!connection.tight_over) {
          connection.tight_over = true;
          connection.resident_at_tight_over = resident_before;
          connection.wire_at_tight_over = wire_before;
          connection.suspect_wire_at_tight_over = suspect_wire_before;
        }
        if (!connection.resident_at_tight_over.has_value()) {
          // The guard's first pass: the window starts at this one.
          connection.resident_at_tight_over = resident_bytes;
          connection.wire_at_tight_over = wire_bytes_;
          connection.suspect_wire_at_tight_over = suspect_wire_bytes_;
        }
      } else {
        connection.tight_over = false;
      }
      // "Memory evidence": the memory grown past what the bytes received
      // since the connection went over its tight bound explain (0 if
      // not): kHonestCostPerWireByte for each byte of connections under
      // their tight bounds, one for each byte of those over (theirs are
      // the bytes in question: a message's bytes cost what they weigh, a
      // header block of 1-byte references ~100 times more).
      uint64_t unexplained_bytes = 0;
      if (connection.tight_over && resident_bytes.has_value() &&
          connection.resident_at_tight_over.has_value() &&
          *resident_bytes > *connection.resident_at_tight_over) {
        const uint64_t grown_bytes =
            *resident_bytes - *connection.resident_at_tight_over;
        const uint64_t wire = wire_bytes_ - connection.wire_at_tight_over;
        const uint64_t suspect_wire = std::min(
            wire, suspect_wire_bytes_ - connection.suspect_wire_at_tight_over);
        const uint64_t explained_bytes =
            kHonestCostPerWireByte * (wire - suspect_wire) + suspect_wire +
            kMemorySlackBytes;
        if (grown_bytes > explained_bytes) unexplained_bytes = grown_bytes;
      }
      // Over its bound, acted on only if the memory shows it (when the
      // guard knows it): bytes gRPC dropped (requests of calls refused
      // before their read, streams reset) cost nothing, and a loaded
      // machine can keep every call's first hook waiting for passes while
      // they arrive (4 connections of 100 concurrent refused 4 MB requests,
      // under one CPU hog: 3.3 MB over, with no call started in three
      // passes, RSS +18-31 MB in all).
      const bool over_acted =
          over_twice && (!resident_bytes.has_value() || unexplained_bytes > 0);
      if (!reads_over && !over_acted) continue;
      if (!connection.reads.empty() &&
          now - connection.last_cancel >= kRecancelAfter) {
        // The pending reads' calls are cancelled, once: gRPC drops what
        // they had. Over again within kRecancelAfter, the connection is
        // closed (the bytes were not theirs, or the client goes on).
        connection.last_cancel = now;
        // The limit named is the smallest of the pending reads' (a health
        // or reflection read's on --listen).
        uint64_t smallest = options_.max_message_bytes;
        for (const auto& [handle, read] : connection.reads)
          smallest = std::min(smallest, read->max_bytes);
        const std::string limit =
            smallest == options_.max_message_bytes
                ? absl::StrCat(options_.limit_name, "=", smallest)
                : absl::StrCat("a health or reflection request's limit=",
                               smallest);
        const std::string message = absl::StrCat(
            "message larger than ", limit, " being received: connection ",
            peer, " received ",
            reads_over ? connection.held_bytes : connection.unclaimed_bytes,
            " bytes its reads did not take, over the ",
            reads_over ? may_hold : close_at, " its ", pending,
            " pending read(s) and its streams' windows may hold; ",
            pending == 1 ? "the read is" : "the reads are", " cancelled");
        Report(message, now);
        for (auto& [handle, read] : connection.reads) {
          int expected = Read::kPending;
          if (read->state.compare_exchange_strong(expected,
                                                  Read::kCancelling)) {
            victims.push_back({read, message});
          }
        }
        // What arrives from now on is counted afresh (gRPC drops what the
        // cancelled calls had).
        ForgetCounts(connection);
        continue;
      }
      // A read that ended during this pass has its delivery counted at the
      // next.
      if (connection.reads.empty() && pending > 0) continue;
      Report(absl::StrCat(
                 "connection ", peer, " read ",
                 std::max(connection.unclaimed_bytes, connection.held_bytes),
                 " bytes that no call took (", connection.open_calls,
                 " call(s) open, ", connection.reads.size(),
                 " read(s) pending: a header block that does not end, "
                 "streams reset before they were handed over, frames gRPC "
                 "ignores, or a read cancelled again), over the ",
                 reads_over ? may_hold : close_at, " it may hold",
                 unexplained_bytes > 0
                     ? absl::StrCat(", while cgacctd's memory grew ",
                                    unexplained_bytes,
                                    " bytes, more than the bytes received "
                                    "explain")
                     : "",
                 "; ",
                 to_close != nullptr ? "the connection is closed"
                                     : "not closed (no source to close it)"),
             now);
      if (to_close != nullptr) to_close->push_back(peer);
      ForgetCounts(connection);
    }
    CloseParkedLocked(now, to_close);
  }
  for (Victim& victim : victims) {
    cancelling_read = victim.read.get();
    victim.read->cancel(victim.message);
    cancelling_read = nullptr;
    victim.read->state.store(Read::kEnded);
    cancelled_.fetch_add(1, std::memory_order_relaxed);
    if (on_cancel_) on_cancel_();
  }
  return static_cast<int>(victims.size());
}

void ReceiveGuard::CloseParkedLocked(absl::Time now,
                                     std::vector<std::string>* to_close) {
  // Each host's parked connections, the most unclaimed bytes first.
  absl::flat_hash_map<absl::string_view,
                      std::vector<std::pair<uint64_t, const std::string*>>>
      parked_by_host;
  for (const auto& [peer, connection] : connections_) {
    if (!connection.have_sample || connection.parked_passes < kParkedPasses)
      continue;
    const absl::string_view p(peer);
    const size_t port = p.rfind(':');
    parked_by_host[port == absl::string_view::npos ? p : p.substr(0, port)]
        .push_back({connection.unclaimed_bytes, &peer});
  }
  for (auto& [host, parked] : parked_by_host) {
    if (parked.size() <= kMaxParkedConnectionsPerHost) continue;
    std::sort(parked.begin(), parked.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    const size_t excess = parked.size() - kMaxParkedConnectionsPerHost;
    for (size_t i = 0; i < excess; ++i) {
      const std::string& peer = *parked[i].second;
      Connection& connection = connections_.find(peer)->second;
      Report(absl::StrCat("connection ", peer, " holds ",
                          connection.unclaimed_bytes,
                          " bytes no call took, with no call started for ",
                          connection.parked_passes, " passes (a header block "
                          "left open), one of ", parked.size(),
                          " such connections of ", host, ", over ",
                          kMaxParkedConnectionsPerHost, "; ",
                          to_close != nullptr
                              ? "the connection is closed"
                              : "not closed (no source to close it)"),
             now);
      if (to_close != nullptr) to_close->push_back(peer);
      ForgetCounts(connection);
    }
  }
}

void ReceiveGuard::Run() {
  absl::flat_hash_map<std::string, uint64_t> bytes_by_peer;
  std::vector<std::string> to_close;
  bool reported_error = false;
  absl::Duration pass_time;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_;
      };
      // Every interval, whether a read is pending or not: a connection
      // without a call can flood too ("Connections, not only reads"); at
      // most a fifth of the thread's time.
      const absl::Duration wait = std::max(options_.interval, 4 * pass_time);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopped), wait)) return;
    }
    const absl::Time pass_start = absl::Now();
    BeginSample();
    absl::Status sampled = source_->Sample(&bytes_by_peer);
    if (!sampled.ok()) {
      if (!reported_error) {
        LogLine(absl::StrCat("receive guard: cannot sample connections (",
                             sampled.message(),
                             "); messages over --max_message_bytes are "
                             "refused only once received"));
        reported_error = true;
      }
      // Unfollowed until a sample lists them again (then counted afresh).
      absl::MutexLock lock(&mu_);
      resync_ = true;
      UnfollowLocked(nullptr);
      continue;
    }
    reported_error = false;
    to_close.clear();
    Check(bytes_by_peer, options_.clock(), &to_close,
          options_.resident_bytes ? options_.resident_bytes() : std::nullopt);
    // NOT_FOUND: it ended meanwhile.
    for (const std::string& peer : to_close) {
      if (source_->Close(peer).ok()) ConnectionClosed();
    }
    pass_time = absl::Now() - pass_start;
  }
}

}  // namespace cgacct
