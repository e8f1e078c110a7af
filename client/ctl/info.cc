// cgacctctl info: the engine's configuration (GetEngineInfo); cgacctctl
// cluster: cluster mode's map (GetClusterMap); cgacctctl health: the
// standard grpc.health.v1 Check.
#include <iostream>

#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace cgacct::ctl {

int Health(Ctl& ctl, const Invocation& inv) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(inv.path);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(ctl.channel())
          ->Check(ctl.Context().get(), request, &response);
  if (!status.ok()) return PrintRpcError("Check", status);
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
          response.status());
  if (ctl.json()) {
    PrintJson(Json{{"service", inv.path}, {"status", name}});
  } else {
    std::cout << name << "\n";
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? kExitOk
             : kExitUnavailable;
}

int Info(Ctl& ctl, const Invocation& inv) {
  (void)inv;  // info takes no argument
  v1::EngineInfo info;
  const grpc::Status status = ctl.stub().GetEngineInfo(
      ctl.Context().get(), v1::GetEngineInfoRequest(), &info);
  if (!status.ok()) return PrintRpcError("GetEngineInfo", status);
  if (ctl.json()) {
    PrintJson(MessageJson(info));
    return kExitOk;
  }
  Line("nr_cpus", info.nr_cpus());
  Line("page_size_bytes", info.page_size_bytes());
  Line("charge_batch_pages", info.charge_batch_pages());
  Line("flush_lock_policy", info.flush_lock_policy());
  Line("flush_preempt_model", info.flush_preempt_model());
  if (info.flush_lock_policy() == "adaptive") {
    Line("flush_hold_budget_us", info.flush_hold_budget_us());
  }
  Line("nr_stock_slots", info.nr_stock_slots());
  // The engine's opt-in additions (0: off, the kernel's behaviour) and the
  // stock's eviction seed in use (replay a run with --stock_eviction_seed).
  Line("stock_pool_buckets", info.stock_pool_buckets());
  Line("stock_victim_sets", info.stock_victim_sets());
  Line("uncharge_refills_stock", info.uncharge_refills_stock() ? 1 : 0);
  Line("stock_eviction_seed", info.stock_eviction_seed());
  Line("memory_localevents", info.memory_localevents() ? 1 : 0);
  Line("nr_groups", info.nr_groups());
  Line("nr_dying_groups", info.nr_dying_groups());
  Line("flush_lock_hold_max_us", info.flush_lock_hold_max_us());
  Line("flush_lock_hold_max_cpus_walked",
       info.flush_lock_hold_max_cpus_walked());
  Line("flush_lock_hold_max_groups_folded",
       info.flush_lock_hold_max_groups_folded());
  Line("max_batch_ops", info.max_batch_ops());
  if (info.has_cluster()) {
    const v1::EngineClusterInfo& c = info.cluster();
    std::cout << "cluster_node " << c.node_name() << " " << c.node_address()
              << "\n";
    Line("cluster_shard_depth", c.shard_depth());
    Line("cluster_has_lease", c.has_lease() ? 1 : 0);
    Line("cluster_fence_remaining_ms", c.fence_remaining_ms());
    Line("cluster_live_nodes", c.live_nodes());
    std::cout << "cluster_owned_shards";
    for (const std::string& root : c.owned_shards()) std::cout << " " << root;
    std::cout << "\n";
    Line("cluster_applied_revision", static_cast<uint64_t>(c.applied_revision()));
    Line("cluster_etcd_revision", static_cast<uint64_t>(c.etcd_revision()));
    Line("cluster_takeover_grace_ms", c.takeover_grace_ms());
    Line("cluster_require_sessions", c.require_sessions() ? 1 : 0);
  }
  return kExitOk;
}

int Cluster(Ctl& ctl, const Invocation& inv) {
  (void)inv;  // cluster takes no argument
  v1::ClusterMap map;
  const grpc::Status status = ctl.stub().GetClusterMap(
      ctl.Context().get(), v1::GetClusterMapRequest(), &map);
  if (!status.ok()) return PrintRpcError("GetClusterMap", status);
  if (ctl.json()) {
    // Paths as text and numbers as numbers, as cat/ls/tree/top print them
    // (protobuf's mapping printed the bytes shard_root in base64 and the
    // int64 revisions as strings: a fresh user's finding).
    Json shards = Json::array();
    for (const v1::ShardOwner& shard : map.shards()) {
      shards.push_back({{"shard_root", shard.shard_root()},
                        {"owner_name", shard.owner_name()},
                        {"owner_address", shard.owner_address()},
                        {"epoch", shard.epoch()}});
    }
    Json nodes = Json::array();
    for (const v1::ClusterNodeInfo& node : map.nodes()) {
      nodes.push_back({{"name", node.name()}, {"address", node.address()}});
    }
    PrintJson(Json{{"cluster_mode", map.cluster_mode()},
                   {"node_name", map.node_name()},
                   {"node_address", map.node_address()},
                   {"shard_depth", map.shard_depth()},
                   {"revision", map.revision()},
                   {"has_lease", map.has_lease()},
                   {"nodes", nodes},
                   {"shards", shards}});
    return kExitOk;
  }
  if (!map.cluster_mode()) {
    std::cout << "single-node mode: this cgacctd serves every group\n";
    return kExitOk;
  }
  std::cout << "node " << map.node_name() << " at " << map.node_address()
            << (map.has_lease() ? "" : " (no etcd lease: admits nothing)")
            << ", shard depth " << map.shard_depth() << ", etcd revision "
            << map.revision() << "\n";
  std::cout << "nodes:\n";
  for (const v1::ClusterNodeInfo& node : map.nodes())
    std::cout << "  " << node.name() << " " << node.address() << "\n";
  std::cout << "shards:\n";
  for (const v1::ShardOwner& shard : map.shards()) {
    std::cout << "  " << shard.shard_root() << " ";
    if (shard.owner_name().empty()) {
      std::cout << "(no owner)\n";
    } else {
      std::cout << shard.owner_name() << " " << shard.owner_address()
                << " epoch " << shard.epoch() << "\n";
    }
  }
  return kExitOk;
}

}  // namespace cgacct::ctl
