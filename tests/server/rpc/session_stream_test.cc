// SessionStream (server/rpc/session_stream.h) at the protocol level, through
// a real channel to an in-process server: attach and keepalive answers, the
// stream's own refusals, admission like every other stream, the drain
// request and answer on the wire, and shutdown. (rpc/sessions_test.cc runs
// whole session lifecycles; this file is about the stream.)
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;
using Stream = grpc::ClientReaderWriter<v1::SessionClientMessage,
                                        v1::SessionServerMessage>;

class SessionStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 2;
    options.charge_batch_pages = 1;
    engine_ = std::move(*Engine::Create(options));
    ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    if (service_ != nullptr) service_->StopSessionStreams();
    server_.reset();
  }
  void Start(uint32_t max_streams = 0) {
    AccountingServiceOptions options;
    options.limits.max_streams_per_identity = max_streams;
    options.sessions.drain_timeout = absl::Seconds(5);
    service_ = std::make_unique<AccountingService>(*engine_, metrics_, options);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
  }
  std::string Open() {
    grpc::ClientContext context;
    v1::OpenSessionRequest request;
    request.set_ttl_ms(60000);
    v1::OpenSessionResponse response;
    EXPECT_TRUE(stub_->OpenSession(&context, request, &response).ok());
    return response.session_id();
  }
  static v1::SessionClientMessage Attach(const std::string& id) {
    v1::SessionClientMessage m;
    m.set_attach_session_id(id);
    return m;
  }

  RpcMetrics metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST_F(SessionStreamTest, AttachAndKeepalivesAreAnsweredWithTheLease) {
  Start();
  const std::string id = Open();
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->SessionStream(&context);
  ASSERT_TRUE(stream->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_GT(answer.expires_in_ms(), 59000u);
  v1::SessionClientMessage keepalive;
  keepalive.set_keepalive(true);
  ASSERT_TRUE(stream->Write(keepalive));
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_GT(answer.expires_in_ms(), 59000u);
  // A half-close ends the stream OK; the session stays.
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  grpc::ClientContext get_context;
  v1::GetSessionRequest get;
  get.set_session_id(id);
  v1::SessionInfo info;
  EXPECT_TRUE(stub_->GetSession(&get_context, get, &info).ok());
}

TEST_F(SessionStreamTest, TheStreamsOwnRefusals) {
  Start();
  const std::string id = Open();
  {
    grpc::ClientContext context;
    auto stream = stub_->SessionStream(&context);
    v1::SessionClientMessage keepalive;
    keepalive.set_keepalive(true);
    ASSERT_TRUE(stream->Write(keepalive));
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(),
                HasSubstr("message 1: attach_session_id is empty"));
  }
  {
    grpc::ClientContext context;
    auto stream = stub_->SessionStream(&context);
    ASSERT_TRUE(stream->Write(Attach("no-such-session")));
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("no such session"));
  }
  {
    grpc::ClientContext context;
    auto stream = stub_->SessionStream(&context);
    ASSERT_TRUE(stream->Write(Attach(id)));
    v1::SessionServerMessage answer;
    ASSERT_TRUE(stream->Read(&answer));
    ASSERT_TRUE(stream->Write(Attach(Open())));
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("message 2"));
  }
}

TEST_F(SessionStreamTest, AStreamIsAdmittedLikeEveryOtherStream) {
  Start(/*max_streams=*/1);
  const std::string id = Open();
  grpc::ClientContext first_context;
  auto first = stub_->SessionStream(&first_context);
  ASSERT_TRUE(first->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(first->Read(&answer));
  grpc::ClientContext second_context;
  auto second = stub_->SessionStream(&second_context);
  second->Write(Attach(id));
  grpc::Status s = second->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  const auto& trailers = second_context.GetServerTrailingMetadata();
  auto shed = trailers.find("cgacct-shed");
  ASSERT_NE(shed, trailers.end());
  EXPECT_EQ(std::string(shed->second.data(), shed->second.size()),
            "streams_per_identity");
  first->WritesDone();
  EXPECT_TRUE(first->Finish().ok());
  // Its permit is back: a new stream is admitted.
  grpc::ClientContext third_context;
  auto third = stub_->SessionStream(&third_context);
  ASSERT_TRUE(third->Write(Attach(id)));
  EXPECT_TRUE(third->Read(&answer));
  third->WritesDone();
  EXPECT_TRUE(third->Finish().ok());
}

// A charge at memory.max asks the attached session, on its stream, to
// return its stock; the answer's pages are uncharged and the charge fits.
TEST_F(SessionStreamTest, DrainRequestAndAnswerOnTheWire) {
  Start();
  const std::string id = Open();
  {
    grpc::ClientContext context;
    v1::CreateGroupRequest create;
    create.set_path("/d");
    create.mutable_limits()->set_max_bytes(10 * 4096);
    v1::Group group;
    grpc::Status made = stub_->CreateGroup(&context, create, &group);
    ASSERT_TRUE(made.ok()) << made.error_message();
  }
  // The session holds the whole max.
  {
    grpc::ClientContext context;
    v1::ChargeRequest charge;
    charge.set_path("/d");
    charge.set_nr_pages(10);
    charge.set_kind(v1::PAGE_KIND_ANON);
    charge.set_session_id(id);
    v1::ChargeResponse response;
    ASSERT_TRUE(stub_->Charge(&context, charge, &response).ok());
  }
  grpc::ClientContext stream_context;
  auto stream = stub_->SessionStream(&stream_context);
  ASSERT_TRUE(stream->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  // An unowned charge at max: the server asks the session.
  std::thread charger([this] {
    grpc::ClientContext context;
    v1::ChargeRequest charge;
    charge.set_path("/d");
    charge.set_nr_pages(4);
    charge.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse response;
    EXPECT_TRUE(stub_->Charge(&context, charge, &response).ok());
  });
  v1::SessionServerMessage drain;
  ASSERT_TRUE(stream->Read(&drain));
  EXPECT_NE(drain.drain_id(), 0u);
  EXPECT_EQ(drain.drain_path(), "/d");
  v1::SessionClientMessage returned;
  returned.set_drain_id(drain.drain_id());
  v1::SessionHolding* h = returned.add_returned();
  h->set_path("/d");
  h->set_kind(v1::PAGE_KIND_ANON);
  h->set_nr_pages(6);
  ASSERT_TRUE(stream->Write(returned));
  charger.join();
  EXPECT_EQ(engine_->GetStats("/d", FlushMode::kExact)->memory_current_pages,
            8u);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SessionStreamTest, ShutdownEndsAttachedStreamsUnavailable) {
  Start();
  const std::string id = Open();
  grpc::ClientContext context;
  auto stream = stub_->SessionStream(&context);
  ASSERT_TRUE(stream->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  service_->BeginShutdown();
  EXPECT_FALSE(stream->Read(&answer));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace cgacct
