// Server reflection (grpc.reflection.v1alpha) of the real cgacctd, called
// as a client would: off unless --reflection=on asks for it, never on the
// health-only port, and with access control on only when forced. On main at
// 949c495 every call below that expects UNIMPLEMENTED got the full
// descriptors: the reflection library registers its plugin with every
// server of the process that loads it, whatever --reflection says.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "reflection.grpc.pb.h"
#include "tests/server/daemon.h"

namespace {

using cgacct::test_util::Daemon;
using ::testing::Contains;
namespace refl = ::grpc::reflection::v1alpha;

constexpr std::chrono::seconds kTimeout(20);

// The port in cgacctd's start line (`pattern`'s group 1), or 0.
int Port(const std::string& line, const char* pattern) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(pattern))) return 0;
  return std::stoi(m[1].str());
}

// list_services through reflection on 127.0.0.1:`port`: the status, and the
// services when OK.
grpc::Status ListServices(int port, std::vector<std::string>* services) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  auto stub = refl::ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kTimeout);
  auto stream = stub->ServerReflectionInfo(&context);
  refl::ServerReflectionRequest request;
  request.set_list_services("");
  stream->Write(request);
  stream->WritesDone();
  refl::ServerReflectionResponse response;
  while (stream->Read(&response)) {
    for (const auto& s : response.list_services_response().service())
      services->push_back(s.name());
  }
  return stream->Finish();
}

TEST(ReflectionTest, OffByDefault) {
  Daemon daemon({"--listen=127.0.0.1:0", "--metrics_listen=", "--cpus=2"});
  const std::string line = daemon.ReadStdoutLine(kTimeout);
  EXPECT_THAT(line, ::testing::HasSubstr("no reflection"));
  std::vector<std::string> services;
  const grpc::Status s =
      ListServices(Port(line, R"(listening on 127\.0\.0\.1:(\d+) )"),
                   &services);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << s.error_message();
  EXPECT_TRUE(services.empty());
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.WaitExit(kTimeout), 0) << daemon.ReadStderr();
}

TEST(ReflectionTest, OnWhenAskedButNeverOnTheHealthPort) {
  Daemon daemon({"--listen=127.0.0.1:0", "--metrics_listen=", "--cpus=2",
                 "--reflection=on", "--health_listen=127.0.0.1:0"});
  const std::string line = daemon.ReadStdoutLine(kTimeout);
  std::vector<std::string> services;
  grpc::Status s = ListServices(
      Port(line, R"(listening on 127\.0\.0\.1:(\d+) )"), &services);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(services, Contains("cgacct.v1.Accounting"));
  services.clear();
  s = ListServices(Port(line, R"(health on 127\.0\.0\.1:(\d+))"), &services);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << s.error_message();
  EXPECT_TRUE(services.empty());
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.WaitExit(kTimeout), 0) << daemon.ReadStderr();
}

TEST(ReflectionTest, AutoIsOffUnderAccessControl) {
  char tokens[] = "/tmp/cgacct_reflection_tokens_XXXXXX";
  const int fd = mkstemp(tokens);
  ASSERT_GE(fd, 0);
  const std::string line_text = "tenant token-of-the-tenant-0123456789\n";
  ASSERT_EQ(write(fd, line_text.data(), line_text.size()),
            static_cast<ssize_t>(line_text.size()));
  close(fd);
  Daemon daemon({"--listen=127.0.0.1:0", "--metrics_listen=", "--cpus=2",
                 "--reflection=auto", std::string("--tokens_file=") + tokens});
  const std::string line = daemon.ReadStdoutLine(kTimeout);
  std::vector<std::string> services;
  const grpc::Status s = ListServices(
      Port(line, R"(listening on 127\.0\.0\.1:(\d+) )"), &services);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << s.error_message();
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.WaitExit(kTimeout), 0) << daemon.ReadStderr();
  unlink(tokens);
}

}  // namespace
