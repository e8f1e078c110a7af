// SessionStream (server/rpc/session_stream.h) at the protocol level, through
// a real channel to an in-process server: attach and keepalive answers, the
// server's pacing (keepalive requests; no read pending unless it awaits an
// answer; reads through the identity's session read slots), the stream's own
// refusals, admission like every other stream, the drain request and answer
// on the wire, and shutdown. (rpc/sessions_test.cc runs
// whole session lifecycles; this file is about the stream.)
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "server/rpc/session_stream.h"
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
  void Start(uint32_t max_streams = 0, uint32_t max_session_reads = 16) {
    AccountingServiceOptions options;
    options.limits.max_streams_per_identity = max_streams;
    options.limits.max_session_reads_per_identity = max_session_reads;
    options.sessions.drain_timeout = absl::Seconds(5);
    service_ = std::make_unique<AccountingService>(*engine_, metrics_, options);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
  }
  std::string Open(uint32_t ttl_ms = 60000) {
    grpc::ClientContext context;
    v1::OpenSessionRequest request;
    request.set_ttl_ms(ttl_ms);
    v1::OpenSessionResponse response;
    EXPECT_TRUE(stub_->OpenSession(&context, request, &response).ok());
    return response.session_id();
  }
  grpc::Status GetSession(const std::string& id, v1::SessionInfo* info) {
    grpc::ClientContext context;
    v1::GetSessionRequest get;
    get.set_session_id(id);
    return stub_->GetSession(&context, get, info);
  }
  static v1::SessionClientMessage Attach(const std::string& id) {
    v1::SessionClientMessage m;
    m.set_attach_session_id(id);
    return m;
  }
  static v1::SessionClientMessage Keepalive() {
    v1::SessionClientMessage m;
    m.set_keepalive(true);
    return m;
  }
  // SessionStream reads of the anonymous identity pending / waiting for a
  // slot.
  uint32_t ReadsPending() {
    return service_->limiter().ReadsInUse("", CallLimiter::ReadPool::kSession);
  }
  size_t ReadsWaiting() {
    return service_->limiter().ReadsWaiting("",
                                            CallLimiter::ReadPool::kSession);
  }
  // Waits (up to 5 s) for `done`.
  template <typename F>
  static bool Eventually(F done) {
    for (int i = 0; i < 500 && !done(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
  }

  RpcMetrics metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST_F(SessionStreamTest, AttachAndKeepalivesAreAnsweredWithTheLease) {
  Start();
  const std::string id = Open(/*ttl_ms=*/600);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->SessionStream(&context);
  ASSERT_TRUE(stream->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_GT(answer.expires_in_ms(), 500u);
  EXPECT_TRUE(answer.paced());
  EXPECT_FALSE(answer.keepalive_request());
  // A third of the lease later the server asks for a keepalive, saying how
  // long the lease has left; the keepalive is answered with a new lease.
  const auto asked_from = std::chrono::steady_clock::now();
  ASSERT_TRUE(stream->Read(&answer));
  const auto waited = std::chrono::steady_clock::now() - asked_from;
  EXPECT_TRUE(answer.keepalive_request());
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_LE(answer.expires_in_ms(), 450u);
  EXPECT_GT(answer.expires_in_ms(), 0u);
  ASSERT_TRUE(stream->Write(Keepalive()));
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_FALSE(answer.keepalive_request());
  EXPECT_GT(answer.expires_in_ms(), 500u);
  EXPECT_TRUE(answer.paced());
  // Answering every request keeps the session alive past several leases.
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  int asked = 0;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(stream->Read(&answer));
    if (!answer.keepalive_request()) continue;
    ++asked;
    ASSERT_TRUE(stream->Write(Keepalive()));
  }
  EXPECT_GE(asked, 4);
  // A half-close ends the stream OK (seen at the server's next read, its
  // next request); the session stays.
  stream->WritesDone();
  while (stream->Read(&answer)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  v1::SessionInfo info;
  EXPECT_TRUE(GetSession(id, &info).ok());
}

// gRPC 1.51 buffers a whole message (up to --max_message_bytes) for every
// read it has pending: the server keeps none on an attached stream unless it
// awaits an answer (issue 22: one tenant's 200 SessionStreams or
// ChargeStreams each sending 4 MB held 0.6-0.9 GB).
TEST_F(SessionStreamTest, NoReadIsPendingUnlessTheServerAwaitsAnAnswer) {
  Start();
  const std::string id = Open(/*ttl_ms=*/900);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->SessionStream(&context);
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 1; }))  // the attach
      << ReadsPending();
  ASSERT_TRUE(stream->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 0; }));
  // A message sent unasked (a pre-pacing client's keepalive) waits unread...
  ASSERT_TRUE(stream->Write(Keepalive()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(ReadsPending(), 0u);
  // ...until the server's next request, which it then answers: the session
  // is renewed by it.
  ASSERT_TRUE(stream->Read(&answer));
  ASSERT_TRUE(answer.keepalive_request());
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_FALSE(answer.keepalive_request());
  EXPECT_GT(answer.expires_in_ms(), 800u);
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 0; }));
  context.TryCancel();
  (void)stream->Finish();
}

TEST_F(SessionStreamTest, AnIdentitysReadsWaitForItsSessionReadSlots) {
  Start(/*max_streams=*/0, /*max_session_reads=*/2);
  // Four streams await their attach: two reads pending, two waiting.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 4; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub_->SessionStream(contexts.back().get()));
  }
  EXPECT_TRUE(Eventually([&] { return ReadsWaiting() == 2; }))
      << ReadsWaiting();
  EXPECT_EQ(ReadsPending(), 2u);
  // Each answer passes its slot on: every stream is attached in the end.
  for (auto& stream : streams) ASSERT_TRUE(stream->Write(Attach(Open())));
  for (auto& stream : streams) {
    v1::SessionServerMessage answer;
    ASSERT_TRUE(stream->Read(&answer));
    EXPECT_GT(answer.expires_in_ms(), 59000u);
  }
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 0; }));
  EXPECT_EQ(ReadsWaiting(), 0u);
  // A stream that ends while it waits gives its place up.
  grpc::ClientContext a_context, b_context, c_context;
  auto a = stub_->SessionStream(&a_context);
  auto b = stub_->SessionStream(&b_context);
  auto c = stub_->SessionStream(&c_context);
  EXPECT_TRUE(Eventually([&] { return ReadsWaiting() == 1; }));
  c_context.TryCancel();
  EXPECT_EQ(c->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return ReadsWaiting() == 0; }));
  EXPECT_LE(ReadsPending(), 2u);  // 0 once a and b waited 1 s for an attach
  a_context.TryCancel();
  b_context.TryCancel();
  (void)a->Finish();
  (void)b->Finish();
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 0; }));
  for (auto& context : contexts) context->TryCancel();
  for (auto& stream : streams) (void)stream->Finish();
}

// A client that is asked and sends nothing (hung, stopped) does not keep its
// identity's read slot for the rest of its lease: its stream ends
// DEADLINE_EXCEEDED kSessionAnswerTimeout after the read began, and the
// session stays (detached) until its lease runs out.
TEST_F(SessionStreamTest, AReadUnansweredForASecondEndsTheStreamNotTheSession) {
  Start();
  const std::string id = Open(/*ttl_ms=*/6000);
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->SessionStream(&context);
  ASSERT_TRUE(stream->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  ASSERT_TRUE(stream->Read(&answer));  // at 2 s
  ASSERT_TRUE(answer.keepalive_request());
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 1; }));
  EXPECT_FALSE(stream->Read(&answer));
  const auto ended_after = std::chrono::steady_clock::now() - asked;
  const grpc::Status ended = stream->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(ended.error_message(), HasSubstr("no message came within 1s"));
  EXPECT_GE(ended_after, std::chrono::milliseconds(900));
  EXPECT_LT(ended_after, std::chrono::milliseconds(3000));
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 0; }));
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_FALSE(info.attached());
}

// Issue 22's re-attack, S1: an answer naming a drain request the session
// was never sent is not an answer: what it lists is not looked at (made-up
// answers of 10,000 entries were each matched against every holding under
// the registry's mutex, and another tenant's sessions expired). An attach
// past kSessionInlineMessageBytes is not parsed.
TEST_F(SessionStreamTest, MadeUpDrainAnswersAndLargeAttachesAreNotLookedAt) {
  Start();
  ASSERT_TRUE(engine_->CreateGroup("/h", {}).ok());
  const std::string id = Open(/*ttl_ms=*/900);
  {
    grpc::ClientContext context;
    v1::ChargeRequest charge;
    charge.set_path("/h");
    charge.set_nr_pages(10);
    charge.set_kind(v1::PAGE_KIND_ANON);
    charge.set_session_id(id);
    v1::ChargeResponse response;
    ASSERT_TRUE(stub_->Charge(&context, charge, &response).ok());
  }
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = stub_->SessionStream(&context);
  ASSERT_TRUE(stream->Write(Attach(id)));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));
  ASSERT_TRUE(stream->Read(&answer));
  ASSERT_TRUE(answer.keepalive_request());
  // The keepalive it was asked for, with a "drain answer" nobody asked for.
  v1::SessionClientMessage made_up = Keepalive();
  made_up.set_drain_id(424242);
  v1::SessionHolding* h = made_up.add_returned();
  h->set_path("/h");
  h->set_kind(v1::PAGE_KIND_ANON);
  h->set_nr_pages(10);
  ASSERT_TRUE(stream->Write(made_up));
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_GT(answer.expires_in_ms(), 800u);  // the keepalive counted
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.held_pages(), 10u);  // nothing "returned"
  EXPECT_EQ(engine_->GetStats("/h", FlushMode::kExact)->memory_current_pages,
            10u);
  context.TryCancel();
  (void)stream->Finish();

  grpc::ClientContext big_context;
  auto big = stub_->SessionStream(&big_context);
  v1::SessionClientMessage attach = Attach(id);
  for (int i = 0; i < 100; ++i) {
    v1::SessionHolding* pad = attach.add_returned();
    pad->set_path(absl::StrCat("/padding/", i, "/", std::string(40, 'p')));
  }
  ASSERT_GT(attach.ByteSizeLong(), kSessionInlineMessageBytes);
  ASSERT_TRUE(big->Write(attach));
  while (big->Read(&answer)) {
  }
  const grpc::Status refused = big->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("the first SessionStream message (the attach) may be "
                        "at most 4096 bytes"));
}

TEST_F(SessionStreamTest, TheStreamsOwnRefusals) {
  Start();
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
    // Message 2 is read at the server's first keepalive request (a third
    // of the lease after the attach).
    grpc::ClientContext context;
    auto stream = stub_->SessionStream(&context);
    ASSERT_TRUE(stream->Write(Attach(Open(/*ttl_ms=*/300))));
    v1::SessionServerMessage answer;
    ASSERT_TRUE(stream->Read(&answer));
    ASSERT_TRUE(stream->Write(Attach(Open())));
    while (stream->Read(&answer)) {  // the keepalive request
    }
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
  first_context.TryCancel();
  EXPECT_EQ(first->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Its permit is back: a new stream is admitted.
  grpc::ClientContext third_context;
  auto third = stub_->SessionStream(&third_context);
  ASSERT_TRUE(third->Write(Attach(id)));
  EXPECT_TRUE(third->Read(&answer));
  third_context.TryCancel();
  EXPECT_EQ(third->Finish().error_code(), grpc::StatusCode::CANCELLED);
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
  // Holdings it does not have, past kSessionInlineMessageBytes: the answer
  // is parsed and handled on a large-request thread, as well.
  for (int i = 0; i < 200; ++i) {
    v1::SessionHolding* none = returned.add_returned();
    none->set_path(absl::StrCat("/nothing-held-here/", i));
    none->set_kind(v1::PAGE_KIND_FILE);
    none->set_nr_pages(1);
  }
  ASSERT_GT(returned.ByteSizeLong(), kSessionInlineMessageBytes);
  ASSERT_TRUE(stream->Write(returned));
  charger.join();
  EXPECT_EQ(engine_->GetStats("/d", FlushMode::kExact)->memory_current_pages,
            8u);
  // Nothing awaited now: no read is pending (a half-close would be seen at
  // the next keepalive request, 20 s away); a cancel ends the stream at
  // once.
  EXPECT_TRUE(Eventually([&] { return ReadsPending() == 0; }));
  stream_context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
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
