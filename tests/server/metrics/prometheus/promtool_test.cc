// The real `promtool check metrics` (Debian's prometheus package) on a live
// scrape of the real cgacctd, after groups, limits, charges, an OOM, errors,
// a stream and health calls: it must exit 0 and print nothing (no lint
// problem in any family: cgacct_*, grpc_server_*, process_*, the exposer's
// own). ctest label "promtool".
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/daemon.h"

namespace cgacct {
namespace {

using test_util::Daemon;

using test_util::ReadFile;
using test_util::RunShell;

TEST(PromtoolTest, LiveScrapeIsClean) {
  ASSERT_EQ(RunShell("command -v promtool > /dev/null"), 0)
      << "promtool missing: deploy/install-deps.sh installs Debian's "
         "prometheus package";
  char dir_template[] = "/tmp/cgacct-promtool-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;

  Daemon daemon({"--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                 "--cpus=2", "--metrics_max_groups=5"});
  const std::string line = daemon.ReadStdoutLine(std::chrono::seconds(20));
  static const std::regex kLine(
      R"(listening on 127\.0\.0\.1:(\d+) \(metrics on 127\.0\.0\.1:(\d+),)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, kLine)) << line;
  const int port = std::stoi(m[1]);
  const int metrics_port = std::stoi(m[2]);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Accounting::NewStub(channel);

  auto create = [&](const std::string& path, uint64_t max_bytes) {
    grpc::ClientContext context;
    v1::CreateGroupRequest request;
    request.set_path(path);
    if (max_bytes != 0) request.mutable_limits()->set_max_bytes(max_bytes);
    v1::Group group;
    return stub->CreateGroup(&context, request, &group);
  };
  auto charge = [&](const std::string& path, uint64_t pages) {
    grpc::ClientContext context;
    v1::ChargeRequest request;
    request.set_path(path);
    request.set_nr_pages(pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse response;
    return stub->Charge(&context, request, &response);
  };
  ASSERT_TRUE(create("/jobs", 16 * 4096).ok());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(create(absl::StrCat("/jobs/j", i), 0).ok());
  }
  ASSERT_TRUE(charge("/jobs/j0", 16).ok());
  // Errors: an OOM, a bad path, a missing group, a duplicate.
  EXPECT_EQ(charge("/jobs/j1", 1).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(charge("no-slash", 1).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(charge("/nope", 1).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(create("/jobs", 0).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  {
    grpc::ClientContext context;
    auto stream = stub->ChargeStream(&context);
    v1::ChargeBatchRequest request;
    v1::ChargeOp* op = request.add_ops();
    op->set_path("/jobs/j2");
    op->set_nr_pages(0);  // an op error inside an OK stream
    op->set_kind(v1::PAGE_KIND_ANON);
    ASSERT_TRUE(stream->Write(request));
    v1::ChargeBatchResponse response;
    ASSERT_TRUE(stream->Read(&response));
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    EXPECT_TRUE(health->Check(&context, request, &response).ok());
  }

  const std::string scrape = dir + "/scrape.txt";
  ASSERT_EQ(
      RunShell(absl::StrCat("curl -sS --fail -o ", scrape,
                            " http://127.0.0.1:", metrics_port, "/metrics")),
      0);
  const std::string text = ReadFile(scrape);
  // The families the lint must see, so a clean result means something.
  for (const char* family :
       {"cgacct_group_memory_events_total{", "cgacct_group_series_dropped{",
        "grpc_server_handled_total{grpc_code=\"ResourceExhausted\"",
        "grpc_server_handling_seconds_bucket{", "process_open_fds ",
        "cgacct_build_info{", "cgacct_oom_total "}) {
    EXPECT_NE(text.find(family), std::string::npos) << family;
  }
  const std::string output = dir + "/promtool.out";
  const int status = RunShell(absl::StrCat("promtool check metrics < ", scrape,
                                           " > ", output, " 2>&1"));
  EXPECT_EQ(status, 0) << ReadFile(output);
  EXPECT_EQ(ReadFile(output), "") << "promtool check metrics is not clean";

  // Close the connection first: an idle client's channel would hold the
  // shutdown for its grace period (cgacctd_test explains).
  stub.reset();
  channel.reset();
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.WaitExit(std::chrono::seconds(20)), 0);
  RunShell("rm -rf " + dir);
}

}  // namespace
}  // namespace cgacct
