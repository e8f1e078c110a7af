// ReadOps (server/pipeline/reads.h).
#include "server/pipeline/reads.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "server/cluster/routing.h"

namespace cgacct {
namespace {

std::optional<FlushMode> FlushModeFromProto(int mode) {
  switch (mode) {
    case v1::FLUSH_MODE_UNSPECIFIED:
    case v1::FLUSH_MODE_EXACT:
      return FlushMode::kExact;
    case v1::FLUSH_MODE_THRESHOLD:
      return FlushMode::kThreshold;
    case v1::FLUSH_MODE_NONE:
      return FlushMode::kNone;
    default:
      return std::nullopt;
  }
}

}  // namespace

ReadOps::ReadOps(Engine& engine, const WireUnits& units,
                 const OpValidator& validator, const CallLimiter& limiter,
                 const SessionRegistry& sessions, const Authorizer* authorizer,
                 TransportLimits transport)
    : engine_(engine),
      units_(units),
      validator_(validator),
      limiter_(limiter),
      sessions_(sessions),
      authorizer_(authorizer),
      transport_(transport) {}

absl::Status ReadOps::GetStats(const CallContext& call,
                               const v1::GetStatsRequest& request,
                               v1::GroupStats* response) const {
  if (absl::Status s = ValidateGroupPath(request.path()); !s.ok()) return s;
  const std::optional<FlushMode> mode = FlushModeFromProto(request.flush());
  if (!mode.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("flush must be FLUSH_MODE_EXACT, FLUSH_MODE_THRESHOLD or "
                     "FLUSH_MODE_NONE (got ",
                     request.flush(), ")"));
  }
  if (absl::Status s =
          Authorize(authorizer_, call.caller(), Access::kRead, request.path());
      !s.ok())
    return s;
  if (absl::Status s = RouteStatus(cluster_, request.path(),
                                   /*read_above_shards=*/true);
      !s.ok())
    return s;
  const bool above_shards =
      cluster_ != nullptr &&
      cluster_->Route(request.path()).kind == ShardRoute::Kind::kAboveShards;
  std::vector<std::string> roots;
  if (above_shards) {
    absl::StatusOr<std::vector<std::string>> listed =
        ShardRootsBelow(request);
    if (!listed.ok()) return listed.status();
    roots = *std::move(listed);
  }
  absl::StatusOr<GroupStats> stats = engine_.GetStats(request.path(), *mode);
  if (!stats.ok()) return stats.status();
  StatsToProto(*std::move(stats), response);
  if (above_shards) SumOwnedShards(roots, *mode, response);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadOps::ShardRootsBelow(
    const v1::GetStatsRequest& request) const {
  std::vector<std::string> roots;
  if (request.shard_roots().empty()) {
    for (ClusterMapView::Shard& shard : cluster_->Map().shards) {
      if (PathStrictlyBelow(shard.root, request.path()))
        roots.push_back(std::move(shard.root));
    }
    return roots;
  }
  for (const std::string& root : request.shard_roots()) {
    if (!ValidateGroupPath(root).ok() ||
        !PathStrictlyBelow(root, request.path()) ||
        cluster_->ShardRootOf(root) != root) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard_roots: ", QuotePath(root), " is not a shard root below ",
          QuotePath(request.path()), " (--shard_depth=",
          cluster_->options().shard_depth, ")"));
    }
    roots.push_back(root);
  }
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

void ReadOps::StatsToProto(GroupStats stats, v1::GroupStats* response) const {
  // Pages never exceed page_counter_max(), so pages * page_size fits.
  const uint64_t page_size = units_.page_size_bytes();
  response->set_path(stats.path);
  response->set_memory_current_bytes(stats.memory_current_pages * page_size);
  response->set_memory_peak_bytes(stats.memory_peak_pages * page_size);
  units_.LimitsToProto(stats.limits, response->mutable_limits());
  response->mutable_limits()->set_oom_group(stats.oom_group);
  response->mutable_stat()->Reserve(static_cast<int>(stats.stat.size()));
  for (StatEntry& entry : stats.stat) {
    v1::StatEntry* out = response->add_stat();
    out->set_name(std::move(entry.name));
    out->set_value(entry.value);  // already in memory.stat units
  }
  EventsToProto(stats.events, response->mutable_events());
  EventsToProto(stats.events_local, response->mutable_events_local());
  response->set_failcnt(stats.failcnt);
  response->set_emin_bytes(stats.emin_pages * page_size);
  response->set_elow_bytes(stats.elow_pages * page_size);
  response->set_flushed(stats.flushed);
  response->set_max_staleness_us(DurationToMicros(stats.max_staleness));
}

void ReadOps::SumOwnedShards(const std::vector<std::string>& roots,
                             FlushMode mode, v1::GroupStats* response) const {
  // The sums start from 0: the group's own view at this node (its engine's
  // hierarchical counters) would hold whatever is left here of shards this
  // node no longer owns.
  response->set_memory_current_bytes(0);
  for (v1::StatEntry& entry : *response->mutable_stat()) entry.set_value(0);
  response->mutable_events()->Clear();
  response->set_flushed(true);
  response->set_max_staleness_us(0);
  for (const std::string& root : roots) {
    absl::StatusOr<GroupStats> stats;
    if (cluster_->Route(root).kind == ShardRoute::Kind::kLocal)
      stats = engine_.GetStats(root, mode);
    if (!stats.ok()) {  // not this node's (now), or gone meanwhile
      response->add_missing_shards(root);
      continue;
    }
    v1::GroupStats shard;
    StatsToProto(*std::move(stats), &shard);
    shard.add_summed_shards(root);
    AddShardSums(shard, response);
  }
}

void AddShardSums(const v1::GroupStats& from, v1::GroupStats* into) {
  into->set_memory_current_bytes(into->memory_current_bytes() +
                                 from.memory_current_bytes());
  // memory.stat has the same names in the same order everywhere; by name
  // all the same (an older node may lack a line).
  for (const v1::StatEntry& entry : from.stat()) {
    v1::StatEntry* match = nullptr;
    for (v1::StatEntry& mine : *into->mutable_stat()) {
      if (mine.name() == entry.name()) {
        match = &mine;
        break;
      }
    }
    if (match == nullptr) {
      match = into->add_stat();
      match->set_name(entry.name());
    }
    match->set_value(match->value() + entry.value());
  }
  const v1::MemoryEvents& e = from.events();
  v1::MemoryEvents* out = into->mutable_events();
  out->set_low(out->low() + e.low());
  out->set_high(out->high() + e.high());
  out->set_max(out->max() + e.max());
  out->set_oom(out->oom() + e.oom());
  out->set_oom_kill(out->oom_kill() + e.oom_kill());
  out->set_oom_group_kill(out->oom_group_kill() + e.oom_group_kill());
  out->set_sock_throttled(out->sock_throttled() + e.sock_throttled());
  into->set_flushed(into->flushed() && from.flushed());
  into->set_max_staleness_us(
      std::max(into->max_staleness_us(), from.max_staleness_us()));
  for (const std::string& root : from.summed_shards()) {
    into->add_summed_shards(root);
    auto* missing = into->mutable_missing_shards();
    for (int i = 0; i < missing->size(); ++i) {
      if ((*missing)[i] == root) {
        missing->DeleteSubrange(i, 1);
        break;
      }
    }
  }
}

absl::Status ReadOps::Reclaim(const CallContext& call,
                              const v1::ReclaimRequest& request,
                              v1::ReclaimResponse* response) const {
  if (absl::Status s = ValidateGroupPath(request.path()); !s.ok()) return s;
  if (absl::Status s =
          Authorize(authorizer_, call.caller(), Access::kWrite, request.path());
      !s.ok())
    return s;
  if (absl::Status s = RouteStatus(cluster_, request.path()); !s.ok()) return s;
  // memory_reclaim(): bytes round down to pages; 0 bytes, or less than a
  // page, is 0 pages, which succeeds with nothing reclaimed (the kernel's
  // `echo 0 > memory.reclaim` returns at once).
  const uint64_t page_size = units_.page_size_bytes();
  absl::StatusOr<uint64_t> reclaimed =
      engine_.Reclaim(request.path(), request.nr_bytes() / page_size);
  if (!reclaimed.ok()) return reclaimed.status();
  response->set_reclaimed_bytes(*reclaimed * page_size);
  return absl::OkStatus();
}

void ReadOps::GetEngineInfo(const CallContext& call,
                            v1::EngineInfo* response) const {
  response->set_caller_identity(call.identity());
  const EngineInfo info = engine_.GetInfo();
  response->set_nr_cpus(static_cast<uint32_t>(info.nr_cpus));
  response->set_page_size_bytes(info.page_size_bytes);
  response->set_charge_batch_pages(info.charge_batch_pages);
  response->set_flush_lock_policy(info.flush_lock_policy_name);
  response->set_nr_stock_slots(static_cast<uint32_t>(info.nr_stock_slots));
  // The engine's load (groups, flush work) is the admin's to see; a
  // tenant sees the configuration and the flushes of its own subtrees.
  const bool admin = call.caller().admin();
  // The additions in force: configuration.
  response->set_stock_pool_buckets(info.stock_pool_buckets);
  response->set_stock_victim_sets(info.stock_victim_sets);
  response->set_uncharge_refills_stock(info.uncharge_refills_stock);
  response->set_memory_localevents(info.memory_localevents);
  if (admin) {
    // The eviction seed is the admin's, to replay a run: with it, a tenant
    // could predict which stock slot the next refill evicts (the kernel's
    // get_random_u32_below() is not predictable).
    response->set_stock_eviction_seed(info.stock_eviction_seed);
    response->set_nr_groups(info.nr_groups);
    response->set_nr_dying_groups(info.nr_dying_groups);
    response->set_flush_lock_hold_max_us(
        DurationToMicros(info.flush_lock_hold_max));
  }
  response->set_max_batch_ops(kMaxBatchOps);
  response->set_max_charge_pages(validator_.max_charge_pages());
  response->set_max_streams_per_identity(
      limiter_.options().max_streams_per_identity);
  response->set_max_in_flight_per_identity(
      limiter_.options().max_in_flight_per_identity);
  response->set_max_in_flight_bytes_per_identity(
      limiter_.options().max_in_flight_bytes_per_identity);
  response->set_max_message_bytes(transport_.max_message_bytes);
  response->set_max_concurrent_streams_per_connection(
      transport_.max_concurrent_streams_per_connection);
  for (const FlushHoldRecord& record : info.longest_flush_holds) {
    // A flush of a subtree outside the caller's grants is not its to see.
    if (!Authorizer::CanRead(call.caller(), record.root_path)) continue;
    v1::FlushLockHold* hold = response->add_longest_flush_holds();
    hold->set_policy(record.policy);
    hold->set_root_path(record.root_path);
    hold->set_cpus_walked(static_cast<uint32_t>(record.cpus_walked));
    hold->set_groups_folded(static_cast<uint32_t>(record.groups_folded));
    hold->set_hold_ns(
        static_cast<uint64_t>(absl::ToInt64Nanoseconds(record.hold)));
    hold->set_when_unix_us(absl::ToUnixMicros(record.when));
    hold->set_preempt_model(FlushPreemptModelName(record.preempt_model));
  }
  response->set_flush_preempt_model(
      FlushPreemptModelName(info.flush_preempt_model));
  if (admin) {
    response->set_flush_lock_hold_wall_max_us(
        DurationToMicros(info.flush_lock_hold_wall_max));
    response->set_preempted_flushes(info.preempted_flushes);
    response->set_flush_lock_hold_max_cpus_walked(
        static_cast<uint32_t>(info.flush_lock_hold_max_cpus_walked));
    response->set_flush_lock_hold_max_groups_folded(
        static_cast<uint32_t>(info.flush_lock_hold_max_groups_folded));
  }
  if (info.flush_lock_policy == FlushLockPolicy::kAdaptive &&
      info.flush_hold_budget > absl::ZeroDuration()) {
    // Rounded up: 0 means "no budget" (one CPU per hold), so a budget
    // under 1 µs reads 1, not 0.
    response->set_flush_hold_budget_us(
        static_cast<uint64_t>(absl::ToInt64Microseconds(
            info.flush_hold_budget + absl::Nanoseconds(999))));
  }
  response->set_periodic_flush_interval_ms(static_cast<uint64_t>(
      absl::ToInt64Milliseconds(info.periodic_flush_interval)));
  const SessionOptions& so = sessions_.options();
  response->set_session_default_ttl_ms(so.default_ttl_ms);
  response->set_session_min_ttl_ms(so.min_ttl_ms);
  response->set_session_max_ttl_ms(so.max_ttl_ms);
  response->set_session_max_pages(so.max_pages);
  response->set_max_sessions_per_identity(so.max_sessions_per_identity);
  response->set_max_peak_watermarks_per_identity(
      so.max_peak_watermarks_per_identity);
  response->set_session_drain_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(so.drain_timeout)));
  if (cluster_ != nullptr) {
    const ClusterMapView map = cluster_->Map();
    const ClusterCounters counters = cluster_->Counters();
    v1::EngineClusterInfo* c = response->mutable_cluster();
    c->set_node_name(map.node_name);
    c->set_node_address(map.advertise_address);
    c->set_shard_depth(map.shard_depth);
    c->set_has_lease(map.has_lease);
    c->set_fence_remaining_ms(static_cast<uint64_t>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(map.fence_remaining))));
    c->set_live_nodes(static_cast<uint32_t>(map.nodes.size()));
    for (const ClusterMapView::Shard& shard : map.shards) {
      if (shard.owner_node != map.node_name) continue;
      if (!Authorizer::CanRead(call.caller(), shard.root)) continue;
      c->add_owned_shards(shard.root);
    }
    c->set_applied_revision(counters.applied_revision);
    c->set_etcd_revision(std::max(counters.seen_revision,
                                  counters.applied_revision));
    c->set_takeover_grace_ms(static_cast<uint64_t>(
        absl::ToInt64Milliseconds(cluster_->options().takeover_grace)));
    c->set_require_sessions(cluster_->options().require_sessions);
  }
}

}  // namespace cgacct
