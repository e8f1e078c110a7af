// populate_groups: fills a running cgacctd with groups for the memory
// footprint benchmark (tests/bench/memory_footprint.sh).
//
//   populate_groups --target=HOST:PORT --parent=/fp --groups=N
//                   [--active_groups=M] [--charge_cpus=all|K]
//
// Creates PARENT and N children PARENT/g0 .. PARENT/g(N-1) (idle groups).
// With --active_groups=M, the first M children are then charged one ANON page
// on each of the first K per-CPU slots (all: every slot), through ChargeBatch,
// and uncharged again: every such group gets its per-CPU blocks on those
// slots, the worst case of an active group. Prints one line of counts. Exit
// status 0, or 1 on any RPC failure (one line on stderr).
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "cgacctd gRPC address");
ABSL_FLAG(std::string, parent, "/fp", "parent of the groups (created)");
ABSL_FLAG(int32_t, groups, 10000, "children to create");
ABSL_FLAG(int32_t, active_groups, 0,
          "children then charged and uncharged on --charge_cpus slots");
ABSL_FLAG(std::string, charge_cpus, "all", "all, or the first K slots");

namespace {

namespace v1 = ::cgacct::v1;

int Fail(const std::string& what, const grpc::Status& s) {
  std::cerr << "populate_groups: " << what << ": " << s.error_code() << " "
            << s.error_message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto stub = v1::Accounting::NewStub(grpc::CreateChannel(
      absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials()));
  const std::string parent = absl::GetFlag(FLAGS_parent);
  const int groups = absl::GetFlag(FLAGS_groups);
  const int active = std::min(absl::GetFlag(FLAGS_active_groups), groups);

  v1::EngineInfo info;
  {
    grpc::ClientContext context;
    const grpc::Status s =
        stub->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info);
    if (!s.ok()) return Fail("GetEngineInfo", s);
  }
  const std::string cpus_flag = absl::GetFlag(FLAGS_charge_cpus);
  const uint32_t cpus =
      cpus_flag == "all"
          ? info.nr_cpus()
          : std::min<uint32_t>(std::stoul(cpus_flag), info.nr_cpus());

  auto create = [&](const std::string& path) {
    v1::CreateGroupRequest request;
    request.set_path(path);
    v1::Group group;
    grpc::ClientContext context;
    grpc::Status s = stub->CreateGroup(&context, request, &group);
    if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) s = grpc::Status();
    return s;
  };
  if (grpc::Status s = create(parent); !s.ok()) return Fail(parent, s);
  for (int i = 0; i < groups; ++i) {
    const std::string path = absl::StrCat(parent, "/g", i);
    if (grpc::Status s = create(path); !s.ok()) return Fail(path, s);
  }

  // Charge then uncharge one page per (group, slot), 4096 ops per call.
  uint64_t ops = 0;
  for (bool uncharge : {false, true}) {
    v1::ChargeBatchRequest request;
    auto flush = [&]() -> grpc::Status {
      if (request.ops_size() == 0) return grpc::Status();
      v1::ChargeBatchResponse response;
      grpc::ClientContext context;
      grpc::Status s = stub->ChargeBatch(&context, request, &response);
      if (!s.ok()) return s;
      for (const v1::OpResult& r : response.results()) {
        if (r.code() != 0) {
          return grpc::Status(static_cast<grpc::StatusCode>(r.code()),
                              r.message());
        }
      }
      ops += static_cast<uint64_t>(request.ops_size());
      request.clear_ops();
      return grpc::Status();
    };
    for (int i = 0; i < active; ++i) {
      const std::string path = absl::StrCat(parent, "/g", i);
      for (uint32_t cpu = 0; cpu < cpus; ++cpu) {
        v1::ChargeOp* op = request.add_ops();
        op->set_uncharge(uncharge);
        op->set_path(path);
        op->set_nr_pages(1);
        op->set_kind(v1::PAGE_KIND_ANON);
        op->set_cpu(cpu);
        if (request.ops_size() == 4096) {
          if (grpc::Status s = flush(); !s.ok()) return Fail("ChargeBatch", s);
        }
      }
    }
    if (grpc::Status s = flush(); !s.ok()) return Fail("ChargeBatch", s);
  }
  std::cout << "populate_groups: " << groups << " groups under " << parent
            << ", " << active << " active on " << cpus << " slots (" << ops
            << " ops)\n";
  return 0;
}
