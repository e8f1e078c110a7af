// ClusterNode: one cgacctd's part in a cluster (docs/DESIGN.md §4.18):
// the group tree kept in etcd and applied from one Watch in revision order,
// the node's etcd lease and the fence it derives, shard ownership won on
// that lease, and the map of who owns what.
//
// Keys, under --etcd_prefix P (default "/cgacct"):
//   P/config          ClusterConfig, written once (page size, shard depth)
//   P/g<path>         GroupRecord: a group; its create_revision is its
//                     generation (what request ids are scoped to)
//   P/n/<node>        NodeRecord, on the node's lease: a live node
//   P/o<shard root>   OwnerRecord, on the owner's lease: the shard's owner;
//                     its create_revision is the ownership's epoch
// Usage is never written to etcd: it is soft state at a shard's owner.
//
// Group changes are etcd Txns with compares (create: parent present, path
// absent; delete: present and no key below it; limits: the record's
// mod_revision unchanged since it was read), and are applied by every node,
// this one included, when its Watch delivers them: a caller is answered
// once the node has applied the change's revision (WaitApplied()).
//
// Ownership: a shard root is a group at depth --shard_depth. A node claims
// unowned shards with a create-if-absent Txn on its lease while it owns
// fewer than ceil(shards / live nodes), and gives back (deletes, fenced on
// the epoch) what it owns beyond that, so ownership spreads as nodes join.
// When a node dies its lease expires, etcd deletes its keys, and the
// others claim its shards.
//
// The fence: every keepalive's send time t (monotonic clock) and the TTL
// etcd answers make the fence deadline t + TTL - margin (margin: a tenth of
// the TTL, at least 500 ms). etcd cannot expire the lease before t + TTL,
// so a node that stops admitting at the deadline never admits for a shard
// another node may already own, whatever it believes about the election
// (a paused process, a lost link). Route() answers kLocal only before it.
//
// Thread safety: thread-safe. Three threads of its own (keepalive, watch,
// ownership); the applier is called from the watch thread only, with no
// lock of this class held.
#ifndef CGACCT_SERVER_CLUSTER_CLUSTER_NODE_H_
#define CGACCT_SERVER_CLUSTER_CLUSTER_NODE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cgacct/cluster/v1/records.pb.h"
#include "engine/clock.h"
#include "server/cluster/etcd_client.h"
#include "server/metrics/histogram.h"

namespace cgacct {

// What a node applies from the Watch (GroupOps implements it). Called on
// the watch thread, one change at a time, in revision order.
class ClusterTreeApplier {
 public:
  virtual ~ClusterTreeApplier() = default;
  // The group at `path` now has `record`; it was created at revision
  // `generation` (a generation the node has not seen for this path: a new
  // group, even where a group of that path was applied before).
  virtual void ApplyGroupPut(const std::string& path,
                             const cluster::v1::GroupRecord& record,
                             int64_t generation) = 0;
  // The group at `path` was deleted at `revision`.
  virtual void ApplyGroupDelete(const std::string& path, int64_t revision) = 0;
  // The groups applied so far (path -> generation): a resync after etcd
  // compacted past the node's revision deletes those etcd no longer has.
  virtual std::vector<std::pair<std::string, int64_t>> AppliedGroups() = 0;
  // This node may no longer admit for these shards (lost, given back,
  // fenced): their sessions end. Their usage stays in this node's engine
  // until they come back (see docs/DESIGN.md §4.18).
  virtual void OnShardsLost(const std::vector<std::string>& shard_roots) = 0;
  // Whether this node's engine counts pages under `shard_root` (its
  // memory.current once the per-CPU stock of the subtree is drained back).
  // Asked before a shard this node stops
  // admitting for is given back (OnShardsLost after): a shard that held
  // nothing has nothing to re-charge, so its next owner needs no takeover
  // grace. Drains the subtree's per-CPU stock first. Called on the ownership
  // thread or in Stop(), never with the node's lock held; thread-safe. A
  // group never applied here holds nothing (false).
  virtual bool ShardHoldsPages(const std::string& shard_root) = 0;
};

struct ClusterOptions {
  EtcdOptions etcd;
  // Every key of the cluster is under it (--etcd_prefix).
  std::string prefix = "/cgacct";
  // Unique in the cluster (--node_name).
  std::string node_name;
  // What clients and other nodes dial (--advertise_address).
  std::string advertise_address;
  // The node lease's TTL (--cluster_lease_ttl; at least 3 s).
  absl::Duration lease_ttl = absl::Seconds(5);
  // Shard roots are the groups at this depth (--shard_depth, >= 1).
  uint32_t shard_depth = 1;
  // After taking over a shard that had an owner before, only charges marked
  // `resume` are admitted there for this long (--cluster_takeover_grace;
  // zero: none); so, after its fence lifts, for a shard this node dropped
  // at the fence and owns again on the same lease. A shard's first owner
  // has no grace.
  absl::Duration takeover_grace = absl::Seconds(10);
  // Charges that name no session are refused FAILED_PRECONDITION
  // (--cluster_require_sessions; routing.h ChargeRouteStatus()).
  bool require_sessions = false;
  // The engine's page size: every node of a cluster must agree.
  uint64_t page_size_bytes = 4096;
  // Monotonic time of the fence; null = Clock::Real(). Not owned.
  const Clock* clock = nullptr;
};

// Where a call for a path goes.
struct ShardRoute {
  enum class Kind {
    kLocal,         // this node owns the shard and is within its fence
    kElsewhere,     // another node owns it: owner_* say which
    kNoOwner,       // nobody owns it now (a failover, or this node fenced)
    kAboveShards,   // the path is above the shard depth ("/" included)
    kNoSuchShard,   // no group is the path's shard root (as applied here)
  };
  Kind kind = Kind::kNoOwner;
  std::string shard_root;
  std::string owner_node;
  std::string owner_address;
  int64_t epoch = 0;  // the owner key's create_revision
  // kLocal: what is left of this node's takeover grace for the shard
  // (ClusterOptions::takeover_grace); zero when none.
  absl::Duration grace_remaining;
};

// GetClusterMap's content.
struct ClusterMapView {
  std::string node_name;
  std::string advertise_address;
  uint32_t shard_depth = 0;
  int64_t applied_revision = 0;
  bool has_lease = false;
  absl::Duration fence_remaining;  // zero when fenced
  struct Node {
    std::string name;
    std::string address;
  };
  std::vector<Node> nodes;  // sorted by name
  struct Shard {
    std::string root;
    std::string owner_node;     // empty: no owner now
    std::string owner_address;
    int64_t epoch = 0;
  };
  std::vector<Shard> shards;  // sorted by root
};

// Counters for metrics and GetEngineInfo (monotonic unless said).
struct ClusterCounters {
  uint64_t txns = 0;
  uint64_t txn_failures = 0;     // UNAVAILABLE from etcd
  uint64_t keepalives = 0;
  uint64_t keepalive_failures = 0;
  uint64_t leases_lost = 0;
  uint64_t shards_claimed = 0;
  uint64_t shards_given_back = 0;
  uint64_t shards_lost = 0;      // taken away (lease lost, fenced)
  uint64_t resyncs = 0;          // full re-reads after compaction
  uint64_t takeovers_with_grace = 0;  // claims of shards owned before, and
                                      // shards re-owned after the fence
  uint64_t grace_refusals = 0;   // fresh charges refused in a grace
  uint64_t shards_owned = 0;     // gauge (owned now, read by Counters())
  int64_t applied_revision = 0;  // gauge
  int64_t seen_revision = 0;     // gauge: etcd's revision last seen
};

class ClusterNode {
 public:
  // `applier` must outlive the node.
  ClusterNode(ClusterOptions options, ClusterTreeApplier* applier);
  ~ClusterNode();
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;

  // Connects, checks the cluster's config (FAILED_PRECONDITION naming the
  // page size or shard depth that differs), takes a lease, registers the
  // node (ALREADY_EXISTS: another live node has this name), reads the tree
  // and applies it, then starts the threads. Errors: UNAVAILABLE (etcd did
  // not answer within `deadline`).
  absl::Status Start(absl::Time deadline);
  // Stops the threads. With `resign`, first gives back every shard and
  // revokes the lease, so that other nodes take them over at once (a
  // planned stop) rather than after the TTL.
  void Stop(bool resign);

  // --- group changes (Txns); each answers the revision to wait for ---
  // Errors: NOT_FOUND the parent is missing; ALREADY_EXISTS; UNAVAILABLE
  // etcd (nothing committed, or unknown: the message says which).
  absl::StatusOr<int64_t> CommitCreate(const std::string& path,
                                       const cluster::v1::GroupRecord& record);
  // Errors: NOT_FOUND; FAILED_PRECONDITION the group has children;
  // UNAVAILABLE.
  absl::StatusOr<int64_t> CommitDelete(const std::string& path);
  // Reads the record, lets `update` change it, writes it fenced on the
  // record's mod_revision; retries a few times when another node changed it
  // meanwhile (then ABORTED). Errors: NOT_FOUND; ABORTED; UNAVAILABLE.
  absl::StatusOr<int64_t> CommitLimits(
      const std::string& path,
      absl::FunctionRef<void(cluster::v1::GroupRecord*)> update);
  // Waits until the Watch applied `revision`. DEADLINE_EXCEEDED past
  // `deadline` (the change is committed and will be applied).
  absl::Status WaitApplied(int64_t revision, absl::Time deadline) const;

  // A linearizable read point: asks etcd its current revision (a count-only
  // Range, no data) and waits until this node applied it, so what it reads
  // next includes every change committed before the call. Errors:
  // UNAVAILABLE (etcd), DEADLINE_EXCEEDED.
  absl::Status SyncRead(absl::Time deadline);

  // --- routing ---
  // The shard root `path` belongs to ("" when above the shard depth).
  std::string ShardRootOf(absl::string_view path) const;
  ShardRoute Route(absl::string_view path) const;
  ClusterMapView Map() const;
  ClusterCounters Counters() const;
  // Latency of every etcd Txn this node sent (answered or not), and of its
  // answered lease keepalives (request written to answer read).
  LatencyHistogram::Snapshot TxnLatency() const;
  LatencyHistogram::Snapshot KeepaliveLatency() const;
  // Whether the node holds a live lease (health: NOT_SERVING without one).
  bool HasLease() const;
  // Counts a fresh charge refused in a takeover grace (routing.cc).
  void NoteGraceRefusal() const {
    grace_refusals_.fetch_add(1, std::memory_order_relaxed);
  }
  const ClusterOptions& options() const { return options_; }

 private:
  std::string GroupKey(absl::string_view path) const;
  std::string NodeKey(absl::string_view name) const;
  std::string OwnerKey(absl::string_view shard_root) const;
  // Written (no lease) by every claim of the shard, deleted with its group:
  // a claim that finds it takes over from an earlier owner.
  std::string ClaimKey(absl::string_view shard_root) const;
  int64_t NowNs() const;

  // etcd_.Txn(), counted (cgacct_cluster_etcd_txns_total) and timed
  // (cgacct_cluster_etcd_txn_seconds): every Txn the node sends.
  absl::StatusOr<etcdserverpb::TxnResponse> CountedTxn(
      const etcdserverpb::TxnRequest& txn) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckConfig();
  absl::Status GrantAndRegister();
  // Reads every key under the prefix and applies it (start, resync).
  absl::StatusOr<int64_t> LoadAll();
  void ApplyKv(const std::string& key, const std::string& value,
               int64_t create_revision, int64_t lease, bool deleted,
               int64_t revision, std::vector<std::string>* lost);

  void KeepAliveLoop();
  void WatchLoop();
  void OwnershipLoop();
  // Called after the lease is gone or fenced: every owned shard lost.
  // Nanoseconds left at `now` (monotonic ns) of this node's takeover grace
  // for shard `root`; 0 when none runs. One lookup (Route() is on every
  // charge's path).
  int64_t GraceLeftNsLocked(const std::string& root, int64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Says on stderr which shards this node no longer admits for and why
  // (LogLine: operators read takeovers, fences and rebalances there), then
  // hands them to the applier. Called without mu_.
  void ShardsLost(absl::string_view why, const std::vector<std::string>& roots)
      ABSL_LOCKS_EXCLUDED(mu_);
  void DropOwnedLocked(std::vector<std::string>* lost)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Balance();
  bool Stopping() const;

  const ClusterOptions options_;
  const Clock& clock_;
  ClusterTreeApplier* const applier_;
  EtcdClient etcd_;

  mutable absl::Mutex mu_;
  // The lease and the fence.
  int64_t lease_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fence_deadline_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // What the watch applied, and the maps it keeps.
  int64_t applied_revision_ ABSL_GUARDED_BY(mu_) = 0;
  struct Owner {
    std::string node;
    std::string address;
    int64_t epoch = 0;
    int64_t lease = 0;
  };
  std::map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> nodes_ ABSL_GUARDED_BY(mu_);  // name -> address
  absl::flat_hash_set<std::string> shards_ ABSL_GUARDED_BY(mu_);
  // Shards this node owns and may admit for (shard -> epoch).
  absl::flat_hash_map<std::string, int64_t> owned_ ABSL_GUARDED_BY(mu_);
  // Shards Balance() gave back whose owner key, on this node's lease, the
  // watch has not shown deleted yet: not owned "again" meanwhile
  // (OwnershipLoop), which took a shard back with a grace 11 ms after
  // giving it away. Out when the key is gone or is not this lease's, or the
  // delete Txn failed.
  absl::flat_hash_set<std::string> giving_back_ ABSL_GUARDED_BY(mu_);
  // Monotonic end of the takeover grace of shards this node claimed from an
  // earlier owner (entries stay once past; the next claim overwrites).
  absl::flat_hash_map<std::string, int64_t> grace_until_ns_
      ABSL_GUARDED_BY(mu_);
  // Relaxed: a counter for metrics.
  mutable std::atomic<uint64_t> grace_refusals_{0};
  ClusterCounters counters_ ABSL_GUARDED_BY(mu_);
  // Round trips of etcd Txns (from send to answer, failures included) and
  // of answered lease keepalives; thread-safe themselves (sharded atomics).
  LatencyHistogram txn_latency_;
  LatencyHistogram keepalive_latency_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_balance_ ABSL_GUARDED_BY(mu_) = false;
  // Serialises the applier's calls (the watch thread, and a resync).
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  // The watch stream's context, cancelled by Stop() (guarded by mu_).
  std::shared_ptr<grpc::ClientContext> watch_context_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::ClientContext> keepalive_context_ ABSL_GUARDED_BY(mu_);

  std::thread keepalive_thread_;
  std::thread watch_thread_;
  std::thread ownership_thread_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_CLUSTER_CLUSTER_NODE_H_
