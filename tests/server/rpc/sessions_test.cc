// Sessions (docs/DESIGN.md §4.14) end to end, through a real channel to an
// in-process server with the generated stubs: the lifecycle, every error,
// expiry and keepalive, reconnect, group deletion, request-id replay,
// races with close and expiry, clients killed with SIGKILL mid-charge, and
// drain_all_stock() over the network at the raw stream level. Every test
// fails on main before issue 13 (the session RPCs answered UNIMPLEMENTED
// there, and session_id was ignored).
//
// The SIGKILL test runs this binary itself as the child (SessionChild.
// DISABLED_ChargeLoop, selected by --gtest_filter and given the server's
// address in CGACCT_SESSION_CHILD_TARGET): gRPC does not survive fork()
// without exec.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/metrics/prometheus/families.h"
#include "server/metrics/prometheus/room_collectors.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "server/sessions/session_registry.h"
#include "tests/server/wait_for.h"

extern char** environ;

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;
using test_util::WaitFor;

constexpr uint64_t kPage = 4096;
constexpr int kCpus = 4;

using Stream = grpc::ClientReaderWriter<v1::SessionClientMessage,
                                        v1::SessionServerMessage>;

std::unique_ptr<grpc::ClientContext> Context(int seconds = 10) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds));
  return context;
}

// `n` threads released at once, thread i running call(i); Join() waits for
// them and returns how long each call took.
class Together {
 public:
  template <typename Call>
  Together(int n, Call call) : took_(n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, n, i, call] {
        ready_.fetch_add(1);
        while (ready_.load() < n) std::this_thread::yield();
        const absl::Time start = absl::Now();
        call(i);
        took_[i] = absl::Now() - start;
      });
    }
  }
  std::vector<absl::Duration> Join() {
    for (std::thread& t : threads_) t.join();
    return took_;
  }

 private:
  std::atomic<int> ready_{0};
  std::vector<absl::Duration> took_;  // took_[i]: thread i's until Join()
  std::vector<std::thread> threads_;
};

class SessionsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(SessionOptions()); }

  // A 3 s drain bound; /d at its max of 128 pages, 125 of them a session's
  // stock in /d/s (its id in *id), /d/c empty: a charge of 8 pages to /d/c
  // must drain the session.
  void FullUnderASessionsStock(std::string* id) {
    StartWithDrainTimeout(absl::Seconds(3));
    LimitsUpdate limits;
    limits.max_pages = 128;
    ASSERT_TRUE(engine_->CreateGroup("/d", limits).ok());
    ASSERT_TRUE(engine_->CreateGroup("/d/s", {}).ok());
    ASSERT_TRUE(engine_->CreateGroup("/d/c", {}).ok());
    *id = Open();
    ASSERT_TRUE(Charge("/d/s", 125, *id).ok());
  }
  void StartWithDrainTimeout(absl::Duration drain_timeout) {
    SessionOptions options;
    options.drain_timeout = drain_timeout;
    Start(options);
  }

  // `dedup_capacity` (0: the default): the request_id table's.
  void Start(SessionOptions sessions, size_t dedup_capacity = 0) {
    Stop();
    EngineOptions options;
    options.nr_cpus = kCpus;
    options.page_size_bytes = kPage;
    engine_ = std::move(*Engine::Create(options));
    AccountingServiceOptions service_options;
    service_options.sessions = sessions;
    if (dedup_capacity > 0) service_options.dedup.capacity = dedup_capacity;
    service_ = std::make_unique<AccountingService>(*engine_, rpc_metrics_,
                                                   service_options);
    // StartInProcessServer's recipe, keeping the port for child processes.
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    service_->RegisterOn(builder);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    service_->StartSessionStreams();
    ASSERT_NE(port, 0);
    server_target_ = absl::StrCat("127.0.0.1:", port);
    channel_ =
        grpc::CreateChannel(server_target_, grpc::InsecureChannelCredentials());
    stub_ = v1::Accounting::NewStub(channel_);
  }

  void Stop() {
    if (server_ == nullptr) return;
    // Ends the SessionStreams still open (UNAVAILABLE), so Shutdown()
    // does not wait for them.
    service_->BeginShutdown();
    server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  void TearDown() override { Stop(); }

  // Reads `stream` for `how_long`, answering every keepalive request as a
  // client does; the lease answers' expires_in_ms go to `leases`. Returns
  // the requests answered (-1 if the stream broke).
  static int AnswerKeepaliveRequests(Stream* stream, absl::Duration how_long,
                                     std::vector<uint64_t>* leases = nullptr) {
    int asked = 0;
    v1::SessionServerMessage answer;
    for (const absl::Time end = absl::Now() + how_long; absl::Now() < end;) {
      if (!stream->Read(&answer)) return -1;
      if (!answer.keepalive_request()) {
        if (leases != nullptr) leases->push_back(answer.expires_in_ms());
        continue;
      }
      ++asked;
      v1::SessionClientMessage keepalive;
      keepalive.set_keepalive(true);
      if (!stream->Write(keepalive)) return -1;
    }
    return asked;
  }

  std::string Open(uint32_t ttl_ms = 0) {
    v1::OpenSessionRequest request;
    request.set_ttl_ms(ttl_ms);
    request.set_client_name("sessions_test");
    v1::OpenSessionResponse response;
    const grpc::Status s =
        stub_->OpenSession(Context().get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.session_id();
  }

  grpc::Status Charge(const std::string& path, uint64_t nr_pages,
                      const std::string& session_id,
                      v1::PageKind kind = v1::PAGE_KIND_ANON,
                      const std::string& request_id = "",
                      v1::ChargeResponse* out = nullptr) {
    v1::ChargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(kind);
    if (!session_id.empty()) request.set_session_id(session_id);
    if (!request_id.empty()) request.set_request_id(request_id);
    v1::ChargeResponse response;
    const grpc::Status s = stub_->Charge(Context().get(), request, &response);
    if (out != nullptr) *out = response;
    return s;
  }

  grpc::Status Uncharge(const std::string& path, uint64_t nr_pages,
                        const std::string& session_id,
                        v1::PageKind kind = v1::PAGE_KIND_ANON) {
    v1::UnchargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(kind);
    if (!session_id.empty()) request.set_session_id(session_id);
    v1::UnchargeResponse response;
    return stub_->Uncharge(Context().get(), request, &response);
  }

  grpc::Status GetSession(const std::string& id, v1::SessionInfo* info) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    return stub_->GetSession(Context().get(), request, info);
  }

  grpc::Status Close(const std::string& id, uint64_t* returned = nullptr) {
    v1::CloseSessionRequest request;
    request.set_session_id(id);
    v1::CloseSessionResponse response;
    const grpc::Status s =
        stub_->CloseSession(Context().get(), request, &response);
    if (returned != nullptr) *returned = response.returned_pages();
    return s;
  }

  v1::GroupStats Stats(const std::string& path) {
    v1::GetStatsRequest request;
    request.set_path(path);
    request.set_flush(v1::FLUSH_MODE_EXACT);
    v1::GroupStats stats;
    const grpc::Status s = stub_->GetStats(Context().get(), request, &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return stats;
  }

  uint64_t CurrentPages(const std::string& path) {
    return Stats(path).memory_current_bytes() / kPage;
  }

  static uint64_t StatValue(const v1::GroupStats& stats,
                            const std::string& name) {
    for (const v1::StatEntry& e : stats.stat())
      if (e.name() == name) return e.value();
    return ~uint64_t{0};
  }

  std::string Metrics() {
    return SerializeMetrics(*MakeSessionMetrics(service_->sessions()));
  }

  // /d (max 128 pages) with /d/c, `holder` below it, and /e (no limit);
  // a session that holds 125 pages at `holder`. Returns its id.
  std::string SessionHoldingMostOfD(const std::string& holder) {
    LimitsUpdate limits;
    limits.max_pages = 128;
    EXPECT_TRUE(engine_->CreateGroup("/d", limits).ok());
    EXPECT_TRUE(engine_->CreateGroup(holder, {}).ok());
    EXPECT_TRUE(engine_->CreateGroup("/d/c", {}).ok());
    EXPECT_TRUE(engine_->CreateGroup("/e", {}).ok());
    const std::string id = Open();
    EXPECT_TRUE(Charge(holder, 125, id).ok());
    return id;
  }

  // Appends an ANON op (its id: its 1-based position).
  static void AddOp(v1::ChargeBatchRequest* request, const std::string& path,
                    uint64_t nr_pages, bool uncharge = false) {
    v1::ChargeOp* op = request->add_ops();
    op->set_id(static_cast<uint64_t>(request->ops_size()));
    op->set_path(path);
    op->set_nr_pages(nr_pages);
    op->set_kind(v1::PAGE_KIND_ANON);
    op->set_uncharge(uncharge);
  }

  std::unique_ptr<Engine> engine_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string server_target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

// Open, charge through the session, see the holdings, close: everything is
// returned, memory.current and memory.stat go back to 0, exactly.
TEST_F(SessionsTest, OpenChargeGetCloseReturnsEverything) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a/b", {}).ok());
  const std::string id = Open();
  ASSERT_EQ(id.size(), 32u);  // 128 bits, hex
  EXPECT_NE(Open(), id);
  ASSERT_TRUE(Charge("/a/b", 10, id).ok());
  ASSERT_TRUE(Charge("/a", 5, id, v1::PAGE_KIND_FILE).ok());
  ASSERT_TRUE(Charge("/a", 7, id).ok());
  ASSERT_TRUE(Uncharge("/a", 2, id).ok());
  ASSERT_TRUE(Charge("/a/b", 3, "").ok());  // unowned: stays

  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.session_id(), id);
  EXPECT_EQ(info.client_name(), "sessions_test");
  EXPECT_EQ(info.ttl_ms(), 10000u);
  EXPECT_GT(info.expires_in_ms(), 9000u);
  EXPECT_FALSE(info.attached());
  EXPECT_EQ(info.held_pages(), 20u);
  EXPECT_EQ(info.max_held_pages(), uint64_t{1} << 20);
  ASSERT_EQ(info.holdings_size(), 3);
  EXPECT_EQ(info.holdings(0).path(), "/a");
  EXPECT_EQ(info.holdings(0).kind(), v1::PAGE_KIND_ANON);
  EXPECT_EQ(info.holdings(0).nr_pages(), 5u);
  EXPECT_EQ(info.holdings(1).path(), "/a");
  EXPECT_EQ(info.holdings(1).kind(), v1::PAGE_KIND_FILE);
  EXPECT_EQ(info.holdings(1).nr_pages(), 5u);
  EXPECT_EQ(info.holdings(2).path(), "/a/b");
  EXPECT_EQ(info.holdings(2).nr_pages(), 10u);

  // memory.current counts the stocked pages too; the stat is exact.
  v1::GroupStats before = Stats("/a");
  EXPECT_EQ(StatValue(before, "anon"), (5 + 10 + 3) * kPage);
  EXPECT_EQ(StatValue(before, "file"), 5 * kPage);

  uint64_t returned = 0;
  ASSERT_TRUE(Close(id, &returned).ok());
  EXPECT_EQ(returned, 20u);
  engine_->DrainAllStock();
  v1::GroupStats after = Stats("/a");
  EXPECT_EQ(after.memory_current_bytes(), 3 * kPage);  // the unowned 3
  EXPECT_EQ(StatValue(after, "anon"), 3 * kPage);
  EXPECT_EQ(StatValue(after, "file"), 0u);
  EXPECT_EQ(after.events().oom(), 0u);
  EXPECT_EQ(after.events().max(), 0u);
  EXPECT_EQ(GetSession(id, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Close(id).error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("cgacct_sessions_opened_total 2"));
  EXPECT_THAT(metrics, HasSubstr("cgacct_sessions_closed_total 1"));
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_returned_pages_total{reason=\"close\"} 20"));
  EXPECT_THAT(metrics, HasSubstr("cgacct_sessions 1"));
}

TEST_F(SessionsTest, ErrorsNameTheFieldAndApplyNothing) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  // Unknown session: NOT_FOUND naming session_id, nothing charged.
  grpc::Status s = Charge("/a", 4, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  EXPECT_EQ(CurrentPages("/a"), 0u);
  s = Uncharge("/a", 1, "nope");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  // Empty session_id when present.
  s = Charge("/a", 1, "");  // absent: unowned, fine
  EXPECT_TRUE(s.ok());
  engine_->DrainAllStock();
  {
    v1::ChargeRequest request;
    request.set_path("/a");
    request.set_nr_pages(1);
    request.set_kind(v1::PAGE_KIND_ANON);
    request.set_session_id("");
    v1::ChargeResponse response;
    s = stub_->Charge(Context().get(), request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  }
  EXPECT_EQ(CurrentPages("/a"), 1u);

  // ttl_ms out of range.
  for (uint32_t ttl : {1u, 600001u}) {
    v1::OpenSessionRequest request;
    request.set_ttl_ms(ttl);
    v1::OpenSessionResponse response;
    s = stub_->OpenSession(Context().get(), request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << ttl;
    EXPECT_THAT(s.error_message(), HasSubstr("ttl_ms"));
  }
  {
    v1::OpenSessionRequest request;
    request.set_client_name(std::string(129, 'x'));
    v1::OpenSessionResponse response;
    s = stub_->OpenSession(Context().get(), request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("client_name"));
  }

  // Uncharging more than the session holds of that path and kind.
  const std::string id = Open();
  ASSERT_TRUE(Charge("/a", 3, id).ok());
  s = Uncharge("/a", 4, id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr(id));
  s = Uncharge("/a", 1, id, v1::PAGE_KIND_FILE);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/a"), 4u);  // the unowned 1 and the session's 3
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 3u);
  EXPECT_EQ(GetSession("", &info).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(SessionsTest, MaxHeldPagesAndSessionsPerIdentity) {
  SessionOptions options;
  options.max_pages = 100;
  options.max_sessions_per_identity = 2;
  Start(options);
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  const std::string id = Open();
  ASSERT_TRUE(Charge("/a", 60, id).ok());
  grpc::Status s = Charge("/a", 41, id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr(id));
  EXPECT_THAT(s.error_message(), HasSubstr("max_held_pages"));
  ASSERT_TRUE(Charge("/a", 40, id).ok());
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/a"), 100u);
  // A batch op over the bound fails alone.
  v1::ChargeBatchRequest batch;
  v1::ChargeOp* op = batch.add_ops();
  op->set_path("/a");
  op->set_nr_pages(1);
  op->set_kind(v1::PAGE_KIND_ANON);
  op->set_session_id(id);
  op = batch.add_ops();
  op->set_path("/a");
  op->set_nr_pages(10);
  op->set_kind(v1::PAGE_KIND_ANON);
  op->set_uncharge(true);
  op->set_session_id(id);
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(stub_->ChargeBatch(Context().get(), batch, &response).ok());
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(response.results(1).code(), grpc::StatusCode::OK);
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 90u);

  Open();
  v1::OpenSessionRequest request;
  v1::OpenSessionResponse opened;
  s = stub_->OpenSession(Context().get(), request, &opened);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("max_sessions_per_identity"));
  ASSERT_TRUE(Close(id).ok());
  EXPECT_FALSE(Open().empty());

  v1::EngineInfo engine_info;
  ASSERT_TRUE(stub_
                  ->GetEngineInfo(Context().get(), v1::GetEngineInfoRequest(),
                                  &engine_info)
                  .ok());
  EXPECT_EQ(engine_info.session_max_pages(), 100u);
  EXPECT_EQ(engine_info.max_sessions_per_identity(), 2u);
  EXPECT_EQ(engine_info.session_default_ttl_ms(), 10000u);
  EXPECT_EQ(engine_info.session_drain_timeout_ms(), 20u);
}

TEST_F(SessionsTest, RequestIdReplayDoesNotDoubleCountHoldings) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  const std::string id = Open();
  v1::ChargeResponse first, second;
  ASSERT_TRUE(Charge("/a", 3, id, v1::PAGE_KIND_ANON, "r1", &first).ok());
  ASSERT_TRUE(Charge("/a", 3, id, v1::PAGE_KIND_ANON, "r1", &second).ok());
  EXPECT_FALSE(first.replayed());
  EXPECT_TRUE(second.replayed());
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 3u);
  // The same id in another session (or none) is another request.
  grpc::Status s = Charge("/a", 3, "", v1::PAGE_KIND_ANON, "r1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  uint64_t returned = 0;
  ASSERT_TRUE(Close(id, &returned).ok());
  EXPECT_EQ(returned, 3u);
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/a"), 0u);
}

TEST_F(SessionsTest, ExpiryWithoutKeepaliveReturnsWithinTtlPlusOneSecond) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  // Before Open: the lease starts inside it, before the answer arrives.
  const absl::Time opened = absl::Now();
  const std::string id = Open(/*ttl_ms=*/200);
  ASSERT_TRUE(Charge("/a", 9, id).ok());
  ASSERT_TRUE(Charge("/a", 4, id, v1::PAGE_KIND_FILE).ok());
  v1::SessionInfo info;
  ASSERT_TRUE(WaitFor(absl::Milliseconds(1200), [&] {
    return GetSession(id, &info).error_code() == grpc::StatusCode::NOT_FOUND;
  }));
  const absl::Duration took = absl::Now() - opened;
  EXPECT_GE(took, absl::Milliseconds(200));
  engine_->DrainAllStock();
  v1::GroupStats stats = Stats("/a");
  EXPECT_EQ(stats.memory_current_bytes(), 0u);
  EXPECT_EQ(StatValue(stats, "anon"), 0u);
  EXPECT_EQ(StatValue(stats, "file"), 0u);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("cgacct_sessions_expired_total 1"));
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_returned_pages_total{reason=\"expire\"} 13"));
  EXPECT_EQ(Charge("/a", 1, id).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(SessionsTest, KeepaliveKeepsTheSessionAlivePastSeveralTtls) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  const std::string id = Open(/*ttl_ms=*/150);
  ASSERT_TRUE(Charge("/a", 5, id).ok());
  auto context = Context();
  std::unique_ptr<Stream> stream = stub_->SessionStream(context.get());
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(id);
  ASSERT_TRUE(stream->Write(attach));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.expires_in_ms(), 150u);
  EXPECT_EQ(answer.drain_id(), 0u);
  EXPECT_TRUE(answer.paced());
  // 1 s = 6+ ttls: the server asks for a keepalive every ttl/3, the client
  // answers each.
  std::vector<uint64_t> leases;
  EXPECT_GE(AnswerKeepaliveRequests(stream.get(), absl::Seconds(1), &leases),
            10);
  for (uint64_t lease : leases) EXPECT_EQ(lease, 150u);
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_TRUE(info.attached());
  EXPECT_EQ(info.held_pages(), 5u);
  // Close: the stream ends OK, the pages come back.
  uint64_t returned = 0;
  ASSERT_TRUE(Close(id, &returned).ok());
  EXPECT_EQ(returned, 5u);
  stream->WritesDone();
  while (stream->Read(&answer)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

// A client from before the server paced the stream sends a keepalive every
// ttl/3 unasked and never looks for requests: the server reads each at its
// next request, and the session stays alive.
TEST_F(SessionsTest, AClientThatSendsKeepalivesUnaskedStaysAlive) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  const std::string id = Open(/*ttl_ms=*/300);
  ASSERT_TRUE(Charge("/a", 3, id).ok());
  auto context = Context();
  std::unique_ptr<Stream> stream = stub_->SessionStream(context.get());
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(id);
  ASSERT_TRUE(stream->Write(attach));
  std::thread reader([&] {
    v1::SessionServerMessage ignored;
    while (stream->Read(&ignored)) {
    }
  });
  const absl::Time end = absl::Now() + absl::Milliseconds(1500);
  while (absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(100));
    v1::SessionClientMessage keepalive;
    keepalive.set_keepalive(true);
    ASSERT_TRUE(stream->Write(keepalive));
  }
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_TRUE(info.attached());
  EXPECT_EQ(info.held_pages(), 3u);
  context->TryCancel();
  reader.join();
  (void)stream->Finish();
}

TEST_F(SessionsTest, NewerStreamReplacesTheOlder) {
  const std::string id = Open(/*ttl_ms=*/300);
  auto c1 = Context();
  std::unique_ptr<Stream> s1 = stub_->SessionStream(c1.get());
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(id);
  v1::SessionServerMessage answer;
  ASSERT_TRUE(s1->Write(attach));
  ASSERT_TRUE(s1->Read(&answer));
  auto c2 = Context();
  std::unique_ptr<Stream> s2 = stub_->SessionStream(c2.get());
  ASSERT_TRUE(s2->Write(attach));
  ASSERT_TRUE(s2->Read(&answer));
  EXPECT_EQ(answer.expires_in_ms(), 300u);
  // The old one is ended ABORTED.
  EXPECT_FALSE(s1->Read(&answer));
  const grpc::Status ended = s1->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(ended.error_message(), HasSubstr("replaced"));
  // The new one keeps the session alive past its ttl.
  ASSERT_GE(AnswerKeepaliveRequests(s2.get(), absl::Milliseconds(800)), 0);
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_TRUE(info.attached());
  // The client goes away: the stream detaches (the half-close is seen at
  // the server's next keepalive request), the lease runs out.
  s2->WritesDone();
  while (s2->Read(&answer)) {
  }
  EXPECT_TRUE(s2->Finish().ok());
  ASSERT_TRUE(WaitFor(absl::Milliseconds(1300), [&] {
    return GetSession(id, &info).error_code() == grpc::StatusCode::NOT_FOUND;
  }));
  // Attaching to an unknown session: NOT_FOUND.
  auto c3 = Context();
  std::unique_ptr<Stream> s3 = stub_->SessionStream(c3.get());
  ASSERT_TRUE(s3->Write(attach));
  EXPECT_FALSE(s3->Read(&answer));
  EXPECT_EQ(s3->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(SessionsTest, GroupDeletedWhileHeldMovesHoldingsToTheParent) {
  for (const char* path : {"/a", "/a/b"}) {  // through the service's store
    v1::CreateGroupRequest create;
    create.set_path(path);
    v1::Group group;
    ASSERT_TRUE(stub_->CreateGroup(Context().get(), create, &group).ok());
  }
  const std::string id = Open();
  ASSERT_TRUE(Charge("/a/b", 6, id).ok());
  ASSERT_TRUE(Charge("/a", 1, id).ok());
  v1::DeleteGroupRequest del;
  del.set_path("/a/b");
  v1::DeleteGroupResponse deleted;
  const grpc::Status s = stub_->DeleteGroup(Context().get(), del, &deleted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  ASSERT_EQ(info.holdings_size(), 1);
  EXPECT_EQ(info.holdings(0).path(), "/a");
  EXPECT_EQ(info.holdings(0).nr_pages(), 7u);
  // The session can uncharge them from the parent now.
  ASSERT_TRUE(Uncharge("/a", 2, id).ok());
  uint64_t returned = 0;
  ASSERT_TRUE(Close(id, &returned).ok());
  EXPECT_EQ(returned, 5u);
  engine_->DrainAllStock();
  v1::GroupStats stats = Stats("/a");
  EXPECT_EQ(stats.memory_current_bytes(), 0u);
  EXPECT_EQ(StatValue(stats, "anon"), 0u);
}

// The pages a session recorded may have been uncharged without naming it
// (an unowned Uncharge of the same group): its close returns what the group
// still holds of them instead of nothing.
TEST_F(SessionsTest, CloseReturnsWhatIsLeftAfterAnUnownedUncharge) {
  ASSERT_TRUE(engine_->CreateGroup("/u", {}).ok());
  const std::string id = Open();
  ASSERT_TRUE(Charge("/u", 10, id).ok());
  ASSERT_TRUE(Uncharge("/u", 4, "").ok());  // not naming the session
  uint64_t returned = 0;
  ASSERT_TRUE(Close(id, &returned).ok());
  EXPECT_EQ(returned, 6u);
  EXPECT_EQ(CurrentPages("/u"), 0u);
}

// SessionInfo.client_name is a proto string: a name that is not printable
// ASCII is refused at OpenSession, so GetSession never sends invalid UTF-8.
TEST_F(SessionsTest, ClientNameMustBePrintable) {
  v1::OpenSessionRequest request;
  request.set_client_name(std::string("\xff\xfe\x00\x1b", 4));
  v1::OpenSessionResponse response;
  const grpc::Status s =
      stub_->OpenSession(Context().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("client_name"));
  EXPECT_THAT(Metrics(), HasSubstr("cgacct_sessions 0"));
}

// Charges and uncharges racing with CloseSession and with expiry: after
// everything settled, nothing is charged (no leak) and no uncharge failed
// for want of pages (no holding went negative).
TEST_F(SessionsTest, ChargesRacingCloseAndExpiryLeakNothing) {
  ASSERT_TRUE(engine_->CreateGroup("/r", {}).ok());
  for (int round = 0; round < 20; ++round) {
    const bool expire = round % 2 == 1;
    const std::string id = Open(expire ? 100 : 10000);
    std::atomic<bool> stop{false};
    std::atomic<int> unexpected{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        while (!stop.load()) {
          grpc::Status s = Charge("/r", 1 + t, id);
          if (s.error_code() == grpc::StatusCode::NOT_FOUND) break;
          if (!s.ok()) ++unexpected;
          s = Uncharge("/r", 1, id);
          if (s.error_code() == grpc::StatusCode::NOT_FOUND) break;
          if (!s.ok()) ++unexpected;
        }
      });
    }
    if (expire) {
      // No keepalive: the reaper ends it under the threads' feet.
      v1::SessionInfo info;
      EXPECT_TRUE(WaitFor(absl::Milliseconds(1100), [&] {
        return GetSession(id, &info).error_code() ==
               grpc::StatusCode::NOT_FOUND;
      }));
    } else {
      absl::SleepFor(absl::Milliseconds(30));
      EXPECT_TRUE(Close(id).ok());
    }
    stop = true;
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(unexpected.load(), 0) << "round " << round;
    engine_->DrainAllStock();
    v1::GroupStats stats = Stats("/r");
    ASSERT_EQ(stats.memory_current_bytes(), 0u) << "round " << round;
    ASSERT_EQ(StatValue(stats, "anon"), 0u) << "round " << round;
  }
}

// With the engine's default 64-page stock batch, a session's charges park
// surplus pages in the server's per-CPU stock and its close or expiry
// uncharges into it; the close and the expiry then drain the groups' stock
// (Engine::DrainStock), so memory.current is exactly 0 once the session is
// gone, with no DrainAllStock() by the test. (Before: 64 pages per group
// stayed charged in the stock.)
TEST_F(SessionsTest, CloseAndExpiryLeaveMemoryCurrentExactlyZero) {
  ASSERT_EQ(engine_->GetInfo().charge_batch_pages, 64u);
  ASSERT_TRUE(engine_->CreateGroup("/z", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/z/a", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/z/b", {}).ok());
  const std::string closed = Open();
  ASSERT_TRUE(Charge("/z/a", 9, closed).ok());
  ASSERT_TRUE(Charge("/z/b", 4, closed, v1::PAGE_KIND_FILE).ok());
  ASSERT_TRUE(Uncharge("/z/a", 2, closed).ok());
  // The stock is real: more is charged than the session holds.
  EXPECT_GT(CurrentPages("/z"), 11u);
  uint64_t returned = 0;
  ASSERT_TRUE(Close(closed, &returned).ok());
  EXPECT_EQ(returned, 11u);
  EXPECT_EQ(CurrentPages("/z/a"), 0u);
  EXPECT_EQ(CurrentPages("/z/b"), 0u);
  EXPECT_EQ(CurrentPages("/z"), 0u);

  const std::string expired = Open(/*ttl_ms=*/200);
  ASSERT_TRUE(Charge("/z/a", 5, expired).ok());
  ASSERT_TRUE(Charge("/z/b", 3, expired).ok());
  EXPECT_GT(CurrentPages("/z"), 8u);
  v1::SessionInfo info;
  ASSERT_TRUE(WaitFor(absl::Milliseconds(1500), [&] {
    return GetSession(expired, &info).error_code() ==
           grpc::StatusCode::NOT_FOUND;
  }));
  // The reaper drains after it uncharged; GetSession answers NOT_FOUND as
  // soon as the session is marked, so wait for the metric too.
  ASSERT_TRUE(WaitFor(absl::Milliseconds(1000), [&] {
    return service_->sessions().stats().expired == 1;
  }));
  EXPECT_EQ(CurrentPages("/z/a"), 0u);
  EXPECT_EQ(CurrentPages("/z/b"), 0u);
  EXPECT_EQ(CurrentPages("/z"), 0u);
  const v1::GroupStats stats = Stats("/z");
  EXPECT_EQ(StatValue(stats, "anon"), 0u);
  EXPECT_EQ(StatValue(stats, "file"), 0u);
}

// --- drain_all_stock() over the network
// ---------------------------------------

// A session attached on a raw stream that answers drain requests by giving
// back everything it holds of `path` (its "stock").
class DrainResponder {
 public:
  DrainResponder(v1::Accounting::Stub* stub, const std::string& id,
                 const std::string& path, uint64_t pages, bool answer,
                 absl::Duration answer_after = absl::ZeroDuration(),
                 bool pad = false)
      : answer_(answer),
        context_(Context(60)),
        stream_(stub->SessionStream(context_.get())) {
    v1::SessionClientMessage attach;
    attach.set_attach_session_id(id);
    EXPECT_TRUE(stream_->Write(attach));
    v1::SessionServerMessage first;
    EXPECT_TRUE(stream_->Read(&first));
    thread_ = std::thread([this, path, pages, answer, answer_after, pad] {
      v1::SessionServerMessage m;
      while (stream_->Read(&m)) {
        if (m.keepalive_request()) {  // as every client does
          v1::SessionClientMessage keepalive;
          keepalive.set_keepalive(true);
          stream_->Write(keepalive);
        }
        if (m.drain_id() == 0) continue;
        drain_paths_.push_back(m.drain_path());
        if (!answer) continue;  // never answers: the bound applies
        absl::SleepFor(answer_after);
        v1::SessionClientMessage back;
        back.set_drain_id(m.drain_id());
        v1::SessionHolding* h = back.add_returned();
        h->set_path(path);
        h->set_kind(v1::PAGE_KIND_ANON);
        h->set_nr_pages(pages);
        // Past kSessionInlineMessageBytes: handled on a large-request
        // thread (while the next drain request may already be out).
        for (int i = 0; pad && i < 100; ++i) {
          v1::SessionHolding* none = back.add_returned();
          none->set_path(absl::StrCat("/not-held/", i, "/", std::string(40, 'x')));
          none->set_kind(v1::PAGE_KIND_FILE);
          none->set_nr_pages(1);
        }
        stream_->Write(back);
      }
    });
  }
  // Call after the session was closed (the server ends the stream). A
  // responder that never answers may have had its stream ended a second
  // after a drain request (kSessionAnswerTimeout): that end counts as OK.
  grpc::Status Finish() {
    thread_.join();
    grpc::Status status = stream_->Finish();
    if (!answer_ &&
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        status.error_message().find("no message came within") !=
            std::string::npos) {
      return grpc::Status::OK;
    }
    return status;
  }
  const std::vector<std::string>& drain_paths() const { return drain_paths_; }

 private:
  const bool answer_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<Stream> stream_;
  std::thread thread_;
  std::vector<std::string> drain_paths_;  // the reader thread's until joined
};

// A group at its max whose pages sit in a session's stock: a charge that
// would fail asks the session, gets the pages back, and succeeds (no OOM).
TEST_F(SessionsTest, DrainReturnsStockSoTheChargeSucceedsAtMax) {
  LimitsUpdate limits;
  limits.max_pages = 128;
  ASSERT_TRUE(engine_->CreateGroup("/d", limits).ok());
  ASSERT_TRUE(engine_->CreateGroup("/d/s", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/d/c", {}).ok());
  const std::string id = Open();
  ASSERT_TRUE(Charge("/d/s", 125, id).ok());
  DrainResponder responder(stub_.get(), id, "/d/s", 125, /*answer=*/true);
  // 8 pages (an OOM-eligible size) with 3 left under max.
  grpc::Status s = Charge("/d/c", 8, "");
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::GroupStats stats = Stats("/d");
  EXPECT_EQ(stats.events().oom(), 0u);
  EXPECT_EQ(stats.events().oom_kill(), 0u);
  EXPECT_GE(stats.events().max(), 1u);  // it did hit max first
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 0u);
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/d"), 8u);
  EXPECT_EQ(CurrentPages("/d/s"), 0u);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("cgacct_session_drains_total 1"));
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_drain_requests_total{result=\"answered\"} 1"));
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_drain_requests_total{result=\"timeout\"} 0"));
  EXPECT_THAT(metrics,
              HasSubstr("cgacct_session_drain_returned_pages_total 125"));
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(responder.Finish().ok());
  ASSERT_EQ(responder.drain_paths().size(), 1u);
  EXPECT_EQ(responder.drain_paths()[0], "/d");
}

// A client answers a drain with the path it charged; the group was deleted
// since and the server moved that holding to the parent: the answer still
// returns the pages (to the parent, where DeleteGroup put them).
TEST_F(SessionsTest, DrainAnswerForADeletedGroupReturnsItsMovedHolding) {
  LimitsUpdate limits;
  limits.max_pages = 128;
  for (const char* path : {"/d", "/d/x"}) {  // through the service's store
    v1::CreateGroupRequest create;
    create.set_path(path);
    v1::Group group;
    ASSERT_TRUE(stub_->CreateGroup(Context().get(), create, &group).ok());
  }
  ASSERT_TRUE(engine_->SetLimits("/d", limits).ok());
  const std::string id = Open();
  ASSERT_TRUE(Charge("/d/x", 125, id).ok());
  v1::DeleteGroupRequest del;
  del.set_path("/d/x");
  v1::DeleteGroupResponse deleted;
  ASSERT_TRUE(stub_->DeleteGroup(Context().get(), del, &deleted).ok());
  DrainResponder responder(stub_.get(), id, "/d/x", 125, /*answer=*/true);
  // EXPECT, not ASSERT, until the responder is finished (its thread).
  const grpc::Status s = Charge("/d", 8, "");
  EXPECT_TRUE(s.ok()) << s.error_message();
  v1::SessionInfo info;
  EXPECT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 0u);
  EXPECT_THAT(Metrics(),
              HasSubstr("cgacct_session_drain_returned_pages_total 125"));
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(responder.Finish().ok());
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/d"), 8u);
}

// A session that never answers delays the charge by the bound, no more;
// the charge then goes on without it (here: OOM, its pages stay held).
TEST_F(SessionsTest, SilentSessionDelaysTheChargeAtMostTheBound) {
  StartWithDrainTimeout(absl::Milliseconds(100));
  LimitsUpdate limits;
  limits.max_pages = 128;
  ASSERT_TRUE(engine_->CreateGroup("/d", limits).ok());
  ASSERT_TRUE(engine_->CreateGroup("/d/t", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/d/c", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/e", limits).ok());
  ASSERT_TRUE(engine_->CreateGroup("/e/c", {}).ok());
  // The baseline: the same failing charge with no session holding pages
  // under the limiting group (nobody asked, nothing waited).
  ASSERT_TRUE(Charge("/e/c", 125, "").ok());
  absl::Time start = absl::Now();
  EXPECT_EQ(Charge("/e/c", 8, "").error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  const absl::Duration baseline = absl::Now() - start;

  const std::string id = Open();
  ASSERT_TRUE(Charge("/d/t", 125, id).ok());
  DrainResponder silent(stub_.get(), id, "/d/t", 125, /*answer=*/false);
  start = absl::Now();
  const grpc::Status s = Charge("/d/c", 8, "");
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::printf(
      "drain bound 100 ms: charge with a silent session took %s "
      "(no session holding: %s)\n",
      absl::FormatDuration(took).c_str(),
      absl::FormatDuration(baseline).c_str());
  EXPECT_GE(took, absl::Milliseconds(100));
  EXPECT_LE(took, absl::Milliseconds(100) + absl::Seconds(1));
  EXPECT_LT(baseline, absl::Milliseconds(100));
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 125u);
  EXPECT_EQ(Stats("/d").events().oom(), 1u);
  const std::string metrics = Metrics();
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_drain_requests_total{result=\"timeout\"} 1"));
  // A second, answering session under the same group: the charge waits
  // for the silent one (bound), uses what the other gave back, succeeds.
  const std::string id2 = Open();
  ASSERT_TRUE(Uncharge("/d/t", 20, id).ok());
  ASSERT_TRUE(Charge("/d/c", 17, id2).ok());  // /d: 105 + 17 = 122 (+6 stock)
  DrainResponder answering(stub_.get(), id2, "/d/c", 17, /*answer=*/true);
  start = absl::Now();
  const grpc::Status s2 = Charge("/d/c", 8, "");
  const absl::Duration took2 = absl::Now() - start;
  EXPECT_TRUE(s2.ok()) << s2.error_message();
  EXPECT_LE(took2, absl::Milliseconds(100) + absl::Seconds(1));
  ASSERT_TRUE(Close(id).ok());
  ASSERT_TRUE(Close(id2).ok());
  EXPECT_TRUE(silent.Finish().ok());
  EXPECT_TRUE(answering.Finish().ok());
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/d"), 8u);
}

// A drain that got back what the charge needs does not wait for the
// sessions still silent: the charge succeeds at once, and the silent
// session's request counts as `unneeded`, not as a timeout. (Before, every
// such charge waited the whole bound, and a charge that had joined it, its
// own bound over first, retried while those pages were still in transit
// and failed at max: 4 of 36 runs of a tester's 4 x 25 one-page charges.)
TEST_F(SessionsTest, DrainThatGotEnoughDoesNotWaitForASilentSession) {
  constexpr absl::Duration kBound = absl::Seconds(2);
  StartWithDrainTimeout(kBound);
  const std::string silent_id = SessionHoldingMostOfD("/d/t");
  ASSERT_TRUE(Uncharge("/d/t", 20, silent_id).ok());
  const std::string answering_id = Open();
  ASSERT_TRUE(Charge("/d/c", 17, answering_id).ok());  // /d: 105 + 17
  DrainResponder silent(stub_.get(), silent_id, "/d/t", 105, /*answer=*/false);
  DrainResponder answering(stub_.get(), answering_id, "/d/c", 17,
                           /*answer=*/true);
  const absl::Time start = absl::Now();
  const grpc::Status s = Charge("/d/c", 8, "");
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::printf(
      "charge at max, one silent and one answering session, bound "
      "%s: %s\n",
      absl::FormatDuration(kBound).c_str(), absl::FormatDuration(took).c_str());
  EXPECT_LT(took, kBound / 2);
  const std::string metrics = Metrics();
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_drain_requests_total{result=\"unneeded\"} 1"));
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_drain_requests_total{result=\"timeout\"} 0"));
  EXPECT_EQ(Stats("/d").events().oom(), 0u);
  ASSERT_TRUE(Close(silent_id).ok());
  ASSERT_TRUE(Close(answering_id).ok());
  EXPECT_TRUE(silent.Finish().ok());
  EXPECT_TRUE(answering.Finish().ok());
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/d"), 8u);
}

// Issue 22 finding 11: one tenant's session kept its lease alive and never
// answered a drain; every refused charge of another tenant under the shared
// limit then waited the whole bound, with no end (0.5 ms -> 22.6 ms p50).
// After two unanswered requests in a row nobody waits for it: it is asked
// once more (not waited for) and left alone until it answers.
TEST_F(SessionsTest, ASilentSessionStopsDelayingOthersAfterTwoMisses) {
  constexpr absl::Duration kBound = absl::Milliseconds(200);
  StartWithDrainTimeout(kBound);
  const std::string id = SessionHoldingMostOfD("/d/t");
  DrainResponder silent(stub_.get(), id, "/d/t", 125, /*answer=*/false);
  std::vector<absl::Duration> took;
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    EXPECT_EQ(Charge("/d/c", 8, "").error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
    took.push_back(absl::Now() - start);
  }
  std::printf("refused charges at max with a silent session, bound %s:",
              absl::FormatDuration(kBound).c_str());
  for (absl::Duration d : took)
    std::printf(" %s", absl::FormatDuration(d).c_str());
  std::printf("\n");
  EXPECT_GE(took[0], kBound);
  EXPECT_GE(took[1], kBound);
  for (size_t i = 2; i < took.size(); ++i) EXPECT_LT(took[i], kBound / 2) << i;
  const std::string metrics = Metrics();
  EXPECT_THAT(
      metrics,
      HasSubstr("cgacct_session_drain_requests_total{result=\"timeout\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("cgacct_session_drain_requests_total{result="
                                 "\"not_awaited\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("cgacct_sessions_silent 1"));
  EXPECT_EQ(Stats("/d").events().oom(), 10u);
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 125u);  // its pages stay its own
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(silent.Finish().ok());
  EXPECT_THAT(Metrics(), HasSubstr("cgacct_sessions_silent 0"));
}

// Issue 22's attack round: a session that answers every drain request, but
// just inside the bound (here 150 ms of 200), is silenced as one that never
// answers is: an answer later than half the bound counts as a miss. Before,
// it reset the count each time, and every refused charge of another tenant
// under the shared max waited for it (20.9 ms per charge at the 20 ms
// default, measured by the attack round). It returns what each request
// asks (8 pages for the 5 the charge needs), so its stock is never known
// empty: only the slow rule stops the waits.
TEST_F(SessionsTest, ASessionAnsweringLateIsSilencedToo) {
  constexpr absl::Duration kBound = absl::Milliseconds(200);
  StartWithDrainTimeout(kBound);
  const std::string id = SessionHoldingMostOfD("/d/t");
  DrainResponder late(stub_.get(), id, "/d/t", /*pages=*/8, /*answer=*/true,
                      /*answer_after=*/absl::Milliseconds(150));
  std::vector<absl::Duration> took;
  std::vector<grpc::StatusCode> codes;
  for (int i = 0; i < 8; ++i) {
    const absl::Time start = absl::Now();
    codes.push_back(Charge("/d/c", 8, "").error_code());
    took.push_back(absl::Now() - start);
  }
  std::printf("charges at max with a late session, bound %s:",
              absl::FormatDuration(kBound).c_str());
  for (absl::Duration d : took)
    std::printf(" %s", absl::FormatDuration(d).c_str());
  std::printf("\n");
  // The first two waited for its answers (150 ms) and got the pages; the
  // rest waited for nobody (its answers come back late, one at a time).
  for (int i = 0; i < 2; ++i) {
    EXPECT_GE(took[i], absl::Milliseconds(140)) << i;
    EXPECT_EQ(codes[i], grpc::StatusCode::OK) << i;
  }
  for (size_t i = 2; i < took.size(); ++i) {
    EXPECT_LT(took[i], kBound / 4) << i;
    EXPECT_EQ(codes[i], grpc::StatusCode::RESOURCE_EXHAUSTED) << i;
  }
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("cgacct_sessions_silent 1"));
  EXPECT_THAT(metrics, HasSubstr("cgacct_sessions_silenced_total 1"));
  EXPECT_THAT(metrics,
              HasSubstr("cgacct_session_drain_requests_total{result="
                        "\"timeout\"} 0"));
  EXPECT_THAT(metrics,
              HasSubstr("cgacct_session_drain_answers_short_total 0"));
  EXPECT_EQ(Stats("/d").events().oom(), 6u);
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(late.Finish().ok());
  // The two awaited answers, at least, were counted slow.
  const std::string slow_metric = "\ncgacct_session_drain_answers_slow_total ";
  const size_t at = metrics.find(slow_metric);
  ASSERT_NE(at, std::string::npos);
  const size_t value = at + slow_metric.size();
  double slow = 0;
  ASSERT_TRUE(absl::SimpleAtod(
      metrics.substr(value, metrics.find('\n', value) - value), &slow));
  EXPECT_GE(slow, 2.0);
}

// A session that answers promptly but returns one page at a time does not
// make a refused charge ask it round after round: the drain is asked again
// only when what came back covered the charge (and a concurrent charge took
// it). Before, the attack round's trickling session (a page per answer,
// charged again) held every refused charge of another tenant for 3 answers
// at 40aa661 (20.5 ms with 5 ms answers), and for 16 before it.
TEST_F(SessionsTest, ATricklingSessionIsAskedOncePerCharge) {
  StartWithDrainTimeout(absl::Milliseconds(300));
  const std::string id = SessionHoldingMostOfD("/d/t");
  DrainResponder trickle(stub_.get(), id, "/d/t", /*pages=*/1, /*answer=*/true,
                         /*answer_after=*/absl::Milliseconds(40));
  // 8 pages with 3 free: the page that comes back is not enough.
  const absl::Time start = absl::Now();
  EXPECT_EQ(Charge("/d/c", 8, "").error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  const absl::Duration took = absl::Now() - start;
  std::printf("refused charge with a trickling session: %s\n",
              absl::FormatDuration(took).c_str());
  EXPECT_GE(took, absl::Milliseconds(40));
  EXPECT_LT(took, absl::Milliseconds(80)) << "asked more than once";
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(trickle.Finish().ok());
  EXPECT_EQ(trickle.drain_paths().size(), 1u);
}

// The charge waiting for drain answers gives up its group-tree reader slot
// for the wait: a CreateGroup arriving meanwhile runs at once, not after the
// charge (before, it waited for the slot as writer and, while it waited,
// held the slots before it, stalling every call there: issue 22's
// re-attack, row 9b, another tenant's GetStats 0.5 -> 9-10 ms). The charge
// still succeeds as soon as the session answers.
TEST_F(SessionsTest, AWriterDoesNotWaitForADrainingCharge) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(FullUnderASessionsStock(&id));
  DrainResponder responder(stub_.get(), id, "/d/s", 125, /*answer=*/true,
                           /*answer_after=*/absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  absl::Duration writer_done;
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));  // the charge is waiting by now
    EXPECT_TRUE(engine_->CreateGroup("/w", {}).ok());
    EXPECT_TRUE(engine_->GetStats("/d/s").ok());
    writer_done = absl::Now() - start;
  });
  const grpc::Status s = Charge("/d/c", 8, "");
  const absl::Duration took = absl::Now() - start;
  writer.join();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(2)) << "the answer waited";
  EXPECT_LT(writer_done, absl::Milliseconds(250))
      << "the writer waited for the charge";
  EXPECT_EQ(Stats("/d").events().oom(), 0u);
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(responder.Finish().ok());
}

// The charging group deleted while its charge waits for drain answers (the
// slot given up, a writer may run): the charge answers NOT_FOUND and
// charges nothing; the returned pages are uncharged all the same. A group
// created after the delete frees the deleted one (no pages), so a charge
// that used its old pointer would touch freed memory (ASan in CI).
TEST_F(SessionsTest, AGroupDeletedWhileItsChargeWaitsIsNotCharged) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(FullUnderASessionsStock(&id));
  DrainResponder responder(stub_.get(), id, "/d/s", 125, /*answer=*/true,
                           /*answer_after=*/absl::Milliseconds(300));
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));  // the charge is waiting by now
    EXPECT_TRUE(engine_->DeleteGroup("/d/c").ok());
    EXPECT_TRUE(engine_->CreateGroup("/d/other", {}).ok());
  });
  const grpc::Status s = Charge("/d/c", 8, "");
  writer.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("deleted while this charge waited"));
  // The session's 125 pages came back; nothing was charged for /d/c.
  engine_->DrainAllStock();
  EXPECT_EQ(Stats("/d").memory_current_bytes(), 0u);
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(responder.Finish().ok());
}

// More charges wait for drain answers at once than gRPC has callback
// threads (Debian's gRPC 1.51 runs callback reactions on a small executor
// pool, a few threads per core): each charge blocks its handler thread for up
// to the drain bound. The answers must still be read (the SessionStream is
// served off the callback threads, docs/DESIGN.md §4.14), so every charge
// gets the stock back and succeeds well before the bound, and no drain
// request is counted as timed out. Before the SessionStream left the
// callback API, every charge here waited the whole bound and most drain
// requests timed out.
TEST_F(SessionsTest, ManyChargesWaitingAtMaxStillGetTheAnswers) {
  constexpr int kSessions = 16;
  constexpr int kCharges = 16;
  // Each session's stock is twice the engine's 64-page batch: every
  // charge that gets room also parks a batch in the server's per-CPU stock,
  // which must not eat the room the drain brought back.
  constexpr uint64_t kStock = 128;
  StartWithDrainTimeout(absl::Seconds(5));
  constexpr uint64_t kMax = kSessions * kStock + 64;
  LimitsUpdate limits;
  limits.max_pages = kMax;
  ASSERT_TRUE(engine_->CreateGroup("/m", limits).ok());
  ASSERT_TRUE(engine_->CreateGroup("/m/c", {}).ok());
  std::vector<std::string> ids;
  std::vector<std::unique_ptr<DrainResponder>> responders;
  for (int i = 0; i < kSessions; ++i) {
    const std::string path = absl::StrCat("/m/s", i);
    ASSERT_TRUE(engine_->CreateGroup(path, {}).ok());
    ids.push_back(Open());
    ASSERT_TRUE(Charge(path, kStock, ids.back()).ok());
    // Half of them answer past 4 KiB (the large-request threads: issue
    // 22's focused re-attack lost such answers to a read started under
    // them).
    responders.push_back(std::make_unique<DrainResponder>(
        stub_.get(), ids.back(), path, kStock, /*answer=*/true,
        absl::ZeroDuration(), /*pad=*/i % 2 == 1));
  }
  // The rest of the max: /m is full, its free pages all in the stocks.
  ASSERT_TRUE(Charge("/m/c", kMax - kSessions * kStock, "").ok());
  std::vector<grpc::Status> results(kCharges);
  const std::vector<absl::Duration> took = Together(kCharges, [&](int i) {
                                             results[i] = Charge("/m/c", 8, "");
                                           }).Join();
  absl::Duration slowest;
  for (int i = 0; i < kCharges; ++i) {
    EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].error_message();
    slowest = std::max(slowest, took[i]);
  }
  const SessionStats stats = service_->sessions().stats();
  std::printf(
      "%d charges at max, %d answering sessions: slowest %s, %llu "
      "drains (%llu charges joined one in flight), %llu requests "
      "answered, %llu timed out\n",
      kCharges, kSessions, absl::FormatDuration(slowest).c_str(),
      static_cast<unsigned long long>(stats.drains),
      static_cast<unsigned long long>(stats.drains_joined),
      static_cast<unsigned long long>(stats.drain_requests_answered),
      static_cast<unsigned long long>(stats.drain_requests_timeout));
  EXPECT_GE(stats.drains, 1u);
  EXPECT_EQ(stats.drain_requests_timeout, 0u);
  // Far below the 5 s bound: no charge waited for it.
  EXPECT_LT(slowest, absl::Seconds(2));
  EXPECT_EQ(Stats("/m").events().oom(), 0u);
  for (const std::string& id : ids) EXPECT_TRUE(Close(id).ok());
  for (auto& r : responders) EXPECT_TRUE(r->Finish().ok());
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/m"), kMax - kSessions * kStock + kCharges * 8);
}

// A session that never answers, and more charges at that group's max than
// gRPC has callback threads, through Charge, ChargeBatch and ChargeStream at
// once: each charge is delayed by the bound once (they wait side by side on
// the server's drain-wait threads, not one after another on gRPC's), and
// calls to other groups are not delayed at all. Before the waiting charges
// left the callback threads, 12 charges with a 500 ms bound took up to
// ~3 s and every other call of the server queued behind them. A batch op
// applied before the deferred one is applied once (not again on resume).
TEST_F(SessionsTest, SilentSessionDelaysConcurrentChargesOnlyByTheBound) {
  constexpr absl::Duration kBound = absl::Milliseconds(500);
  constexpr int kPerKind = 4;  // Charge, ChargeBatch, ChargeStream each
  StartWithDrainTimeout(kBound);
  const std::string id = SessionHoldingMostOfD("/d/t");
  DrainResponder silent(stub_.get(), id, "/d/t", 125, /*answer=*/false);

  // One op that fits (elsewhere), then the one at /d's max.
  v1::ChargeBatchRequest batch;
  AddOp(&batch, "/e", 1);
  AddOp(&batch, "/d/c", 8);

  constexpr int kChargers = 3 * kPerKind;
  std::vector<std::string> outcome(kChargers);
  Together chargers(kChargers, [&](int i) {
    if (i < kPerKind) {
      outcome[i] = absl::StrCat(Charge("/d/c", 8, "").error_code());
    } else if (i < 2 * kPerKind) {
      v1::ChargeBatchResponse response;
      const grpc::Status s =
          stub_->ChargeBatch(Context().get(), batch, &response);
      outcome[i] = s.ok() && response.results_size() == 2
                       ? absl::StrCat(response.results(0).code(), ",",
                                      response.results(1).code())
                       : s.error_message();
    } else {
      auto context = Context();
      auto stream = stub_->ChargeStream(context.get());
      v1::ChargeBatchResponse response;
      const bool io = stream->Write(batch) && stream->Read(&response);
      stream->WritesDone();
      const grpc::Status s = stream->Finish();
      outcome[i] = io && s.ok() && response.results_size() == 2
                       ? absl::StrCat(response.results(0).code(), ",",
                                      response.results(1).code())
                       : s.error_message();
    }
  });
  // Meanwhile, calls that have nothing to do with /d.
  absl::SleepFor(kBound / 5);  // the charges are waiting by now
  absl::Duration slowest_other;
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    Stats("/e");  // a GetStats
    EXPECT_TRUE(Charge("/e", 1, "").ok());
    EXPECT_TRUE(Uncharge("/e", 1, "").ok());
    slowest_other = std::max(slowest_other, absl::Now() - start);
  }
  const std::vector<absl::Duration> took = chargers.Join();
  absl::Duration slowest_charge;
  for (int i = 0; i < kChargers; ++i) {
    // An OOM after the bound (the silent session kept its pages); a
    // batch's first op applied.
    const std::string exhausted =
        absl::StrCat(grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(outcome[i], i < kPerKind ? exhausted : "0," + exhausted) << i;
    EXPECT_GE(took[i], kBound) << i;
    slowest_charge = std::max(slowest_charge, took[i]);
  }
  std::printf(
      "%d charges at max with a silent session, bound %s: slowest "
      "%s; slowest GetStats+Charge+Uncharge elsewhere meanwhile %s\n",
      kChargers, absl::FormatDuration(kBound).c_str(),
      absl::FormatDuration(slowest_charge).c_str(),
      absl::FormatDuration(slowest_other).c_str());
  EXPECT_LT(slowest_charge, kBound + absl::Milliseconds(400));
  EXPECT_LT(slowest_other, kBound / 2);
  // Each batch's first op once: 8 pages at /e, not 16.
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/e"), static_cast<uint64_t>(2 * kPerKind));
  EXPECT_EQ(CurrentPages("/d"), 125u);
  const SessionStats stats = service_->sessions().stats();
  EXPECT_GE(stats.drains_deferred, static_cast<uint64_t>(kChargers));
  EXPECT_EQ(Stats("/d").events().oom(), static_cast<uint64_t>(kChargers));
  EXPECT_THAT(Metrics(), HasSubstr("cgacct_session_drains_deferred_total"));
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(silent.Finish().ok());
}

// A batch and a stream whose op at max is deferred and then served by an
// answering session's stock: every op applied exactly once, in order; an
// idempotency_key replay after the deferral answers the stored results and
// applies nothing; a keyed single Charge deferred the same way is applied
// once and replayed.
TEST_F(SessionsTest, DeferredBatchStreamAndKeyedChargeApplyOnce) {
  const std::string id = SessionHoldingMostOfD("/d/s");
  DrainResponder responder(stub_.get(), id, "/d/s", 125, /*answer=*/true);
  v1::ChargeBatchRequest batch;
  batch.set_idempotency_key("deferred-batch");
  AddOp(&batch, "/e", 3);
  AddOp(&batch, "/d/c", 8);  // at max: deferred, then drained
  AddOp(&batch, "/e", 1, /*uncharge=*/true);
  AddOp(&batch, "/d/c", 2);
  v1::ChargeBatchResponse first;
  ASSERT_TRUE(stub_->ChargeBatch(Context().get(), batch, &first).ok());
  ASSERT_EQ(first.results_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(first.results(i).code(), 0) << i << first.results(i).message();
    EXPECT_EQ(first.results(i).id(), static_cast<uint64_t>(i + 1));
  }
  EXPECT_FALSE(first.replayed());
  EXPECT_GE(service_->sessions().stats().drains_deferred, 1u);
  v1::ChargeBatchResponse again;
  ASSERT_TRUE(stub_->ChargeBatch(Context().get(), batch, &again).ok());
  EXPECT_TRUE(again.replayed());
  ASSERT_EQ(again.results_size(), 4);
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/e"), 2u);
  EXPECT_EQ(CurrentPages("/d"), 10u);
  EXPECT_EQ(Stats("/d").events().oom(), 0u);

  // The stream: the same again at a full /d; two requests, answers in order.
  ASSERT_TRUE(Charge("/d/s", 118, id).ok());  // /d at 128
  {
    auto context = Context();
    auto stream = stub_->ChargeStream(context.get());
    v1::ChargeBatchRequest r1;
    AddOp(&r1, "/d/c", 8);
    v1::ChargeBatchRequest r2;
    AddOp(&r2, "/e", 5);
    ASSERT_TRUE(stream->Write(r1));
    ASSERT_TRUE(stream->Write(r2));
    stream->WritesDone();
    v1::ChargeBatchResponse a1, a2;
    ASSERT_TRUE(stream->Read(&a1));
    ASSERT_TRUE(stream->Read(&a2));
    const grpc::Status s = stream->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(a1.results_size(), 1);
    EXPECT_EQ(a1.results(0).code(), 0) << a1.results(0).message();
    ASSERT_EQ(a2.results_size(), 1);
    EXPECT_EQ(a2.results(0).code(), 0);
  }
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/e"), 7u);
  EXPECT_EQ(CurrentPages("/d"), 18u);

  // A keyed Charge deferred, then replayed.
  ASSERT_TRUE(Charge("/d/s", 110, id).ok());  // /d at 128
  v1::ChargeResponse charged;
  ASSERT_TRUE(
      Charge("/d/c", 8, "", v1::PAGE_KIND_ANON, "keyed-1", &charged).ok());
  EXPECT_FALSE(charged.replayed());
  ASSERT_TRUE(
      Charge("/d/c", 8, "", v1::PAGE_KIND_ANON, "keyed-1", &charged).ok());
  EXPECT_TRUE(charged.replayed());
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/d"), 26u);
  EXPECT_EQ(Stats("/d").events().oom(), 0u);
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(responder.Finish().ok());
}

// ChargeRequest.batch_pages: the batch when it fits at once, else exactly
// nr_pages (no `max` event for the batch), the session holding what was
// charged; bad values INVALID_ARGUMENT naming batch_pages, nothing applied;
// a request_id retry must repeat batch_pages.
TEST_F(SessionsTest, BatchPagesChargesTheBatchOrWhatIsNeeded) {
  LimitsUpdate limits;
  limits.max_pages = 100;
  ASSERT_TRUE(engine_->CreateGroup("/b", limits).ok());
  const std::string id = Open();
  auto charge = [&](uint64_t nr_pages, uint64_t batch_pages,
                    const std::string& request_id, v1::ChargeResponse* out) {
    v1::ChargeRequest request;
    request.set_path("/b");
    request.set_nr_pages(nr_pages);
    request.set_batch_pages(batch_pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    request.set_session_id(id);
    if (!request_id.empty()) request.set_request_id(request_id);
    return stub_->Charge(Context().get(), request, out);
  };
  v1::ChargeResponse r;
  ASSERT_TRUE(charge(1, 64, "a", &r).ok());
  EXPECT_EQ(r.nr_pages(), 64u);
  ASSERT_TRUE(charge(1, 64, "b", &r).ok());  // 36 free: 1 page
  EXPECT_EQ(r.nr_pages(), 1u);
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 65u);
  EXPECT_EQ(Stats("/b").events().max(), 0u);
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/b"), 65u);  // nothing parked in the server stock
  // The replay answers the same; another batch_pages is another request.
  ASSERT_TRUE(charge(1, 64, "b", &r).ok());
  EXPECT_TRUE(r.replayed());
  EXPECT_EQ(r.nr_pages(), 1u);
  grpc::Status s = charge(1, 32, "b", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Below nr_pages, or beyond what a charge may be: refused, named.
  s = charge(8, 4, "", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("batch_pages 4 is below nr_pages 8"));
  s = charge(1, ~uint64_t{0}, "", &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("batch_pages"));
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 65u);
  EXPECT_EQ(CurrentPages("/b"), 65u);
  ASSERT_TRUE(Close(id).ok());
  EXPECT_EQ(CurrentPages("/b"), 0u);
}

// A keyed Charge deferred to a drain-wait thread keeps its one entry of
// the request_id table in flight and its rerun completes it: deferrals do
// not take two entries each (a tester saw ids forgotten after half the
// table's capacity, and a retry inside the window applied twice).
TEST_F(SessionsTest, DeferredKeyedChargesTakeOneRequestIdEntryEach) {
  constexpr size_t kCapacity = 8;
  Start(SessionOptions(), kCapacity);
  const std::string id = SessionHoldingMostOfD("/d/s");
  DrainResponder responder(stub_.get(), id, "/d/s", 125, /*answer=*/true);
  v1::ChargeResponse first;
  ASSERT_TRUE(Charge("/e", 1, "", v1::PAGE_KIND_ANON, "k0", &first).ok());
  // kCapacity - 2 keyed charges at /d's max, each deferred, then drained.
  for (size_t i = 0; i + 2 < kCapacity; ++i) {
    engine_->DrainAllStock();
    const uint64_t used = CurrentPages("/d");
    if (used < 128) {
      ASSERT_TRUE(Charge("/d/s", 128 - used, id).ok());  // full again
    }
    v1::ChargeResponse r;
    const grpc::Status s =
        Charge("/d/c", 1, "", v1::PAGE_KIND_ANON, absl::StrCat("k", i + 1), &r);
    ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
  }
  EXPECT_EQ(service_->sessions().stats().drains_deferred, kCapacity - 2);
  v1::ChargeResponse again;
  ASSERT_TRUE(Charge("/e", 1, "", v1::PAGE_KIND_ANON, "k0", &again).ok());
  EXPECT_TRUE(again.replayed());
  engine_->DrainAllStock();
  EXPECT_EQ(CurrentPages("/e"), 1u);
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(responder.Finish().ok());
}

// Deferred calls queue for a drain-wait thread when all are busy; one whose
// client gave up (deadline passed) while queued is answered at once, not
// run: it neither waits the bound again nor delays the calls behind it.
TEST_F(SessionsTest, ExpiredDeferredCallsAreNotRun) {
  constexpr absl::Duration kBound = absl::Milliseconds(600);
  SessionOptions options;
  options.drain_timeout = kBound;
  options.drain_wait_threads = 1;
  Start(options);
  const std::string id = SessionHoldingMostOfD("/d/t");
  DrainResponder silent(stub_.get(), id, "/d/t", 125, /*answer=*/false);
  auto charge_with_deadline = [&](absl::Duration deadline) {
    v1::ChargeRequest request;
    request.set_path("/d/c");
    request.set_nr_pages(8);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(deadline));
    return stub_->Charge(&context, request, &response);
  };
  // The first takes the only thread for the bound; three queue and expire.
  std::thread holder([&] {
    EXPECT_EQ(charge_with_deadline(absl::Seconds(10)).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  });
  absl::SleepFor(absl::Milliseconds(100));
  std::vector<std::thread> expiring;
  for (int i = 0; i < 3; ++i) {
    expiring.emplace_back([&] {
      EXPECT_EQ(charge_with_deadline(absl::Milliseconds(100)).error_code(),
                grpc::StatusCode::DEADLINE_EXCEEDED);
    });
  }
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  EXPECT_EQ(charge_with_deadline(absl::Seconds(10)).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  const absl::Duration took = absl::Now() - start;
  holder.join();
  for (std::thread& t : expiring) t.join();
  // Behind the holder (~450 ms left), then its own bound; the three
  // expired calls add nothing (they would add 3 x 600 ms).
  std::printf("last queued charge: %s (bound %s, one drain-wait thread)\n",
              absl::FormatDuration(took).c_str(),
              absl::FormatDuration(kBound).c_str());
  EXPECT_LT(took, 2 * kBound + absl::Milliseconds(300));
  EXPECT_EQ(service_->sessions().stats().drains, 2u);
  ASSERT_TRUE(Close(id).ok());
  EXPECT_TRUE(silent.Finish().ok());
}

// The drain stops early only once the pages returned cover the room the
// charge needs at the limiting group, which is more than the charge when
// usage is above a lowered max.
TEST_F(SessionsTest, DrainWaitsForTheRoomNeededNotJustTheCharge) {
  StartWithDrainTimeout(absl::Seconds(3));
  LimitsUpdate limits;
  limits.max_pages = 100;
  ASSERT_TRUE(engine_->CreateGroup("/a", limits).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a/x", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a/y", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a/c", {}).ok());
  const std::string fast = Open();
  const std::string slow = Open();
  ASSERT_TRUE(Charge("/a/x", 5, fast).ok());
  ASSERT_TRUE(Charge("/a/y", 20, slow).ok());
  ASSERT_TRUE(Charge("/a/c", 75, "").ok());  // usage 100
  engine_->DrainAllStock();
  DrainResponder answers_at_once(stub_.get(), fast, "/a/x", 5, true);
  DrainResponder answers_later(stub_.get(), slow, "/a/y", 20, true,
                               absl::Milliseconds(200));
  LimitsUpdate lower;
  lower.max_pages = 95;  // usage stays 100 (no reclaimable pages)
  ASSERT_TRUE(engine_->SetLimits("/a", lower).ok());
  // (memory_max_write() raised `oom`: usage could not get under.)
  const uint64_t oom_before = Stats("/a").events().oom();
  // 3 pages need 8 back: 5 come at once, the rest 200 ms later.
  const grpc::Status s = Charge("/a/c", 3, "");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Stats("/a").events().oom(), oom_before);
  ASSERT_TRUE(Close(fast).ok());
  ASSERT_TRUE(Close(slow).ok());
  EXPECT_TRUE(answers_at_once.Finish().ok());
  EXPECT_TRUE(answers_later.Finish().ok());
}

// --- SIGKILL ----------------------------------------------------------------

// The child: opens a session with CGACCT_SESSION_CHILD_TTL_MS, keeps it
// alive on a stream, writes its id to CGACCT_SESSION_CHILD_OUT, and charges
// and uncharges in a loop until killed. Only run by the test below.
TEST(SessionChild, DISABLED_ChargeLoop) {
  const char* target = std::getenv("CGACCT_SESSION_CHILD_TARGET");
  const char* out = std::getenv("CGACCT_SESSION_CHILD_OUT");
  const char* ttl = std::getenv("CGACCT_SESSION_CHILD_TTL_MS");
  ASSERT_NE(target, nullptr);
  ASSERT_NE(out, nullptr);
  ASSERT_NE(ttl, nullptr);
  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::Accounting::NewStub(channel);
  v1::OpenSessionRequest open;
  open.set_ttl_ms(static_cast<uint32_t>(std::atoi(ttl)));
  open.set_client_name(absl::StrCat("child:", getpid()));
  v1::OpenSessionResponse opened;
  const grpc::Status open_status =
      stub->OpenSession(Context().get(), open, &opened);
  ASSERT_TRUE(open_status.ok()) << "OpenSession: " << open_status.error_code()
                                << " " << open_status.error_message();
  const std::string id = opened.session_id();
  grpc::ClientContext stream_context;
  std::unique_ptr<Stream> stream = stub->SessionStream(&stream_context);
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(id);
  ASSERT_TRUE(stream->Write(attach));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  std::thread keepalive([&] {
    for (;;) {
      absl::SleepFor(absl::Milliseconds(std::atoi(ttl) / 3));
      v1::SessionClientMessage k;
      k.set_keepalive(true);
      if (!stream->Write(k) || !stream->Read(&answer)) return;
    }
  });
  {
    std::ofstream f(std::string(out) + ".tmp");
    f << id;
  }
  std::rename((std::string(out) + ".tmp").c_str(), out);
  for (uint64_t i = 0;; ++i) {
    v1::ChargeRequest charge;
    charge.set_path("/k");
    charge.set_nr_pages(1 + i % 5);
    charge.set_kind(i % 3 == 0 ? v1::PAGE_KIND_FILE : v1::PAGE_KIND_ANON);
    charge.set_session_id(id);
    v1::ChargeResponse charged;
    stub->Charge(Context().get(), charge, &charged);
    if (i % 2 == 1) {
      v1::UnchargeRequest uncharge;
      uncharge.set_path("/k");
      uncharge.set_nr_pages(1);
      uncharge.set_kind(v1::PAGE_KIND_ANON);
      uncharge.set_session_id(id);
      v1::UnchargeResponse uncharged;
      stub->Uncharge(Context().get(), uncharge, &uncharged);
    }
  }
}

TEST_F(SessionsTest, SigkilledClientsHoldNothingWithinTtlPlusOneSecond) {
  ASSERT_TRUE(engine_->CreateGroup("/k", {}).ok());
  constexpr int kChildren = 3;
  constexpr int kTtlMs = 300;
  const std::string dir = ::testing::TempDir();
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int c = 0; c < kChildren; ++c) {
    const std::string out =
        absl::StrCat(dir, "/session_child_", getpid(), "_", c);
    std::remove(out.c_str());
    outs.push_back(out);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
    env_strings.push_back(
        absl::StrCat("CGACCT_SESSION_CHILD_TARGET=", server_target_));
    env_strings.push_back(absl::StrCat("CGACCT_SESSION_CHILD_OUT=", out));
    env_strings.push_back(absl::StrCat("CGACCT_SESSION_CHILD_TTL_MS=", kTtlMs));
    std::vector<char*> env;
    for (std::string& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    std::string self = "/proc/self/exe";
    std::string filter = "--gtest_filter=SessionChild.DISABLED_ChargeLoop";
    std::string disabled = "--gtest_also_run_disabled_tests";
    char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
    pid_t pid;
    ASSERT_EQ(
        posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, env.data()),
        0);
    pids.push_back(pid);
  }
  std::vector<std::string> ids;
  for (const std::string& out : outs) {
    std::string id;
    ASSERT_TRUE(WaitFor(absl::Seconds(20), [&] {
      std::ifstream f(out);
      return static_cast<bool>(f >> id);
    }));
    ids.push_back(id);
  }
  // Let them charge for a while, then kill each mid-loop.
  ASSERT_TRUE(WaitFor(absl::Seconds(10), [&] {
    engine_->DrainAllStock();
    return CurrentPages("/k") > 50;
  }));
  for (pid_t pid : pids) ASSERT_EQ(kill(pid, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  {
    // Still there at the kill: the leases run on without the clients.
    v1::SessionInfo info;
    for (const std::string& id : ids) EXPECT_TRUE(GetSession(id, &info).ok());
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  for (const std::string& out : outs) std::remove(out.c_str());
  // Within ttl + 1 s of the kill: nothing held, no session left.
  const bool drained = WaitFor(absl::Milliseconds(kTtlMs + 1000), [&] {
    v1::SessionInfo info;
    for (const std::string& id : ids)
      if (GetSession(id, &info).error_code() != grpc::StatusCode::NOT_FOUND)
        return false;
    engine_->DrainAllStock();
    return CurrentPages("/k") == 0;
  });
  const absl::Duration took = absl::Now() - killed;
  EXPECT_TRUE(drained) << "after " << took << ": " << CurrentPages("/k")
                       << " pages still charged";
  std::printf(
      "SIGKILL: %d sessions expired and returned within %s of the "
      "kill (ttl %d ms)\n",
      kChildren, absl::FormatDuration(took).c_str(), kTtlMs);
  v1::GroupStats stats = Stats("/k");
  EXPECT_EQ(StatValue(stats, "anon"), 0u);
  EXPECT_EQ(StatValue(stats, "file"), 0u);
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat(
                             "cgacct_sessions_expired_total ", kChildren)));
}

}  // namespace
}  // namespace cgacct