// cgacctd's grpc.health.v1 (server/rpc/health_service.h) through a real
// in-process server and the standard client stubs: Check by name, NOT_FOUND
// for a name not served, Watch's first status and its changes, the end of
// Watch streams at shutdown, and the refusals of a request too large or not
// a HealthCheckRequest.
#include "server/rpc/health_service.h"

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"

namespace cgacct {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(false);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
    stub_ = Health::NewStub(channel_);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now());
  }

  grpc::Status Check(const std::string& service, HealthCheckResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, out);
  }

  // A raw unary call of `bytes` to `method` (no client-side type).
  grpc::Status RawCall(const char* method, const std::string& bytes) {
    grpc::GenericStub generic(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    bool done = false;
    std::mutex mu;
    std::condition_variable cv;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        std::lock_guard<std::mutex> l(mu);
                        status = std::move(s);
                        done = true;
                        cv.notify_one();
                      });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
    return status;
  }

  HealthStatuses statuses_{{"cgacct.v1.Accounting"}};
  HealthService service_{statuses_};
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckByName) {
  HealthCheckResponse response;
  for (const char* service : {"", "cgacct.v1.Accounting"}) {
    ASSERT_TRUE(Check(service, &response).ok()) << service;
    EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  }
  statuses_.SetServing(true);
  for (const char* service : {"", "cgacct.v1.Accounting"}) {
    ASSERT_TRUE(Check(service, &response).ok()) << service;
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  }
  const grpc::Status unknown = Check("no.such.Service", &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("no.such.Service"));
}

TEST_F(HealthServiceTest, RequestsTooLargeOrUndecodableAreRefused) {
  statuses_.SetServing(true);
  HealthCheckResponse response;
  // A service name of 5,000 bytes: over ReceiveGuard::kHealthRequestMaxBytes.
  const grpc::Status large = Check(std::string(5000, 's'), &response);
  EXPECT_EQ(large.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(large.error_message(), HasSubstr("4096"));
  EXPECT_THAT(large.error_message(), HasSubstr("request"));
  const grpc::Status garbage =
      RawCall("/grpc.health.v1.Health/Check", std::string("\xff\xff\xff", 3));
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(garbage.error_message(),
              HasSubstr("grpc.health.v1.HealthCheckRequest"));
  // The largest request allowed is answered.
  HealthCheckRequest just;
  just.set_service(std::string(4000, 's'));
  ASSERT_LE(just.ByteSizeLong(), 4096u);
  EXPECT_EQ(Check(just.service(), &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(HealthServiceTest, WatchSendsChangesThenEndsAtShutdown) {
  statuses_.SetServing(true);
  grpc::ClientContext context;
  HealthCheckRequest request;
  request.set_service("cgacct.v1.Accounting");
  auto watch = stub_->Watch(&context, request);
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  statuses_.SetServing(false);
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  statuses_.SetServing(true);
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  // A name not served: SERVICE_UNKNOWN, the stream stays open.
  grpc::ClientContext unknown_context;
  HealthCheckRequest unknown_request;
  unknown_request.set_service("no.such.Service");
  auto unknown = stub_->Watch(&unknown_context, unknown_request);
  ASSERT_TRUE(unknown->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  // Shutdown: NOT_SERVING, then the end (UNAVAILABLE), on both streams.
  statuses_.Shutdown();
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(watch->Read(&update));
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(unknown->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(unknown->Read(&update));
  EXPECT_EQ(unknown->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  // After it: a new Watch gets NOT_SERVING and ends; SetServing is ignored.
  statuses_.SetServing(true);
  grpc::ClientContext late_context;
  auto late = stub_->Watch(&late_context, request);
  ASSERT_TRUE(late->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(late->Read(&update));
  EXPECT_EQ(late->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  HealthCheckResponse response;
  ASSERT_TRUE(Check("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
}

// Open calls are bounded per client host: 64 Watches (a 65th refused
// RESOURCE_EXHAUSTED before its request is read; one ending frees its
// place) and 64 Checks whose request has not come (held open raw).
TEST_F(HealthServiceTest, OpenCallsAreBoundedPerHost) {
  statuses_.SetServing(true);
  constexpr int kMax = HealthStatuses::kMaxCallsPerHost;
  HealthCheckRequest request;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<HealthCheckResponse>>>
      watches;
  HealthCheckResponse update;
  for (int i = 0; i < kMax; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    watches.push_back(stub_->Watch(contexts.back().get(), request));
    ASSERT_TRUE(watches.back()->Read(&update)) << i;
  }
  {
    grpc::ClientContext context;
    auto refused = stub_->Watch(&context, request);
    EXPECT_FALSE(refused->Read(&update));
    const grpc::Status s = refused->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("ipv4:127.0.0.1"));
  }
  // A Check is still answered (its own bound).
  HealthCheckResponse response;
  EXPECT_TRUE(Check("", &response).ok());
  contexts[0]->TryCancel();
  while (watches[0]->Read(&update)) {
  }
  (void)watches[0]->Finish();
  // Its place is free once the server has seen the end.
  bool reopened = false;
  for (int attempt = 0; attempt < 100 && !reopened; ++attempt) {
    grpc::ClientContext context;
    auto again = stub_->Watch(&context, request);
    reopened = again->Read(&update);
    context.TryCancel();
    while (again->Read(&update)) {
    }
    (void)again->Finish();
    if (!reopened) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(reopened);
  for (size_t i = 1; i < contexts.size(); ++i) {
    contexts[i]->TryCancel();
    while (watches[i]->Read(&update)) {
    }
    (void)watches[i]->Finish();
  }
  // Checks held open with no request: one of 65 is refused (the server may
  // take them in any order), the others end at their deadline.
  std::vector<std::unique_ptr<grpc::ClientContext>> check_contexts;
  std::vector<std::unique_ptr<
      grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>>
      checks;
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(3);
  for (int i = 0; i <= kMax; ++i) {
    check_contexts.push_back(std::make_unique<grpc::ClientContext>());
    check_contexts.back()->set_deadline(deadline);
    checks.emplace_back(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer,
                                                  grpc::ByteBuffer>::
            Create(channel_.get(),
                   grpc::internal::RpcMethod(
                       "/grpc.health.v1.Health/Check",
                       grpc::internal::RpcMethod::BIDI_STREAMING),
                   check_contexts.back().get()));
  }
  // Each read at once, on a thread of its own (a client call whose status
  // came but was not read before its deadline reports the deadline).
  std::atomic<int> refused{0};
  std::atomic<int> timed_out{0};
  std::vector<std::thread> readers;
  for (auto& check : checks) {
    readers.emplace_back([&check, &refused, &timed_out] {
      grpc::ByteBuffer ignored;
      while (check->Read(&ignored)) {
      }
      const grpc::Status s = check->Finish();
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
      if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) ++timed_out;
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(timed_out.load(), kMax);
}

// Many watchers coming and going (cancelled by their clients) while the
// status flips: each ends, and the last status every live one reads is the
// last one set.
TEST_F(HealthServiceTest, WatchersComeAndGoWhileTheStatusFlips) {
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    bool serving = false;
    while (!stop.load()) {
      serving = !serving;
      statuses_.SetServing(serving);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> watchers;
  std::atomic<int> reads{0};
  for (int t = 0; t < 4; ++t) {
    watchers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        grpc::ClientContext context;
        HealthCheckRequest request;
        auto watch = stub_->Watch(&context, request);
        HealthCheckResponse update;
        for (int r = 0; r < 3 && watch->Read(&update); ++r) ++reads;
        context.TryCancel();
        while (watch->Read(&update)) {
        }
        EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::CANCELLED);
      }
    });
  }
  for (std::thread& t : watchers) t.join();
  stop = true;
  flipper.join();
  EXPECT_GE(reads.load(), 100);
  statuses_.SetServing(true);
  grpc::ClientContext context;
  HealthCheckRequest request;
  auto watch = stub_->Watch(&context, request);
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);
  context.TryCancel();
  while (watch->Read(&update)) {
  }
  (void)watch->Finish();
}

}  // namespace
}  // namespace cgacct
