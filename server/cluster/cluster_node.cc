// ClusterNode (server/cluster/cluster_node.h).
#include "server/cluster/cluster_node.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "engine/group_path.h"
#include "server/common/log_line.h"

namespace cgacct {
namespace {

using etcdserverpb::Compare;
using etcdserverpb::RangeRequest;
using etcdserverpb::TxnRequest;
using etcdserverpb::TxnResponse;

// Depth of a valid group path: "/" 0, "/a" 1, "/a/b" 2.
uint32_t Depth(absl::string_view path) {
  if (path == "/") return 0;
  return static_cast<uint32_t>(std::count(path.begin(), path.end(), '/'));
}

Compare* AddCompare(TxnRequest* txn, const std::string& key,
                    Compare::CompareTarget target,
                    Compare::CompareResult result) {
  Compare* c = txn->add_compare();
  c->set_key(key);
  c->set_target(target);
  c->set_result(result);
  return c;
}

void AddPut(TxnRequest* txn, const std::string& key, const std::string& value,
            int64_t lease) {
  etcdserverpb::PutRequest* put = txn->add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
}

void AddFailureRange(TxnRequest* txn, const std::string& key) {
  RangeRequest* r = txn->add_failure()->mutable_request_range();
  r->set_key(key);
}

// The failure branch's first range found a key.
bool FailureFound(const TxnResponse& response, int index) {
  if (response.responses_size() <= index) return false;
  return response.responses(index).response_range().kvs_size() > 0;
}

constexpr absl::Duration kLoopInterval = absl::Milliseconds(200);

}  // namespace

ClusterNode::ClusterNode(ClusterOptions options, ClusterTreeApplier* applier)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : Clock::Real()),
      applier_(applier),
      etcd_(options_.etcd) {}

// A node that goes away without Stop() (a failed start) gives back what it
// holds rather than leave it to the TTL.
ClusterNode::~ClusterNode() { Stop(/*resign=*/true); }

int64_t ClusterNode::NowNs() const { return clock_.NowNs(); }

std::string ClusterNode::GroupKey(absl::string_view path) const {
  return absl::StrCat(options_.prefix, "/g", path);
}

std::string ClusterNode::NodeKey(absl::string_view name) const {
  return absl::StrCat(options_.prefix, "/n/", name);
}

std::string ClusterNode::OwnerKey(absl::string_view shard_root) const {
  return absl::StrCat(options_.prefix, "/o", shard_root);
}

std::string ClusterNode::ClaimKey(absl::string_view shard_root) const {
  return absl::StrCat(options_.prefix, "/c", shard_root);
}

bool ClusterNode::Stopping() const {
  absl::MutexLock l(&mu_);
  return stopping_;
}

std::string ClusterNode::ShardRootOf(absl::string_view path) const {
  if (Depth(path) < options_.shard_depth) return "";
  // The first shard_depth components.
  size_t end = 0;
  for (uint32_t i = 0; i < options_.shard_depth; ++i) {
    end = path.find('/', end + 1);
    if (end == absl::string_view::npos) return std::string(path);
  }
  return std::string(path.substr(0, end));
}

absl::Status ClusterNode::CheckConfig() {
  cluster::v1::ClusterConfig config;
  config.set_page_size_bytes(options_.page_size_bytes);
  config.set_shard_depth(options_.shard_depth);
  const std::string key = options_.prefix + "/config";
  TxnRequest txn;
  AddCompare(&txn, key, Compare::CREATE, Compare::EQUAL)->set_create_revision(0);
  AddPut(&txn, key, config.SerializeAsString(), 0);
  AddFailureRange(&txn, key);
  absl::StatusOr<TxnResponse> r = CountedTxn(txn);
  if (!r.ok()) return r.status();
  if (r->succeeded()) return absl::OkStatus();
  cluster::v1::ClusterConfig stored;
  if (r->responses_size() < 1 ||
      r->responses(0).response_range().kvs_size() < 1 ||
      !stored.ParseFromString(r->responses(0).response_range().kvs(0).value()))
    return absl::DataLossError(absl::StrCat("etcd key ", key,
                                            " does not hold a cluster config"));
  if (stored.page_size_bytes() != options_.page_size_bytes)
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster under --etcd_prefix=", options_.prefix, " uses pages of ",
        stored.page_size_bytes(), " bytes; this node's --page_size is ",
        options_.page_size_bytes));
  if (stored.shard_depth() != options_.shard_depth)
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster under --etcd_prefix=", options_.prefix,
        " has --shard_depth=", stored.shard_depth(), "; this node has ",
        options_.shard_depth));
  return absl::OkStatus();
}

absl::Status ClusterNode::GrantAndRegister() {
  const int64_t sent_ns = NowNs();
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> lease =
      etcd_.LeaseGrant(options_.lease_ttl);
  if (!lease.ok()) return lease.status();
  cluster::v1::NodeRecord record;
  record.set_name(options_.node_name);
  record.set_address(options_.advertise_address);
  const std::string key = NodeKey(options_.node_name);
  TxnRequest txn;
  AddCompare(&txn, key, Compare::CREATE, Compare::EQUAL)->set_create_revision(0);
  AddPut(&txn, key, record.SerializeAsString(), lease->id());
  absl::StatusOr<TxnResponse> r = CountedTxn(txn);
  if (!r.ok() || !r->succeeded()) {
    (void)etcd_.LeaseRevoke(lease->id());
    if (!r.ok()) return r.status();
    return absl::AlreadyExistsError(absl::StrCat(
        "--node_name=", options_.node_name,
        " is registered by a live node (another cgacctd with this name, or "
        "this one's previous run, whose lease expires within "
        "--cluster_lease_ttl)"));
  }
  absl::MutexLock l(&mu_);
  lease_id_ = lease->id();
  const absl::Duration margin =
      std::max(options_.lease_ttl / 10, absl::Milliseconds(500));
  fence_deadline_ns_ =
      sent_ns + absl::ToInt64Nanoseconds(absl::Seconds(lease->ttl()) - margin);
  return absl::OkStatus();
}

void ClusterNode::ApplyKv(const std::string& key, const std::string& value,
                          int64_t create_revision, int64_t lease,
                          bool deleted, int64_t revision,
                          std::vector<std::string>* lost) {
  const std::string groups = options_.prefix + "/g";
  const std::string nodes = options_.prefix + "/n/";
  const std::string owners = options_.prefix + "/o";
  if (absl::string_view(key).substr(0, groups.size()) == groups) {
    const std::string path = key.substr(groups.size());
    if (deleted) {
      applier_->ApplyGroupDelete(path, revision);
    } else {
      cluster::v1::GroupRecord record;
      if (!record.ParseFromString(value)) return;  // not ours: ignored
      applier_->ApplyGroupPut(path, record, create_revision);
    }
    if (Depth(path) == options_.shard_depth) {
      absl::MutexLock l(&mu_);
      if (deleted) {
        shards_.erase(path);
      } else {
        shards_.insert(path);
      }
      wake_balance_ = true;
    }
    return;
  }
  absl::MutexLock l(&mu_);
  wake_balance_ = true;
  if (absl::string_view(key).substr(0, nodes.size()) == nodes) {
    const std::string name = key.substr(nodes.size());
    if (deleted) {
      nodes_.erase(name);
      return;
    }
    cluster::v1::NodeRecord record;
    if (record.ParseFromString(value)) nodes_[name] = record.address();
    return;
  }
  if (absl::string_view(key).substr(0, owners.size()) == owners) {
    const std::string root = key.substr(owners.size());
    if (deleted) {
      owners_.erase(root);
      if (owned_.erase(root) > 0) {
        lost->push_back(root);
        ++counters_.shards_lost;
      }
      return;
    }
    cluster::v1::OwnerRecord record;
    if (!record.ParseFromString(value)) return;
    Owner& owner = owners_[root];
    owner.node = record.node();
    owner.address = record.address();
    owner.epoch = create_revision;
    owner.lease = lease;
    if (owner.node == options_.node_name && lease == lease_id_ &&
        lease_id_ != 0) {
      owned_[root] = create_revision;
    } else if (owned_.erase(root) > 0) {
      lost->push_back(root);
      ++counters_.shards_lost;
    }
  }
}

absl::StatusOr<int64_t> ClusterNode::LoadAll() {
  RangeRequest range;
  range.set_key(options_.prefix + "/");
  range.set_range_end(PrefixRangeEnd(options_.prefix + "/"));
  absl::StatusOr<etcdserverpb::RangeResponse> r = etcd_.Range(range);
  if (!r.ok()) return r.status();
  const int64_t revision = r->header().revision();
  std::vector<std::string> lost;
  absl::MutexLock apply(&apply_mu_);
  // Groups the node applied that etcd no longer has: deleted, children
  // first (a path sorts after its ancestors).
  absl::flat_hash_map<std::string, int64_t> present;
  const std::string groups = options_.prefix + "/g";
  for (const auto& kv : r->kvs()) {
    if (absl::string_view(kv.key()).substr(0, groups.size()) == groups)
      present[kv.key().substr(groups.size())] = kv.create_revision();
  }
  std::vector<std::pair<std::string, int64_t>> applied =
      applier_->AppliedGroups();
  std::sort(applied.begin(), applied.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [path, generation] : applied) {
    auto it = present.find(path);
    if (it == present.end() || it->second != generation)
      applier_->ApplyGroupDelete(path, revision);
  }
  {
    absl::MutexLock l(&mu_);
    nodes_.clear();
    owners_.clear();
    shards_.clear();
    for (const auto& [root, epoch] : owned_) lost.push_back(root);
    counters_.shards_lost += owned_.size();
    owned_.clear();
  }
  // Keys come sorted: a parent's before its children's.
  for (const auto& kv : r->kvs())
    ApplyKv(kv.key(), kv.value(), kv.create_revision(), kv.lease(),
            /*deleted=*/false, revision, &lost);
  {
    absl::MutexLock l(&mu_);
    applied_revision_ = std::max(applied_revision_, revision);
    counters_.applied_revision = applied_revision_;
    counters_.seen_revision = std::max(counters_.seen_revision, revision);
  }
  // Owned shards found again in the map are owned again (ApplyKv): only
  // those that are not are lost.
  std::vector<std::string> really_lost;
  {
    absl::MutexLock l(&mu_);
    for (const std::string& root : lost)
      if (!owned_.contains(root)) really_lost.push_back(root);
  }
  if (!really_lost.empty())
    ShardsLost("not this node's in etcd after a resync", really_lost);
  return revision;
}

absl::Status ClusterNode::Start(absl::Time deadline) {
  absl::Status s;
  // etcd may still be starting: retry until the deadline.
  while (true) {
    s = CheckConfig();
    if (s.ok() || !absl::IsUnavailable(s) || absl::Now() > deadline) break;
    absl::SleepFor(kLoopInterval);
  }
  if (!s.ok()) return s;
  // A node restarted at once finds its previous run's key until that lease
  // expires: wait for it, up to a TTL and a bit.
  const absl::Time registered_by =
      std::min(deadline, absl::Now() + options_.lease_ttl + absl::Seconds(2));
  while (true) {
    s = GrantAndRegister();
    if (s.ok()) break;
    if (absl::IsAlreadyExists(s) ? absl::Now() > registered_by
                                 : (!absl::IsUnavailable(s) ||
                                    absl::Now() > deadline))
      return s;
    absl::SleepFor(kLoopInterval);
  }
  absl::StatusOr<int64_t> loaded = LoadAll();
  while (!loaded.ok() && absl::IsUnavailable(loaded.status()) &&
         absl::Now() < deadline) {
    absl::SleepFor(kLoopInterval);
    loaded = LoadAll();
  }
  if (!loaded.ok()) return loaded.status();
  keepalive_thread_ = std::thread([this] { KeepAliveLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
  ownership_thread_ = std::thread([this] { OwnershipLoop(); });
  return absl::OkStatus();
}

void ClusterNode::Stop(bool resign) {
  std::vector<std::string> lost;
  absl::flat_hash_set<std::string> in_grace;
  int64_t lease = 0;
  {
    absl::MutexLock l(&mu_);
    if (stopping_ && !keepalive_thread_.joinable()) return;
    stopping_ = true;
    if (resign) {
      // Stop admitting first, then let etcd delete the keys.
      const int64_t now = NowNs();
      for (const auto& [root, epoch] : owned_) {
        lost.push_back(root);
        if (GraceLeftNsLocked(root, now) > 0) in_grace.insert(root);
      }
      counters_.shards_given_back += owned_.size();
      owned_.clear();
      lease = lease_id_;
      lease_id_ = 0;
      fence_deadline_ns_ = 0;
    }
    if (watch_context_ != nullptr) watch_context_->TryCancel();
    if (keepalive_context_ != nullptr) keepalive_context_->TryCancel();
  }
  if (!lost.empty()) {
    // Shards that held nothing have nothing to re-charge: their claim marks
    // go first, so that their next owners start without a grace.
    // (etcd takes at most 128 operations per Txn by default.)
    std::vector<TxnRequest> empty(1);
    for (const std::string& root : lost) {
      // (In its own grace a node holds nothing yet: the mark stays.)
      if (in_grace.contains(root) || applier_->ShardHoldsPages(root)) continue;
      if (empty.back().success_size() == 100) empty.emplace_back();
      empty.back().add_success()->mutable_request_delete_range()->set_key(
          ClaimKey(root));
    }
    ShardsLost("given back at shutdown (the lease is revoked)", lost);
    for (const TxnRequest& txn : empty) {
      if (lease != 0 && txn.success_size() > 0) (void)CountedTxn(txn);
    }
  }
  // Revoking the lease deletes the node's key and its owner keys at once:
  // the other nodes claim the shards without waiting for the TTL.
  if (lease != 0) (void)etcd_.LeaseRevoke(lease);
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (ownership_thread_.joinable()) ownership_thread_.join();
}

void ClusterNode::KeepAliveLoop() {
  while (!Stopping()) {
    int64_t lease;
    {
      absl::MutexLock l(&mu_);
      lease = lease_id_;
    }
    if (lease == 0) {
      // The lease expired: a new one, and the node registered again.
      if (!GrantAndRegister().ok()) {
        absl::MutexLock l(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), kLoopInterval);
      }
      continue;
    }
    const int64_t sent_ns = NowNs();
    auto context = std::make_shared<grpc::ClientContext>();
    const absl::Duration period = options_.lease_ttl / 3;
    context->set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoMilliseconds(
                              std::min(period, absl::Seconds(1))));
    {
      absl::MutexLock l(&mu_);
      if (stopping_) break;
      keepalive_context_ = context;
    }
    std::shared_ptr<etcdserverpb::Lease::Stub> stub = etcd_.LeaseStub();
    auto stream = stub->LeaseKeepAlive(context.get());
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    etcdserverpb::LeaseKeepAliveResponse response;
    const int64_t written_ns = NowNs();
    const bool answered = stream->Write(request) && stream->Read(&response);
    if (answered) {
      keepalive_latency_.RecordNanos(
          static_cast<uint64_t>(NowNs() - written_ns));
    }
    stream->WritesDone();
    (void)stream->Finish();
    std::vector<std::string> lost;
    absl::Duration wait = kLoopInterval;
    {
      absl::MutexLock l(&mu_);
      keepalive_context_ = nullptr;
      if (!answered) {
        ++counters_.keepalive_failures;
      } else if (response.ttl() <= 0) {
        // etcd says the lease is gone: so are the node's keys.
        ++counters_.leases_lost;
        if (lease_id_ == lease) {
          lease_id_ = 0;
          fence_deadline_ns_ = 0;
          DropOwnedLocked(&lost);
        }
        wait = absl::ZeroDuration();
      } else {
        ++counters_.keepalives;
        const absl::Duration margin =
            std::max(options_.lease_ttl / 10, absl::Milliseconds(500));
        if (lease_id_ == lease)
          fence_deadline_ns_ = std::max(
              fence_deadline_ns_,
              sent_ns + absl::ToInt64Nanoseconds(
                            absl::Seconds(response.ttl()) - margin));
        wait = period - absl::Nanoseconds(NowNs() - sent_ns);
      }
    }
    if (!answered) etcd_.NextEndpoint();
    if (!lost.empty()) ShardsLost("etcd says its lease is gone", lost);
    if (wait > absl::ZeroDuration()) {
      absl::MutexLock l(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
    }
  }
}

void ClusterNode::ShardsLost(absl::string_view why,
                             const std::vector<std::string>& roots) {
  LogLine(absl::StrCat("cluster: no longer admits for ",
                       absl::StrJoin(roots, ", "), ": ", why,
                       "; their sessions end (their holders charge again at "
                       "the next owner)"));
  applier_->OnShardsLost(roots);
}

void ClusterNode::DropOwnedLocked(std::vector<std::string>* lost) {
  for (const auto& [root, epoch] : owned_) lost->push_back(root);
  counters_.shards_lost += owned_.size();
  owned_.clear();
}

void ClusterNode::WatchLoop() {
  while (!Stopping()) {
    int64_t start;
    auto context = std::make_shared<grpc::ClientContext>();
    {
      absl::MutexLock l(&mu_);
      if (stopping_) break;
      start = applied_revision_ + 1;
      watch_context_ = context;
    }
    std::shared_ptr<etcdserverpb::Watch::Stub> stub = etcd_.WatchStub();
    auto stream = stub->Watch(context.get());
    etcdserverpb::WatchRequest request;
    etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key(options_.prefix + "/");
    create->set_range_end(PrefixRangeEnd(options_.prefix + "/"));
    create->set_start_revision(start);
    create->set_progress_notify(true);
    bool compacted = false;
    if (stream->Write(request)) {
      etcdserverpb::WatchResponse response;
      while (stream->Read(&response)) {
        if (response.compact_revision() > 0) {
          compacted = true;
          break;
        }
        if (response.canceled()) break;
        std::vector<std::string> lost;
        int64_t last = 0;
        {
          absl::MutexLock apply(&apply_mu_);
          for (const auto& event : response.events()) {
            const auto& kv = event.kv();
            ApplyKv(kv.key(), kv.value(), kv.create_revision(), kv.lease(),
                    event.type() == mvccpb::Event::DELETE, kv.mod_revision(),
                    &lost);
            last = std::max(last, kv.mod_revision());
          }
        }
        {
          absl::MutexLock l(&mu_);
          // An event-less response (created, progress) is sent to a watcher
          // that has caught up: everything up to its revision was seen. One
          // with events may be part of a catch-up: only its events count.
          const int64_t seen =
              response.events_size() == 0 ? response.header().revision() : last;
          applied_revision_ = std::max(applied_revision_, seen);
          counters_.applied_revision = applied_revision_;
          counters_.seen_revision =
              std::max(counters_.seen_revision, response.header().revision());
        }
        if (!lost.empty())
          ShardsLost("another node owns them in etcd now", lost);
      }
    }
    context->TryCancel();
    (void)stream->Finish();
    {
      absl::MutexLock l(&mu_);
      watch_context_ = nullptr;
      if (stopping_) break;
    }
    if (compacted) {
      {
        absl::MutexLock l(&mu_);
        ++counters_.resyncs;
      }
      if (LoadAll().ok()) continue;
    }
    etcd_.NextEndpoint();
    absl::MutexLock l(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), kLoopInterval);
  }
}

void ClusterNode::OwnershipLoop() {
  while (true) {
    std::vector<std::string> lost;
    bool balance = false;
    {
      absl::MutexLock l(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || wake_balance_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&woken), kLoopInterval);
      if (stopping_) break;
      wake_balance_ = false;
      const bool fenced = NowNs() >= fence_deadline_ns_;
      if (fenced) {
        // Past the fence: nothing is admitted (Route()); the sessions end.
        DropOwnedLocked(&lost);
      } else if (lease_id_ != 0) {
        // Keys still on this node's lease are its shards again once the
        // fence is renewed (no other node could take them meanwhile). One
        // dropped at the fence had its sessions ended and its pages
        // uncharged: its holders re-charge them here (resume, refused
        // while fenced and kept by the libraries) before fresh charges are
        // admitted, as after a takeover. Without the grace, an etcd leader
        // change or a quorum lost past the fence let the fresh charges of
        // some holders fill the group while others' pages waited:
        // 1.26-1.30x memory.max (ClusterTest's etcd faults).
        const int64_t now = NowNs();
        for (auto it = giving_back_.begin(); it != giving_back_.end();) {
          auto owner = owners_.find(*it);
          if (owner == owners_.end() ||
              owner->second.node != options_.node_name ||
              owner->second.lease != lease_id_) {
            giving_back_.erase(it++);
          } else {
            ++it;
          }
        }
        for (const auto& [root, owner] : owners_) {
          if (owner.node != options_.node_name || owner.lease != lease_id_)
            continue;
          if (giving_back_.contains(root)) continue;  // its delete under way
          if (!owned_.emplace(root, owner.epoch).second) continue;
          LogLine(absl::StrCat("cluster: owns ", root,
                               " again, its fence renewed on the same lease",
                               options_.takeover_grace > absl::ZeroDuration()
                                   ? absl::StrCat(
                                         ": only resumed charges for ",
                                         absl::FormatDuration(
                                             options_.takeover_grace))
                                   : ""));
          if (options_.takeover_grace > absl::ZeroDuration()) {
            grace_until_ns_[root] =
                now + absl::ToInt64Nanoseconds(options_.takeover_grace);
            ++counters_.takeovers_with_grace;
          }
        }
        balance = true;
      }
    }
    if (!lost.empty()) {
      ShardsLost(
          "past its fence (no keepalive answered in time): nothing admitted "
          "until one is",
          lost);
    }
    if (balance) Balance();
  }
}

void ClusterNode::Balance() {
  // A snapshot of the map: the Txns decide, the watch brings the outcome.
  std::vector<std::string> shards;
  std::vector<std::pair<std::string, int64_t>> mine;
  absl::flat_hash_map<std::string, size_t> per_node;
  size_t live_nodes;
  int64_t lease;
  {
    absl::MutexLock l(&mu_);
    lease = lease_id_;
    if (lease == 0) return;
    for (const auto& [name, address] : nodes_) per_node[name] = 0;
    per_node[options_.node_name];  // this node, even before its key is seen
    live_nodes = per_node.size();
    for (const std::string& root : shards_) {
      auto it = owners_.find(root);
      if (it == owners_.end()) {
        shards.push_back(root);
      } else if (per_node.contains(it->second.node)) {
        ++per_node[it->second.node];
      }
    }
    for (const auto& [root, epoch] : owned_) mine.emplace_back(root, epoch);
    per_node[options_.node_name] = owned_.size();
  }
  const size_t total = shards.size() + [&] {
    size_t n = 0;
    for (const auto& [name, count] : per_node) n += count;
    return n;
  }();
  const size_t floor = total / live_nodes;
  const size_t ceil = (total + live_nodes - 1) / live_nodes;
  bool someone_below_floor = false;
  // Shards the nodes below the floor lack, in all.
  size_t deficit = 0;
  for (const auto& [name, count] : per_node) {
    if (name == options_.node_name || count >= floor) continue;
    someone_below_floor = true;
    deficit += floor - count;
  }
  // Whether they need one of this node's shards: not while shards without
  // an owner (one given back a moment ago, a dead node's) cover what they
  // lack; they claim those. Without this, a node gave back another shard
  // every round until the one below the floor had claimed the first, then
  // claimed the extras back itself: each move a second grace, and the
  // sessionless pages of a shard that never needed to move were lost (a
  // fresh user's rejoin: /b given back and taken again in 11 ms, /d moved
  // between two nodes that were both at their share).
  // Which nodes give: those above the floor, the most loaded first (then
  // by name), as many as the deficit less the shards without an owner:
  // every node computes the same from the same map, so two nodes at the
  // ceiling do not both give one when a joining node lacks one.
  std::vector<std::pair<size_t, std::string>> donors;
  for (const auto& [name, count] : per_node)
    if (count > floor) donors.emplace_back(count, name);
  std::sort(donors.begin(), donors.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  const size_t needed = deficit > shards.size() ? deficit - shards.size() : 0;
  bool needs_mine = false;
  for (size_t i = 0; i < donors.size() && i < needed; ++i)
    needs_mine |= donors[i].second == options_.node_name;
  size_t owned = mine.size();
  // Each node prefers its own order of the shards, so that nodes claiming
  // at once mostly try different ones.
  auto rank = [this](const std::string& root) {
    return absl::HashOf(root, options_.node_name);
  };
  std::sort(shards.begin(), shards.end(),
            [&](const std::string& a, const std::string& b) {
              return rank(a) < rank(b);
            });
  for (const std::string& root : shards) {
    const size_t limit = someone_below_floor ? floor : ceil;
    if (owned >= limit) break;
    cluster::v1::OwnerRecord record;
    record.set_node(options_.node_name);
    record.set_address(options_.advertise_address);
    TxnRequest txn;
    AddCompare(&txn, OwnerKey(root), Compare::CREATE, Compare::EQUAL)
        ->set_create_revision(0);
    AddCompare(&txn, GroupKey(root), Compare::CREATE, Compare::GREATER)
        ->set_create_revision(0);
    // Whether the shard had an owner before (read before the put below:
    // a Txn's operations run in order), then this claim's mark.
    RangeRequest* earlier = txn.add_success()->mutable_request_range();
    earlier->set_key(ClaimKey(root));
    earlier->set_count_only(true);
    AddPut(&txn, OwnerKey(root), record.SerializeAsString(), lease);
    AddPut(&txn, ClaimKey(root), options_.node_name, 0);
    absl::StatusOr<TxnResponse> r = CountedTxn(txn);
    if (!r.ok()) return;
    if (!r->succeeded()) continue;
    const bool taken_over =
        r->responses_size() > 0 && r->responses(0).response_range().count() > 0;
    absl::MutexLock l(&mu_);
    const int64_t now = NowNs();
    if (lease_id_ == lease && now < fence_deadline_ns_) {
      owned_[root] = r->header().revision();
      ++counters_.shards_claimed;
      ++owned;
      if (taken_over && options_.takeover_grace > absl::ZeroDuration()) {
        // Its pages went with the earlier owner: their holders re-charge
        // them here (resume) before fresh charges are admitted.
        grace_until_ns_[root] =
            now + absl::ToInt64Nanoseconds(options_.takeover_grace);
        ++counters_.takeovers_with_grace;
        LogLine(absl::StrCat("cluster: owns ", root, " (epoch ",
                             r->header().revision(),
                             "), taken over from another node: only resumed "
                             "charges for --cluster_takeover_grace (",
                             absl::FormatDuration(options_.takeover_grace),
                             ")"));
      } else {
        grace_until_ns_.erase(root);
        LogLine(absl::StrCat("cluster: owns ", root, " (epoch ",
                             r->header().revision(), ")"));
      }
    }
  }
  // Give back beyond the fair share: above ceil, or above floor while
  // another node is below floor and no shard without an owner covers it (it
  // claims what this one gives back).
  std::sort(mine.begin(), mine.end(), [&](const auto& a, const auto& b) {
    return rank(a.first) > rank(b.first);
  });
  for (const auto& [root, epoch] : mine) {
    if (!(owned > ceil || (owned > floor && needs_mine))) break;
    bool in_grace;
    {
      // Stop admitting before the key goes.
      absl::MutexLock l(&mu_);
      if (owned_.erase(root) == 0) continue;
      giving_back_.insert(root);
      ++counters_.shards_given_back;
      in_grace = GraceLeftNsLocked(root, NowNs()) > 0;
    }
    // In its own grace the node holds nothing because the holders have not
    // re-charged yet: the mark stays (the next owner has a grace too).
    const bool held = in_grace || applier_->ShardHoldsPages(root);
    ShardsLost("given back to balance the nodes", {root});
    TxnRequest txn;
    AddCompare(&txn, OwnerKey(root), Compare::CREATE, Compare::EQUAL)
        ->set_create_revision(epoch);
    txn.add_success()->mutable_request_delete_range()->set_key(OwnerKey(root));
    // Nothing to re-charge: the next owner starts without a grace.
    if (!held)
      txn.add_success()->mutable_request_delete_range()->set_key(ClaimKey(root));
    absl::StatusOr<TxnResponse> done = CountedTxn(txn);
    if (!done.ok() || !done->succeeded()) {
      // The key stays: the loop may own the shard again (as before).
      absl::MutexLock l(&mu_);
      giving_back_.erase(root);
    }
    --owned;
    // For a node below the floor: one at a time (the map changes; the next
    // round counts the shard given back as without an owner).
    needs_mine = false;
  }
}

absl::StatusOr<TxnResponse> ClusterNode::CountedTxn(const TxnRequest& txn) {
  const int64_t start_ns = NowNs();
  absl::StatusOr<TxnResponse> r = etcd_.Txn(txn);
  txn_latency_.RecordNanos(static_cast<uint64_t>(NowNs() - start_ns));
  absl::MutexLock l(&mu_);
  ++counters_.txns;
  if (!r.ok()) ++counters_.txn_failures;
  return r;
}

absl::StatusOr<int64_t> ClusterNode::CommitCreate(
    const std::string& path, const cluster::v1::GroupRecord& record) {
  const std::string parent(ParentPath(path));
  TxnRequest txn;
  AddCompare(&txn, GroupKey(path), Compare::CREATE, Compare::EQUAL)
      ->set_create_revision(0);
  if (parent != "/")
    AddCompare(&txn, GroupKey(parent), Compare::CREATE, Compare::GREATER)
        ->set_create_revision(0);
  AddPut(&txn, GroupKey(path), record.SerializeAsString(), 0);
  AddFailureRange(&txn, GroupKey(path));
  absl::StatusOr<TxnResponse> r = CountedTxn(txn);
  if (!r.ok()) return r.status();
  if (r->succeeded()) return r->header().revision();
  if (FailureFound(*r, 0))
    return absl::AlreadyExistsError(
        absl::StrCat("path ", QuotePath(path), " already exists"));
  return absl::NotFoundError(absl::StrCat("path ", QuotePath(path),
                                          ": parent \"", parent,
                                          "\" does not exist"));
}

absl::StatusOr<int64_t> ClusterNode::CommitDelete(const std::string& path) {
  const std::string key = GroupKey(path);
  TxnRequest txn;
  AddCompare(&txn, key, Compare::CREATE, Compare::GREATER)
      ->set_create_revision(0);
  // No key below it: every key in the range has create_revision 0, which
  // holds only when there is none.
  Compare* children =
      AddCompare(&txn, key + "/", Compare::CREATE, Compare::EQUAL);
  children->set_create_revision(0);
  children->set_range_end(PrefixRangeEnd(key + "/"));
  txn.add_success()->mutable_request_delete_range()->set_key(key);
  if (Depth(path) == options_.shard_depth) {
    txn.add_success()->mutable_request_delete_range()->set_key(OwnerKey(path));
    txn.add_success()->mutable_request_delete_range()->set_key(ClaimKey(path));
  }
  AddFailureRange(&txn, key);
  RangeRequest* count =
      txn.add_failure()->mutable_request_range();
  count->set_key(key + "/");
  count->set_range_end(PrefixRangeEnd(key + "/"));
  count->set_count_only(true);
  absl::StatusOr<TxnResponse> r = CountedTxn(txn);
  if (!r.ok()) return r.status();
  if (r->succeeded()) return r->header().revision();
  if (!FailureFound(*r, 0))
    return absl::NotFoundError(
        absl::StrCat("path ", QuotePath(path), ": no such group"));
  const int64_t below =
      r->responses_size() > 1 ? r->responses(1).response_range().count() : 0;
  return absl::FailedPreconditionError(
      absl::StrCat("path ", QuotePath(path), " has ", below,
                   " group(s) below it; delete them first"));
}

absl::StatusOr<int64_t> ClusterNode::CommitLimits(
    const std::string& path,
    absl::FunctionRef<void(cluster::v1::GroupRecord*)> update) {
  const std::string key = GroupKey(path);
  for (int attempt = 0; attempt < 5; ++attempt) {
    RangeRequest range;
    range.set_key(key);
    absl::StatusOr<etcdserverpb::RangeResponse> read = etcd_.Range(range);
    if (!read.ok()) return read.status();
    if (read->kvs_size() == 0)
      return absl::NotFoundError(
          absl::StrCat("path ", QuotePath(path), ": no such group"));
    const auto& kv = read->kvs(0);
    cluster::v1::GroupRecord record;
    if (!record.ParseFromString(kv.value()))
      return absl::DataLossError(
          absl::StrCat("etcd key ", key, " does not hold a group record"));
    update(&record);
    TxnRequest txn;
    AddCompare(&txn, key, Compare::MOD, Compare::EQUAL)
        ->set_mod_revision(kv.mod_revision());
    AddPut(&txn, key, record.SerializeAsString(), 0);
    absl::StatusOr<TxnResponse> r = CountedTxn(txn);
    if (!r.ok()) return r.status();
    if (r->succeeded()) return r->header().revision();
  }
  return absl::AbortedError(absl::StrCat(
      "limits of ", QuotePath(path),
      " not changed: other nodes changed the group 5 times meanwhile; retry"));
}

absl::Status ClusterNode::WaitApplied(int64_t revision,
                                      absl::Time deadline) const {
  absl::MutexLock l(&mu_);
  auto applied = [this, revision]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return applied_revision_ >= revision || stopping_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&applied), deadline) ||
      applied_revision_ < revision)
    return absl::DeadlineExceededError(absl::StrCat(
        "committed to etcd at revision ", revision,
        " but not yet applied by this node (at ", applied_revision_,
        "): it will be"));
  return absl::OkStatus();
}

absl::Status ClusterNode::SyncRead(absl::Time deadline) {
  RangeRequest range;
  range.set_key(options_.prefix + "/config");
  range.set_count_only(true);
  absl::StatusOr<etcdserverpb::RangeResponse> r = etcd_.Range(range);
  if (!r.ok()) return r.status();
  return WaitApplied(r->header().revision(), deadline);
}

int64_t ClusterNode::GraceLeftNsLocked(const std::string& root,
                                       int64_t now) const {
  auto grace = grace_until_ns_.find(root);
  if (grace == grace_until_ns_.end() || now >= grace->second) return 0;
  return grace->second - now;
}

ShardRoute ClusterNode::Route(absl::string_view path) const {
  ShardRoute route;
  route.shard_root = ShardRootOf(path);
  if (route.shard_root.empty()) {
    route.kind = ShardRoute::Kind::kAboveShards;
    return route;
  }
  const int64_t now = NowNs();
  absl::MutexLock l(&mu_);
  if (!shards_.contains(route.shard_root)) {
    route.kind = ShardRoute::Kind::kNoSuchShard;
    return route;
  }
  auto mine = owned_.find(route.shard_root);
  if (mine != owned_.end() && now < fence_deadline_ns_) {
    route.kind = ShardRoute::Kind::kLocal;
    route.owner_node = options_.node_name;
    route.owner_address = options_.advertise_address;
    route.epoch = mine->second;
    route.grace_remaining =
        absl::Nanoseconds(GraceLeftNsLocked(route.shard_root, now));
    return route;
  }
  auto it = owners_.find(route.shard_root);
  if (it != owners_.end() && it->second.node != options_.node_name) {
    route.kind = ShardRoute::Kind::kElsewhere;
    route.owner_node = it->second.node;
    route.owner_address = it->second.address;
    route.epoch = it->second.epoch;
    return route;
  }
  route.kind = ShardRoute::Kind::kNoOwner;
  return route;
}

bool ClusterNode::HasLease() const {
  const int64_t now = NowNs();
  absl::MutexLock l(&mu_);
  return lease_id_ != 0 && now < fence_deadline_ns_;
}

ClusterMapView ClusterNode::Map() const {
  ClusterMapView view;
  view.node_name = options_.node_name;
  view.advertise_address = options_.advertise_address;
  view.shard_depth = options_.shard_depth;
  const int64_t now = NowNs();
  absl::MutexLock l(&mu_);
  view.applied_revision = applied_revision_;
  view.has_lease = lease_id_ != 0 && now < fence_deadline_ns_;
  view.fence_remaining = view.has_lease
                             ? absl::Nanoseconds(fence_deadline_ns_ - now)
                             : absl::ZeroDuration();
  for (const auto& [name, address] : nodes_)
    view.nodes.push_back({name, address});
  std::vector<std::string> roots(shards_.begin(), shards_.end());
  std::sort(roots.begin(), roots.end());
  for (const std::string& root : roots) {
    ClusterMapView::Shard shard;
    shard.root = root;
    auto it = owners_.find(root);
    if (it != owners_.end()) {
      shard.owner_node = it->second.node;
      shard.owner_address = it->second.address;
      shard.epoch = it->second.epoch;
    }
    view.shards.push_back(std::move(shard));
  }
  return view;
}

LatencyHistogram::Snapshot ClusterNode::TxnLatency() const {
  return txn_latency_.Collect();
}

LatencyHistogram::Snapshot ClusterNode::KeepaliveLatency() const {
  return keepalive_latency_.Collect();
}

ClusterCounters ClusterNode::Counters() const {
  absl::MutexLock l(&mu_);
  ClusterCounters c = counters_;
  c.shards_owned = owned_.size();
  c.grace_refusals = grace_refusals_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace cgacct
