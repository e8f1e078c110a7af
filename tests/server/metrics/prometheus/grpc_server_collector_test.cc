// The grpc_server_* families end to end (server/metrics/prometheus/
// room_collectors.h, server/rpc/metrics_interceptor.h): the real service
// behind a real server with the interceptor, scraped. A cgacct.v1.Accounting
// call is counted once, by the pipeline; health is counted by the
// interceptor.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/events/events_hub.h"
#include "server/metrics/grpc_server_metrics.h"
#include "server/metrics/prometheus/families.h"
#include "server/metrics/prometheus/room_collectors.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "server/rpc/metrics_interceptor.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kPage = 4096;

std::unique_ptr<Engine> NewEngine(EngineObserver* observer = nullptr) {
  EngineOptions options;
  options.nr_cpus = 2;
  options.page_size_bytes = kPage;
  options.observer = observer;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

// The value of the one series `series` ("name{labels}") in `text`, or -1.
double SeriesValue(const std::string& text, const std::string& series) {
  const std::string prefix = series + " ";
  size_t at = 0;
  while ((at = text.find(prefix, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      return std::stod(text.substr(at + prefix.size()));
    }
    at += prefix.size();
  }
  return -1;
}

// --- Per-group series policy ---------------------------------------------

class GrpcServerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // WatchEvents needs the hub as the engine's observer.
    hub_ = std::make_unique<EventsHub>();
    engine_ = NewEngine(hub_.get());
    AccountingServiceOptions options;
    options.events_hub = hub_.get();
    service_ =
        std::make_unique<AccountingService>(*engine_, rpc_metrics_, options);
    grpc::EnableDefaultHealthCheckService(true);
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(NewMetricsInterceptorFactory(&grpc_metrics_));
    InProcessServer started =
        StartInProcessServer(service_.get(), std::move(interceptors));
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    channel_ = std::move(started.channel);
    stub_ = std::move(started.stub);
  }

  void TearDown() override {
    hub_->Shutdown();
    if (server_) server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  grpc::Status CreateGroup(const std::string& path) {
    v1::CreateGroupRequest request;
    request.set_path(path);
    v1::Group group;
    grpc::ClientContext context;
    return stub_->CreateGroup(&context, request, &group);
  }

  std::string Scrape() {
    return SerializeMetrics(GrpcServerCollector(grpc_metrics_, &rpc_metrics_));
  }

  RpcMetrics rpc_metrics_;
  GrpcServerMetrics grpc_metrics_{CgacctdGrpcMethods()};
  std::unique_ptr<EventsHub> hub_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST_F(GrpcServerMetricsTest, UnaryCallsByCodeWithGoNames) {
  ASSERT_TRUE(CreateGroup("/g").ok());
  ASSERT_TRUE(CreateGroup("/h").ok());
  EXPECT_EQ(CreateGroup("/g").error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(CreateGroup("no-slash").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  const std::string text = Scrape();
  const std::string labels =
      "grpc_method=\"CreateGroup\",grpc_service=\"cgacct.v1.Accounting\","
      "grpc_type=\"unary\"";
  EXPECT_EQ(SeriesValue(text, "grpc_server_started_total{" + labels + "}"), 4);
  EXPECT_EQ(SeriesValue(text, "grpc_server_handled_total{grpc_code=\"OK\"," +
                                  labels + "}"),
            2);
  EXPECT_EQ(SeriesValue(
                text, "grpc_server_handled_total{grpc_code=\"AlreadyExists\"," +
                          labels + "}"),
            1);
  EXPECT_EQ(
      SeriesValue(text,
                  "grpc_server_handled_total{grpc_code=\"InvalidArgument\"," +
                      labels + "}"),
      1);
  EXPECT_EQ(SeriesValue(text, "grpc_server_msg_received_total{" + labels + "}"),
            4);
  // An error status sends no response message.
  EXPECT_EQ(SeriesValue(text, "grpc_server_msg_sent_total{" + labels + "}"), 2);
  EXPECT_EQ(
      SeriesValue(text, "grpc_server_handling_seconds_count{" + labels + "}"),
      4);
  EXPECT_EQ(SeriesValue(text, "grpc_server_handling_seconds_bucket{" + labels +
                                  ",le=\"+Inf\"}"),
            4);
  // A method never called: started 0, handled OK 0, no other code.
  const std::string reclaim =
      "grpc_method=\"Reclaim\",grpc_service=\"cgacct.v1.Accounting\","
      "grpc_type=\"unary\"";
  EXPECT_EQ(SeriesValue(text, "grpc_server_started_total{" + reclaim + "}"), 0);
  EXPECT_EQ(SeriesValue(text, "grpc_server_handled_total{grpc_code=\"OK\"," +
                                  reclaim + "}"),
            0);
  EXPECT_THAT(text, Not(HasSubstr("grpc_code=\"NotFound\"," + reclaim)));
  // ... and no histogram until it handles a call (issue 26, item 8).
  EXPECT_THAT(text, Not(HasSubstr("grpc_server_handling_seconds_bucket{" +
                                  reclaim)));
  EXPECT_THAT(text, Not(HasSubstr("grpc_server_handling_seconds_count{" +
                                  reclaim)));
  // The one family reads the pipeline's own count (RpcMetrics); there is
  // no cgacct_grpc_server_* beside it.
  EXPECT_EQ(rpc_metrics_.handled(RpcMethod::kCreateGroup,
                                 grpc::StatusCode::ALREADY_EXISTS),
            1u);
}

TEST_F(GrpcServerMetricsTest, StreamMessagesAreCounted) {
  ASSERT_TRUE(CreateGroup("/s").ok());
  {
    grpc::ClientContext context;
    auto stream = stub_->ChargeStream(&context);
    for (int i = 0; i < 5; ++i) {
      v1::ChargeBatchRequest request;
      v1::ChargeOp* op = request.add_ops();
      op->set_id(i);
      op->set_path("/s");
      op->set_nr_pages(1);
      op->set_kind(v1::PAGE_KIND_ANON);
      ASSERT_TRUE(stream->Write(request));
      v1::ChargeBatchResponse response;
      ASSERT_TRUE(stream->Read(&response));
    }
    stream->WritesDone();
    v1::ChargeBatchResponse extra;
    EXPECT_FALSE(stream->Read(&extra));
    ASSERT_TRUE(stream->Finish().ok());
  }
  {
    // A watch cancelled by the client after its first update.
    grpc::ClientContext context;
    v1::WatchEventsRequest request;
    request.set_path("/s");
    auto reader = stub_->WatchEvents(&context, request);
    v1::EventsUpdate update;
    ASSERT_TRUE(reader->Read(&update));
    context.TryCancel();
    while (reader->Read(&update)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The server answers the stream's end after the client saw it: wait for
  // the handled count rather than race it.
  const std::string stream_labels =
      "grpc_method=\"ChargeStream\",grpc_service=\"cgacct.v1.Accounting\","
      "grpc_type=\"bidi_stream\"";
  const std::string watch_labels =
      "grpc_method=\"WatchEvents\",grpc_service=\"cgacct.v1.Accounting\","
      "grpc_type=\"server_stream\"";
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text = Scrape();
    if (SeriesValue(text, "grpc_server_handling_seconds_count{" + watch_labels +
                              "}") == 1) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(
      SeriesValue(text, "grpc_server_started_total{" + stream_labels + "}"), 1);
  EXPECT_EQ(SeriesValue(
                text, "grpc_server_msg_received_total{" + stream_labels + "}"),
            5);
  EXPECT_EQ(
      SeriesValue(text, "grpc_server_msg_sent_total{" + stream_labels + "}"),
      5);
  EXPECT_EQ(SeriesValue(text, "grpc_server_handled_total{grpc_code=\"OK\"," +
                                  stream_labels + "}"),
            1);
  EXPECT_EQ(
      SeriesValue(text, "grpc_server_msg_received_total{" + watch_labels + "}"),
      1);
  EXPECT_GE(
      SeriesValue(text, "grpc_server_msg_sent_total{" + watch_labels + "}"), 1);
  EXPECT_EQ(SeriesValue(text, "grpc_server_handling_seconds_count{" +
                                  watch_labels + "}"),
            1);
}

TEST_F(GrpcServerMetricsTest, HealthServiceIsCountedToo) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;  // "" = the whole server
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string text = Scrape();
  EXPECT_EQ(SeriesValue(text,
                        "grpc_server_handled_total{grpc_code=\"OK\","
                        "grpc_method=\"Check\",grpc_service=\"grpc.health.v1."
                        "Health\",grpc_type=\"unary\"}"),
            1);
}

// --- process_* and cgacct_build_info
// ------------------------------------------

}  // namespace
}  // namespace cgacct
