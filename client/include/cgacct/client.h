// cgacct::client: the application library of cgacct (docs/DESIGN.md §4.15).
//
// An application charges and uncharges pages through one `Client`, which
// carries the kernel's per-CPU charge stock (mm/memcontrol.c,
// consume_stock()/refill_stock()/drain_all_stock()) across the network:
//
//   * one session per Client (OpenSession, ttl from Options), kept alive on a
//     SessionStream by a background thread (a keepalive whenever the server
//     asks, every ttl/3). Every
//     page the Client charges is held by that session: if the process dies,
//     the server uncharges it all when the lease expires;
//   * per-CPU stock slots in the process (Options::nr_slots, one per CPU by
//     default, chosen with sched_getcpu() like this_cpu_ptr()), each caching
//     pre-charged pages of a few groups (Options::stock_groups, like
//     NR_MEMCG_STOCK). Charge() first consumes the calling CPU's stock
//     (consume_stock(): no RPC); otherwise it charges max(nr_pages, batch)
//     pages in one RPC and keeps the surplus in the slot (try_charge() with
//     MEMCG_CHARGE_BATCH). Uncharge() refills the slot up to its cap and
//     returns the excess to the server (refill_stock());
//   * drain_all_stock() over the network: when a charge would fail at a
//     group's memory.max while clients hold stock of it, the server asks on
//     the stream; the stream thread gives up every slot's stock of groups
//     at or below the drain path at once and answers with what it returned.
//     Until the next Charge that refills a slot, Uncharge() then sends what
//     it frees back to the server instead of stocking it (and a refill
//     whose RPC overlapped the answer returns its surplus): the server
//     takes an answer with less than it asked as an empty stock, which
//     other tenants' charges stop waiting for (docs/DESIGN.md §4.14).
//
// Where it differs from the kernel: the stock is keyed by (group, kind),
// since the server keeps a session's holdings per page kind; the batch
// adapts to the refill rate (64 pages, doubling up to max_batch_pages while
// the same slot refills the same group within 100 ms of its last refill,
// halving back after 1 s without one) instead of the fixed 64; a slot's lock
// is an uncontended mutex, not disabled preemption, so a thread preempted
// inside Charge() delays another thread on the same CPU for that long; and
// Uncharge() drains a (slot, group) entry entirely once it passes
// max_batch_pages, where the kernel's refill_stock() drains at
// MEMCG_CHARGE_BATCH (the batch here adapts up to max_batch_pages). A group
// can so be
// over-reserved by at most clients x nr_slots x max_batch_pages pages: the
// stock counts in memory.current, as the kernel's does.
//
// Units: pages (the server's page size, EngineInfo.page_size_bytes).
// Groups: absolute paths ("/tenants/acme").
//
// Thread safety: every method of Client may be called from any number of
// threads at once, except that Close() and the destructor must not race
// with other calls. No call blocks forever: every RPC has Options::
// call_timeout and at most Options::max_attempts attempts, a throttle
// sleep is at most 2 s (the server's cap).
//
// Errors: cgacct::client::Status (cgacct/status.h: google.rpc.Code and a
// message), the server's (RESOURCE_EXHAUSTED at memory.max, NOT_FOUND for a
// missing group, INVALID_ARGUMENT naming the field) or the transport's
// (UNAVAILABLE, DEADLINE_EXCEEDED after the last attempt);
// FAILED_PRECONDITION after Close().
//
// Connecting: Open(target, options) makes the channel from
// Options::connect (cgacct/channel.h: TLS, mTLS, a bearer token); an
// application with its own channel (interceptors, other credentials) passes
// it to Open(channel, options). The rest of the API (groups, limits,
// statistics, events, reclaim) is groups() (cgacct/groups.h), over the same
// channel.
#ifndef CGACCT_CLIENT_H_
#define CGACCT_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <grpcpp/channel.h>

#include "cgacct/channel.h"
#include "cgacct/groups.h"
#include "cgacct/status.h"

namespace cgacct::client {

// As cgacct.v1.PageKind.
enum class PageKind : int { kAnon = 1, kFile = 2 };

// What Charge() does with the server's throttle_us (memory.high).
enum class ThrottleMode {
  // Charge() sleeps it before returning (the kernel's
  // mem_cgroup_handle_over_high() on the way back to user space).
  kSleep,
  // Charge() returns it in ChargeResult::throttle_us; the caller decides.
  kReturn,
};

// Something the library did on its own, reported to Options::on_event from
// the library's stream thread (or the calling thread for kSessionLost found
// by a call). Keep the callback short; it must not call the Client's methods
// (it may run while the Client holds its session lock), nor a ClusterClient's
// (its watch may be waiting for this Client's calls under the routing lock).
struct Event {
  enum class Type {
    // The session was gone (expired, server restarted: NOT_FOUND) and a new
    // one was opened; `session_id` is the new one.
    kSessionReopened,
    // After kSessionReopened: re-charging what the application still held of
    // `group` failed with `status` (`nr_pages` pages the application holds
    // that the server no longer counts).
    kRechargeFailed,
    // A drain request was answered: `nr_pages` stocked pages of groups at or
    // below `group` returned.
    kDrained,
    // The session stream broke with `status` and is being re-attached.
    kStreamBroken,
    // After kSessionReopened: the same, refused because the node does not
    // serve `group` now (UNAVAILABLE, DEADLINE_EXCEEDED, FAILED_PRECONDITION:
    // in a cluster its shard moved, or the node has no etcd lease), or
    // because the new session was gone already (the next reopen tries). The
    // `nr_pages` pages stay the application's in the books, uncounted at
    // this node; ClusterClient charges them again at the shard's new owner
    // (dropping them would let that owner admit fresh charges over them).
    kRechargeDeferred,
  };
  Type type;
  std::string session_id;
  std::string group;
  uint64_t nr_pages = 0;
  Status status;
};

struct Options {
  // How Open(target, ...) connects: TLS files, a bearer token
  // (cgacct/channel.h). Unused by Open(channel, ...).
  ConnectOptions connect;
  // Session lease (OpenSessionRequest.ttl_ms); 0 = the server's default.
  std::chrono::milliseconds session_ttl{10000};
  // OpenSessionRequest.client_name ("" = "HOST:PID").
  std::string client_name;
  // Stock slots: 0 = one per configured CPU (get_nprocs_conf()); at most
  // 4096.
  int nr_slots = 0;
  // Groups (x kinds) each slot caches at once (NR_MEMCG_STOCK is 7); 1 to
  // 64.
  int stock_groups = 7;
  // First charge batch, pages (MEMCG_CHARGE_BATCH). 0 = no batching: every
  // miss charges exactly what was asked and Uncharge() keeps nothing.
  uint64_t batch_pages = 64;
  // Cap of the adaptive batch and of each slot's stock of one group, pages
  // (>= batch_pages).
  uint64_t max_batch_pages = 256;
  // Deadline of each RPC attempt (> 0, at most 24 h).
  std::chrono::milliseconds call_timeout{2000};
  // Attempts per call on UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED and
  // CANCELLED (a node shutting down cancels the calls in flight) (with
  // the same request_id, so the server applies the call once), >= 1.
  int max_attempts = 4;
  ThrottleMode throttle = ThrottleMode::kSleep;
  // Optional; see Event.
  std::function<void(const Event&)> on_event;
};

struct ChargeResult {
  Status status;
  // memory.high throttle the server asked for (0 on a stock hit),
  // microseconds; already slept when Options::throttle is kSleep.
  uint64_t throttle_us = 0;
  // True when the stock satisfied the charge (no RPC).
  bool from_stock = false;
  bool ok() const { return status.ok(); }
};

// Counters of one Client since Open (monotonic; read with Client::stats()).
struct ClientStats {
  uint64_t charges = 0;         // Charge() calls that succeeded
  uint64_t stock_hits = 0;      // ... of which satisfied by the stock
  uint64_t charge_rpcs = 0;     // Charge RPC attempts
  uint64_t uncharge_rpcs = 0;   // Uncharge RPC attempts
  uint64_t retries = 0;         // attempts after the first, all RPCs
  uint64_t drains = 0;          // drain requests answered
  uint64_t drained_pages = 0;   // stocked pages they returned
  uint64_t reopened_sessions = 0;
  uint64_t reattached_streams = 0;
  // Pages a re-charge after a reopen could not put back because the node
  // does not serve their group now, or the new session was gone already
  // (Event::kRechargeDeferred), counted at each try: kept in the books and
  // charged again (as resumes) by the keepalive thread's reconciliation
  // once the node serves the group, or by ClusterClient at a new owner.
  uint64_t resume_deferred_pages = 0;
  // Pages Uncharge() or a drain could not give back to the server (after
  // the attempts): dropped, never stocked again; the session holds them on
  // the server, if it still counts them, until it closes.
  uint64_t return_failed_pages = 0;
  // Times the books were brought back to GetSession's holdings after a call
  // failed ambiguously (its last attempt UNAVAILABLE, DEADLINE_EXCEEDED or
  // ABORTED: it may have been applied). Done by the keepalive thread.
  uint64_t reconciles = 0;
};

class Client {
 public:
  // Opens a session on `channel` (OpenSession with options.session_ttl) and
  // attaches its SessionStream; returns once the server answered the attach
  // (or after call_timeout: the stream thread keeps trying). Errors:
  // OpenSession's status (e.g. INVALID_ARGUMENT naming ttl_ms),
  // UNAVAILABLE if the server cannot be reached within the attempts;
  // INVALID_ARGUMENT naming the option for bad options. Blocks at most
  // (max_attempts + 1) x call_timeout plus the retry pauses.
  static Status Open(std::shared_ptr<grpc::Channel> channel, Options options,
                     std::unique_ptr<Client>* client);
  // The same over MakeChannel(target, options.connect); its errors
  // (INVALID_ARGUMENT naming the ConnectOptions field) too.
  static Status Open(const std::string& target, Options options,
                     std::unique_ptr<Client>* client);

  // Close()s if not closed.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Charges `nr_pages` (> 0) pages of `kind` to `group` for this process
  // (try_charge()): from the calling CPU's stock when it holds enough
  // (consume_stock(): no RPC, no lock shared with other CPUs), otherwise
  // one Charge RPC of nr_pages with batch_pages max(nr_pages, batch) on the
  // session: the server charges the batch if it fits at once (the surplus
  // is stocked here), else exactly nr_pages through its reclaim and drains,
  // in the same RPC (try_charge() drops its batch before reclaiming): a
  // group at its max costs one drain wait, not two. Errors: the
  // server's (RESOURCE_EXHAUSTED at memory.max after the server's reclaim
  // and drain, NOT_FOUND group) or the transport's after max_attempts.
  ChargeResult Charge(std::string_view group, uint64_t nr_pages,
                      PageKind kind = PageKind::kAnon);

  // Uncharges `nr_pages` pages of `kind` the application charged to `group`
  // through this Client (refill_stock()): they go to the calling CPU's
  // stock; once the slot's entry for (group, kind) passes max_batch_pages,
  // all of it goes back to the server in one Uncharge RPC and the entry
  // starts again from 0, as drain_stock() (all `nr_pages` after a server
  // drain took the stock, until the next refilling Charge). Uncharging more than was charged is not
  // caught on the stock path (the kernel's page_counter only warns); the
  // server refuses it (FAILED_PRECONDITION) once it reaches it.
  Status Uncharge(std::string_view group, uint64_t nr_pages,
                  PageKind kind = PageKind::kAnon);

  // Returns every slot's stock to the server (drain_all_stock() on this
  // process alone), e.g. before a long idle period.
  Status Drain();

  // Ends the session (CloseSession): the server uncharges everything it
  // holds, the stock and what the application still holds alike, and the
  // stream thread stops. Further calls answer FAILED_PRECONDITION.
  // Idempotent. Returns CloseSession's status. groups() keeps working.
  Status Close();

  // Groups, limits, statistics, events, reclaim (cgacct/groups.h) over this
  // Client's channel, with its call_timeout and max_attempts; no session.
  // Lives as long as the Client.
  Groups& groups();

  // The current session id (changes when the session is reopened).
  std::string session_id() const;
  ClientStats stats() const;
  // Pages currently in this process's stock, over all slots and groups.
  uint64_t stocked_pages() const;
  // Pages of (group, kind) the application holds through this Client (what
  // its session holds there, less this process's stock of it).
  uint64_t held_pages(std::string_view group,
                      PageKind kind = PageKind::kAnon) const;

 private:
  friend class ClusterClient;
  // (group, kind as int) -> pages.
  using Holdings = std::map<std::pair<std::string, int>, uint64_t>;

  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);

  // For ClusterClient, when a shard moves to another node. Forget(): drops
  // from the books (and the stock) everything at or below `root` without
  // returning it (this node no longer owns that shard: the pages died with
  // its ownership) and returns what the application held there; with
  // wait_for_calls, once the calls in flight on this Client have ended
  // (ClusterClient's watch, moving from a silent node, does not wait).
  // Adopt():
  // charges `nr_pages` on this Client's session as a resume
  // (ChargeRequest.resume: a new owner admits it in its takeover grace) and
  // counts them as the application's; nothing counted on an error.
  // Restore(): puts forgotten holdings back into the books (no RPC), when a
  // move is given up. Disown(): one Uncharge RPC of pages adopted by a move
  // that was given up, and out of the books.
  Holdings Forget(std::string_view root, bool wait_for_calls = true);
  // For ClusterClient's watch: whether this Client's node may no longer
  // serve what it holds: Silent(), its session stream broken for more than
  // 250 ms (a node dead, stopping, or that ended the session) or silent for
  // longer than a keepalive period (ttl / 3) plus min(call_timeout, 500 ms)
  // (a node stopped or cut off), or a re-charge is deferred there (refused
  // as not served here). Never block on the network.
  bool Silent() const;
  bool Suspect() const;
  Status Adopt(std::string_view group, int kind, uint64_t nr_pages);
  void Restore(const Holdings& holdings);
  Status Disown(std::string_view group, int kind, uint64_t nr_pages);

  std::unique_ptr<Impl> impl_;
};

}  // namespace cgacct::client

#endif  // CGACCT_CLIENT_H_
