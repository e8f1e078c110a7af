// One pipeline for every entry point (docs/DESIGN.md §2.4, §4.11), through a
// real channel to an in-process server: a refusal gets the same code and
// message whichever RPC carried it, and every call (WatchEvents included)
// passes admission -- shutdown, its deadline, the caller's limits -- before
// its request is read. Each test here failed on main at 949c495: the batch
// and the stream checked the root before authorization, and WatchEvents
// parsed, authorized and resolved before admission and never looked at its
// deadline.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/auth/authorizer.h"
#include "server/events/events_hub.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-of-tenant-a-0123456789";

// Delays every received message by 300 ms before the handler sees it, so a
// call with a 100 ms deadline reaches its handler late.
class DelayInterceptor final : public grpc::experimental::Interceptor {
 public:
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_MESSAGE)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    methods->Proceed();
  }
};
class DelayFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo*) override {
    return new DelayInterceptor;
  }
};

class StageOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 2;
    options.observer = &hub_;
    engine_ = std::move(*Engine::Create(options));
    ASSERT_TRUE(engine_->CreateGroup("/tenants", {}).ok());
    ASSERT_TRUE(engine_->CreateGroup("/tenants/a", {}).ok());
  }

  void TearDown() override {
    hub_.Shutdown();
    if (server_ != nullptr) server_->Shutdown();
    if (service_ != nullptr) service_->StopSessionStreams();
    server_.reset();
  }

  // `access_control`: tenant-a's token, rw /tenants/a. `delay`: every
  // request reaches its handler 300 ms late.
  void Start(bool access_control, uint32_t max_streams = 0,
             bool delay = false) {
    AccountingServiceOptions options;
    options.events_hub = &hub_;
    options.limits.max_streams_per_identity = max_streams;
    if (access_control) {
      AuthConfig config;
      config.tokens = *TokenTable::Parse(absl::StrCat("tenant-a ", kTokenA));
      config.policy = *AuthzPolicy::Parse("token:tenant-a rw /tenants/a\n");
      authorizer_ = std::make_unique<Authorizer>(std::move(config), nullptr);
      options.authorizer = authorizer_.get();
    }
    service_ = std::make_unique<AccountingService>(*engine_, metrics_, options);
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    if (delay) interceptors.push_back(std::make_unique<DelayFactory>());
    InProcessServer started =
        StartInProcessServer(service_.get(), std::move(interceptors));
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
  }

  std::unique_ptr<grpc::ClientContext> Context(bool token = true) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    if (token)
      context->AddMetadata("authorization", absl::StrCat("Bearer ", kTokenA));
    return context;
  }

  static v1::ChargeOp Op(const std::string& path) {
    v1::ChargeOp op;
    op.set_path(path);
    op.set_nr_pages(1);
    op.set_kind(v1::PAGE_KIND_ANON);
    return op;
  }

  // The answer to charging `path` through Charge, a ChargeBatch op and a
  // ChargeStream op: {code, message} each (an op's message without its
  // "ops[0]: " prefix).
  std::vector<std::pair<int, std::string>> ThreeWays(const std::string& path,
                                                     bool token = true) {
    std::vector<std::pair<int, std::string>> out;
    {
      v1::ChargeRequest request;
      request.set_path(path);
      request.set_nr_pages(1);
      request.set_kind(v1::PAGE_KIND_ANON);
      v1::ChargeResponse response;
      grpc::Status s = stub_->Charge(Context(token).get(), request, &response);
      out.emplace_back(s.error_code(), s.error_message());
    }
    v1::ChargeBatchRequest batch;
    *batch.add_ops() = Op(path);
    auto strip = [](const std::string& m) {
      return m.rfind("ops[0]: ", 0) == 0 ? m.substr(8) : m;
    };
    {
      v1::ChargeBatchResponse response;
      grpc::Status s =
          stub_->ChargeBatch(Context(token).get(), batch, &response);
      if (!s.ok() || response.results_size() != 1) {
        out.emplace_back(s.error_code(), s.error_message());
      } else {
        out.emplace_back(response.results(0).code(),
                         strip(response.results(0).message()));
      }
    }
    {
      auto context = Context(token);
      auto stream = stub_->ChargeStream(context.get());
      v1::ChargeBatchResponse response;
      if (stream->Write(batch) && stream->Read(&response) &&
          response.results_size() == 1) {
        out.emplace_back(response.results(0).code(),
                         strip(response.results(0).message()));
        stream->WritesDone();
        stream->Finish();
      } else {
        stream->WritesDone();
        grpc::Status s = stream->Finish();
        out.emplace_back(s.error_code(), s.error_message());
      }
    }
    return out;
  }

  EventsHub hub_;
  RpcMetrics metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST_F(StageOrderTest, ATenantChargingTheRootGetsOneAnswerThreeWays) {
  Start(/*access_control=*/true);
  const auto answers = ThreeWays("/");
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[0].first, grpc::StatusCode::INVALID_ARGUMENT)
      << answers[0].second;
  EXPECT_EQ(answers[1], answers[0]);
  EXPECT_EQ(answers[2], answers[0]);
}

TEST_F(StageOrderTest, APathOutsideTheGrantGetsOneAnswerThreeWays) {
  Start(/*access_control=*/true);
  for (const std::string path : {"/tenants/b", "/tenants/a/../b"}) {
    const auto answers = ThreeWays(path);
    ASSERT_EQ(answers.size(), 3u);
    EXPECT_EQ(answers[1], answers[0]) << path;
    EXPECT_EQ(answers[2], answers[0]) << path;
  }
  EXPECT_EQ(ThreeWays("/tenants/b")[0].first,
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(StageOrderTest, NoCredentialsIsUnauthenticatedThreeWays) {
  Start(/*access_control=*/true);
  for (const auto& [code, message] : ThreeWays("/", /*token=*/false)) {
    EXPECT_EQ(code, grpc::StatusCode::UNAUTHENTICATED) << message;
  }
}

TEST_F(StageOrderTest, WatchEventsPastItsDeadlineIsRefused) {
  Start(/*access_control=*/false, 0, /*delay=*/true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(100));
  v1::WatchEventsRequest request;
  request.set_path("/tenants/a");
  auto reader = stub_->WatchEvents(&context, request);
  v1::EventsUpdate update;
  EXPECT_FALSE(reader->Read(&update));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server refused it too: counted as such, no stream held.
  for (int i = 0;
       i < 100 && metrics_.handled(RpcMethod::kWatchEvents,
                                   grpc::StatusCode::DEADLINE_EXCEEDED) == 0;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(metrics_.handled(RpcMethod::kWatchEvents,
                             grpc::StatusCode::DEADLINE_EXCEEDED),
            1u);
  EXPECT_EQ(service_->limiter().InUse(CallLimiter::Kind::kStream, ""), 0u);
}

TEST_F(StageOrderTest, WatchEventsIsAdmittedBeforeItsRequestIsRead) {
  Start(/*access_control=*/false, /*max_streams=*/1);
  // One stream held: the caller's limit.
  auto held_context = Context(false);
  auto held = stub_->ChargeStream(held_context.get());
  for (int i = 0; i < 100 && service_->limiter().InUse(
                                 CallLimiter::Kind::kStream, "") == 0;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // A watch of a bad path is shed, not told its path is bad.
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  request.set_path("/bad/");
  auto reader = stub_->WatchEvents(&context, request);
  v1::EventsUpdate update;
  EXPECT_FALSE(reader->Read(&update));
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("shedding load"));
  const auto& trailers = context.GetServerTrailingMetadata();
  auto shed = trailers.find("cgacct-shed");
  ASSERT_NE(shed, trailers.end());
  EXPECT_EQ(std::string(shed->second.data(), shed->second.size()),
            "streams_per_identity");
  held->WritesDone();
  EXPECT_TRUE(held->Finish().ok());
}

TEST_F(StageOrderTest, WatchEventsAfterShutdownBeganIsUnavailable) {
  Start(/*access_control=*/false);
  service_->BeginShutdown();
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  request.set_path("/tenants/a");
  auto reader = stub_->WatchEvents(&context, request);
  v1::EventsUpdate update;
  EXPECT_FALSE(reader->Read(&update));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace cgacct
