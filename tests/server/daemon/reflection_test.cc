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
#include <cstdio>
#include <filesystem>
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
  // Said on the start line: anyone who connects reads the descriptors.
  EXPECT_THAT(line, ::testing::HasSubstr(", reflection (unauthenticated)"));
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

// gRPC's sync server (reflection's) runs a thread per open stream: 2,000
// unauthenticated reflection streams held open were 2,150 threads in
// cgacctd (the re-attack at c1df8aa). With the quota's thread limit (64)
// streams past it are refused RESOURCE_EXHAUSTED and the threads stay
// bounded.
TEST(ReflectionTest, OpenStreamsAreBoundedInThreads) {
  Daemon daemon({"--listen=127.0.0.1:0", "--metrics_listen=", "--cpus=2",
                 "--reflection=on"});
  const std::string line = daemon.ReadStdoutLine(kTimeout);
  const int port = Port(line, R"(listening on 127\.0\.0\.1:(\d+) )");
  ASSERT_GT(port, 0) << line;
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  auto stub = refl::ServerReflection::NewStub(channel);
  constexpr int kStreams = 200;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<
      refl::ServerReflectionRequest, refl::ServerReflectionResponse>>>
      streams;
  int answered = 0;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + kTimeout);
    streams.push_back(stub->ServerReflectionInfo(contexts.back().get()));
    refl::ServerReflectionRequest request;
    request.set_list_services("");
    streams.back()->Write(request);  // and held open: no WritesDone
  }
  std::vector<grpc::Status> ends;
  std::vector<bool> open(streams.size(), false);
  for (size_t i = 0; i < streams.size(); ++i) {
    refl::ServerReflectionResponse response;
    if (streams[i]->Read(&response)) {
      ++answered;  // a thread holds this stream open
      open[i] = true;
    } else {
      ends.push_back(streams[i]->Finish());
    }
  }
  int threads = 0;
  const std::string task_dir =
      "/proc/" + std::to_string(daemon.pid()) + "/task";
  for (const auto& entry : std::filesystem::directory_iterator(task_dir)) {
    (void)entry;
    ++threads;
  }
  std::printf("%d reflection streams held: %d answered, %zu refused; "
              "cgacctd has %d threads\n",
              kStreams, answered, ends.size(), threads);
  EXPECT_LE(answered, 64);
  EXPECT_FALSE(ends.empty());
  for (const grpc::Status& s : ends) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
  }
  EXPECT_LT(threads, 120);
  for (auto& context : contexts) context->TryCancel();
  for (size_t i = 0; i < streams.size(); ++i) {
    if (open[i]) (void)streams[i]->Finish();
  }
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
