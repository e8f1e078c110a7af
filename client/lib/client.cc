// cgacct::client (client/include/cgacct/client.h): sessions, the remote
// per-CPU stock, retries, drain, resume. Client::Impl composes the stock
// (stock.h), the retrying RPCs (rpcs.h) and the session link (session
// link.h), and keeps the books: the pages the session holds per (group,
// kind) as far as this process knows.
//
// Locks, in the order they may be taken:
//   rpc_mu_                 reader: every operation that sends a
//                           charge-path RPC on the session (so the session
//                           cannot change under it); writer: Reopen() and
//                           Reconcile() (no such RPC in flight while the
//                           session changes and the books are rebuilt)
//   SessionLink session_mu  the session id and generation
//   Slot::mu                one slot's stock (per CPU; taken alone on the
//                           hot path, all of them in index order by Reopen())
//   held_mu_                held_: pages the session holds per (group, kind)
//                           as far as this process knows (application's +
//                           stock)
//   seen_mu                 the session's successful Charge answers read
//   SessionLink stream_mu   the attached SessionStream (writes are
//                           serialised on it)
// No lock is held across an RPC except rpc_mu_ (reader) and stream_mu
// around a stream Write.
#include "cgacct/client.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/lib/groups_impl.h"
#include "client/lib/grpc_status.h"
#include "client/lib/rpcs.h"
#include "client/lib/session_link.h"
#include "client/lib/stock.h"
#include "engine/group_path.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::client {

using internal::FromGrpc;
using internal::HeldKey;
using internal::NotServedHere;
using internal::Returned;
using internal::SessionGone;

// Thread safety: see the lock order above; every method may be called from
// any thread, except that Close() must not race with the others.
struct Client::Impl : internal::SessionLink::Handler {
  Impl(std::shared_ptr<grpc::Channel> channel, Options o, int nr_slots)
      : options(std::move(o)),
        stock(nr_slots, options.stock_groups, options.batch_pages,
              options.max_batch_pages),
        rpcs(channel, options),
        groups(new Groups(Groups::Impl::OneChannel(
            channel, CallOptions{options.call_timeout, options.max_attempts}))),
        link(rpcs, *this, closed) {}

  const Options options;
  internal::Stock stock;
  internal::Rpcs rpcs;
  // groups(): the session-less calls, over the same channel.
  const std::unique_ptr<Groups> groups;
  // Set by Close(); read without order on the hot path (a call racing with
  // Close() is the caller's error).
  std::atomic<bool> closed{false};

  absl::Mutex rpc_mu;

  mutable absl::Mutex held_mu;
  std::map<HeldKey, uint64_t> held ABSL_GUARDED_BY(held_mu);

  // Successful Charge answers read (and their batches stocked) in session
  // generation seen_gen: a drain request says how many charges the server
  // had applied (charges_applied); fewer read means refills in flight to
  // the stock, which the drain waits for (WaitForRefills).
  absl::Mutex seen_mu;
  uint64_t seen_gen ABSL_GUARDED_BY(seen_mu) = 0;
  uint64_t charges_seen ABSL_GUARDED_BY(seen_mu) = 0;
  // ReturnPages calls under way: stock going back by Uncharge RPCs, on the
  // network, in neither the stock nor the server's counters yet.
  int returns_in_flight ABSL_GUARDED_BY(seen_mu) = 0;

  // Statistics: relaxed.
  std::atomic<uint64_t> drains{0}, drained_pages{0}, reopened{0}, reconciles{0},
      resume_deferred{0}, return_failed{0};
  // Set when a re-charge was deferred (this node refused it as not served
  // here, or its session was gone), cleared by the next Reconcile() that
  // succeeds: ClusterClient's watch reads it (Suspect()). Relaxed.
  std::atomic<bool> deferred_pending{false};


  // Set when the server's drain took the stock (before the take), cleared
  // by the next charge that refilled it, or by the first free after it,
  // sent back with UnchargeRequest.restock (ResumeStocking()): meanwhile
  // Uncharge() sends what the application frees back to the server instead
  // of stocking it. A
  // drain answer that returned less than asked tells the server this
  // client's stock there is empty, and the server stops waiting for its
  // answers until it refills (docs/DESIGN.md §4.14): pages stocked from
  // frees in between would be stock the server does not wait for. Relaxed:
  // a free racing the flag goes either way, and the server's next drain
  // request still asks for it.
  std::atomic<bool> stock_held_off{false};
  // Drain answers given so far (bumped before the take). A refill whose
  // Charge RPC overlapped one may have been applied before the server read
  // that answer as "stock empty": its extra pages go back to the server
  // instead of into the stock (ChargeRemote), so the stock the server does
  // not wait for stays empty.
  std::atomic<uint64_t> drain_epoch{0};
  // Makes a drain's (stock_held_off = true, ++drain_epoch) one step for the
  // paths that clear stock_held_off when drain_epoch has not moved (a
  // refill, ResumeStocking()): without it a clear could read the epoch
  // between the drain's two stores and leave the flag off after the drain.
  // Readers of the flag alone (Uncharge()'s stock path) do not take it.
  absl::Mutex held_off_mu;

  // After the free that UnchargeRequest.restock sent back while the stock
  // was held off was applied: the server waits for this session's drain
  // answers again, so frees may go to the stock again, unless a drain
  // answered since `epoch` was read (then its answer may have been taken as
  // an empty stock after the restock, and the flag stays).
  void ResumeStocking(uint64_t epoch) ABSL_LOCKS_EXCLUDED(held_off_mu) {
    absl::MutexLock l(&held_off_mu);
    if (drain_epoch.load(std::memory_order_relaxed) == epoch)
      stock_held_off.store(false, std::memory_order_relaxed);
  }

  // Last: destroyed (its threads stopped) before what they use.
  internal::SessionLink link;

  // --- the books ----------------------------------------------------------

  void Emit(Event::Type type, std::string group, uint64_t nr_pages,
            grpc::Status status = grpc::Status::OK) {
    if (!options.on_event) return;
    Event e;
    e.type = type;
    e.session_id = link.Session().first;
    e.group = std::move(group);
    e.nr_pages = nr_pages;
    e.status = FromGrpc(status);
    options.on_event(e);
  }

  void AddHeld(const std::string& group, int kind, int64_t delta) {
    absl::MutexLock l(&held_mu);
    uint64_t& h = held[{group, kind}];
    h = delta < 0 && static_cast<uint64_t>(-delta) > h ? 0 : h + delta;
  }

  // A successful Charge answer of session generation `gen` was read (and
  // its batch stocked).
  void SawCharge(uint64_t gen) ABSL_LOCKS_EXCLUDED(seen_mu) {
    absl::MutexLock l(&seen_mu);
    ++ChargesSeenLocked(gen);
  }

  // charges_seen for generation `gen` (a new generation counts from 0).
  uint64_t& ChargesSeenLocked(uint64_t gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(seen_mu) {
    if (gen != seen_gen) {
      seen_gen = gen;
      charges_seen = 0;
    }
    return charges_seen;
  }

  // How long a drain waits for refills in flight (see WaitForRefills):
  // their answers are already on the wire, a round trip at most; well
  // inside the server's --session_drain_timeout_ms (20 ms by default).
  static constexpr absl::Duration kRefillWait = absl::Milliseconds(5);

  // Before a drain takes the stock: waits, at most kRefillWait, until this
  // client has read the `applied` successful Charge answers the server had
  // sent in session generation `gen`, so the batches they carry are in the
  // stock and go back with the drain, and until no ReturnPages is under way
  // (those pages reach the server's counters before the drain's answer).
  // Where the kernel's drain work cannot run between a CPU's charge and its
  // refill_stock() (both are inside its local lock), a client's Charge
  // answer is on the network between the two: without this, a drain found the stock empty, the charge at max
  // failed, and the batch landed in the stock a moment later. An answer
  // that never comes (its call failed after the server applied it; the
  // books are reconciled later) is counted as read once the wait ends, so
  // it delays one drain only.
  void WaitForRefills(uint64_t gen, uint64_t applied)
      ABSL_LOCKS_EXCLUDED(seen_mu) {
    absl::MutexLock l(&seen_mu);
    auto all_read = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(seen_mu) {
      return seen_gen == gen && charges_seen >= applied &&
             returns_in_flight == 0;
    };
    if (all_read()) return;
    seen_mu.AwaitWithTimeout(absl::Condition(&all_read), kRefillWait);
    uint64_t& seen = ChargesSeenLocked(gen);
    seen = std::max(seen, applied);
  }

  // Gives `pages` back to the server with Uncharge RPCs (caller holds
  // rpc_mu as reader). Pages that fail to go back leave the books and are
  // dropped, not stocked again: a later charge would consume pages nobody
  // may count any more (in a cluster, a node that lost the shard ended the
  // session that held them). If the server still counts them, the session
  // does until it closes (or a Reconcile() returns them). Counted in
  // returns_in_flight meanwhile (a drain waits for it: WaitForRefills).
  grpc::Status ReturnPages(const std::string& sid,
                           const std::vector<Returned>& pages,
                           bool restock = false) {
    if (pages.empty()) return grpc::Status::OK;
    {
      absl::MutexLock l(&seen_mu);
      ++returns_in_flight;
    }
    grpc::Status first;
    for (const Returned& r : pages) {
      grpc::Status s = rpcs.Uncharge(sid, r.path, r.nr_pages, r.kind, restock);
      if (s.ok()) {
        AddHeld(r.path, r.kind, -static_cast<int64_t>(r.nr_pages));
        continue;
      }
      if (first.ok()) first = s;
      AddHeld(r.path, r.kind, -static_cast<int64_t>(r.nr_pages));
      return_failed.fetch_add(r.nr_pages, std::memory_order_relaxed);
    }
    absl::MutexLock l(&seen_mu);
    --returns_in_flight;
    return first;
  }

  // The session is gone (`gen` is the generation that found it gone): open a
  // new one and charge again, on it, what the application still holds.
  grpc::Status Reopen(uint64_t gen) ABSL_LOCKS_EXCLUDED(rpc_mu) {
    absl::WriterMutexLock w(&rpc_mu);
    if (!link.IsCurrent(gen)) return grpc::Status::OK;  // someone else did
    v1::OpenSessionResponse opened;
    grpc::Status s = rpcs.OpenSession(&opened);
    if (!s.ok()) return s;
    // The old session's holdings, stock included, were uncharged by the
    // server: the stock is simply forgotten, the application's part is
    // charged again.
    std::map<HeldKey, uint64_t> stocked = stock.TakeAll();
    std::map<HeldKey, uint64_t> app;
    {
      absl::MutexLock l(&held_mu);
      for (auto& [k, n] : held) {
        const uint64_t st = stocked[k];
        if (n > st) app[k] = n - st;
      }
      held.clear();
    }
    link.Replace(opened);
    const uint64_t new_gen = link.Session().second;
    reopened.fetch_add(1, std::memory_order_relaxed);
    Emit(Event::Type::kSessionReopened, "", 0);
    for (auto& [k, n] : app) {
      // Marked resume: a cluster node that has just taken the group's shard
      // over admits these before fresh charges (its takeover grace).
      grpc::Status cs =
          rpcs.Charge(opened.session_id(), k.first, n, k.second, nullptr,
                      /*batch_pages=*/0, /*charged=*/nullptr, /*resume=*/true);
      if (cs.ok()) {
        SawCharge(new_gen);
        AddHeld(k.first, k.second, static_cast<int64_t>(n));
      } else if (NotServedHere(cs.error_code()) || SessionGone(cs)) {
        // Kept in the books for ClusterClient's move (Forget()). A new
        // session gone before its re-charges (seen at a cluster node
        // resumed after a pause past its fence) says nothing of the group:
        // the next Reopen() charges them again. Dropped, their room went
        // to fresh charges at the shard's next owner.
        AddHeld(k.first, k.second, static_cast<int64_t>(n));
        resume_deferred.fetch_add(n, std::memory_order_relaxed);
        deferred_pending.store(true, std::memory_order_relaxed);
        Emit(Event::Type::kRechargeDeferred, k.first, n, cs);
        // And charged again here by the keepalive thread's Reconcile()
        // (the books hold them, the session does not) once this node
        // serves the group: in a cluster, a node that dropped the shard at
        // its fence serves it again on the same lease, admitting resumes
        // first (its takeover grace). Without it nothing charged them
        // again while the owner stayed the same, and fresh charges took
        // their room (1.26-1.30x memory.max in ClusterTest's etcd faults).
        rpcs.SetNeedsReconcile();
      } else {
        Emit(Event::Type::kRechargeFailed, k.first, n, cs);
      }
    }
    // The stream (attached to the old session) re-attaches to the new one.
    link.Reattach();
    return grpc::Status::OK;
  }

  // After a call whose last attempt failed ambiguously (UNAVAILABLE,
  // DEADLINE_EXCEEDED, ABORTED: the server may have applied it), brings
  // the books back to the server's: GetSession's holdings are the truth.
  // Pages the session holds that the books do not (a charge applied whose
  // answer never came) are uncharged; pages the books count that the server
  // no longer holds (an uncharge applied whose answer never came, the pages
  // put back in the stock) leave the stock, and what the application
  // already consumed of them is charged again (kRechargeFailed if that
  // fails). Runs with no charge-path RPC in flight.
  grpc::Status Reconcile() ABSL_LOCKS_EXCLUDED(rpc_mu) {
    absl::WriterMutexLock w(&rpc_mu);
    const auto [sid, gen] = link.Session();
    v1::SessionInfo info;
    grpc::Status s = rpcs.GetSession(sid, &info);
    if (SessionGone(s)) return grpc::Status::OK;  // Reopen rebuilds them
    if (!s.ok()) return s;
    std::map<HeldKey, int64_t> delta = TakeServerBooks(info);  // server - books
    grpc::Status first;
    for (auto& [k, d] : delta) {
      if (d > 0) {
        s = rpcs.Uncharge(sid, k.first, static_cast<uint64_t>(d), k.second);
        if (s.ok()) AddHeld(k.first, k.second, -d);
        if (!s.ok() && first.ok()) first = s;
      } else if (d < 0) {
        const uint64_t phantom = stock.Remove(k, static_cast<uint64_t>(-d));
        if (phantom == 0) continue;
        // A resume: pages the application held before (a cluster node
        // admits these in its takeover grace, §4.18).
        s = rpcs.Charge(sid, k.first, phantom, k.second, nullptr,
                        /*batch_pages=*/0, /*charged=*/nullptr,
                        /*resume=*/true);
        if (s.ok()) {
          SawCharge(gen);
          AddHeld(k.first, k.second, static_cast<int64_t>(phantom));
        } else if (NotServedHere(s.error_code()) || SessionGone(s)) {
          // As in Reopen(): kept for ClusterClient's move. Tried again
          // after the next keepalive while the node keeps refusing; a
          // session gone meanwhile (a cluster node ends its sessions of a
          // shard at its fence) says nothing of the group: the Reopen()
          // that follows charges them again with the rest.
          if (first.ok()) first = s;
          AddHeld(k.first, k.second, static_cast<int64_t>(phantom));
          resume_deferred.fetch_add(phantom, std::memory_order_relaxed);
          deferred_pending.store(true, std::memory_order_relaxed);
          Emit(Event::Type::kRechargeDeferred, k.first, phantom, s);
        } else {
          if (first.ok()) first = s;
          Emit(Event::Type::kRechargeFailed, k.first, phantom, s);
        }
      }
    }
    reconciles.fetch_add(1, std::memory_order_relaxed);
    return first;
  }

  // Makes the books GetSession's holdings `info`; returns, per (group,
  // kind), what the server holds minus what the books said.
  std::map<HeldKey, int64_t> TakeServerBooks(const v1::SessionInfo& info) {
    std::map<HeldKey, uint64_t> server;
    for (const v1::SessionHolding& h : info.holdings()) {
      server[{h.path(), static_cast<int>(h.kind())}] += h.nr_pages();
    }
    std::map<HeldKey, int64_t> delta;
    absl::MutexLock l(&held_mu);
    for (auto& [k, n] : server) delta[k] += static_cast<int64_t>(n);
    for (auto& [k, n] : held) delta[k] -= static_cast<int64_t>(n);
    held = std::move(server);
    return delta;
  }

  // --- SessionLink::Handler -----------------------------------------------

  // drain_all_stock() asked by the server: give up the stock of drain_path's
  // subtree and answer with it. Not while the books are being rebuilt
  // (Reopen and Reconcile hold rpc_mu as writer, and may wait for the very
  // charge this drain is for): then answer "nothing to return" at once, as
  // the kernel's trylock skips a busy CPU's stock.
  void OnDrainRequest(const v1::SessionServerMessage& msg) override {
    if (!rpc_mu.ReaderTryLock()) {
      link.WriteDrainAnswer(msg.drain_id(), {});
      return;
    }
    HandleDrainLocked(msg);
    rpc_mu.ReaderUnlock();
  }

  void HandleDrainLocked(const v1::SessionServerMessage& msg)
      ABSL_SHARED_LOCKS_REQUIRED(rpc_mu) {
    // The session cannot change under rpc_mu (reader).
    if (msg.charges_applied() > 0)
      WaitForRefills(link.Session().second, msg.charges_applied());
    {
      absl::MutexLock l(&held_off_mu);
      stock_held_off.store(true, std::memory_order_relaxed);
      drain_epoch.fetch_add(1, std::memory_order_relaxed);
    }
    std::vector<Returned> taken = stock.Take(msg.drain_path());
    uint64_t total = 0;
    for (const Returned& r : taken) total += r.nr_pages;
    if (link.WriteDrainAnswer(msg.drain_id(), taken)) {
      for (const Returned& r : taken) {
        AddHeld(r.path, r.kind, -static_cast<int64_t>(r.nr_pages));
      }
      drains.fetch_add(1, std::memory_order_relaxed);
      drained_pages.fetch_add(total, std::memory_order_relaxed);
      Emit(Event::Type::kDrained, msg.drain_path(), total);
    } else if (!taken.empty()) {
      // The answer did not go out: give the pages back the unary way.
      ReturnPages(link.Session().first, taken);
    }
  }

  grpc::Status OnSessionGone(uint64_t gen) override { return Reopen(gen); }

  void OnStreamBroken(const grpc::Status& status) override {
    Emit(Event::Type::kStreamBroken, "", 0, status);
  }

  // Reconcile() runs here, on the keepalive thread, when a call failed
  // ambiguously; a failed one is tried again after the next keepalive.
  void AfterKeepalive() override {
    if (!rpcs.TakeNeedsReconcile()) return;
    if (Reconcile().ok()) {
      deferred_pending.store(false, std::memory_order_relaxed);
    } else {
      rpcs.SetNeedsReconcile();
    }
  }

  // --- Client's charge path -------------------------------------------------

  // The charge that missed the stock: one RPC of nr_pages with batch_pages
  // max(nr_pages, batch), the surplus stocked; the session reopened (up to
  // twice) when it is gone.
  ChargeResult ChargeRemote(std::string_view group, uint64_t nr_pages, int k,
                            uint64_t batch);
};

namespace {
// Bounds of Options: a slot array and its entries are allocated at Open
// (1 << 30 slots aborted it with bad_alloc), and now + call_timeout must
// not overflow the clock (milliseconds::max() made every deadline past).
constexpr int kMaxSlots = 4096;
constexpr int kMaxStockGroups = 64;
constexpr std::chrono::hours kMaxCallTimeout(24);
}  // namespace

Status Client::Open(const std::string& target, Options options,
                    std::unique_ptr<Client>* client) {
  Result<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(target, options.connect);
  if (!channel.ok()) return channel.status();
  return Open(std::move(*channel), std::move(options), client);
}

Status Client::Open(std::shared_ptr<grpc::Channel> channel, Options options,
                    std::unique_ptr<Client>* client) {
  auto bad = [](std::string_view what) {
    return Status(StatusCode::kInvalidArgument,
                  "cgacct::client::Options: " + std::string(what));
  };
  if (channel == nullptr) return bad("channel is null");
  if (options.nr_slots < 0 || options.nr_slots > kMaxSlots)
    return bad("nr_slots must be from 0 to 4096");
  if (options.stock_groups < 1 || options.stock_groups > kMaxStockGroups)
    return bad("stock_groups must be from 1 to 64");
  if (options.max_attempts < 1) return bad("max_attempts must be >= 1");
  if (options.call_timeout.count() <= 0 ||
      options.call_timeout > kMaxCallTimeout)
    return bad("call_timeout must be > 0 and at most 24 h");
  if (options.session_ttl.count() < 0 ||
      options.session_ttl.count() > UINT32_MAX)
    return bad("session_ttl out of range");
  if (options.max_batch_pages < options.batch_pages)
    return bad("max_batch_pages must be >= batch_pages");
  const int nr_slots =
      std::max(options.nr_slots > 0 ? options.nr_slots : get_nprocs_conf(), 1);
  auto impl =
      std::make_unique<Impl>(std::move(channel), std::move(options), nr_slots);
  v1::OpenSessionResponse opened;
  grpc::Status s = impl->rpcs.OpenSession(&opened);
  if (!s.ok()) return FromGrpc(s);
  impl->link.Replace(opened);
  impl->link.Start(absl::FromChrono(impl->options.call_timeout));
  client->reset(new Client(std::move(impl)));
  return Status();
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { Close(); }

ChargeResult Client::Charge(std::string_view group, uint64_t nr_pages,
                            PageKind kind) {
  Impl& m = *impl_;
  ChargeResult result;
  if (m.closed.load(std::memory_order_relaxed)) {
    result.status = Status(StatusCode::kFailedPrecondition,
                           "cgacct::client: Charge after Close");
    return result;
  }
  if (nr_pages == 0) {
    result.status = Status(StatusCode::kInvalidArgument,
                           "cgacct::client: Charge: nr_pages must be > 0");
    return result;
  }
  if (kind != PageKind::kAnon && kind != PageKind::kFile) {
    result.status = Status(StatusCode::kInvalidArgument,
                           "cgacct::client: Charge: kind must be kAnon or kFile");
    return result;
  }
  const int k = static_cast<int>(kind);
  uint64_t batch;
  if (m.stock.Consume(group, k, nr_pages, &batch)) {  // consume_stock()
    result.from_stock = true;
    return result;
  }
  return m.ChargeRemote(group, nr_pages, k, batch);
}

ChargeResult Client::Impl::ChargeRemote(std::string_view group,
                                        uint64_t nr_pages, int k,
                                        uint64_t batch) {
  ChargeResult result;
  // One RPC: the server charges the batch if it fits at once, else
  // exactly nr_pages through reclaim and the drains (try_charge_memcg()
  // drops its batch before reclaiming), so a group at its max costs one
  // drain wait, not two.
  const uint64_t want = std::max(nr_pages, batch);
  for (int round = 0; round < 3; ++round) {
    grpc::Status s;
    uint64_t throttle = 0;
    std::vector<Returned> excess;
    uint64_t gen;
    {
      absl::ReaderMutexLock r(&rpc_mu);
      std::string sid;
      std::tie(sid, gen) = link.Session();
      uint64_t charged = nr_pages;
      const uint64_t epoch = drain_epoch.load(std::memory_order_relaxed);
      s = rpcs.Charge(sid, group, nr_pages, k, &throttle, want, &charged);
      if (s.ok()) {
        // A server that predates batch_pages charged nr_pages.
        charged = std::clamp(charged, nr_pages, want);
        AddHeld(std::string(group), k, static_cast<int64_t>(charged));
        if (charged > nr_pages) {
          // Into the stock unless a drain answered while this charge was
          // on the network (then back to the server).
          absl::MutexLock l(&held_off_mu);
          stock.RefillIfNoDrainSince(group, k, charged - nr_pages,
                                     drain_epoch, epoch, &stock_held_off,
                                     &excess);
        }
        if (!excess.empty()) ReturnPages(sid, excess);
        SawCharge(gen);
      }
    }
    if (s.ok()) {
      stock.CountCharge();
      result.throttle_us = throttle;
      if (throttle > 0 && options.throttle == ThrottleMode::kSleep) {
        std::this_thread::sleep_for(std::chrono::microseconds(throttle));
      }
      return result;
    }
    if (SessionGone(s) && round < 2) {
      grpc::Status rs = Reopen(gen);
      if (!rs.ok()) {
        result.status = FromGrpc(rs);
        return result;
      }
      continue;
    }
    result.status = FromGrpc(s);
    return result;
  }
  result.status = Status(StatusCode::kUnavailable,
                         "cgacct::client: Charge: session lost twice");
  return result;
}

Status Client::Uncharge(std::string_view group, uint64_t nr_pages,
                        PageKind kind) {
  Impl& m = *impl_;
  if (m.closed.load(std::memory_order_relaxed))
    return Status(StatusCode::kFailedPrecondition,
                  "cgacct::client: Uncharge after Close");
  if (nr_pages == 0)
    return Status(StatusCode::kInvalidArgument,
                  "cgacct::client: Uncharge: nr_pages must be > 0");
  // Else stocked under a kind no Charge RPC could have made, and handed out
  // by Charge() from the stock.
  if (kind != PageKind::kAnon && kind != PageKind::kFile)
    return Status(StatusCode::kInvalidArgument,
                  "cgacct::client: Uncharge: kind must be kAnon or kFile");
  const int k = static_cast<int>(kind);
  std::vector<Returned> excess;
  // After a drain, until the next refill or restock: back to the server.
  const bool held_off = m.stock.RefillUnlessHeldOff(
      group, k, nr_pages, m.stock_held_off, &excess);
  if (excess.empty()) return Status();
  // Held off: this free goes back with `restock`, and once the server has
  // applied it (it then waits for this session's drain answers again, as
  // after a refill) the frees after it are stocked again, unless a drain
  // answered meanwhile. Without it a shrinking application whose stock a
  // drain took at its max sent every free after it (issue 26, item 10).
  const uint64_t epoch = m.drain_epoch.load(std::memory_order_relaxed);
  uint64_t gen;
  grpc::Status s;
  {
    absl::ReaderMutexLock r(&m.rpc_mu);
    std::string sid;
    std::tie(sid, gen) = m.link.Session();
    s = m.ReturnPages(sid, excess, /*restock=*/held_off);
  }
  if (held_off && s.ok()) m.ResumeStocking(epoch);
  if (SessionGone(s)) {
    // The server already uncharged them with the session; Reopen() forgets
    // the stock they went back into.
    return FromGrpc(m.Reopen(gen));
  }
  return FromGrpc(s);
}

Status Client::Drain() {
  Impl& m = *impl_;
  if (m.closed.load())
    return Status(StatusCode::kFailedPrecondition,
                  "cgacct::client: Drain after Close");
  absl::ReaderMutexLock r(&m.rpc_mu);
  std::vector<Returned> taken = m.stock.Take("/");
  return FromGrpc(m.ReturnPages(m.link.Session().first, taken));
}

Status Client::Close() {
  Impl& m = *impl_;
  if (m.closed.exchange(true)) return Status();
  m.link.Stop();
  grpc::Status s = m.rpcs.CloseSession(m.link.Session().first);
  // A retry of a CloseSession that was applied finds the session gone.
  if (SessionGone(s)) s = grpc::Status::OK;
  m.stock.TakeAll();
  absl::MutexLock l(&m.held_mu);
  m.held.clear();
  return FromGrpc(s);
}

Groups& Client::groups() { return *impl_->groups; }

std::string Client::session_id() const { return impl_->link.Session().first; }

ClientStats Client::stats() const {
  const Impl& m = *impl_;
  ClientStats s;
  m.stock.CountCharges(&s.charges, &s.stock_hits);
  m.rpcs.AddCounts(&s);
  s.drains = m.drains.load();
  s.drained_pages = m.drained_pages.load();
  s.reopened_sessions = m.reopened.load();
  s.reattached_streams = m.link.reattached();
  s.reconciles = m.reconciles.load();
  s.resume_deferred_pages = m.resume_deferred.load();
  s.return_failed_pages = m.return_failed.load();
  return s;
}

uint64_t Client::stocked_pages() const { return impl_->stock.pages(); }

uint64_t Client::held_pages(std::string_view group, PageKind kind) const {
  const HeldKey key{std::string(group), static_cast<int>(kind)};
  const uint64_t stocked = impl_->stock.PagesOf(key);
  absl::MutexLock l(&impl_->held_mu);
  auto it = impl_->held.find(key);
  const uint64_t held = it == impl_->held.end() ? 0 : it->second;
  return held > stocked ? held - stocked : 0;
}

Client::Holdings Client::Forget(std::string_view root, bool wait_for_calls) {
  Impl& m = *impl_;
  // No charge-path RPC in flight: the books and the stock change together.
  // Without wait_for_calls (the watch, moving from a silent node) a call
  // in flight there ends in its deadline, unanswered, or refused past the
  // node's fence; waiting for it cost the move up to its attempts, past the
  // heir's takeover grace.
  std::optional<absl::WriterMutexLock> w;
  if (wait_for_calls) w.emplace(&m.rpc_mu);
  std::map<HeldKey, uint64_t> stocked;
  for (const Returned& r : m.stock.Take(root)) {
    stocked[{r.path, r.kind}] += r.nr_pages;
  }
  const absl::string_view subtree(root.data(), root.size());
  Holdings app;
  absl::MutexLock l(&m.held_mu);
  for (auto it = m.held.begin(); it != m.held.end();) {
    if (!PathAtOrBelow(it->first.first, subtree)) {
      ++it;
      continue;
    }
    const uint64_t st = stocked[it->first];
    if (it->second > st) app[it->first] = it->second - st;
    it = m.held.erase(it);
  }
  return app;
}

Status Client::Adopt(std::string_view group, int kind, uint64_t nr_pages) {
  Impl& m = *impl_;
  for (int round = 0; round < 2; ++round) {
    if (m.closed.load(std::memory_order_relaxed))
      return Status(StatusCode::kFailedPrecondition,
                    "cgacct::client: Charge after Close");
    uint64_t gen;
    grpc::Status s;
    {
      absl::ReaderMutexLock r(&m.rpc_mu);
      std::string sid;
      std::tie(sid, gen) = m.link.Session();
      s = m.rpcs.Charge(sid, group, nr_pages, kind, nullptr,
                        /*batch_pages=*/0, /*charged=*/nullptr,
                        /*resume=*/true);
      if (s.ok()) {
        m.AddHeld(std::string(group), kind, static_cast<int64_t>(nr_pages));
        m.SawCharge(gen);
        return Status();
      }
    }
    if (!SessionGone(s) || round > 0) return FromGrpc(s);
    grpc::Status rs = m.Reopen(gen);
    if (!rs.ok()) return FromGrpc(rs);
  }
  return Status(StatusCode::kUnavailable,
                "cgacct::client: Charge: session lost twice");
}

bool Client::Silent() const {
  const Impl& m = *impl_;
  if (m.closed.load(std::memory_order_relaxed)) return false;
  // A wrong guess costs ClusterClient's watch one map read.
  constexpr absl::Duration kDetached = absl::Milliseconds(250);
  constexpr absl::Duration kSilenceMargin = absl::Milliseconds(500);
  const absl::Duration period =
      absl::Milliseconds(std::max<uint32_t>(m.link.ttl_ms() / 3, 10));
  return m.link.Detached() > kDetached ||
         m.link.Silence() >
             period + std::min(absl::FromChrono(m.options.call_timeout),
                               kSilenceMargin);
}

bool Client::Suspect() const {
  return Silent() ||
         (!impl_->closed.load(std::memory_order_relaxed) &&
          impl_->deferred_pending.load(std::memory_order_relaxed));
}

void Client::Restore(const Holdings& holdings) {
  for (const auto& [k, n] : holdings) {
    impl_->AddHeld(k.first, k.second, static_cast<int64_t>(n));
  }
}

Status Client::Disown(std::string_view group, int kind, uint64_t nr_pages) {
  Impl& m = *impl_;
  absl::ReaderMutexLock r(&m.rpc_mu);
  grpc::Status s =
      m.rpcs.Uncharge(m.link.Session().first, group, nr_pages, kind);
  // Out of the books either way: on a failure the session returns them
  // when it ends.
  m.AddHeld(std::string(group), kind, -static_cast<int64_t>(nr_pages));
  return FromGrpc(s);
}

}  // namespace cgacct::client
