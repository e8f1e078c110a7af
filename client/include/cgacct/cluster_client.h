// cgacct::client::ClusterClient: one Client per owner node of a cgacct
// cluster (docs/DESIGN.md §4.18), the C++ twin of Python's
// cgacct.ClusterClient.
//
// In cluster mode each shard (by default each child of `/`) is owned by one
// node, which alone serves its sessions and does its charges; a node that
// does not own a path's shard refuses a session's charge FAILED_PRECONDITION
// (trailer `cgacct-owner` naming the owner), and while a shard has no owner
// (a failover) UNAVAILABLE. ClusterClient routes by the cluster map
// (GetClusterMap): each path goes to its shard's owner through a Client of
// its own there, so there is a session and a stock per owner (as the
// kernel's stock is per CPU, this one is per CPU per owner).
//
// Failover: when a call fails UNAVAILABLE, DEADLINE_EXCEEDED or
// FAILED_PRECONDITION (or NOT_FOUND, while the map still changes) the map
// is read again from any node it knows and the call is tried again, until
// ClusterOptions::failover_timeout has passed. When a shard's owner has
// changed, what the application holds in that shard is first charged again
// at the new owner as a resume (ChargeRequest.resume, which a new owner
// admits during its takeover grace while it refuses fresh charges), then the
// call is made there. The old owner's stock of the shard is forgotten, not
// returned: those pages died with the old owner's ownership (its node was
// killed, or fenced; a new owner starts at 0 pages). A watch thread does the
// same without waiting for a call to fail: while a node's session stream is
// silent past a keepalive period plus call_timeout, or holds re-charges it
// refused, it reads the map every 250 ms and moves each shard whose owner
// changed, so that holdings reach a new owner within its takeover grace.
//
// A refusal that is not routing's (memory.max: RESOURCE_EXHAUSTED; an
// uncharge of more than was charged: FAILED_PRECONDITION with the map
// unchanged; a path under no shard or a missing group: NOT_FOUND with the
// map unchanged) is returned at once.
//
// Against a node that is not in cluster mode (GetClusterMap's cluster_mode
// false) a ClusterClient is one Client of that node for every path.
//
// Units: pages (the server's page size). Groups: absolute paths.
//
// Thread safety: every method may be called from any number of threads at
// once, except that Close() and the destructor must not race with other
// calls. One lock serialises the routing (map reads, moves of a shard's
// holdings); the charges themselves run on the per-owner Clients, which are
// thread-safe, outside it. No call blocks forever: at most
// failover_timeout plus one Client call (Options::call_timeout x
// max_attempts).
#ifndef CGACCT_CLUSTER_CLIENT_H_
#define CGACCT_CLUSTER_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/channel.h>

#include "cgacct/channel.h"
#include "cgacct/client.h"
#include "cgacct/groups.h"
#include "cgacct/status.h"

namespace cgacct::client {

struct ClusterOptions {
  // Options of every per-owner Client (session lease, stock, batch, call
  // timeout, attempts). Keep call_timeout x max_attempts well under
  // failover_timeout, so that a dead owner is given up in time.
  Options client;
  // How long a call keeps re-reading the map and trying again: a node's
  // lease TTL (--cluster_lease_ttl, 5 s) plus the takeover grace
  // (--cluster_takeover_grace, 10 s) plus a few seconds.
  std::chrono::milliseconds failover_timeout{20000};
  // Makes the channel to a node's address ("host:port", a target or an
  // owner's --advertise_address). Null: MakeChannelFactory(client.connect)
  // (cgacct/channel.h: TLS, mTLS, a bearer token from files); set it for
  // channels of your own (interceptors, other credentials).
  ChannelFactory channel_factory;
};

// Counters of one ClusterClient (monotonic; read with stats()).
struct ClusterStats {
  uint64_t map_reads = 0;  // GetClusterMap answers read
  // Shards whose holdings were charged again at a new owner.
  uint64_t moves = 0;
  // Of those, the moves the watch thread made (before any of the
  // application's calls failed at the old owner).
  uint64_t watch_moves = 0;
  // Pages a new owner refused to take as a resume (the group is full or
  // gone): no longer the application's to uncharge.
  uint64_t recharge_failed_pages = 0;
  // The per-owner Clients' counters, summed.
  ClientStats clients;
};

class ClusterClient {
 public:
  // Reads the map from the first of `targets` ("host:port"; any node serves
  // it) that answers, trying until options.failover_timeout. Errors:
  // INVALID_ARGUMENT naming the option for bad options or an empty target;
  // UNAVAILABLE naming the targets when none answered GetClusterMap in
  // time. Opens no session yet: a node's Client is opened by the first call
  // routed to it.
  static Status Open(std::vector<std::string> targets, ClusterOptions options,
                     std::unique_ptr<ClusterClient>* client);

  // Close()s if not closed.
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  // Client::Charge() at the owner of `group`'s shard (see the file comment
  // for failovers). Errors: Client::Charge()'s; NOT_FOUND when no shard of
  // the map holds `group`; UNAVAILABLE / DEADLINE_EXCEEDED /
  // FAILED_PRECONDITION from routing once failover_timeout has passed.
  ChargeResult Charge(std::string_view group, uint64_t nr_pages,
                      PageKind kind = PageKind::kAnon);

  // Client::Uncharge() at the owner of `group`'s shard. Only the routing
  // is tried again: once the Client's Uncharge ran, its answer is the
  // caller's (the pages left the books before its RPC; on a failure the
  // node that held them no longer counts them, or its session holds them
  // until it ends), so a failover never uncharges them twice.
  Status Uncharge(std::string_view group, uint64_t nr_pages,
                  PageKind kind = PageKind::kAnon);

  // Closes every per-owner Client at once (their sessions return their
  // pages; a node that is gone is given up after its Client's attempts).
  // Further calls answer FAILED_PRECONDITION. Idempotent; returns the first
  // failure other than a gone node's.
  Status Close();

  // Groups, limits, statistics, events, reclaim (cgacct/groups.h) in the
  // cluster: a unary call goes to any node (one this client talks to
  // already first, the next on UNAVAILABLE or DEADLINE_EXCEEDED), which
  // forwards it to the owner of the group's shard; GetStats above the shard
  // roots sums the owners'. WatchEvents goes to the owner of the group's
  // shard in the last map read (after a failover the watch ends
  // UNAVAILABLE: watch again). FAILED_PRECONDITION after Close(). Lives as
  // long as the ClusterClient.
  Groups& groups();

  // The address this client sends `group` to now ("" when its shard has no
  // owner in the last map read, or no shard holds it).
  std::string owner(std::string_view group) const;
  // Pages of (group, kind) the application holds through this client.
  uint64_t held_pages(std::string_view group,
                      PageKind kind = PageKind::kAnon) const;
  ClusterStats stats() const;

 private:
  struct Impl;
  explicit ClusterClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgacct::client

#endif  // CGACCT_CLUSTER_CLIENT_H_
