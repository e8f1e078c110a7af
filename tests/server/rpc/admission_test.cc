// Admission (docs/DESIGN.md §4.10, server/pipeline/pipeline.h Admit) through
// a real channel to an in-process server: deadlines; the per-call page cap
// (Charge and a batch's per-request budget), shed streams and in-flight
// messages (RESOURCE_EXHAUSTED, the cgacct-shed trailer, cgacct_shed_total,
// nothing applied, never counted as an OOM), and EngineInfo's report of the
// limits.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/prometheus/collector.h"
#include "server/metrics/prometheus/families.h"
#include "server/metrics/rpc_metrics.h"
#include "server/pipeline/call_limiter.h"
#include "server/rpc/accounting_service.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;
constexpr int kCpus = 4;
using Kind = CallLimiter::Kind;

// A ChargeStream request of one op: 1 anon page on /g.
v1::ChargeBatchRequest OneAnonPageOnG() {
  v1::ChargeBatchRequest request;
  v1::ChargeOp* op = request.add_ops();
  op->set_path("/g");
  op->set_nr_pages(1);
  op->set_kind(v1::PAGE_KIND_ANON);
  return request;
}

class LimitsServiceTest : public ::testing::Test {
 public:
  static std::string ShedTrailer(const grpc::ClientContext& context) {
    const auto& trailers = context.GetServerTrailingMetadata();
    auto it = trailers.find(kShedMetadataKey);
    return it == trailers.end()
               ? ""
               : std::string(it->second.data(), it->second.size());
  }

 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = kCpus;
    options.page_size_bytes = kPage;
    engine_ = std::move(*Engine::Create(options));
    AccountingServiceOptions service_options;
    service_options.max_charge_pages = 100;
    service_options.limits.max_streams_per_identity = 1;
    service_options.limits.max_in_flight_per_identity = 2;
    service_options.transport.max_message_bytes = 1 << 20;
    service_options.transport.max_concurrent_streams_per_connection = 7;
    service_ = std::make_unique<AccountingService>(*engine_, rpc_metrics_,
                                                   service_options);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
    ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  }

  void TearDown() override {
    server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  grpc::Status Charge(uint64_t nr_pages, std::string* shed = nullptr) {
    v1::ChargeRequest request;
    request.set_path("/g");
    request.set_nr_pages(nr_pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub_->Charge(&context, request, &response);
    if (shed != nullptr) *shed = ShedTrailer(context);
    return s;
  }

  uint64_t AnonPages() {
    const absl::StatusOr<GroupStats> stats =
        engine_->GetStats("/g", FlushMode::kExact);
    EXPECT_TRUE(stats.ok());
    for (const StatEntry& entry : stats->stat) {
      if (entry.name == "anon") return entry.value / kPage;
    }
    return 0;
  }

  // Waits until the service holds `n` streams (a finished stream's permit
  // goes with its reactor, just after the client sees the end).
  void WaitForStreams(uint32_t n) {
    for (int i = 0;
         i < 500 && service_->limiter().InUse(Kind::kStream, "") != n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(service_->limiter().InUse(Kind::kStream, ""), n);
  }

  RpcMetrics rpc_metrics_;
  RstatFlushObserver flush_observer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST_F(LimitsServiceTest, ChargeOverThePerCallCapIsInvalidArgument) {
  const grpc::Status s = Charge(101);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("nr_pages 101"));
  EXPECT_THAT(s.error_message(), HasSubstr("cap of 100 pages"));
  EXPECT_EQ(AnonPages(), 0u);
  EXPECT_TRUE(Charge(100).ok());
  EXPECT_EQ(AnonPages(), 100u);
  // Uncharges are not capped.
  v1::UnchargeRequest uncharge;
  uncharge.set_path("/g");
  uncharge.set_nr_pages(100);
  uncharge.set_kind(v1::PAGE_KIND_ANON);
  v1::UnchargeResponse response;
  grpc::ClientContext context;
  EXPECT_TRUE(stub_->Uncharge(&context, uncharge, &response).ok());
}

TEST_F(LimitsServiceTest, BatchOpsShareOneBudgetPerRequest) {
  v1::ChargeBatchRequest request;
  auto add = [&](uint64_t nr_pages, bool uncharge, int kind) {
    v1::ChargeOp* op = request.add_ops();
    op->set_path("/g");
    op->set_nr_pages(nr_pages);
    op->set_uncharge(uncharge);
    op->set_kind(static_cast<v1::PageKind>(kind));
  };
  add(60, false, v1::PAGE_KIND_ANON);  // ok: 40 left
  add(50, false, v1::PAGE_KIND_ANON);  // over what is left
  add(30, false, 0);                   // invalid kind: takes nothing
  add(10, true, v1::PAGE_KIND_ANON);   // uncharge: not counted
  add(40, false, v1::PAGE_KIND_ANON);  // ok: 0 left
  add(1, false, v1::PAGE_KIND_ANON);   // over
  v1::ChargeBatchResponse response;
  for (int round = 0; round < 2; ++round) {  // the budget is per request
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->ChargeBatch(&context, request, &response).ok());
    ASSERT_EQ(response.results_size(), 6);
    EXPECT_EQ(response.results(0).code(), 0);
    EXPECT_EQ(response.results(1).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.results(1).message(),
                HasSubstr("ops[1]: nr_pages 50 exceeds the 40 pages left"));
    EXPECT_EQ(response.results(2).code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(response.results(2).message(), HasSubstr("kind"));
    EXPECT_EQ(response.results(3).code(), 0);
    EXPECT_EQ(response.results(4).code(), 0);
    EXPECT_EQ(response.results(5).code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(AnonPages(), 2 * (60 - 10 + 40));
}

TEST_F(LimitsServiceTest, UnaryCallsOverTheInFlightLimitAreShedNotOom) {
  std::vector<CallLimiter::Permit> held;
  for (int i = 0; i < 2; ++i)
    held.push_back(*service_->limiter().Acquire(Kind::kInFlight, ""));
  std::string trailer;
  const grpc::Status s = Charge(1, &trailer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("cgacctd is shedding load"));
  EXPECT_THAT(s.error_message(), HasSubstr("--max_in_flight_per_identity"));
  EXPECT_EQ(trailer, "in_flight_per_identity");
  EXPECT_EQ(AnonPages(), 0u);
  EXPECT_EQ(rpc_metrics_.shed(ShedReason::kInFlightPerIdentity), 1u);
  EXPECT_EQ(engine_->GetCounters().charges_oom, 0u);
  // GetEngineInfo is never shed, and reports the limits.
  {
    v1::EngineInfo info;
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub_->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info).ok());
    EXPECT_EQ(info.max_charge_pages(), 100u);
    EXPECT_EQ(info.max_streams_per_identity(), 1u);
    EXPECT_EQ(info.max_in_flight_per_identity(), 2u);
    EXPECT_EQ(info.max_message_bytes(), 1u << 20);
    EXPECT_EQ(info.max_concurrent_streams_per_connection(), 7u);
  }
  MetricsCollector collector(*engine_, flush_observer_, rpc_metrics_);
  const std::string text = SerializeMetrics(collector);
  EXPECT_THAT(
      text,
      HasSubstr("cgacct_shed_total{reason=\"in_flight_per_identity\"} 1"));
  EXPECT_THAT(
      text, HasSubstr("cgacct_shed_total{reason=\"streams_per_identity\"} 0"));
  EXPECT_THAT(text, HasSubstr("cgacct_charges_total{result=\"oom\"} 0"));
  held.pop_back();
  // A unary call's permit goes before its answer: sequential calls at the
  // limit all pass.
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(Charge(1).ok());
  held.clear();
  EXPECT_EQ(service_->limiter().InUse(Kind::kInFlight, ""), 0u);
}

TEST_F(LimitsServiceTest, StreamsOverTheLimitAreShed) {
  grpc::ClientContext first_context;
  auto first = stub_->ChargeStream(&first_context);
  const v1::ChargeBatchRequest request = OneAnonPageOnG();
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(first->Write(request));
  ASSERT_TRUE(first->Read(&response));
  WaitForStreams(1);

  grpc::ClientContext second_context;
  auto second = stub_->ChargeStream(&second_context);
  second->Write(request);
  EXPECT_FALSE(second->Read(&response));
  const grpc::Status shed = second->Finish();
  EXPECT_EQ(shed.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(shed.error_message(), HasSubstr("--max_streams_per_identity"));
  EXPECT_EQ(ShedTrailer(second_context), "streams_per_identity");
  EXPECT_EQ(rpc_metrics_.shed(ShedReason::kStreamsPerIdentity), 1u);
  EXPECT_EQ(AnonPages(), 1u);  // the shed stream applied nothing

  first->WritesDone();
  EXPECT_TRUE(first->Finish().ok());
  WaitForStreams(0);
  grpc::ClientContext third_context;
  auto third = stub_->ChargeStream(&third_context);
  ASSERT_TRUE(third->Write(request));
  ASSERT_TRUE(third->Read(&response));
  third->WritesDone();
  EXPECT_TRUE(third->Finish().ok());
  EXPECT_EQ(AnonPages(), 2u);
}

// Issue 22: each open ChargeStream keeps a read pending, and gRPC 1.51
// buffers a pending read's whole message (up to --max_message_bytes): past
// max_charge_streams_per_identity (cgacctd: the in-flight bytes over the
// largest message, with access control) a ChargeStream is shed at once,
// before any message of it is read.
TEST(ChargeStreamBoundTest, ChargeStreamsPastTheirBoundAreShedAtOnce) {
  EngineOptions options;
  options.nr_cpus = kCpus;
  options.page_size_bytes = kPage;
  std::unique_ptr<Engine> engine = std::move(*Engine::Create(options));
  ASSERT_TRUE(engine->CreateGroup("/g", {}).ok());
  RpcMetrics rpc_metrics;
  AccountingServiceOptions service_options;
  service_options.limits.max_streams_per_identity = 8;
  service_options.limits.max_charge_streams_per_identity = 2;
  auto service = std::make_unique<AccountingService>(*engine, rpc_metrics,
                                                     service_options);
  InProcessServer started = StartInProcessServer(service.get());
  ASSERT_NE(started.server, nullptr);
  const v1::ChargeBatchRequest request = OneAnonPageOnG();
  v1::ChargeBatchResponse response;
  grpc::ClientContext c1, c2, c3, w;
  auto s1 = started.stub->ChargeStream(&c1);
  auto s2 = started.stub->ChargeStream(&c2);
  ASSERT_TRUE(s1->Write(request));
  ASSERT_TRUE(s1->Read(&response));
  ASSERT_TRUE(s2->Write(request));
  ASSERT_TRUE(s2->Read(&response));
  auto s3 = started.stub->ChargeStream(&c3);
  s3->Write(request);
  EXPECT_FALSE(s3->Read(&response));
  const grpc::Status shed = s3->Finish();
  EXPECT_EQ(shed.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(shed.error_message(),
              HasSubstr("already has 2 ChargeStreams open"));
  EXPECT_EQ(LimitsServiceTest::ShedTrailer(c3),
            "charge_streams_per_identity");
  EXPECT_EQ(rpc_metrics.shed(ShedReason::kChargeStreamsPerIdentity), 1u);
  // Another kind of stream is still admitted; a ChargeStream that ends
  // makes room for the next.
  v1::OpenSessionResponse opened;
  {
    grpc::ClientContext open_context;
    ASSERT_TRUE(started.stub
                    ->OpenSession(&open_context, v1::OpenSessionRequest(),
                                  &opened)
                    .ok());
  }
  auto session = started.stub->SessionStream(&w);
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(opened.session_id());
  ASSERT_TRUE(session->Write(attach));
  v1::SessionServerMessage lease;
  EXPECT_TRUE(session->Read(&lease));
  EXPECT_GT(lease.expires_in_ms(), 0u);
  s1->WritesDone();
  EXPECT_TRUE(s1->Finish().ok());
  for (int i = 0; i < 500 && service->limiter().InUse(
                                 Kind::kChargeStream, "") != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  grpc::ClientContext c4;
  auto s4 = started.stub->ChargeStream(&c4);
  ASSERT_TRUE(s4->Write(request));
  EXPECT_TRUE(s4->Read(&response));
  s4->WritesDone();
  EXPECT_TRUE(s4->Finish().ok());
  s2->WritesDone();
  EXPECT_TRUE(s2->Finish().ok());
  w.TryCancel();
  (void)session->Finish();
  started.server->Shutdown();
  service->StopSessionStreams();
}

TEST_F(LimitsServiceTest, StreamRequestOverTheInFlightLimitEndsTheStream) {
  grpc::ClientContext context;
  auto stream = stub_->ChargeStream(&context);
  v1::ChargeBatchRequest request;
  v1::ChargeOp* op = request.add_ops();
  op->set_path("/g");
  op->set_nr_pages(1);
  op->set_kind(v1::PAGE_KIND_ANON);
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  // The first request's permit goes once the server saw its write complete.
  for (int i = 0;
       i < 500 && service_->limiter().InUse(Kind::kInFlight, "") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(service_->limiter().InUse(Kind::kInFlight, ""), 0u);
  std::vector<CallLimiter::Permit> held;
  for (int i = 0; i < 2; ++i)
    held.push_back(*service_->limiter().Acquire(Kind::kInFlight, ""));
  stream->Write(request);
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("cgacctd is shedding load"));
  EXPECT_EQ(ShedTrailer(context), "in_flight_per_identity");
  EXPECT_EQ(AnonPages(), 1u);  // the first request only
}

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
      grpc::experimental::ServerRpcInfo* info) override {
    return new DelayInterceptor;
  }
};

// A call whose deadline has passed when its handler starts changes nothing
// (checked before anything changes). Fails on main@700b79d: the late charge
// was applied although its caller had already seen DEADLINE_EXCEEDED.
TEST(DeadlineTest, ExpiredCallsChangeNothing) {
  EngineOptions engine_options;
  engine_options.nr_cpus = 2;
  engine_options.page_size_bytes = kPage;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(engine_options);
  ASSERT_TRUE(engine.ok());
  RpcMetrics metrics;
  AccountingService service(**engine, metrics);
  ASSERT_TRUE((*engine)->CreateGroup("/g", {}).ok());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  service.RegisterOn(builder);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      creators;
  creators.push_back(std::make_unique<DelayFactory>());
  builder.experimental().SetInterceptorCreators(std::move(creators));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  service.StartSessionStreams();
  auto stub = v1::Accounting::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(100));
    v1::ChargeRequest request;
    request.set_path("/g");
    request.set_nr_pages(5);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse response;
    EXPECT_EQ(stub->Charge(&context, request, &response).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(100));
    v1::CreateGroupRequest request;
    request.set_path("/late");
    v1::Group group;
    EXPECT_EQ(stub->CreateGroup(&context, request, &group).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  // Let the late handlers run (they are 300 ms behind), then look.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  (*engine)->DrainAllStock();
  absl::StatusOr<GroupStats> stats =
      (*engine)->GetStats("/g", FlushMode::kExact);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->memory_current_pages, 0u);
  EXPECT_FALSE((*engine)->GetStats("/late", FlushMode::kExact).ok());
  server->Shutdown();
  service.StopSessionStreams();  // before `server` goes (declared after it)
}

}  // namespace
}  // namespace cgacct
