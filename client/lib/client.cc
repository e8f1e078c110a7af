// cgacct::client (client/include/cgacct/client.h): sessions, the remote
// per-CPU stock, retries, drain, resume.
//
// Locks, in the order they may be taken:
//   rpc_mu_      reader: every operation that sends a charge-path RPC on
//                the session (so the session cannot change under it);
//                writer: Reopen() (no such RPC in flight while the session
//                changes and the books are rebuilt)
//   session_mu_  session_id_, generation_
//   Slot::mu     one slot's stock (per CPU; taken alone on the hot path, all
//                of them in index order by Reopen())
//   held_mu_     held_: pages the session holds per (group, kind) as far as
//                this process knows (application's + stock)
//   stream_mu_   the attached SessionStream (writes are serialised on it)
// No lock is held across an RPC except rpc_mu_ (reader) and stream_mu_
// around a stream Write.
#include "cgacct/client.h"

#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string_view>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::client {
namespace {

using HeldKey = std::pair<std::string, int>;  // (group, kind)

bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::ABORTED;
}

// NOT_FOUND naming the session (closed, expired, server restarted), as
// opposed to NOT_FOUND naming a group.
bool SessionGone(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::NOT_FOUND &&
         s.error_message().rfind("session_id", 0) == 0;
}

// `path` is `root` or below it.
bool AtOrBelow(std::string_view path, std::string_view root) {
  if (root == "/" || root.empty()) return true;
  if (path.substr(0, root.size()) != root) return false;
  return path.size() == root.size() || path[root.size()] == '/';
}

// A slot's lock: a plain futex mutex (std::mutex), annotated for clang's
// thread-safety analysis. Not absl::Mutex: Debian's Abseil keeps its
// deadlock detection on, whose global graph lookup on every Lock() would
// make every CPU's stock hit share one lock.
class ABSL_LOCKABLE SlotMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE SlotLock {
 public:
  explicit SlotLock(SlotMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~SlotLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  SlotLock(const SlotLock&) = delete;
  SlotLock& operator=(const SlotLock&) = delete;

 private:
  SlotMutex* const mu_;
};

// One (group, kind) of a slot's stock (struct memcg_stock_pcp's cached[i] /
// nr_pages[i]), with this slot's adaptive batch for it.
struct StockEntry {
  std::string path;
  int kind = 0;
  uint64_t nr_pages = 0;
  uint64_t batch = 0;
  absl::Time last_refill = absl::InfinitePast();
  uint64_t last_use = 0;  // LRU tick
};

// A per-CPU slot (struct memcg_stock_pcp). Cache-line aligned so that CPUs
// do not share lines.
struct alignas(64) Slot {
  mutable SlotMutex mu;
  std::vector<StockEntry> entries ABSL_GUARDED_BY(mu);
  uint64_t tick ABSL_GUARDED_BY(mu) = 0;
  // Per-slot counters (summed by stats()), so the hot path shares nothing.
  uint64_t charges ABSL_GUARDED_BY(mu) = 0;
  uint64_t stock_hits ABSL_GUARDED_BY(mu) = 0;
};

struct Returned {
  std::string path;
  int kind;
  uint64_t nr_pages;
};

}  // namespace

struct Client::Impl {
  Impl(std::shared_ptr<grpc::Channel> ch, Options o)
      : channel(std::move(ch)),
        stub(v1::Accounting::NewStub(channel)),
        options(std::move(o)) {}

  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Accounting::Stub> stub;
  const Options options;
  int nr_slots = 1;
  std::unique_ptr<Slot[]> slots;
  std::string request_prefix;  // random, per Client
  std::atomic<uint64_t> request_seq{0};
  std::atomic<bool> closed{false};

  absl::Mutex rpc_mu;
  mutable absl::Mutex session_mu;
  std::string session_id ABSL_GUARDED_BY(session_mu);
  uint64_t generation ABSL_GUARDED_BY(session_mu) = 0;
  uint32_t ttl_ms ABSL_GUARDED_BY(session_mu) = 0;

  mutable absl::Mutex held_mu;
  std::map<HeldKey, uint64_t> held ABSL_GUARDED_BY(held_mu);

  absl::Mutex stream_mu;
  grpc::ClientContext* stream_ctx ABSL_GUARDED_BY(stream_mu) = nullptr;
  grpc::ClientReaderWriter<v1::SessionClientMessage, v1::SessionServerMessage>*
      stream ABSL_GUARDED_BY(stream_mu) = nullptr;
  bool stream_stop ABSL_GUARDED_BY(stream_mu) = false;
  // Set when the server first answered an attach (Open waits for it).
  bool attached_once ABSL_GUARDED_BY(stream_mu) = false;

  std::thread stream_thread;
  std::thread keepalive_thread;

  std::atomic<uint64_t> charge_rpcs{0}, uncharge_rpcs{0}, retries{0},
      drains{0}, drained_pages{0}, reopened{0}, reattached{0}, reconciles{0};
  // Set by a call whose last attempt failed ambiguously; the keepalive
  // thread then runs Reconcile().
  std::atomic<bool> needs_reconcile{false};

  // --- helpers -------------------------------------------------------------

  std::string NextRequestId() {
    return absl::StrCat(request_prefix, "-",
                        request_seq.fetch_add(1, std::memory_order_relaxed));
  }

  std::pair<std::string, uint64_t> Session() const {
    absl::MutexLock l(&session_mu);
    return {session_id, generation};
  }

  void Emit(Event::Type type, std::string group, uint64_t nr_pages,
            grpc::Status status = grpc::Status::OK) {
    if (!options.on_event) return;
    Event e;
    e.type = type;
    e.session_id = Session().first;
    e.group = std::move(group);
    e.nr_pages = nr_pages;
    e.status = std::move(status);
    options.on_event(e);
  }

  Slot& MySlot() {
    const int cpu = sched_getcpu();
    return slots[cpu < 0 ? 0 : cpu % nr_slots];
  }

  // Runs `call(context)` up to max_attempts times, each with call_timeout,
  // while it fails with a retryable code (the same request, so the same
  // request_id, every time).
  template <typename Call>
  grpc::Status WithRetries(Call call) {
    grpc::Status status;
    for (int attempt = 0; attempt < options.max_attempts; ++attempt) {
      if (attempt > 0) {
        retries.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::min(10 << (attempt - 1), 200)));
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           options.call_timeout);
      status = call(&context);
      if (status.ok() || !Retryable(status.error_code())) return status;
    }
    return status;
  }

  // One Charge RPC (with retries) on session `sid`.
  // `batch_pages` > nr_pages: ChargeRequest.batch_pages (the server charges
  // the batch if it fits at once, else nr_pages); *charged (if not null)
  // gets what was charged.
  grpc::Status ChargeRpc(const std::string& sid, std::string_view group,
                         uint64_t nr_pages, int kind, uint64_t* throttle_us,
                         uint64_t batch_pages = 0,
                         uint64_t* charged = nullptr) {
    v1::ChargeRequest request;
    request.set_path(std::string(group));
    request.set_nr_pages(nr_pages);
    if (batch_pages > nr_pages) request.set_batch_pages(batch_pages);
    request.set_kind(static_cast<v1::PageKind>(kind));
    request.set_request_id(NextRequestId());
    request.set_session_id(sid);
    v1::ChargeResponse response;
    grpc::Status s = WithRetries([&](grpc::ClientContext* c) {
      charge_rpcs.fetch_add(1, std::memory_order_relaxed);
      return stub->Charge(c, request, &response);
    });
    if (s.ok() && throttle_us != nullptr) *throttle_us = response.throttle_us();
    if (s.ok() && charged != nullptr) *charged = response.nr_pages();
    if (!s.ok() && Retryable(s.error_code())) needs_reconcile.store(true);
    return s;
  }

  grpc::Status UnchargeRpc(const std::string& sid, std::string_view group,
                           uint64_t nr_pages, int kind) {
    v1::UnchargeRequest request;
    request.set_path(std::string(group));
    request.set_nr_pages(nr_pages);
    request.set_kind(static_cast<v1::PageKind>(kind));
    request.set_request_id(NextRequestId());
    request.set_session_id(sid);
    v1::UnchargeResponse response;
    grpc::Status s = WithRetries([&](grpc::ClientContext* c) {
      uncharge_rpcs.fetch_add(1, std::memory_order_relaxed);
      return stub->Uncharge(c, request, &response);
    });
    if (!s.ok() && Retryable(s.error_code())) needs_reconcile.store(true);
    return s;
  }

  void AddHeld(const std::string& group, int kind, int64_t delta) {
    absl::MutexLock l(&held_mu);
    uint64_t& h = held[{group, kind}];
    h = delta < 0 && static_cast<uint64_t>(-delta) > h ? 0 : h + delta;
  }

  // refill_stock(): adds `nr_pages` of (group, kind) to `slot`; what does
  // not fit (above max_batch_pages, or an evicted least-recently-used
  // entry when all stock_groups entries are taken) is appended to *excess.
  void Refill(Slot& slot, std::string_view group, int kind, uint64_t nr_pages,
              std::vector<Returned>* excess) {
    const uint64_t cap =
        options.batch_pages == 0 ? 0 : options.max_batch_pages;
    SlotLock l(&slot.mu);
    StockEntry* e = nullptr;
    for (StockEntry& x : slot.entries)
      if (x.kind == kind && x.path == group) e = &x;
    if (e == nullptr) {
      if (cap == 0) {
        excess->push_back({std::string(group), kind, nr_pages});
        return;
      }
      if (static_cast<int>(slot.entries.size()) >= options.stock_groups) {
        auto lru = std::min_element(
            slot.entries.begin(), slot.entries.end(),
            [](const StockEntry& a, const StockEntry& b) {
              return a.last_use < b.last_use;
            });
        if (lru->nr_pages > 0)
          excess->push_back({lru->path, lru->kind, lru->nr_pages});
        slot.entries.erase(lru);
      }
      slot.entries.push_back(StockEntry{std::string(group), kind, 0,
                                        options.batch_pages});
      e = &slot.entries.back();
    }
    e->last_use = ++slot.tick;
    e->nr_pages += nr_pages;
    if (e->nr_pages > cap) {
      excess->push_back({e->path, kind, e->nr_pages - cap});
      e->nr_pages = cap;
    }
  }

  // Takes every slot's stock of groups at or below `root` out of the slots.
  std::vector<Returned> TakeStock(std::string_view root) {
    std::map<HeldKey, uint64_t> sum;
    for (int i = 0; i < nr_slots; ++i) {
      Slot& slot = slots[i];
      SlotLock l(&slot.mu);
      for (StockEntry& e : slot.entries) {
        if (e.nr_pages == 0 || !AtOrBelow(e.path, root)) continue;
        sum[{e.path, e.kind}] += e.nr_pages;
        e.nr_pages = 0;
      }
    }
    std::vector<Returned> out;
    for (auto& [k, n] : sum) out.push_back({k.first, k.second, n});
    return out;
  }

  // Gives `pages` back to the server with Uncharge RPCs (caller holds
  // rpc_mu as reader); on failure puts them back into slot 0.
  grpc::Status ReturnPages(const std::string& sid,
                           const std::vector<Returned>& pages) {
    grpc::Status first;
    for (const Returned& r : pages) {
      grpc::Status s = UnchargeRpc(sid, r.path, r.nr_pages, r.kind);
      if (s.ok()) {
        AddHeld(r.path, r.kind, -static_cast<int64_t>(r.nr_pages));
        continue;
      }
      if (first.ok()) first = s;
      Slot& slot = slots[0];
      SlotLock l(&slot.mu);
      bool found = false;
      for (StockEntry& e : slot.entries)
        if (e.kind == r.kind && e.path == r.path) {
          e.nr_pages += r.nr_pages;
          found = true;
        }
      if (!found)
        slot.entries.push_back(
            StockEntry{r.path, r.kind, r.nr_pages, options.batch_pages});
    }
    return first;
  }

  // The session is gone (`gen` is the generation that found it gone): open a
  // new one and charge again, on it, what the application still holds.
  grpc::Status Reopen(uint64_t gen) ABSL_LOCKS_EXCLUDED(rpc_mu) {
    absl::WriterMutexLock w(&rpc_mu);
    {
      absl::MutexLock l(&session_mu);
      if (generation != gen) return grpc::Status::OK;  // someone else did
    }
    v1::OpenSessionResponse opened;
    grpc::Status s = OpenSessionRpc(&opened);
    if (!s.ok()) return s;
    // The old session's holdings, stock included, were uncharged by the
    // server: the stock is simply forgotten, the application's part is
    // charged again.
    std::map<HeldKey, uint64_t> stock;
    for (int i = 0; i < nr_slots; ++i) {
      Slot& slot = slots[i];
      SlotLock l(&slot.mu);
      for (StockEntry& e : slot.entries) {
        stock[{e.path, e.kind}] += e.nr_pages;
        e.nr_pages = 0;
      }
    }
    std::map<HeldKey, uint64_t> app;
    {
      absl::MutexLock l(&held_mu);
      for (auto& [k, n] : held) {
        const uint64_t st = stock[k];
        if (n > st) app[k] = n - st;
      }
      held.clear();
    }
    {
      absl::MutexLock l(&session_mu);
      session_id = opened.session_id();
      ttl_ms = opened.ttl_ms();
      ++generation;
    }
    reopened.fetch_add(1, std::memory_order_relaxed);
    Emit(Event::Type::kSessionReopened, "", 0);
    for (auto& [k, n] : app) {
      grpc::Status cs = ChargeRpc(opened.session_id(), k.first, n, k.second,
                                  nullptr);
      if (cs.ok()) {
        AddHeld(k.first, k.second, static_cast<int64_t>(n));
      } else {
        Emit(Event::Type::kRechargeFailed, k.first, n, cs);
      }
    }
    // The stream (attached to the old session) re-attaches to the new one.
    absl::MutexLock l(&stream_mu);
    if (stream_ctx != nullptr) stream_ctx->TryCancel();
    return grpc::Status::OK;
  }

  grpc::Status OpenSessionRpc(v1::OpenSessionResponse* response) {
    v1::OpenSessionRequest request;
    request.set_ttl_ms(static_cast<uint32_t>(options.session_ttl.count()));
    std::string name = options.client_name;
    if (name.empty()) {
      char host[64] = {};
      gethostname(host, sizeof(host) - 1);
      name = absl::StrCat(host, ":", getpid());
    }
    request.set_client_name(name);
    return WithRetries([&](grpc::ClientContext* c) {
      return stub->OpenSession(c, request, response);
    });
  }

  // Writes the answer to drain `drain_id` carrying `returned`; false if the
  // stream is gone.
  bool WriteDrainAnswer(uint64_t drain_id,
                        const std::vector<Returned>& returned) {
    v1::SessionClientMessage answer;
    answer.set_drain_id(drain_id);
    for (const Returned& r : returned) {
      v1::SessionHolding* h = answer.add_returned();
      h->set_path(r.path);
      h->set_kind(static_cast<v1::PageKind>(r.kind));
      h->set_nr_pages(r.nr_pages);
    }
    absl::MutexLock l(&stream_mu);
    return stream != nullptr && stream->Write(answer);
  }

  // drain_all_stock() asked by the server: give up the stock of drain_path's
  // subtree and answer with it. Not while the books are being rebuilt
  // (Reopen and Reconcile hold rpc_mu as writer, and may wait for the very
  // charge this drain is for): then answer "nothing to return" at once, as
  // the kernel's trylock skips a busy CPU's stock.
  void HandleDrain(const v1::SessionServerMessage& msg) {
    if (!rpc_mu.ReaderTryLock()) {
      WriteDrainAnswer(msg.drain_id(), {});
      return;
    }
    HandleDrainLocked(msg);
    rpc_mu.ReaderUnlock();
  }

  void HandleDrainLocked(const v1::SessionServerMessage& msg)
      ABSL_SHARED_LOCKS_REQUIRED(rpc_mu) {
    std::vector<Returned> taken = TakeStock(msg.drain_path());
    uint64_t total = 0;
    for (const Returned& r : taken) total += r.nr_pages;
    if (WriteDrainAnswer(msg.drain_id(), taken)) {
      for (const Returned& r : taken)
        AddHeld(r.path, r.kind, -static_cast<int64_t>(r.nr_pages));
      drains.fetch_add(1, std::memory_order_relaxed);
      drained_pages.fetch_add(total, std::memory_order_relaxed);
      Emit(Event::Type::kDrained, msg.drain_path(), total);
    } else if (!taken.empty()) {
      // The answer did not go out: give the pages back the unary way.
      ReturnPages(Session().first, taken);
    }
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
    const std::string sid = Session().first;
    v1::GetSessionRequest request;
    request.set_session_id(sid);
    v1::SessionInfo info;
    grpc::Status s = WithRetries([&](grpc::ClientContext* c) {
      return stub->GetSession(c, request, &info);
    });
    if (SessionGone(s)) return grpc::Status::OK;  // Reopen rebuilds them
    if (!s.ok()) return s;
    std::map<HeldKey, uint64_t> server;
    for (const v1::SessionHolding& h : info.holdings())
      server[{h.path(), static_cast<int>(h.kind())}] += h.nr_pages();
    std::map<HeldKey, int64_t> delta;  // server - books
    {
      absl::MutexLock l(&held_mu);
      for (auto& [k, n] : server) delta[k] += static_cast<int64_t>(n);
      for (auto& [k, n] : held) delta[k] -= static_cast<int64_t>(n);
      for (auto& [k, n] : server) held[k] = n;
      for (auto it = held.begin(); it != held.end();) {
        if (server.count(it->first) == 0)
          it = held.erase(it);
        else
          ++it;
      }
    }
    grpc::Status first;
    for (auto& [k, d] : delta) {
      if (d > 0) {
        s = UnchargeRpc(sid, k.first, static_cast<uint64_t>(d), k.second);
        if (s.ok()) AddHeld(k.first, k.second, -d);
        if (!s.ok() && first.ok()) first = s;
      } else if (d < 0) {
        uint64_t phantom = static_cast<uint64_t>(-d);
        for (int i = 0; i < nr_slots && phantom > 0; ++i) {
          Slot& slot = slots[i];
          SlotLock l(&slot.mu);
          for (StockEntry& e : slot.entries) {
            if (e.kind != k.second || e.path != k.first) continue;
            const uint64_t take = std::min(e.nr_pages, phantom);
            e.nr_pages -= take;
            phantom -= take;
          }
        }
        if (phantom == 0) continue;
        s = ChargeRpc(sid, k.first, phantom, k.second, nullptr);
        if (s.ok()) {
          AddHeld(k.first, k.second, static_cast<int64_t>(phantom));
        } else {
          if (first.ok()) first = s;
          Emit(Event::Type::kRechargeFailed, k.first, phantom, s);
        }
      }
    }
    reconciles.fetch_add(1, std::memory_order_relaxed);
    return first;
  }

  void StreamLoop() {
    int backoff_ms = 50;
    while (!closed.load()) {
      auto [sid, gen] = Session();
      {
        absl::MutexLock l(&stream_mu);
        if (stream_stop) break;
      }
      grpc::ClientContext context;
      auto rw = stub->SessionStream(&context);
      {
        absl::MutexLock l(&stream_mu);
        stream_ctx = &context;
        stream = rw.get();
        if (stream_stop) context.TryCancel();
      }
      v1::SessionClientMessage attach;
      attach.set_attach_session_id(sid);
      bool ok;
      {
        absl::MutexLock l(&stream_mu);
        ok = rw->Write(attach);
      }
      v1::SessionServerMessage msg;
      bool got_any = false;
      while (ok && rw->Read(&msg)) {
        if (!got_any) {
          absl::MutexLock l(&stream_mu);
          attached_once = true;
        }
        got_any = true;
        backoff_ms = 50;
        if (msg.drain_id() != 0) HandleDrain(msg);
      }
      {
        absl::MutexLock l(&stream_mu);
        stream_ctx = nullptr;
        stream = nullptr;
      }
      grpc::Status status = rw->Finish();
      if (closed.load()) break;
      if (Session().second != gen) continue;  // reopened meanwhile: re-attach
      if (SessionGone(status)) {
        grpc::Status s = Reopen(gen);
        if (s.ok()) continue;
        status = s;
      }
      reattached.fetch_add(1, std::memory_order_relaxed);
      Emit(Event::Type::kStreamBroken, "", 0, status);
      absl::MutexLock l(&stream_mu);
      stream_mu.AwaitWithTimeout(absl::Condition(&stream_stop),
                                 absl::Milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 1000);
    }
  }

  void KeepaliveLoop() {
    uint32_t ttl;
    {
      absl::MutexLock l(&session_mu);
      ttl = ttl_ms;
    }
    const absl::Duration period =
        absl::Milliseconds(std::max<uint32_t>(ttl / 3, 10));
    for (;;) {
      {
        absl::MutexLock l(&stream_mu);
        if (stream_mu.AwaitWithTimeout(absl::Condition(&stream_stop), period))
          return;
        if (stream != nullptr) {
          v1::SessionClientMessage keepalive;
          keepalive.set_keepalive(true);
          stream->Write(keepalive);
        }
      }
      // Outside stream_mu: Reconcile takes rpc_mu, which comes first.
      if (needs_reconcile.exchange(false) && !Reconcile().ok())
        needs_reconcile.store(true);
    }
  }

  void StopThreads() {
    {
      absl::MutexLock l(&stream_mu);
      stream_stop = true;
      if (stream_ctx != nullptr) stream_ctx->TryCancel();
    }
    if (stream_thread.joinable()) stream_thread.join();
    if (keepalive_thread.joinable()) keepalive_thread.join();
  }
};

grpc::Status Client::Open(std::shared_ptr<grpc::Channel> channel,
                          Options options, std::unique_ptr<Client>* client) {
  auto bad = [](std::string_view what) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "cgacct::client::Options: " + std::string(what));
  };
  if (channel == nullptr) return bad("channel is null");
  if (options.nr_slots < 0) return bad("nr_slots must be >= 0");
  if (options.stock_groups < 1) return bad("stock_groups must be >= 1");
  if (options.max_attempts < 1) return bad("max_attempts must be >= 1");
  if (options.call_timeout.count() <= 0) return bad("call_timeout must be > 0");
  if (options.session_ttl.count() < 0 ||
      options.session_ttl.count() > UINT32_MAX)
    return bad("session_ttl out of range");
  if (options.max_batch_pages < options.batch_pages)
    return bad("max_batch_pages must be >= batch_pages");
  auto impl = std::make_unique<Impl>(std::move(channel), std::move(options));
  impl->nr_slots =
      impl->options.nr_slots > 0 ? impl->options.nr_slots : get_nprocs_conf();
  if (impl->nr_slots < 1) impl->nr_slots = 1;
  impl->slots = std::make_unique<Slot[]>(impl->nr_slots);
  std::random_device rd;
  impl->request_prefix = absl::StrCat("cgacct-client-", rd(), rd(), rd());

  v1::OpenSessionResponse opened;
  grpc::Status s = impl->OpenSessionRpc(&opened);
  if (!s.ok()) return s;
  {
    absl::MutexLock l(&impl->session_mu);
    impl->session_id = opened.session_id();
    impl->ttl_ms = opened.ttl_ms();
    impl->generation = 1;
  }
  Impl* p = impl.get();
  impl->stream_thread = std::thread([p] { p->StreamLoop(); });
  impl->keepalive_thread = std::thread([p] { p->KeepaliveLoop(); });
  {
    // Drain requests reach the process only once the stream is attached:
    // wait for the server's first answer (at most call_timeout; past it
    // the stream thread keeps trying).
    absl::MutexLock l(&p->stream_mu);
    p->stream_mu.AwaitWithTimeout(
        absl::Condition(&p->attached_once),
        absl::FromChrono(p->options.call_timeout));
  }
  client->reset(new Client(std::move(impl)));
  return grpc::Status::OK;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { Close(); }

ChargeResult Client::Charge(std::string_view group, uint64_t nr_pages,
                            PageKind kind) {
  Impl& m = *impl_;
  ChargeResult result;
  if (m.closed.load(std::memory_order_relaxed)) {
    result.status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "cgacct::client: Charge after Close");
    return result;
  }
  if (nr_pages == 0) {
    result.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "cgacct::client: Charge: nr_pages must be > 0");
    return result;
  }
  const int k = static_cast<int>(kind);
  uint64_t batch = m.options.batch_pages;
  {
    // consume_stock()
    Slot& slot = m.MySlot();
    SlotLock l(&slot.mu);
    for (StockEntry& e : slot.entries) {
      if (e.kind != k || e.path != group) continue;
      if (e.nr_pages >= nr_pages) {
        e.nr_pages -= nr_pages;
        e.last_use = ++slot.tick;
        ++slot.charges;
        ++slot.stock_hits;
        result.from_stock = true;
        return result;
      }
      // A miss: adapt this slot's batch for the group to the refill rate.
      const absl::Time now = absl::Now();
      const absl::Duration since = now - e.last_refill;
      if (since < absl::Milliseconds(100))
        e.batch = std::min(std::max<uint64_t>(e.batch, 1) * 2,
                           m.options.max_batch_pages);
      else if (since > absl::Seconds(1))
        e.batch = std::max(e.batch / 2, m.options.batch_pages);
      e.last_refill = now;
      batch = e.batch;
      break;
    }
  }
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
      absl::ReaderMutexLock r(&m.rpc_mu);
      std::string sid;
      std::tie(sid, gen) = m.Session();
      uint64_t charged = nr_pages;
      s = m.ChargeRpc(sid, group, nr_pages, k, &throttle, want, &charged);
      if (s.ok()) {
        // A server that predates batch_pages charged nr_pages.
        charged = std::clamp(charged, nr_pages, want);
        m.AddHeld(std::string(group), k, static_cast<int64_t>(charged));
        if (charged > nr_pages)
          m.Refill(m.MySlot(), group, k, charged - nr_pages, &excess);
        if (!excess.empty()) m.ReturnPages(sid, excess);
      }
    }
    if (s.ok()) {
      {
        Slot& slot = m.MySlot();
        SlotLock l(&slot.mu);
        ++slot.charges;
      }
      result.throttle_us = throttle;
      if (throttle > 0 && m.options.throttle == ThrottleMode::kSleep)
        std::this_thread::sleep_for(std::chrono::microseconds(throttle));
      return result;
    }
    if (SessionGone(s) && round < 2) {
      grpc::Status rs = m.Reopen(gen);
      if (!rs.ok()) {
        result.status = rs;
        return result;
      }
      continue;
    }
    result.status = s;
    return result;
  }
  result.status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "cgacct::client: Charge: session lost twice");
  return result;
}

grpc::Status Client::Uncharge(std::string_view group, uint64_t nr_pages,
                              PageKind kind) {
  Impl& m = *impl_;
  if (m.closed.load(std::memory_order_relaxed))
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "cgacct::client: Uncharge after Close");
  if (nr_pages == 0)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "cgacct::client: Uncharge: nr_pages must be > 0");
  const int k = static_cast<int>(kind);
  std::vector<Returned> excess;
  m.Refill(m.MySlot(), group, k, nr_pages, &excess);
  if (excess.empty()) return grpc::Status::OK;
  uint64_t gen;
  grpc::Status s;
  {
    absl::ReaderMutexLock r(&m.rpc_mu);
    std::string sid;
    std::tie(sid, gen) = m.Session();
    s = m.ReturnPages(sid, excess);
  }
  if (SessionGone(s)) {
    // The server already uncharged them with the session; Reopen() forgets
    // the stock they went back into.
    return m.Reopen(gen);
  }
  return s;
}

grpc::Status Client::Drain() {
  Impl& m = *impl_;
  if (m.closed.load())
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "cgacct::client: Drain after Close");
  absl::ReaderMutexLock r(&m.rpc_mu);
  std::vector<Returned> taken = m.TakeStock("/");
  return m.ReturnPages(m.Session().first, taken);
}

grpc::Status Client::Close() {
  Impl& m = *impl_;
  if (m.closed.exchange(true)) return grpc::Status::OK;
  m.StopThreads();
  v1::CloseSessionRequest request;
  request.set_session_id(m.Session().first);
  v1::CloseSessionResponse response;
  grpc::Status s = m.WithRetries([&](grpc::ClientContext* c) {
    return m.stub->CloseSession(c, request, &response);
  });
  // A retry of a CloseSession that was applied finds the session gone.
  if (SessionGone(s)) s = grpc::Status::OK;
  for (int i = 0; i < m.nr_slots; ++i) {
    SlotLock l(&m.slots[i].mu);
    for (StockEntry& e : m.slots[i].entries) e.nr_pages = 0;
  }
  absl::MutexLock l(&m.held_mu);
  m.held.clear();
  return s;
}

std::string Client::session_id() const { return impl_->Session().first; }

ClientStats Client::stats() const {
  const Impl& m = *impl_;
  ClientStats s;
  for (int i = 0; i < m.nr_slots; ++i) {
    SlotLock l(&m.slots[i].mu);
    s.charges += m.slots[i].charges;
    s.stock_hits += m.slots[i].stock_hits;
  }
  s.charge_rpcs = m.charge_rpcs.load();
  s.uncharge_rpcs = m.uncharge_rpcs.load();
  s.retries = m.retries.load();
  s.drains = m.drains.load();
  s.drained_pages = m.drained_pages.load();
  s.reopened_sessions = m.reopened.load();
  s.reattached_streams = m.reattached.load();
  s.reconciles = m.reconciles.load();
  return s;
}

uint64_t Client::stocked_pages() const {
  const Impl& m = *impl_;
  uint64_t n = 0;
  for (int i = 0; i < m.nr_slots; ++i) {
    SlotLock l(&m.slots[i].mu);
    for (const StockEntry& e : m.slots[i].entries) n += e.nr_pages;
  }
  return n;
}

}  // namespace cgacct::client
