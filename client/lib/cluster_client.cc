// cgacct::client::ClusterClient (client/include/cgacct/cluster_client.h):
// the routing by cluster map over one Client per owner node. The same rules
// as Python's cgacct.ClusterClient (client/python/cgacct/cluster.py).
//
// Locks: Impl::mu guards the map, the per-owner Clients, the shards' homes
// and the counters. It is held while the map is read and while a shard's
// holdings move (RPCs: bounded by the Clients' attempts), never while the
// caller's own charge or uncharge runs.
//
// Threads: the callers', and the watch thread (Impl::Watch), which moves a
// shard's holdings to its new owner as soon as the map names one while the
// old owner's Client is suspect, without waiting for a call to fail.
#include "cgacct/cluster_client.h"

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/lib/groups_impl.h"
#include "client/lib/grpc_status.h"
#include "client/lib/rpcs.h"
#include "engine/group_path.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::client {
namespace {

using Clock = std::chrono::steady_clock;

// After these the map is read again and the call tried again.
using internal::NotServedHere;

void AddClientStats(const ClientStats& s, ClientStats* sum) {
  sum->charges += s.charges;
  sum->stock_hits += s.stock_hits;
  sum->charge_rpcs += s.charge_rpcs;
  sum->uncharge_rpcs += s.uncharge_rpcs;
  sum->retries += s.retries;
  sum->drains += s.drains;
  sum->drained_pages += s.drained_pages;
  sum->reopened_sessions += s.reopened_sessions;
  sum->reattached_streams += s.reattached_streams;
  sum->reconciles += s.reconciles;
  sum->resume_deferred_pages += s.resume_deferred_pages;
  sum->return_failed_pages += s.return_failed_pages;
}

}  // namespace

struct ClusterClient::Impl {
  Impl(std::vector<std::string> t, ClusterOptions o)
      : targets(std::move(t)), options(std::move(o)) {}

  const std::vector<std::string> targets;
  const ClusterOptions options;
  // options.channel_factory, or MakeChannelFactory(options.client.connect).
  ChannelFactory factory;
  // groups(): unary calls to any node, watches to the owner (made by Open).
  std::unique_ptr<Groups> groups;

  mutable absl::Mutex mu;
  // Shard root -> its owner's address ("" while it has none), as of the
  // last map read.
  std::map<std::string, std::string> owners ABSL_GUARDED_BY(mu);
  // Address -> the Client there (opened by the first call routed to it).
  std::map<std::string, std::shared_ptr<Client>> clients ABSL_GUARDED_BY(mu);
  // Shard root -> the address whose Client holds the application's pages
  // of that shard.
  std::map<std::string, std::string> home ABSL_GUARDED_BY(mu);
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels
      ABSL_GUARDED_BY(mu);
  uint64_t map_reads ABSL_GUARDED_BY(mu) = 0;
  uint64_t moves ABSL_GUARDED_BY(mu) = 0;
  uint64_t recharge_failed_pages ABSL_GUARDED_BY(mu) = 0;
  uint64_t watch_moves ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;
  // Runs Watch() from Open() until Close() (joined there).
  std::thread watcher;

  std::shared_ptr<grpc::Channel> ChannelFor(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::shared_ptr<grpc::Channel>& channel = channels[address];
    if (channel == nullptr) channel = factory(address);
    return channel;
  }

  // The longest shard root of the last map read at or above `group`.
  std::optional<std::string> RootOf(std::string_view group) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const absl::string_view path(group.data(), group.size());
    std::optional<std::string> best;
    for (const auto& [root, address] : owners) {
      if (PathAtOrBelow(path, root) &&
          (!best.has_value() || root.size() > best->size()))
        best = root;
    }
    return best;
  }

  // GetClusterMap from the first node that answers: the targets, then every
  // address the last map named, `failed` (the nodes a call just failed at,
  // or the watch found suspect) last; tried again every 200 ms until
  // `give_up`. Asked first, a stopped
  // owner that is also a target cost every map read a whole call_timeout,
  // and a holder could reach the shard's new owner only after its takeover
  // grace (ClusterTest's SIGSTOP fault: 48 pages over max, 1 run in 5).
  // Errors: UNAVAILABLE naming the targets and the last failure.
  Status ReadMap(Clock::time_point give_up,
                       const std::vector<std::string>& failed = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Status last(StatusCode::kUnavailable, "no target");
    while (true) {
      std::vector<std::string> candidates = targets;
      for (const auto& [root, address] : owners) {
        if (!address.empty() &&
            std::find(candidates.begin(), candidates.end(), address) ==
                candidates.end())
          candidates.push_back(address);
      }
      for (const std::string& bad : failed) {
        auto it = std::find(candidates.begin(), candidates.end(), bad);
        if (it != candidates.end()) std::rotate(it, it + 1, candidates.end());
      }
      for (const std::string& target : candidates) {
        auto stub = v1::Accounting::NewStub(ChannelFor(target));
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             options.client.call_timeout);
        v1::ClusterMap map;
        Status s = internal::FromGrpc(
            stub->GetClusterMap(&context, v1::GetClusterMapRequest(), &map));
        if (!s.ok()) {
          last = s;
          continue;
        }
        ++map_reads;
        owners.clear();
        if (!map.cluster_mode()) {
          // A single node serves every path.
          owners["/"] = target;
        } else {
          for (const v1::ShardOwner& shard : map.shards()) {
            owners[shard.shard_root()] = shard.owner_address();
          }
        }
        return Status();
      }
      if (Clock::now() + std::chrono::milliseconds(200) > give_up) {
        return Status(
            StatusCode::kUnavailable,
            absl::StrCat("cgacct::client::ClusterClient: no node answered "
                         "GetClusterMap (",
                         absl::StrJoin(targets, ", "),
                         "): ", last.message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  Status ClientFor(const std::string& address,
                         std::shared_ptr<Client>* client)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = clients.find(address);
    if (it != clients.end()) {
      *client = it->second;
      return Status();
    }
    std::unique_ptr<Client> opened;
    Status s = Client::Open(ChannelFor(address), options.client, &opened);
    if (!s.ok()) return s;
    *client = std::shared_ptr<Client>(std::move(opened));
    clients[address] = *client;
    return Status();
  }

  // Charges what the application holds in shard `root` at `address` (as a
  // resume) if it was charged at another node. On a routing error (the new
  // owner refusing for now) nothing has moved and the error is returned;
  // pages the new owner refuses for good are counted in
  // recharge_failed_pages.
  // `wait_for_calls`: Client::Forget()'s (false from the watch: the old
  // node is silent).
  Status MoveHome(const std::string& root, const std::string& address,
                        Client& to, bool wait_for_calls = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto old = home.find(root);
    if (old != home.end() && old->second == address) return Status();
    if (old != home.end()) {
      Client& from = *clients.at(old->second);
      const Client::Holdings held = from.Forget(root, wait_for_calls);
      Client::Holdings moved;
      uint64_t refused = 0;
      for (const auto& [k, n] : held) {
        Status s = to.Adopt(k.first, k.second, n);
        if (s.ok()) {
          moved[k] = n;
        } else if (NotServedHere(s.code())) {
          // Not this time: the holdings stay the old Client's; what the
          // new owner took already goes back there.
          Client::Holdings left;
          for (const auto& [lk, ln] : held) {
            if (moved.count(lk) == 0) left[lk] = ln;
          }
          from.Restore(left);
          for (const auto& [mk, mn] : moved) to.Disown(mk.first, mk.second, mn);
          return s;
        } else {
          refused += n;
        }
      }
      recharge_failed_pages += refused;
      ++moves;
    }
    home[root] = address;
    return Status();
  }

  // The watch thread: every 250 ms, while a node's Client is suspect
  // (Client::Suspect(): its session stream silent past a keepalive period
  // and call_timeout, or a re-charge deferred there), reads the map (those
  // nodes asked last) and moves every shard whose owner changed to its new
  // owner at once, whether or not the application calls into it. Without
  // it a holder learnt of a new owner only when one of its own calls failed
  // there: a stopped owner cost each call its attempts, a shard the
  // application did not call into stayed with the old node, and a late move
  // met the new owner past its takeover grace, where fresh charges had
  // taken the room (ClusterTest's SIGSTOP fault: 8-48 pages over max, 1 run
  // in 5). A move refused for now is tried at the next round.
  void Watch() ABSL_LOCKS_EXCLUDED(mu) {
    for (;;) {
      std::vector<std::pair<std::string, std::shared_ptr<Client>>> all;
      {
        absl::MutexLock l(&mu);
        if (mu.AwaitWithTimeout(absl::Condition(&closed),
                                absl::Milliseconds(250)))
          return;
        all.assign(clients.begin(), clients.end());
      }
      std::vector<std::string> suspects, silent;
      for (const auto& [address, c] : all) {
        if (c->Suspect()) suspects.push_back(address);
        if (c->Silent()) silent.push_back(address);
      }
      if (suspects.empty()) continue;
      absl::MutexLock l(&mu);
      if (closed) return;
      if (!ReadMap(Clock::now() + options.client.call_timeout, suspects).ok())
        continue;  // no node answered: the next round
      const std::map<std::string, std::string> homes = home;
      for (const auto& [root, old] : homes) {
        auto owner = owners.find(root);
        if (owner == owners.end() || owner->second.empty() ||
            owner->second == old)
          continue;
        std::shared_ptr<Client> to;
        const bool quiet =
            std::find(silent.begin(), silent.end(), old) != silent.end();
        if (ClientFor(owner->second, &to).ok() &&
            MoveHome(root, owner->second, *to, /*wait_for_calls=*/!quiet).ok())
          ++watch_moves;
      }
    }
  }

  // Runs `call` on the Client of `group`'s owner, re-reading the map and
  // trying again after a routing error until failover_timeout. With
  // `once`, a call that ran is not made again whatever it answered (only
  // the routing before it is retried): an Uncharge takes the pages out of
  // the books before its RPC, so a second one at the shard's new owner
  // would take them from what the move charged there for the application
  // (ClusterTest's black-holed link: 1.06-1.08x memory.max, 2 runs of 5).
  template <typename Call>
  Status Routed(std::string_view group, Call call, bool once = false) {
    const Clock::time_point give_up = Clock::now() + options.failover_timeout;
    std::chrono::milliseconds delay(50);
    while (true) {
      std::shared_ptr<Client> client;
      std::optional<std::string> root;
      std::string address;
      Status error;
      {
        absl::MutexLock l(&mu);
        if (closed)
          return Status(StatusCode::kFailedPrecondition,
                              "cgacct::client::ClusterClient: closed");
        root = RootOf(group);
        if (!root.has_value()) {
          error = Status(
              StatusCode::kNotFound,
              absl::StrCat("group: no shard of the cluster map holds ",
                           std::string(group)));
        } else if ((address = owners[*root]).empty()) {
          error = Status(
              StatusCode::kUnavailable,
              absl::StrCat("group: shard ", *root,
                           " has no owner now (a failover)"));
        } else {
          error = ClientFor(address, &client);
          if (error.ok()) error = MoveHome(*root, address, *client);
        }
      }
      if (error.ok()) {
        error = call(*client);
        if (error.ok() || once) return error;
      }
      const StatusCode code = error.code();
      const bool may_move = code == StatusCode::kFailedPrecondition ||
                            code == StatusCode::kNotFound;
      if (!(NotServedHere(code) || may_move) || Clock::now() + delay > give_up)
        return error;
      std::this_thread::sleep_for(delay);
      delay = std::min(2 * delay, std::chrono::milliseconds(1000));
      bool moved;
      {
        absl::MutexLock l(&mu);
        if (!ReadMap(give_up, {address}).ok()) {
          if (may_move) return error;
          continue;  // tried again until give_up
        }
        std::optional<std::string> now = RootOf(group);
        moved = now != root || (root.has_value() && owners[*root] != address);
      }
      // A refusal that is not routing's (the map did not change: an
      // uncharge of more than was charged, a group that does not exist) is
      // the caller's.
      if (may_move && !moved) return error;
    }
  }
};

Status ClusterClient::Open(std::vector<std::string> targets,
                                 ClusterOptions options,
                                 std::unique_ptr<ClusterClient>* client) {
  auto bad = [](std::string_view what) {
    return Status(StatusCode::kInvalidArgument,
                        absl::StrCat("cgacct::client::ClusterOptions: ",
                                     std::string(what)));
  };
  if (targets.empty()) return bad("targets: one or more \"host:port\"");
  for (const std::string& t : targets) {
    if (t.empty()) return bad("targets: an empty target");
  }
  if (options.failover_timeout.count() <= 0)
    return bad("failover_timeout must be > 0");
  if (options.client.max_attempts < 1)
    return bad("client.max_attempts must be >= 1");
  if (options.client.call_timeout.count() <= 0 ||
      options.client.call_timeout > std::chrono::hours(24))
    return bad("client.call_timeout must be > 0 and at most 24 h");
  if (options.failover_timeout > std::chrono::hours(24))
    return bad("failover_timeout must be at most 24 h");
  ChannelFactory factory = options.channel_factory;
  if (!factory) {
    Result<ChannelFactory> made = MakeChannelFactory(options.client.connect);
    if (!made.ok()) return made.status();
    factory = std::move(*made);
  }
  const auto give_up = Clock::now() + options.failover_timeout;
  auto impl = std::make_unique<Impl>(std::move(targets), std::move(options));
  impl->factory = std::move(factory);
  Impl* m = impl.get();
  auto groups = std::make_unique<Groups::Impl>();
  groups->options = CallOptions{m->options.client.call_timeout,
                                m->options.client.max_attempts};
  // Unary calls: any node forwards to the owner; the nodes this client
  // talks to already first, then the targets.
  groups->channels = [m]() -> Result<std::vector<std::shared_ptr<grpc::Channel>>> {
    absl::MutexLock l(&m->mu);
    if (m->closed) {
      return Status(StatusCode::kFailedPrecondition,
                    "cgacct::client::ClusterClient: closed");
    }
    std::vector<std::string> addresses;
    for (const auto& [address, c] : m->clients) addresses.push_back(address);
    for (const std::string& t : m->targets) {
      if (m->clients.count(t) == 0) addresses.push_back(t);
    }
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (const std::string& a : addresses) channels.push_back(m->ChannelFor(a));
    return channels;
  };
  // A watch is served by the owner of the group's shard only.
  groups->watch_channel =
      [m](std::string_view path) -> Result<std::shared_ptr<grpc::Channel>> {
    absl::MutexLock l(&m->mu);
    if (m->closed) {
      return Status(StatusCode::kFailedPrecondition,
                    "cgacct::client::ClusterClient: closed");
    }
    std::optional<std::string> root = m->RootOf(path);
    const std::string address = root.has_value() ? m->owners[*root] : "";
    if (address.empty()) {
      return Status(StatusCode::kUnavailable,
                    absl::StrCat("path: no node owns the shard of ",
                                 std::string(path), " now"));
    }
    return m->ChannelFor(address);
  };
  impl->groups.reset(new Groups(std::move(groups)));
  {
    absl::MutexLock l(&impl->mu);
    Status s = impl->ReadMap(give_up);
    if (!s.ok()) return s;
  }
  Impl* watched = impl.get();
  impl->watcher = std::thread([watched] { watched->Watch(); });
  client->reset(new ClusterClient(std::move(impl)));
  return Status();
}

ClusterClient::ClusterClient(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ClusterClient::~ClusterClient() { Close(); }

ChargeResult ClusterClient::Charge(std::string_view group, uint64_t nr_pages,
                                   PageKind kind) {
  ChargeResult result;
  result.status = impl_->Routed(group, [&](Client& c) {
    result = c.Charge(group, nr_pages, kind);
    return result.status;
  });
  return result;
}

Status ClusterClient::Uncharge(std::string_view group,
                                     uint64_t nr_pages, PageKind kind) {
  return impl_->Routed(
      group, [&](Client& c) { return c.Uncharge(group, nr_pages, kind); },
      /*once=*/true);
}

Status ClusterClient::Close() {
  std::vector<std::shared_ptr<Client>> clients;
  {
    absl::MutexLock l(&impl_->mu);
    if (impl_->closed) return Status();
    impl_->closed = true;
    for (auto& [address, c] : impl_->clients) clients.push_back(c);
  }
  // The watch ends at its next step (it waits on `closed`).
  if (impl_->watcher.joinable()) impl_->watcher.join();
  // At once: a node that is gone costs its Client's attempts, not the sum.
  std::vector<Status> results(clients.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = clients[i]->Close(); });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) {
    // A node that is gone: its session's lease returns the pages.
    if (!s.ok() && s.code() != StatusCode::kUnavailable &&
        s.code() != StatusCode::kDeadlineExceeded)
      return s;
  }
  return Status();
}

Groups& ClusterClient::groups() { return *impl_->groups; }

std::string ClusterClient::owner(std::string_view group) const {
  absl::MutexLock l(&impl_->mu);
  std::optional<std::string> root = impl_->RootOf(group);
  if (!root.has_value()) return "";
  auto it = impl_->owners.find(*root);
  return it == impl_->owners.end() ? "" : it->second;
}

uint64_t ClusterClient::held_pages(std::string_view group,
                                   PageKind kind) const {
  std::shared_ptr<Client> client;
  {
    absl::MutexLock l(&impl_->mu);
    std::optional<std::string> root = impl_->RootOf(group);
    if (!root.has_value()) return 0;
    auto home = impl_->home.find(*root);
    if (home == impl_->home.end()) return 0;
    client = impl_->clients.at(home->second);
  }
  return client->held_pages(group, kind);
}

ClusterStats ClusterClient::stats() const {
  ClusterStats out;
  std::vector<std::shared_ptr<Client>> clients;
  {
    absl::MutexLock l(&impl_->mu);
    out.map_reads = impl_->map_reads;
    out.moves = impl_->moves;
    out.recharge_failed_pages = impl_->recharge_failed_pages;
    out.watch_moves = impl_->watch_moves;
    for (auto& [address, c] : impl_->clients) clients.push_back(c);
  }
  for (const auto& c : clients) AddClientStats(c->stats(), &out.clients);
  return out;
}

}  // namespace cgacct::client
