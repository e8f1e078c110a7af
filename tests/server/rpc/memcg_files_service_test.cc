// Issue 25's additions as the service's users meet them, through a real
// channel to an in-process server with tokens and a policy:
//   - memory.peak per open file: OpenPeakWatermark / ResetPeakWatermark /
//     ReadPeakWatermark / ClosePeakWatermark, owned by a session of the
//     caller (closed with it, with the group), bounded per identity, write
//     access to open or reset, NOT_FOUND for another identity;
//   - memory.oom.group: Limits.oom_group on CreateGroup and SetLimits, shown
//     by GetStats; an OOM in such a group ends every session holding pages
//     in it (its stream says it was OOM-killed, naming the group), the
//     charge's RESOURCE_EXHAUSTED names the group, oom_group_kill counts it;
//   - GetEngineInfo's new fields, nr_dying_groups for admins only.
// Every test fails on main before this change (the RPCs were UNIMPLEMENTED,
// Limits had no oom_group, EngineInfo no such fields).
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/auth/authorizer.h"
#include "server/events/events_hub.h"
#include "server/metrics/prometheus/families.h"
#include "server/metrics/prometheus/room_collectors.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "tests/server/in_process_server.h"
#include "tests/server/wait_for.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::AllOf;
using ::testing::HasSubstr;
using test_util::WaitFor;

constexpr uint64_t kPage = 4096;
constexpr char kTokenA[] = "token-of-tenant-a-0123456789";
constexpr char kTokenB[] = "token-of-tenant-b-0123456789";
constexpr char kTokenReader[] = "token-of-a-reader-0123456789";
constexpr char kTokenAdmin[] = "token-of-the-admin-0123456789";

using Stream = grpc::ClientReaderWriter<v1::SessionClientMessage,
                                        v1::SessionServerMessage>;

class MemcgFilesServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(/*max_watermarks=*/4); }

  // The engine's options of every test but those that change them.
  EngineOptions TestEngineOptions() {
    EngineOptions options;
    options.nr_cpus = 2;
    options.page_size_bytes = kPage;
    options.charge_batch_pages = 1;  // no stock: usage = charges
    options.observer = &hub_;        // OOM group kills reach the sessions
    return options;
  }

  void Start(uint32_t max_watermarks) {
    Start(max_watermarks, TestEngineOptions());
  }
  void Start(uint32_t max_watermarks, const EngineOptions& options) {
    engine_ = std::move(*Engine::Create(options));
    AuthConfig config;
    config.tokens = *TokenTable::Parse(
        absl::StrCat("a ", kTokenA, "\nb ", kTokenB, "\nreader ", kTokenReader,
                     "\nops ", kTokenAdmin, "\n"));
    config.policy = *AuthzPolicy::Parse(
        "token:a rw /a\ntoken:b rw /b\ntoken:reader ro /a\ntoken:ops admin\n");
    authorizer_ = std::make_unique<Authorizer>(std::move(config), nullptr);
    AccountingServiceOptions service_options;
    service_options.authorizer = authorizer_.get();
    service_options.events_hub = &hub_;
    service_options.sessions.max_peak_watermarks_per_identity = max_watermarks;
    service_ = std::make_unique<AccountingService>(*engine_, metrics_,
                                                   service_options);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
  }

  void TearDown() override {
    service_->BeginShutdown();
    server_->Shutdown();
    service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  static std::unique_ptr<grpc::ClientContext> As(const char* token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    return context;
  }

  grpc::Status Create(const std::string& path, std::optional<bool> oom_group =
                                                   std::nullopt,
                      uint64_t max_pages = 0, v1::Group* out = nullptr) {
    v1::CreateGroupRequest request;
    request.set_path(path);
    if (oom_group.has_value()) request.mutable_limits()->set_oom_group(*oom_group);
    if (max_pages > 0) request.mutable_limits()->set_max_bytes(max_pages * kPage);
    v1::Group group;
    grpc::Status s = stub_->CreateGroup(As(kTokenAdmin).get(), request, &group);
    if (out != nullptr) *out = group;
    return s;
  }

  grpc::Status SetLimits(const std::string& path, const v1::Limits& limits,
                         v1::Group* out = nullptr) {
    v1::SetLimitsRequest request;
    request.set_path(path);
    *request.mutable_limits() = limits;
    v1::Group group;
    grpc::Status s = stub_->SetLimits(As(kTokenAdmin).get(), request, &group);
    if (out != nullptr) *out = group;
    return s;
  }

  v1::GroupStats Stats(const std::string& path) {
    v1::GetStatsRequest request;
    request.set_path(path);
    v1::GroupStats stats;
    grpc::Status s = stub_->GetStats(As(kTokenAdmin).get(), request, &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return stats;
  }

  std::string OpenSession(const char* token) {
    v1::OpenSessionRequest request;
    v1::OpenSessionResponse response;
    grpc::Status s = stub_->OpenSession(As(token).get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.session_id();
  }

  // `pages` ANON pages charged (or uncharged) at `path`, in `session_id`'s
  // name when given.
  template <typename Request, typename Response, typename Rpc>
  grpc::Status PageCall(Rpc rpc, const char* token, const std::string& path,
                        uint64_t pages, const std::string& session_id) {
    Request request;
    request.set_path(path);
    request.set_nr_pages(pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    if (!session_id.empty()) request.set_session_id(session_id);
    Response response;
    return (stub_.get()->*rpc)(As(token).get(), request, &response);
  }
  grpc::Status Charge(const char* token, const std::string& path,
                      uint64_t pages, const std::string& session_id = "") {
    return PageCall<v1::ChargeRequest, v1::ChargeResponse>(
        &v1::Accounting::Stub::Charge, token, path, pages, session_id);
  }
  grpc::Status Uncharge(const char* token, const std::string& path,
                        uint64_t pages, const std::string& session_id = "") {
    return PageCall<v1::UnchargeRequest, v1::UnchargeResponse>(
        &v1::Accounting::Stub::Uncharge, token, path, pages, session_id);
  }

  grpc::Status OpenPeak(const char* token, const std::string& path,
                        const std::string& session_id,
                        v1::PeakWatermark* out) {
    v1::OpenPeakWatermarkRequest request;
    request.set_path(path);
    request.set_session_id(session_id);
    return stub_->OpenPeakWatermark(As(token).get(), request, out);
  }
  // ReadPeakWatermark, or (`reset`) ResetPeakWatermark.
  grpc::Status PeakIo(bool reset, const char* token, uint64_t id,
                      v1::PeakWatermark* out) {
    v1::PeakWatermarkRequest request;
    request.set_watermark_id(id);
    return reset ? stub_->ResetPeakWatermark(As(token).get(), request, out)
                 : stub_->ReadPeakWatermark(As(token).get(), request, out);
  }
  grpc::Status ReadPeak(const char* token, uint64_t id,
                        v1::PeakWatermark* out) {
    return PeakIo(false, token, id, out);
  }
  grpc::Status ResetPeak(const char* token, uint64_t id,
                         v1::PeakWatermark* out) {
    return PeakIo(true, token, id, out);
  }
  grpc::Status ClosePeak(const char* token, uint64_t id) {
    v1::PeakWatermarkRequest request;
    request.set_watermark_id(id);
    v1::ClosePeakWatermarkResponse response;
    return stub_->ClosePeakWatermark(As(token).get(), request, &response);
  }
  // The peak read through watermark `id`, in pages.
  uint64_t PeakPages(const char* token, uint64_t id) {
    v1::PeakWatermark w;
    const grpc::Status s = ReadPeak(token, id, &w);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return w.peak_bytes() / kPage;
  }

  // Declared first: the engine's observer outlives the engine.
  EventsHub hub_{nullptr};
  RpcMetrics metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

// memory_peak_write() then memory_peak_show() through the same file: the
// caller's watermark starts at usage and keeps the highest usage since;
// a write restarts it; the group-wide peak is not touched.
TEST_F(MemcgFilesServiceTest, PeakWatermarkIsTheWritersOwn) {
  ASSERT_TRUE(Create("/a").ok());
  const std::string sid = OpenSession(kTokenA);
  ASSERT_TRUE(Charge(kTokenA, "/a", 100, sid).ok());
  ASSERT_TRUE(Uncharge(kTokenA, "/a", 90, sid).ok());  // usage 10, peak 100

  v1::PeakWatermark w;
  ASSERT_TRUE(OpenPeak(kTokenA, "/a", sid, &w).ok());
  EXPECT_NE(w.watermark_id(), 0u);
  EXPECT_EQ(w.path(), "/a");
  EXPECT_EQ(w.peak_bytes(), 10 * kPage);  // starts at usage
  ASSERT_TRUE(Charge(kTokenA, "/a", 20, sid).ok());    // 30
  ASSERT_TRUE(Uncharge(kTokenA, "/a", 25, sid).ok());  // 5
  EXPECT_EQ(PeakPages(kTokenA, w.watermark_id()), 30u);
  EXPECT_EQ(Stats("/a").memory_peak_bytes(), 100 * kPage);  // group-wide

  v1::PeakWatermark reset;
  ASSERT_TRUE(ResetPeak(kTokenA, w.watermark_id(), &reset).ok());
  EXPECT_EQ(reset.peak_bytes(), 5 * kPage);  // restarted at usage
  ASSERT_TRUE(Charge(kTokenA, "/a", 3, sid).ok());  // 8
  EXPECT_EQ(PeakPages(kTokenA, w.watermark_id()), 8u);
  EXPECT_EQ(Stats("/a").memory_peak_bytes(), 100 * kPage);

  // Closed: the id is gone.
  ASSERT_TRUE(ClosePeak(kTokenA, w.watermark_id()).ok());
  const grpc::Status after = ReadPeak(kTokenA, w.watermark_id(), &w);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(after.error_message(), HasSubstr("watermark_id"));
  EXPECT_EQ(service_->sessions().stats().peak_watermarks, 0u);
}

// Owned by the caller identity: another identity naming the id gets
// NOT_FOUND from every call, changing nothing; opening and resetting need
// write access (a read-only grant is refused), as writing memory.peak does.
TEST_F(MemcgFilesServiceTest, PeakWatermarksBelongToTheirIdentity) {
  ASSERT_TRUE(Create("/a").ok());
  ASSERT_TRUE(Create("/b").ok());
  const std::string sid = OpenSession(kTokenA);
  v1::PeakWatermark w;
  ASSERT_TRUE(OpenPeak(kTokenA, "/a", sid, &w).ok());
  ASSERT_TRUE(Charge(kTokenA, "/a", 7, sid).ok());

  v1::PeakWatermark other;
  for (const char* token : {kTokenB, kTokenReader, kTokenAdmin}) {
    const grpc::Status read = ReadPeak(token, w.watermark_id(), &other);
    EXPECT_EQ(read.error_code(), grpc::StatusCode::NOT_FOUND) << token;
    EXPECT_THAT(read.error_message(),
                HasSubstr(absl::StrCat("watermark_id ", w.watermark_id())));
    EXPECT_EQ(ResetPeak(token, w.watermark_id(), &other).error_code(),
              grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(ClosePeak(token, w.watermark_id()).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_EQ(PeakPages(kTokenA, w.watermark_id()), 7u);  // still open, unreset

  // b cannot open one on /a (outside its grant), even in its own session;
  // the reader may read /a but not write memory.peak.
  const std::string b_sid = OpenSession(kTokenB);
  EXPECT_EQ(OpenPeak(kTokenB, "/a", b_sid, &other).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const std::string r_sid = OpenSession(kTokenReader);
  EXPECT_EQ(OpenPeak(kTokenReader, "/a", r_sid, &other).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Nor in another identity's session.
  const grpc::Status foreign = OpenPeak(kTokenB, "/b", sid, &other);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(foreign.error_message(), HasSubstr("session_id"));
  EXPECT_EQ(service_->sessions().stats().peak_watermarks, 1u);
}

// Every bad input is refused naming its field, and opens nothing.
TEST_F(MemcgFilesServiceTest, PeakWatermarkBadInputsNameTheField) {
  ASSERT_TRUE(Create("/a").ok());
  const std::string sid = OpenSession(kTokenA);
  v1::PeakWatermark w;
  grpc::Status s = OpenPeak(kTokenA, "/a", "", &w);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  s = OpenPeak(kTokenA, "a//b", sid, &w);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("path"));
  s = OpenPeak(kTokenA, "/a", "no-such-session", &w);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("session_id"));
  s = OpenPeak(kTokenA, "/a/missing", sid, &w);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("/a/missing"));
  for (bool reset : {false, true}) {
    s = PeakIo(reset, kTokenA, 0, &w);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("watermark_id"));
    s = PeakIo(reset, kTokenA, 12345, &w);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("watermark_id 12345"));
  }
  s = ClosePeak(kTokenA, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("watermark_id"));
  EXPECT_EQ(service_->sessions().stats().peak_watermarks, 0u);
}

// They cannot leak: at most --max_peak_watermarks_per_identity open (the
// refusal names the bound), and they close with their session (CloseSession
// or expiry) and with their group.
TEST_F(MemcgFilesServiceTest, PeakWatermarksAreBoundedAndCloseWithTheSession) {
  TearDown();
  Start(/*max_watermarks=*/2);
  ASSERT_TRUE(Create("/a").ok());
  ASSERT_TRUE(Create("/a/x").ok());
  const std::string sid = OpenSession(kTokenA);
  v1::PeakWatermark w1, w2, w3;
  ASSERT_TRUE(OpenPeak(kTokenA, "/a", sid, &w1).ok());
  ASSERT_TRUE(OpenPeak(kTokenA, "/a/x", sid, &w2).ok());
  const grpc::Status third = OpenPeak(kTokenA, "/a", sid, &w3);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(third.error_message(),
              HasSubstr("--max_peak_watermarks_per_identity 2"));
  // Another identity has a bound of its own.
  ASSERT_TRUE(Create("/b").ok());
  const std::string b_sid = OpenSession(kTokenB);
  EXPECT_TRUE(OpenPeak(kTokenB, "/b", b_sid, &w3).ok());
  EXPECT_TRUE(ClosePeak(kTokenB, w3.watermark_id()).ok());

  // Deleting /a/x closes w2 (the engine's watermark went with the group).
  v1::DeleteGroupRequest del;
  del.set_path("/a/x");
  v1::DeleteGroupResponse deleted;
  ASSERT_TRUE(stub_->DeleteGroup(As(kTokenAdmin).get(), del, &deleted).ok());
  EXPECT_EQ(ReadPeak(kTokenA, w2.watermark_id(), &w3).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(OpenPeak(kTokenA, "/a", sid, &w3).ok());  // room again

  // CloseSession closes the rest.
  v1::CloseSessionRequest close;
  close.set_session_id(sid);
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(As(kTokenA).get(), close, &closed).ok());
  EXPECT_EQ(ReadPeak(kTokenA, w1.watermark_id(), &w2).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ReadPeak(kTokenA, w3.watermark_id(), &w2).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(service_->sessions().stats().peak_watermarks, 0u);
  const std::string again = OpenSession(kTokenA);
  EXPECT_TRUE(OpenPeak(kTokenA, "/a", again, &w1).ok());
  EXPECT_TRUE(OpenPeak(kTokenA, "/a", again, &w2).ok());
  EXPECT_THAT(SerializeMetrics(*MakeSessionMetrics(service_->sessions())),
              HasSubstr("\ncgacct_peak_watermarks 2\n"));
}

// memory.oom.group is set with the limits (CreateGroup, SetLimits), read
// back in the answer and in GetStats, kept when other limits change, and
// refused on the root naming the path.
TEST_F(MemcgFilesServiceTest, OomGroupIsSetWithTheLimits) {
  v1::Group group;
  ASSERT_TRUE(Create("/g", true, 0, &group).ok());
  EXPECT_TRUE(group.limits().has_oom_group());
  EXPECT_TRUE(group.limits().oom_group());
  EXPECT_TRUE(Stats("/g").limits().oom_group());
  ASSERT_TRUE(Create("/h", std::nullopt, 0, &group).ok());
  EXPECT_TRUE(group.limits().has_oom_group());
  EXPECT_FALSE(group.limits().oom_group());

  v1::Limits limits;
  limits.set_max_bytes(64 * kPage);
  ASSERT_TRUE(SetLimits("/g", limits, &group).ok());
  EXPECT_TRUE(group.limits().oom_group());  // absent: unchanged
  EXPECT_TRUE(Stats("/g").limits().oom_group());
  limits.Clear();
  limits.set_oom_group(false);
  ASSERT_TRUE(SetLimits("/g", limits, &group).ok());
  EXPECT_FALSE(group.limits().oom_group());
  EXPECT_EQ(group.limits().max_bytes(), 64 * kPage);
  EXPECT_FALSE(Stats("/g").limits().oom_group());
  limits.set_oom_group(true);
  ASSERT_TRUE(SetLimits("/h", limits).ok());
  EXPECT_TRUE(Stats("/h").limits().oom_group());

  const grpc::Status root = SetLimits("/", limits);
  EXPECT_EQ(root.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(root.error_message(), HasSubstr("path"));
  EXPECT_FALSE(Stats("/").limits().oom_group());
}

// An OOM in a group with memory.oom.group set kills it whole: every
// session holding pages at or below it ends (its pages uncharged, its
// stream ended NOT_FOUND saying it was OOM-killed with the group's path),
// sessions elsewhere live on, the charge's RESOURCE_EXHAUSTED names the
// group, and oom_group_kill counts it (also in /metrics' sessions family).
TEST_F(MemcgFilesServiceTest, OomGroupKillEndsTheSessionsHoldingPagesInIt) {
  ASSERT_TRUE(Create("/a").ok());
  v1::Limits limits;
  limits.set_max_bytes(10 * kPage);
  limits.set_oom_group(true);
  ASSERT_TRUE(SetLimits("/a", limits).ok());
  ASSERT_TRUE(Create("/a/x").ok());
  ASSERT_TRUE(Create("/a/y").ok());
  ASSERT_TRUE(Create("/b").ok());
  const std::string s1 = OpenSession(kTokenA);
  const std::string s2 = OpenSession(kTokenA);
  const std::string s3 = OpenSession(kTokenB);
  ASSERT_TRUE(Charge(kTokenA, "/a/x", 4, s1).ok());
  ASSERT_TRUE(Charge(kTokenA, "/a/y", 3, s2).ok());
  ASSERT_TRUE(Charge(kTokenB, "/b", 2, s3).ok());
  ASSERT_TRUE(Charge(kTokenA, "/a/x", 1).ok());  // unowned
  v1::PeakWatermark w;
  ASSERT_TRUE(OpenPeak(kTokenA, "/a", s1, &w).ok());
  // s1 attached: its stream sees the kill.
  grpc::ClientContext stream_context;
  stream_context.AddMetadata("authorization",
                             absl::StrCat("Bearer ", kTokenA));
  std::unique_ptr<Stream> stream = stub_->SessionStream(&stream_context);
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(s1);
  ASSERT_TRUE(stream->Write(attach));
  v1::SessionServerMessage answer;
  ASSERT_TRUE(stream->Read(&answer));

  // 8 of 10 pages charged: 3 more is an OOM (a charge of at most 8 pages).
  const grpc::Status oom = Charge(kTokenA, "/a/y", 3, s2);
  EXPECT_EQ(oom.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(oom.error_message(),
              AllOf(HasSubstr("memory.oom.group of /a"),
                    HasSubstr("the whole group is killed")));

  // The stream ends (a drain request for the OOM may come first).
  grpc::Status ended;
  while (stream->Read(&answer)) {
    v1::SessionClientMessage nothing;  // nothing stocked to return
    nothing.set_drain_id(answer.drain_id());
    stream->Write(nothing);
  }
  ended = stream->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(ended.error_message(),
              AllOf(HasSubstr(absl::StrCat("session_id \"", s1, "\"")),
                    HasSubstr("OOM-killed"), HasSubstr("\"/a\""),
                    HasSubstr("memory.oom.group")));
  ASSERT_TRUE(WaitFor(absl::Seconds(10), [&] {
    return service_->sessions().stats().oom_killed == 2;
  }));
  v1::GetSessionRequest get;
  v1::SessionInfo info;
  get.set_session_id(s1);
  EXPECT_EQ(stub_->GetSession(As(kTokenA).get(), get, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.set_session_id(s2);
  EXPECT_EQ(stub_->GetSession(As(kTokenA).get(), get, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.set_session_id(s3);
  EXPECT_TRUE(stub_->GetSession(As(kTokenB).get(), get, &info).ok());
  EXPECT_EQ(info.held_pages(), 2u);
  // Their pages were uncharged; the unowned page stays; the watermark
  // closed with s1.
  EXPECT_EQ(Stats("/a").memory_current_bytes(), 1 * kPage);
  EXPECT_EQ(Stats("/b").memory_current_bytes(), 2 * kPage);
  EXPECT_EQ(ReadPeak(kTokenA, w.watermark_id(), &w).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Counted once, on the killed group (and its ancestors' hierarchical
  // counts below the root).
  EXPECT_EQ(Stats("/a").events_local().oom_group_kill(), 1u);
  EXPECT_EQ(Stats("/a").events().oom_group_kill(), 1u);
  EXPECT_EQ(Stats("/a/y").events().oom_group_kill(), 0u);
  const SessionStats stats = service_->sessions().stats();
  EXPECT_EQ(stats.oom_group_kills, 1u);
  EXPECT_EQ(stats.returned_pages_oom_kill, 7u);
  const std::string metrics =
      SerializeMetrics(*MakeSessionMetrics(service_->sessions()));
  EXPECT_THAT(metrics, HasSubstr("\ncgacct_sessions_oom_killed_total 2\n"));
  EXPECT_THAT(metrics,
              HasSubstr("cgacct_session_returned_pages_total{reason="
                        "\"oom_kill\"} 7\n"));
  // The group lives on: a new session charges there again.
  const std::string s4 = OpenSession(kTokenA);
  EXPECT_TRUE(Charge(kTokenA, "/a/x", 5, s4).ok());
}

// GetEngineInfo shows the engine's additions and the seed in use to
// everyone (configuration), the dying groups to admins only (load).
TEST_F(MemcgFilesServiceTest, EngineInfoShowsTheAdditionsAndDyingGroups) {
  TearDown();
  // Its own engine: the additions on, a fixed seed, localevents.
  EngineOptions options = TestEngineOptions();
  options.stock_pool_buckets = 8;
  options.stock_victim_sets = 2;
  options.uncharge_refills_stock = true;
  options.stock_eviction_seed = 12345;
  options.memory_localevents = true;
  Start(/*max_watermarks=*/77, options);
  // A dying group: deleted while its page is still charged.
  ASSERT_TRUE(Create("/a").ok());
  ASSERT_TRUE(Create("/a/d").ok());
  ASSERT_TRUE(Charge(kTokenA, "/a/d", 1).ok());
  v1::DeleteGroupRequest del;
  del.set_path("/a/d");
  v1::DeleteGroupResponse deleted;
  ASSERT_TRUE(stub_->DeleteGroup(As(kTokenAdmin).get(), del, &deleted).ok());
  EXPECT_GE(deleted.reparented_pages(), 1u);

  v1::EngineInfo admin, tenant;
  ASSERT_TRUE(stub_->GetEngineInfo(As(kTokenAdmin).get(),
                                   v1::GetEngineInfoRequest(), &admin)
                  .ok());
  ASSERT_TRUE(stub_->GetEngineInfo(As(kTokenA).get(),
                                   v1::GetEngineInfoRequest(), &tenant)
                  .ok());
  for (const v1::EngineInfo* info : {&admin, &tenant}) {
    EXPECT_EQ(info->stock_pool_buckets(), 8u);
    EXPECT_EQ(info->stock_victim_sets(), 2u);
    EXPECT_TRUE(info->uncharge_refills_stock());
    EXPECT_TRUE(info->memory_localevents());
    EXPECT_EQ(info->max_peak_watermarks_per_identity(), 77u);
  }
  EXPECT_EQ(admin.stock_eviction_seed(), 12345u);
  EXPECT_EQ(tenant.stock_eviction_seed(), 0u);  // it predicts evictions
  EXPECT_EQ(admin.nr_dying_groups(), 1u);
  EXPECT_EQ(tenant.nr_dying_groups(), 0u);  // the engine's load
}

// The seed drawn for --stock_eviction_seed=0 is the one shown, not 0.
TEST_F(MemcgFilesServiceTest, EngineInfoShowsTheEvictionSeedDrawn) {
  v1::EngineInfo info;
  ASSERT_TRUE(stub_->GetEngineInfo(As(kTokenAdmin).get(),
                                   v1::GetEngineInfoRequest(), &info)
                  .ok());
  EXPECT_EQ(info.stock_eviction_seed(), engine_->GetInfo().stock_eviction_seed);
  EXPECT_NE(info.stock_eviction_seed(), 0u);
  EXPECT_EQ(info.stock_pool_buckets(), 0u);  // the kernel's: off
  EXPECT_FALSE(info.uncharge_refills_stock());
  EXPECT_FALSE(info.memory_localevents());
  EXPECT_EQ(info.nr_dying_groups(), 0u);
}

}  // namespace
}  // namespace cgacct
