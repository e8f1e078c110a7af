// Issue 12 items 1 and 5, in process: the per-group series policy
// (--metrics_group_depth, --metrics_max_groups, cgacct_group_series_dropped,
// the one-time message), memory.max and memory.events per group, the
// grpc_server_* family through the interceptor on a real server, process_*
// and cgacct_build_info.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "health_check.grpc.pb.h"
#include "server/accounting_service.h"
#include "server/events_watch.h"
#include "server/grpc_metrics.h"
#include "server/metrics.h"
#include "server/process_metrics.h"
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

// Lines of `family` ("name{" prefix) in `text`.
int CountSeries(const std::string& text, const std::string& family) {
  int n = 0;
  size_t at = 0;
  const std::string prefix = "\n" + family + "{";
  while ((at = text.find(prefix, at)) != std::string::npos) {
    ++n;
    at += prefix.size();
  }
  return n;
}

// --- Per-group series policy ---------------------------------------------

class GroupSeriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = NewEngine(&flush_);
    // / -> /a (max 8 pages) -> /a/x -> /a/x/deep; /b, /c.
    LimitsUpdate a_limits;
    a_limits.max_pages = 8;
    ASSERT_TRUE(engine_->CreateGroup("/a", a_limits).ok());
    ASSERT_TRUE(engine_->CreateGroup("/a/x", LimitsUpdate()).ok());
    ASSERT_TRUE(engine_->CreateGroup("/a/x/deep", LimitsUpdate()).ok());
    ASSERT_TRUE(engine_->CreateGroup("/b", LimitsUpdate()).ok());
    ASSERT_TRUE(engine_->CreateGroup("/c", LimitsUpdate()).ok());
  }

  std::string Scrape(MetricsOptions options) {
    MetricsCollector collector(*engine_, flush_, rpc_, std::move(options));
    return SerializeMetrics(collector);
  }

  RstatFlushObserver flush_;
  RpcMetrics rpc_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(GroupSeriesTest, CurrentMaxAndEventsPerGroup) {
  // /a/x charges 8 pages (its parent's max), then one more: an OOM at /a.
  ASSERT_TRUE(engine_->Charge("/a/x", 8, PageKind::kAnon).ok());
  EXPECT_EQ(engine_->Charge("/a/x", 1, PageKind::kAnon).status().code(),
            absl::StatusCode::kResourceExhausted);
  MetricsOptions options;
  options.group_depth = 3;
  const std::string text = Scrape(options);

  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_group_memory_max_bytes gauge"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE cgacct_group_memory_events_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_group_series_dropped gauge"));
  EXPECT_EQ(SeriesValue(text,
                        "cgacct_group_memory_current_bytes{path=\"/a/x\"}"),
            8.0 * kPage);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_max_bytes{path=\"/a\"}"),
            8.0 * kPage);
  // "max" is +Inf.
  EXPECT_THAT(text,
              HasSubstr("cgacct_group_memory_max_bytes{path=\"/b\"} +Inf\n"));
  EXPECT_THAT(text,
              HasSubstr("cgacct_group_memory_max_bytes{path=\"/\"} +Inf\n"));
  // memory.events is hierarchical: the OOM at /a's limit counts at /a (and
  // would at its non-root ancestors), not at /a/x (the charging child) or
  // /b.
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_events_total{event=\"oom\","
                              "path=\"/a\"}"),
            1);
  // max: once per reclaim retry of the failing charge.
  EXPECT_GE(SeriesValue(text, "cgacct_group_memory_events_total{event=\"max\","
                              "path=\"/a\"}"),
            1);
  // The root never counts events (memcg_memory_event() stops below it).
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_events_total{event=\"oom\","
                              "path=\"/\"}"),
            0);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_events_total{event=\"oom\","
                              "path=\"/a/x\"}"),
            0);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_memory_events_total{event=\"oom\","
                              "path=\"/b\"}"),
            0);
  // The kinds that can happen here, each present for every group; the two
  // that are always 0 (oom_group_kill, sock_throttled) are not exported.
  for (const char* kind : {"low", "high", "max", "oom", "oom_kill"}) {
    EXPECT_GE(SeriesValue(text,
                          absl::StrCat("cgacct_group_memory_events_total{event="
                                       "\"",
                                       kind, "\",path=\"/c\"}")),
              0)
        << kind;
  }
  EXPECT_THAT(text, Not(HasSubstr("event=\"sock_throttled\"")));
  // The global counter stays, without a group label (alerts use it).
  EXPECT_THAT(text, HasSubstr("\ncgacct_oom_total 1\n"));
  // Depth 3 covers all 6 groups.
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_current_bytes"), 6);
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_max_bytes"), 6);
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_events_total"), 6 * 5);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_series_dropped{reason=\"depth\"}"),
            0);
  EXPECT_EQ(
      SeriesValue(text, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      0);
}

TEST_F(GroupSeriesTest, DepthLeavesDeeperGroupsOutAndCountsThem) {
  MetricsOptions options;
  options.group_depth = 1;
  const std::string text = Scrape(options);
  // /, /a, /b, /c; not /a/x nor /a/x/deep.
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_current_bytes"), 4);
  EXPECT_THAT(text, Not(HasSubstr("path=\"/a/x\"")));
  EXPECT_EQ(SeriesValue(text, "cgacct_group_series_dropped{reason=\"depth\"}"),
            2);
  EXPECT_EQ(
      SeriesValue(text, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      0);

  // Depth 0: no per-group series, every group counted as left out.
  options.group_depth = 0;
  const std::string off = Scrape(options);
  EXPECT_THAT(off, Not(HasSubstr("cgacct_group_memory_current_bytes")));
  EXPECT_THAT(off, Not(HasSubstr("cgacct_group_memory_events_total")));
  EXPECT_EQ(SeriesValue(off, "cgacct_group_series_dropped{reason=\"depth\"}"),
            6);
}

TEST_F(GroupSeriesTest, MaxGroupsKeepsTheShallowestAndSaysSoOnce) {
  std::vector<std::string> messages;
  MetricsOptions options;
  options.group_depth = 3;
  options.max_groups = 3;
  options.on_first_drop = [&messages](const std::string& m) {
    messages.push_back(m);
  };
  MetricsCollector collector(*engine_, flush_, rpc_, options);
  const std::string text = SerializeMetrics(collector);
  // Level order, path order within a level: /, /a, /b; not /c nor deeper.
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_current_bytes"), 3);
  EXPECT_EQ(CountSeries(text, "cgacct_group_memory_max_bytes"), 3);
  for (const char* path : {"/", "/a", "/b"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat(
                          "cgacct_group_memory_current_bytes{path=\"", path,
                          "\"}")));
  }
  EXPECT_THAT(text, Not(HasSubstr("path=\"/c\"")));
  // /c, /a/x and /a/x/deep are within the depth: left out by the count.
  EXPECT_EQ(
      SeriesValue(text, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      3);
  EXPECT_EQ(SeriesValue(text, "cgacct_group_series_dropped{reason=\"depth\"}"),
            0);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_THAT(messages[0], HasSubstr("3 of 6 groups"));
  EXPECT_THAT(messages[0], HasSubstr("--metrics_max_groups=3"));
  EXPECT_THAT(messages[0], HasSubstr("cgacct_group_series_dropped"));

  // Later scrapes still count, but say nothing more.
  ASSERT_TRUE(engine_->CreateGroup("/d", LimitsUpdate()).ok());
  const std::string again = SerializeMetrics(collector);
  EXPECT_EQ(
      SeriesValue(again, "cgacct_group_series_dropped{reason=\"max_groups\"}"),
      4);
  EXPECT_EQ(messages.size(), 1u);
}

// --- grpc_server_* ---------------------------------------------------------

class GrpcServerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // WatchEvents needs the hub as the engine's observer.
    hub_ = std::make_unique<EventsWatchHub>();
    engine_ = NewEngine(hub_.get());
    AccountingServiceOptions options;
    options.events_hub = hub_.get();
    service_ = std::make_unique<AccountingService>(*engine_, rpc_metrics_,
                                                   options);
    grpc::EnableDefaultHealthCheckService(true);
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(grpc_metrics_.NewInterceptorFactory());
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

  std::string Scrape() { return SerializeMetrics(grpc_metrics_); }

  RpcMetrics rpc_metrics_;
  GrpcServerMetrics grpc_metrics_{CgacctdGrpcMethods()};
  std::unique_ptr<EventsWatchHub> hub_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST(GrpcMethodsTest, TypesFromTheProto) {
  const std::vector<GrpcMethodInfo> methods = CgacctdGrpcMethods();
  auto type_of = [&methods](const std::string& service,
                            const std::string& method) -> std::string {
    for (const GrpcMethodInfo& m : methods) {
      if (m.service == service && m.method == method) return m.type;
    }
    return "absent";
  };
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "Charge"), "unary");
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "ChargeStream"), "bidi_stream");
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "WatchEvents"), "server_stream");
  EXPECT_EQ(type_of("cgacct.v1.Accounting", "GetEngineInfo"), "unary");
  EXPECT_EQ(type_of("grpc.health.v1.Health", "Check"), "unary");
  EXPECT_EQ(type_of("grpc.health.v1.Health", "Watch"), "server_stream");
  EXPECT_EQ(GrpcCodeGoName(grpc::StatusCode::OK), std::string("OK"));
  EXPECT_EQ(GrpcCodeGoName(grpc::StatusCode::CANCELLED),
            std::string("Canceled"));
  EXPECT_EQ(GrpcCodeGoName(grpc::StatusCode::INVALID_ARGUMENT),
            std::string("InvalidArgument"));
  EXPECT_EQ(GrpcCodeGoName(grpc::StatusCode::RESOURCE_EXHAUSTED),
            std::string("ResourceExhausted"));
  EXPECT_EQ(GrpcCodeGoName(grpc::StatusCode::UNAUTHENTICATED),
            std::string("Unauthenticated"));
  EXPECT_EQ(GrpcCodeGoName(99),
            std::string("Unknown"));
}

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
  EXPECT_EQ(SeriesValue(text,
                        "grpc_server_handled_total{grpc_code=\"AlreadyExists\"," +
                            labels + "}"),
            1);
  EXPECT_EQ(
      SeriesValue(text, "grpc_server_handled_total{grpc_code=\"InvalidArgument\"," +
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
  // The cgacct_grpc_* families are kept beside (in RpcMetrics).
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
    if (SeriesValue(text, "grpc_server_handling_seconds_count{" +
                              watch_labels + "}") == 1) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(SeriesValue(text, "grpc_server_started_total{" + stream_labels + "}"),
            1);
  EXPECT_EQ(
      SeriesValue(text, "grpc_server_msg_received_total{" + stream_labels + "}"),
      5);
  EXPECT_EQ(SeriesValue(text, "grpc_server_msg_sent_total{" + stream_labels + "}"),
            5);
  EXPECT_EQ(SeriesValue(text, "grpc_server_handled_total{grpc_code=\"OK\"," +
                                  stream_labels + "}"),
            1);
  EXPECT_EQ(
      SeriesValue(text, "grpc_server_msg_received_total{" + watch_labels + "}"),
      1);
  EXPECT_GE(SeriesValue(text, "grpc_server_msg_sent_total{" + watch_labels + "}"),
            1);
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

// --- process_* and cgacct_build_info ------------------------------------------

TEST(ProcessCollectorTest, ReadsThisProcess) {
  const std::string text = SerializeMetrics(ProcessCollector());
  for (const char* family :
       {"# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_THAT(text, HasSubstr(family));
  }
  const double rss = SeriesValue(text, "process_resident_memory_bytes");
  const double vsz = SeriesValue(text, "process_virtual_memory_bytes");
  EXPECT_GT(rss, 1 << 20);  // a gtest binary with gRPC: megabytes
  EXPECT_GE(vsz, rss);
  // Open a descriptor: the count follows.
  const double fds = SeriesValue(text, "process_open_fds");
  EXPECT_GE(fds, 3);  // stdin, stdout, stderr at least
  const int fd = dup(0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(SeriesValue(SerializeMetrics(ProcessCollector()),
                        "process_open_fds"),
            fds + 1);
  close(fd);
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  EXPECT_EQ(SeriesValue(text, "process_max_fds"),
            static_cast<double>(nofile.rlim_cur));
  const double start = SeriesValue(text, "process_start_time_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);  // this test started less than an hour ago
  EXPECT_GE(SeriesValue(text, "process_cpu_seconds_total"), 0);
}

TEST(BuildInfoTest, VersionAndRevision) {
  const std::string text = SerializeMetrics(BuildInfoCollector());
  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_build_info gauge"));
  static const std::regex kLine(
      R"re(\ncgacct_build_info\{revision="([0-9a-f]{12}|unknown)",version="[0-9]+\.[0-9]+\.[0-9]+"\} 1\n)re");
  EXPECT_TRUE(std::regex_search(text, kLine)) << text;
  EXPECT_EQ(std::string(CgacctVersion()).empty(), false);
}

}  // namespace
}  // namespace cgacct
