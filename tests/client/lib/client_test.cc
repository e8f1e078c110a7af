// cgacct::client against the real cgacctd on loopback (a daemon per test):
// the stock, the batch and its cap, request-id retries, throttle_us, resume
// after the session is lost, Close, SIGKILLed clients, drain_all_stock()
// over the network. Server RPCs are counted from its /metrics
// (grpc_server_handled_total).
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cgacct/client.h"
#include "cgacct/cluster_client.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/load/metrics_scrape.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_interceptor.h"
#include "gtest/gtest.h"
#include "tests/server/daemon.h"

namespace cgacct {
namespace {

using client::ChargeResult;
using client::Client;
using client::Options;
using client::PageKind;
using test_util::Daemon;
using test_util::Process;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kTimeout(20);
constexpr uint64_t kPage = 4096;

struct Server {
  // `server_stock`: the server's own per-CPU stock as cgacctd's default
  // (64-page batch, pool). Otherwise it is off, so that memory.current is
  // exactly what the sessions hold while they live (the tests comparing it
  // with held + stocked pages need that); after a close or expiry it is
  // exact either way (the server drains the groups' stock).
  explicit Server(std::vector<std::string> extra = {}, int port = 0,
                  bool server_stock = false) {
    std::vector<std::string> flags = {
        absl::StrCat("--listen=127.0.0.1:", port),
        "--metrics_listen=127.0.0.1:0", "--cpus=2",
        "--session_drain_timeout_ms=300"};
    if (!server_stock) {
      flags.push_back("--charge_batch_pages=1");
      flags.push_back("--stock_pool_buckets=0");
    }
    flags.insert(flags.end(), extra.begin(), extra.end());
    daemon = std::make_unique<Daemon>(flags);
    const std::string line = daemon->ReadStdoutLine(kTimeout);
    static const std::regex kLine(
        R"(listening on 127\.0\.0\.1:(\d+) \(metrics on 127\.0\.0\.1:(\d+))");
    std::smatch m;
    EXPECT_TRUE(std::regex_search(line, m, kLine)) << line;
    if (m.empty()) return;
    this->port = std::stoi(m[1]);
    metrics = absl::StrCat("127.0.0.1:", m[2].str());
    target = absl::StrCat("127.0.0.1:", this->port);
    channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    stub = v1::Accounting::NewStub(channel);
  }

  void CreateGroup(const std::string& path, uint64_t max_pages = 0,
                   uint64_t high_pages = 0) {
    v1::CreateGroupRequest request;
    request.set_path(path);
    if (max_pages > 0) request.mutable_limits()->set_max_bytes(max_pages * kPage);
    if (high_pages > 0)
      request.mutable_limits()->set_high_bytes(high_pages * kPage);
    v1::Group group;
    grpc::ClientContext context;
    const grpc::Status s = stub->CreateGroup(&context, request, &group);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  v1::GroupStats Stats(const std::string& path) {
    v1::GetStatsRequest request;
    request.set_path(path);
    request.set_flush(v1::FLUSH_MODE_EXACT);
    v1::GroupStats stats;
    grpc::ClientContext context;
    const grpc::Status s = stub->GetStats(&context, request, &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return stats;
  }
  uint64_t CurrentPages(const std::string& path) {
    return Stats(path).memory_current_bytes() / kPage;
  }

  // Deletes `path` (css offline drains the server's stocks first) and
  // returns the pages still charged that went to the parent: 0 when nothing
  // is held there any more.
  uint64_t DeleteReparented(const std::string& path) {
    v1::DeleteGroupRequest request;
    request.set_path(path);
    v1::DeleteGroupResponse response;
    grpc::ClientContext context;
    const grpc::Status s = stub->DeleteGroup(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return s.ok() ? response.reparented_pages() : UINT64_MAX;
  }

  // grpc_server_handled_total of `method` (all codes).
  double Handled(const std::string& method) {
    absl::StatusOr<std::string> text =
        load::HttpGet(metrics, "/metrics", absl::Seconds(5));
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return -1;
    auto samples = load::ParseMetricsText(*text);
    EXPECT_TRUE(samples.ok());
    double n = 0;
    for (const load::MetricSample& s : *samples) {
      if (s.name != "grpc_server_handled_total") continue;
      for (const auto& [k, v] : s.labels)
        if (k == "grpc_method" && v == method) n += s.value;
    }
    return n;
  }

  // The sum of `name`'s samples whose label `key` is `value`.
  double Metric(const std::string& name, const std::string& key,
                const std::string& value) {
    absl::StatusOr<std::string> text =
        load::HttpGet(metrics, "/metrics", absl::Seconds(5));
    if (!text.ok()) return -1;
    auto samples = load::ParseMetricsText(*text);
    if (!samples.ok()) return -1;
    double n = 0;
    for (const load::MetricSample& s : *samples) {
      if (s.name != name) continue;
      for (const auto& [k, v] : s.labels)
        if (k == key && v == value) n += s.value;
    }
    return n;
  }

  grpc::StatusCode SessionCode(const std::string& id) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    v1::SessionInfo info;
    grpc::ClientContext context;
    return stub->GetSession(&context, request, &info).error_code();
  }

  bool Attached(const std::string& id) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    v1::SessionInfo info;
    grpc::ClientContext context;
    return stub->GetSession(&context, request, &info).ok() && info.attached();
  }

  std::unique_ptr<Client> Open(Options options = {},
                               std::shared_ptr<grpc::Channel> ch = nullptr) {
    std::unique_ptr<Client> c;
    const client::Status s = Client::Open(
        ch != nullptr ? ch
                      : grpc::CreateChannel(target,
                                            grpc::InsecureChannelCredentials()),
        std::move(options), &c);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }

  std::unique_ptr<Daemon> daemon;
  int port = 0;
  std::string target;
  std::string metrics;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Accounting::Stub> stub;
};

// consume_stock(): after the first batch, a charge/uncharge loop makes no RPC.
TEST(ClientLibTest, StockHitsMakeNoRpc) {
  Server server;
  server.CreateGroup("/app");
  Options options;
  options.nr_slots = 1;  // one slot: whatever CPU the thread runs on
  std::unique_ptr<Client> c = server.Open(options);
  ASSERT_NE(c, nullptr);
  // Open returns once the session stream is attached.
  EXPECT_TRUE(server.Attached(c->session_id()));
  const double before = server.Handled("Charge") + server.Handled("Uncharge");
  for (int i = 0; i < 10000; ++i) {
    ChargeResult r = c->Charge("/app", 3);
    ASSERT_TRUE(r.ok()) << r.status.ToString();
    ASSERT_TRUE(c->Uncharge("/app", 3).ok());
  }
  const double after = server.Handled("Charge") + server.Handled("Uncharge");
  EXPECT_EQ(after - before, 1);  // the first batch, nothing else
  const client::ClientStats st = c->stats();
  EXPECT_EQ(st.charges, 10000u);
  EXPECT_EQ(st.stock_hits, 9999u);
  EXPECT_EQ(st.charge_rpcs, 1u);
  EXPECT_EQ(st.uncharge_rpcs, 0u);
  // The stock counts in memory.current, as the kernel's does.
  EXPECT_EQ(server.CurrentPages("/app"), 64u);
  EXPECT_EQ(c->stocked_pages(), 64u);
  const std::string id = c->session_id();
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(server.DeleteReparented("/app"), 0u);
  EXPECT_EQ(server.SessionCode(id), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(c->Charge("/app", 1).status.code(),
            client::StatusCode::kFailedPrecondition);
}

// Issue 26, item 10: an application that grows to its group's max 3 pages
// at a time, then shrinks back, pays at most one RPC per 20 calls each
// way. Past max_batch_pages a slot's entry goes back whole (refill_stock()
// drains the stock entirely), so frees accumulate again; and after the
// drain the last charges at the max needed, the first free goes back
// marked `restock` and the frees after it are stocked again (before, every
// free after a drain was an RPC: 1/1 in tests/bench/grow_shrink.py).
TEST(ClientLibTest, GrowingToTheMaxThenShrinkingCostsAFewRpcs) {
  Server server;
  server.CreateGroup("/shrink", /*max_pages=*/6002);
  Options options;
  options.nr_slots = 1;
  std::unique_ptr<Client> c = server.Open(options);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Charge("/shrink", 2).ok());
  for (int i = 0; i < 1999; ++i) {
    ChargeResult r = c->Charge("/shrink", 3);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status.ToString();
  }
  // The stock holds 1..4 pages now (usage never passes the max).
  ASSERT_TRUE(c->Uncharge("/shrink", 1).ok());
  ASSERT_GE(c->stocked_pages(), 1u);
  // Another charger takes the last free page and one more: the server must
  // drain this client's stock.
  const uint64_t room = 6002 - server.CurrentPages("/shrink");
  {
    v1::ChargeRequest request;
    request.set_path("/shrink");
    request.set_nr_pages(room + 1);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse response;
    grpc::ClientContext context;
    const grpc::Status s = server.stub->Charge(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const client::ClientStats grown = c->stats();
  EXPECT_GE(grown.drains, 1u);
  EXPECT_LE(grown.charge_rpcs, 2000u / 20);
  for (int i = 0; i < 1998; ++i) ASSERT_TRUE(c->Uncharge("/shrink", 3).ok());
  ASSERT_TRUE(c->Uncharge("/shrink", 4).ok());
  const client::ClientStats shrunk = c->stats();
  EXPECT_LE(shrunk.uncharge_rpcs - grown.uncharge_rpcs, 2000u / 20);
  EXPECT_EQ(server.CurrentPages("/shrink"), room + 1 + c->stocked_pages());
  EXPECT_LE(c->stocked_pages(), options.max_batch_pages);
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(server.CurrentPages("/shrink"), room + 1);
}

// The batch doubles while the same slot refills within 100 ms, up to
// max_batch_pages; the stock never exceeds nr_slots x max_batch_pages.
TEST(ClientLibTest, BatchAdaptsUpToTheCap) {
  Server server;
  server.CreateGroup("/grow");
  Options options;
  options.nr_slots = 1;
  options.batch_pages = 8;
  options.max_batch_pages = 64;
  std::unique_ptr<Client> c = server.Open(options);
  ASSERT_NE(c, nullptr);
  uint64_t held = 0;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(c->Charge("/grow", 5).ok());
    held += 5;
    ASSERT_LE(c->stocked_pages(), 64u);
    ASSERT_EQ(server.CurrentPages("/grow"), held + c->stocked_pages());
  }
  // 1000 pages: at 8 pages per RPC it would take 200 RPCs (one per charge);
  // at the cap of 64, 16. The batch grew to the cap and stayed there.
  const uint64_t rpcs = c->stats().charge_rpcs;
  EXPECT_LE(rpcs, 30u);
  EXPECT_GE(rpcs, 1000u / 64);
  // An uncharge that takes the slot's entry past the cap returns all of it
  // (refill_stock() drains the stock entirely); one that stays within it
  // is kept.
  ASSERT_TRUE(c->Uncharge("/grow", held - 10).ok());
  EXPECT_EQ(c->stocked_pages(), 0u);
  EXPECT_EQ(server.CurrentPages("/grow"), 10u);
  ASSERT_TRUE(c->Uncharge("/grow", 10).ok());
  EXPECT_EQ(c->stocked_pages(), 10u);
  EXPECT_EQ(server.CurrentPages("/grow"), 10u);
  ASSERT_TRUE(c->Drain().ok());
  EXPECT_EQ(server.DeleteReparented("/grow"), 0u);
  ASSERT_TRUE(c->Close().ok());
}

// Loses the first Charge response after the server applied it (the client
// sees `code`: UNAVAILABLE, or CANCELLED as from a node shutting down): the
// library retries with the same request_id and the server applies the
// charge once.
class DropFirstChargeResponse : public grpc::experimental::Interceptor {
 public:
  DropFirstChargeResponse(grpc::experimental::ClientRpcInfo* info,
                          std::atomic<int>* dropped, grpc::StatusCode code)
      : charge_(std::string(info->method()) == "/cgacct.v1.Accounting/Charge"),
        dropped_(dropped),
        code_(code) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (charge_ &&
        methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_STATUS)) {
      grpc::Status* status = methods->GetRecvStatus();
      if (status->ok() && dropped_->fetch_add(1) == 0)
        *status = grpc::Status(code_, "test: the response was lost");
    }
    methods->Proceed();
  }

 private:
  const bool charge_;
  std::atomic<int>* dropped_;
  const grpc::StatusCode code_;
};

class DropFirstChargeResponseFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit DropFirstChargeResponseFactory(grpc::StatusCode code)
      : code_(code) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new DropFirstChargeResponse(info, &dropped, code_);
  }
  std::atomic<int> dropped{0};

 private:
  const grpc::StatusCode code_;
};

class RetriedChargeTest : public testing::TestWithParam<grpc::StatusCode> {};

INSTANTIATE_TEST_SUITE_P(LostAs, RetriedChargeTest,
                         testing::Values(grpc::StatusCode::UNAVAILABLE,
                                         grpc::StatusCode::CANCELLED));

TEST_P(RetriedChargeTest, RetriedChargeIsAppliedOnce) {
  Server server;
  server.CreateGroup("/retry");
  auto factory = std::make_unique<DropFirstChargeResponseFactory>(GetParam());
  std::atomic<int>* dropped = &factory->dropped;
  std::vector<std::unique_ptr<
      grpc::experimental::ClientInterceptorFactoryInterface>>
      factories;
  factories.push_back(std::move(factory));
  auto channel = grpc::experimental::CreateCustomChannelWithInterceptors(
      server.target, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(),
      std::move(factories));
  Options options;
  options.nr_slots = 1;
  std::unique_ptr<Client> c = server.Open(options, channel);
  ASSERT_NE(c, nullptr);
  const double before = server.Handled("Charge");
  ChargeResult r = c->Charge("/retry", 3);
  ASSERT_TRUE(r.ok()) << r.status.ToString();
  EXPECT_GE(dropped->load(), 1);
  EXPECT_EQ(server.Handled("Charge") - before, 2);  // the charge and its retry
  EXPECT_EQ(c->stats().retries, 1u);
  // Once: 64 pages (one batch), not 128.
  EXPECT_EQ(server.CurrentPages("/retry"), 64u);
  EXPECT_EQ(c->stocked_pages(), 61u);
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(server.DeleteReparented("/retry"), 0u);
}

// Loses every Uncharge response while `active` (the server applied them).
class DropUnchargeResponses : public grpc::experimental::Interceptor {
 public:
  DropUnchargeResponses(grpc::experimental::ClientRpcInfo* info,
                        std::atomic<bool>* active)
      : uncharge_(std::string(info->method()) ==
                  "/cgacct.v1.Accounting/Uncharge"),
        active_(active) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (uncharge_ && active_->load() &&
        methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_STATUS)) {
      *methods->GetRecvStatus() = grpc::Status(
          grpc::StatusCode::UNAVAILABLE, "test: the response was lost");
    }
    methods->Proceed();
  }

 private:
  const bool uncharge_;
  std::atomic<bool>* active_;
};

class DropUnchargeResponsesFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new DropUnchargeResponses(info, &active);
  }
  std::atomic<bool> active{false};
};

// An Uncharge applied by the server whose every answer was lost: the call
// fails UNAVAILABLE and its pages are dropped, not stocked again (stocked,
// they were phantoms the next charges consumed: pages nobody counts; in a
// cluster, ClusterTest's black-holed link passed memory.max that way). The
// keepalive thread reconciles the books with GetSession, which agree.
TEST(ClientLibTest, AnAmbiguousUnchargeIsReconciledWithTheServer) {
  Server server;
  server.CreateGroup("/amb");
  auto factory = std::make_unique<DropUnchargeResponsesFactory>();
  std::atomic<bool>* drop = &factory->active;
  std::vector<std::unique_ptr<
      grpc::experimental::ClientInterceptorFactoryInterface>>
      factories;
  factories.push_back(std::move(factory));
  auto channel = grpc::experimental::CreateCustomChannelWithInterceptors(
      server.target, grpc::InsecureChannelCredentials(),
      grpc::ChannelArguments(), std::move(factories));
  Options options;
  options.nr_slots = 1;
  options.max_batch_pages = 64;
  options.session_ttl = std::chrono::milliseconds(600);
  std::unique_ptr<Client> c = server.Open(options, channel);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Charge("/amb", 3).ok());    // 64 charged, 61 stocked
  ASSERT_TRUE(c->Charge("/amb", 200).ok());  // exactly 200
  ASSERT_EQ(server.CurrentPages("/amb"), 264u);
  drop->store(true);
  // 61 + 200 pass the cap: the whole entry, 261, goes back (refill_stock()
  // drains it): applied, answer lost.
  EXPECT_EQ(c->Uncharge("/amb", 200).code(),
            client::StatusCode::kUnavailable);
  EXPECT_EQ(server.CurrentPages("/amb"), 3u);
  EXPECT_EQ(c->stocked_pages(), 0u);  // no phantoms
  EXPECT_EQ(c->stats().return_failed_pages, 261u);
  drop->store(false);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  while (c->stats().reconciles == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(c->stats().reconciles, 1u);
  EXPECT_EQ(c->stocked_pages(), 0u);
  EXPECT_EQ(server.CurrentPages("/amb"), 3u);  // 3 held
  ASSERT_TRUE(c->Uncharge("/amb", 3).ok());  // into the stock
  ASSERT_TRUE(c->Drain().ok());
  EXPECT_EQ(server.CurrentPages("/amb"), 0u);
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(server.DeleteReparented("/amb"), 0u);
}

// memory.high: ANON pages past it cannot be reclaimed, so the server asks
// for throttle_us; kReturn hands it back at once, kSleep sleeps it.
TEST(ClientLibTest, ThrottleIsHandedBackOrSlept) {
  Server server;
  server.CreateGroup("/hot", 0, /*high_pages=*/16);
  Options ret;
  ret.throttle = client::ThrottleMode::kReturn;
  ret.batch_pages = 0;  // every charge an RPC
  ret.max_batch_pages = 0;
  std::unique_ptr<Client> a = server.Open(ret);
  ASSERT_NE(a, nullptr);
  ChargeResult r = a->Charge("/hot", 2048);
  ASSERT_TRUE(r.ok()) << r.status.ToString();
  ASSERT_GT(r.throttle_us, 0u);
  r = a->Charge("/hot", 2048);
  ASSERT_TRUE(r.ok());
  ASSERT_GT(r.throttle_us, 0u);
  Options sleep = ret;
  sleep.throttle = client::ThrottleMode::kSleep;
  std::unique_ptr<Client> b = server.Open(sleep);
  ASSERT_NE(b, nullptr);
  const Clock::time_point t0 = Clock::now();
  r = b->Charge("/hot", 2048);
  const auto slept = std::chrono::duration_cast<std::chrono::microseconds>(
      Clock::now() - t0);
  ASSERT_TRUE(r.ok());
  ASSERT_GT(r.throttle_us, 0u);
  EXPECT_GE(static_cast<uint64_t>(slept.count()), r.throttle_us);
  ASSERT_TRUE(a->Close().ok());
  ASSERT_TRUE(b->Close().ok());
  EXPECT_EQ(server.DeleteReparented("/hot"), 0u);
}

// The session is lost (the server restarted: NOT_FOUND): the library opens
// a new one and charges again what the application still holds.
TEST(ClientLibTest, ResumesOnANewSessionAfterAServerRestart) {
  // The groups survive the restart (--state_dir); sessions and charges do
  // not.
  char dir_template[] = "/tmp/client_test.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::vector<std::string> flags = {absl::StrCat("--state_dir=", dir)};
  auto server = std::make_unique<Server>(flags);
  server->CreateGroup("/r");
  absl::Mutex mu;
  std::vector<client::Event> events;
  Options options;
  options.nr_slots = 1;
  options.session_ttl = std::chrono::milliseconds(2000);
  options.on_event = [&](const client::Event& e) {
    absl::MutexLock l(&mu);
    events.push_back(e);
  };
  std::unique_ptr<Client> c = server->Open(options);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Charge("/r", 100).ok());  // the application holds 100
  ASSERT_TRUE(c->Charge("/r", 3).ok());    // and 3, 61 in the stock
  const std::string old_id = c->session_id();
  const int port = server->port;
  server->daemon->Signal(SIGKILL);
  server->daemon->WaitDeath(kTimeout);
  server.reset();
  server = std::make_unique<Server>(flags, port);
  ASSERT_EQ(server->port, port);
  // The stream thread notices and reopens; a charge in the meantime would
  // do it itself. Wait for the re-charge.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  while (server->CurrentPages("/r") < 103 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_NE(c->session_id(), old_id);
  EXPECT_EQ(server->CurrentPages("/r"), 103u);  // re-charged, stock forgotten
  EXPECT_EQ(c->stocked_pages(), 0u);
  EXPECT_GE(c->stats().reopened_sessions, 1u);
  {
    absl::MutexLock l(&mu);
    bool reopened = false;
    for (const client::Event& e : events)
      reopened |= e.type == client::Event::Type::kSessionReopened;
    EXPECT_TRUE(reopened);
  }
  // Everything still works on the new session and balances.
  ASSERT_TRUE(c->Charge("/r", 3).ok());
  ASSERT_TRUE(c->Uncharge("/r", 106).ok());
  ASSERT_TRUE(c->Drain().ok());
  EXPECT_EQ(server->DeleteReparented("/r"), 0u);
  ASSERT_TRUE(c->Close().ok());
  server.reset();
  test_util::RunShell(absl::StrCat("rm -rf ", dir));
}

// A broken stream (here: replaced by another attach, which the server ends
// with ABORTED) is re-attached to the same session, and the keepalives keep
// a short lease alive across many ttls.
TEST(ClientLibTest, ReattachesTheSameSessionAndKeepsItAlive) {
  Server server;
  server.CreateGroup("/k");
  Options options;
  options.session_ttl = std::chrono::milliseconds(300);
  std::unique_ptr<Client> c = server.Open(options);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Charge("/k", 3).ok());
  const std::string id = c->session_id();
  {
    grpc::ClientContext context;
    auto intruder = server.stub->SessionStream(&context);
    v1::SessionClientMessage attach;
    attach.set_attach_session_id(id);
    ASSERT_TRUE(intruder->Write(attach));
    v1::SessionServerMessage answer;
    ASSERT_TRUE(intruder->Read(&answer));  // attached: the library's ended
    // The library re-attaches and replaces the intruder in turn.
    EXPECT_FALSE(intruder->Read(&answer));
    EXPECT_EQ(intruder->Finish().error_code(), grpc::StatusCode::ABORTED);
  }
  EXPECT_GE(c->stats().reattached_streams, 1u);
  // Five leases later the session is the same one, attached, still holding.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(c->session_id(), id);
  EXPECT_EQ(c->stats().reopened_sessions, 0u);
  EXPECT_TRUE(server.Attached(id));
  EXPECT_EQ(server.CurrentPages("/k"), 64u);
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(server.DeleteReparented("/k"), 0u);
}

// Several threads charge and uncharge; Close returns everything, and the
// events match what the charges saw (no max, no oom: nothing failed).
TEST(ClientLibTest, CloseReturnsEverythingFromManyThreads) {
  Server server({}, 0, /*server_stock=*/true);
  server.CreateGroup("/many");
  std::unique_ptr<Client> c = server.Open();
  ASSERT_NE(c, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        if (!c->Charge("/many", 1 + (i + t) % 5).ok()) ++failures;
        if (i % 3 != 0 && !c->Uncharge("/many", 1 + (i + t) % 5).ok())
          ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(server.CurrentPages("/many"), 0u);
  ASSERT_TRUE(c->Close().ok());
  const v1::GroupStats stats = server.Stats("/many");
  // Exact with the server's stock on: the close drained it.
  EXPECT_EQ(stats.memory_current_bytes(), 0u);
  EXPECT_EQ(stats.events().max(), 0u);
  EXPECT_EQ(stats.events().oom(), 0u);
  EXPECT_EQ(server.DeleteReparented("/many"), 0u);
}

// Child processes charging through the library are SIGKILLed mid-loop:
// within ttl + 1 s the server holds nothing of theirs.
TEST(ClientLibTest, SigkilledClientsHoldNothingAfterTtlPlusOneSecond) {
  Server server({}, 0, /*server_stock=*/true);
  server.CreateGroup("/kill");
  constexpr int kTtlMs = 1000;
  std::vector<std::unique_ptr<Process>> children;
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    children.push_back(std::make_unique<Process>(
        CLIENT_TEST_CHILD_PATH,
        std::vector<std::string>{server.target, "/kill",
                                 absl::StrCat(kTtlMs)}));
  }
  for (auto& child : children) {
    const std::string line = child->ReadStdoutLine(kTimeout);
    ASSERT_EQ(line.rfind("ready ", 0), 0u) << line << child->ReadStderr();
    ids.push_back(line.substr(6));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // The children hold pages before they are killed. Polled, not read once:
  // in a loaded sanitizer run a child's lease can lapse and its library
  // resume on a new session, charging its pages again (seen once: 0 pages
  // at the single read).
  const Clock::time_point holding_by = Clock::now() + kTimeout;
  while (server.CurrentPages("/kill") == 0 && Clock::now() < holding_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GT(server.CurrentPages("/kill"), 0u);
  for (auto& child : children) child->Signal(SIGKILL);
  const Clock::time_point killed = Clock::now();
  for (auto& child : children) ASSERT_TRUE(child->WaitDeath(kTimeout));
  // Exactly 0 with the server's stock on: each expiry drained it.
  while (server.CurrentPages("/kill") > 0 &&
         Clock::now() - killed < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      Clock::now() - killed);
  EXPECT_EQ(server.CurrentPages("/kill"), 0u);
  EXPECT_EQ(server.DeleteReparented("/kill"), 0u);
  EXPECT_LE(took.count(), kTtlMs + 1000) << "took " << took.count() << " ms";
  for (const std::string& id : ids)
    EXPECT_EQ(server.SessionCode(id), grpc::StatusCode::NOT_FOUND) << id;
}

// drain_all_stock() over the network: a group near its max while three
// clients hold stock of it; a charge that fits only if they return it
// succeeds.
TEST(ClientLibTest, DrainReturnsStockBeforeACharge) {
  Server server;
  server.CreateGroup("/d", /*max_pages=*/200);
  Options options;
  options.nr_slots = 1;
  options.max_batch_pages = 64;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(server.Open(options));
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(clients.back()->Charge("/d", 1).ok());
  }
  ASSERT_EQ(server.CurrentPages("/d"), 192u);  // 3 held + 3 x 63 stocked
  // 150 pages: 8 free; it fits only with the stock back.
  v1::ChargeRequest request;
  request.set_path("/d");
  request.set_nr_pages(150);
  request.set_kind(v1::PAGE_KIND_ANON);
  v1::ChargeResponse response;
  grpc::ClientContext context;
  const grpc::Status s = server.stub->Charge(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message() << "; drains answered "
                      << clients[0]->stats().drains << "/"
                      << clients[1]->stats().drains << "/"
                      << clients[2]->stats().drains << ", attached "
                      << server.Attached(clients[0]->session_id());
  // The stream threads count a drain right after their answer went out:
  // the charge may return first.
  uint64_t drained = 0;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  do {
    drained = 0;
    for (auto& c : clients) drained += c->stats().drained_pages;
    if (drained == 189) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (Clock::now() < deadline);
  EXPECT_EQ(drained, 189u);
  for (auto& c : clients) EXPECT_EQ(c->stocked_pages(), 0u);
  EXPECT_EQ(server.CurrentPages("/d"), 153u);
  // The charge hit memory.max once (counted before the drain, as
  // try_charge() counts MEMCG_MAX before drain_all_stock()) and no OOM.
  EXPECT_EQ(server.Stats("/d").events().max(), 1u);
  EXPECT_EQ(server.Stats("/d").events().oom(), 0u);
  // After the drain took its stock, and until a charge refills it, what a
  // client frees goes back to the server, not into its stock (the server
  // takes a drain answer with less than asked as an empty stock:
  // docs/DESIGN.md §4.14).
  ASSERT_TRUE(clients[0]->Uncharge("/d", 1).ok());
  EXPECT_EQ(clients[0]->stocked_pages(), 0u);
  EXPECT_EQ(server.CurrentPages("/d"), 152u);
  // The library clients go on: their next charge is exact (47 free: the
  // 64-page batch does not fit), so the stock is still held off...
  for (auto& c : clients) ASSERT_TRUE(c->Charge("/d", 1).ok());
  ASSERT_TRUE(clients[1]->Uncharge("/d", 1).ok());
  EXPECT_EQ(clients[1]->stocked_pages(), 0u);
  // ...until a charge refills it: with room for a batch, the surplus is
  // stocked, and so are pages freed after it.
  ASSERT_TRUE(server.stub != nullptr);
  v1::UnchargeRequest free_room;
  free_room.set_path("/d");
  free_room.set_nr_pages(150);
  free_room.set_kind(v1::PAGE_KIND_ANON);
  v1::UnchargeResponse freed;
  grpc::ClientContext free_context;
  ASSERT_TRUE(server.stub->Uncharge(&free_context, free_room, &freed).ok());
  ASSERT_TRUE(clients[2]->Charge("/d", 1).ok());
  EXPECT_EQ(clients[2]->stocked_pages(), 63u);
  ASSERT_TRUE(clients[2]->Uncharge("/d", 1).ok());
  EXPECT_EQ(clients[2]->stocked_pages(), 64u);
  for (auto& c : clients) ASSERT_TRUE(c->Close().ok());
}

// Four clients charge concurrently into a group whose max fits what their
// applications hold (4 x 90 of 400 pages) but not that plus their stocks
// (up to 4 x 2 slots x 64): every charge that needs room gets it from the
// others' stock, so none fails.
TEST(ClientLibTest, ConcurrentClientsAtMaxNeverFailWhileStockCouldServe) {
  Server server;
  server.CreateGroup("/c", /*max_pages=*/400);
  Options options;
  options.max_batch_pages = 64;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(server.Open(options));
    ASSERT_NE(clients.back(), nullptr);
  }
  std::atomic<int> failed{0};
  std::atomic<int> arrived{0};  // clients that finished charging, all rounds
  std::atomic<int> uncharged{0};  // clients that uncharged, all rounds
  std::string first_error;
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      Client& c = *clients[i];
      for (int round = 0; round < 20; ++round) {
        // Every round ends with the 4 clients holding 100 pages each, the
        // whole max: whatever the clients' batches (64 pages, dropping to
        // 1 when they do not fit) left in their stocks had to come back
        // for the last pages.
        for (int n = 0; n < 100; ++n) {
          const ChargeResult r = c.Charge("/c", 1);
          if (!r.ok()) {
            ++failed;
            absl::MutexLock l(&mu);
            if (first_error.empty()) first_error = r.status.ToString();
          }
        }
        arrived.fetch_add(1);
        while (arrived.load() < 4 * (round + 1)) std::this_thread::yield();
        EXPECT_TRUE(c.Uncharge("/c", 100).ok());
        // Nobody starts the next round before everyone's uncharge: a
        // client still holding its 100 pages (in use, not stock) when the
        // others' charges reach the max is a true OOM, the kernel's too.
        uncharged.fetch_add(1);
        while (uncharged.load() < 4 * (round + 1)) std::this_thread::yield();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0) << first_error;
  uint64_t drains = 0;
  for (auto& c : clients) drains += c->stats().drains;
  EXPECT_GT(drains, 0u);  // the max was reached and the stock came back
  const auto answered = server.Metric("cgacct_session_drain_requests_total",
                                      "result", "answered");
  const auto timed_out = server.Metric("cgacct_session_drain_requests_total",
                                       "result", "timeout");
  std::cerr << "drains answered by the clients: " << drains
            << "; server drain requests answered/timed out: " << answered
            << "/" << timed_out << "\n";
  // Every client answers within milliseconds on loopback (its stream
  // thread), far inside the 300 ms bound, and the server reads the answers
  // on SessionStream's own thread, which no waiting charge can block
  // (docs/DESIGN.md §4.14): no request may time out. (Before, charges
  // waiting on every gRPC callback thread left the answers unread: 108-147
  // of ~160-180 requests timed out.)
  EXPECT_GT(answered, 0.0);
  EXPECT_EQ(timed_out, 0.0);
  const v1::GroupStats stats = server.Stats("/c");
  EXPECT_EQ(stats.events().oom(), 0u);
  EXPECT_EQ(stats.events().oom_kill(), 0u);
  for (auto& c : clients) ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(server.DeleteReparented("/c"), 0u);
}

// A session that never answers the drain delays a charge by at most the
// bound (--session_drain_timeout_ms=300), and the charge still gets the
// pages the answering clients returned.
TEST(ClientLibTest, ASilentSessionDelaysADrainByAtMostTheBound) {
  Server server;
  server.CreateGroup("/s", /*max_pages=*/200);
  // The silent one: a raw session, attached, holding 100 pages, never
  // answering (it never reads its stream).
  v1::OpenSessionRequest open;
  open.set_ttl_ms(10000);
  v1::OpenSessionResponse opened;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(server.stub->OpenSession(&context, open, &opened).ok());
  }
  grpc::ClientContext stream_context;
  auto stream = server.stub->SessionStream(&stream_context);
  v1::SessionClientMessage attach;
  attach.set_attach_session_id(opened.session_id());
  ASSERT_TRUE(stream->Write(attach));
  {
    v1::ChargeRequest request;
    request.set_path("/s");
    request.set_nr_pages(100);
    request.set_kind(v1::PAGE_KIND_ANON);
    request.set_session_id(opened.session_id());
    v1::ChargeResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(server.stub->Charge(&context, request, &response).ok());
  }
  Options options;
  options.nr_slots = 1;
  std::unique_ptr<Client> c = server.Open(options);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Charge("/s", 1).ok());  // 63 stocked
  ASSERT_EQ(server.CurrentPages("/s"), 164u);
  v1::ChargeRequest request;
  request.set_path("/s");
  request.set_nr_pages(90);  // 36 free + 63 returned
  request.set_kind(v1::PAGE_KIND_ANON);
  v1::ChargeResponse response;
  grpc::ClientContext context;
  const Clock::time_point t0 = Clock::now();
  const grpc::Status s = server.stub->Charge(&context, request, &response);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_LE(took.count(), 300 + 700) << took.count() << " ms";
  EXPECT_EQ(c->stocked_pages(), 0u);
  EXPECT_EQ(server.CurrentPages("/s"), 191u);

  // The library's own charge at the max, with nothing left but the silent
  // session's stock: one RPC (nr_pages 1, batch_pages 64: the server drops
  // the batch before reclaiming, as try_charge_memcg() does), so one wait
  // for the silent session, then RESOURCE_EXHAUSTED. Before batch_pages the
  // library sent the batch as a whole charge, waited the bound, was
  // refused, and charged 1 page: two bounds (600-610 ms).
  {
    v1::ChargeRequest fill;
    fill.set_path("/s");
    fill.set_nr_pages(9);  // 191 + 9: at the max
    fill.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse filled;
    grpc::ClientContext fill_context;
    ASSERT_TRUE(server.stub->Charge(&fill_context, fill, &filled).ok());
  }
  const uint64_t rpcs_before = c->stats().charge_rpcs;
  const Clock::time_point t1 = Clock::now();
  const ChargeResult at_max = c->Charge("/s", 1);
  const auto took_library =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t1);
  EXPECT_EQ(at_max.status.code(), client::StatusCode::kResourceExhausted)
      << at_max.status.ToString();
  std::cerr << "library charge at max with a silent session (bound 300 ms): "
            << took_library.count() << " ms\n";
  EXPECT_GE(took_library.count(), 300);
  EXPECT_LT(took_library.count(), 500);
  EXPECT_EQ(c->stats().charge_rpcs, rpcs_before + 1);
  ASSERT_TRUE(c->Close().ok());
  stream_context.TryCancel();
  stream->Finish();
}

// ChargeRequest.batch_pages through the library: a batch that fits is
// charged whole in one RPC (the rest stocked); one that does not drops to
// exactly what is needed in the same RPC, with no `max` event (the
// page_counter refused only the batch) and nothing parked in the server's
// stock.
TEST(ClientLibTest, BatchThatDoesNotFitDropsToWhatIsNeededInOneRpc) {
  Server server;
  server.CreateGroup("/b", /*max_pages=*/100);
  Options options;
  options.nr_slots = 1;
  std::unique_ptr<Client> c = server.Open(options);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Charge("/b", 1).ok());  // a 64-page batch: 63 stocked
  EXPECT_EQ(c->stocked_pages(), 63u);
  EXPECT_EQ(server.CurrentPages("/b"), 64u);
  EXPECT_EQ(c->stats().charge_rpcs, 1u);
  ASSERT_TRUE(c->Charge("/b", 63).ok());  // from the stock, no RPC
  EXPECT_EQ(c->stats().charge_rpcs, 1u);
  // 36 free: the next batch (64) does not fit, 1 page does.
  ASSERT_TRUE(c->Charge("/b", 1).ok());
  EXPECT_EQ(c->stats().charge_rpcs, 2u);
  EXPECT_EQ(c->stocked_pages(), 0u);
  EXPECT_EQ(server.CurrentPages("/b"), 65u);
  EXPECT_EQ(server.Stats("/b").events().max(), 0u);
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(server.CurrentPages("/b"), 0u);
}

// Against a node that is not in cluster mode, a ClusterClient is one Client
// of it for every path: one map read, one session, the stock as a Client's;
// refusals that are not routing's come back at once; bad options and
// unreachable targets are statuses naming what is wrong. (Against a real
// cluster: ClusterTest.test_cpp_library_follows_its_shards_owner_through_a_
// failover, tests/server/cluster.)
TEST(ClientLibTest, ClusterClientAgainstASingleNodeIsOneClient) {
  Server server;
  server.CreateGroup("/app", /*max_pages=*/1000);
  client::ClusterOptions options;
  options.client.nr_slots = 1;
  options.failover_timeout = std::chrono::seconds(5);
  std::unique_ptr<client::ClusterClient> cc;
  ASSERT_TRUE(
      client::ClusterClient::Open({server.target}, options, &cc).ok());
  EXPECT_EQ(cc->owner("/app"), server.target);
  EXPECT_EQ(cc->owner("/"), server.target);
  for (int i = 0; i < 100; ++i) {
    ChargeResult r = cc->Charge("/app", 3);
    ASSERT_TRUE(r.ok()) << r.status.ToString();
  }
  EXPECT_EQ(cc->held_pages("/app"), 300u);
  // The first batch 64, then the adaptive batch: far fewer RPCs than
  // charges.
  client::ClusterStats st = cc->stats();
  EXPECT_EQ(st.map_reads, 1u);
  EXPECT_EQ(st.moves, 0u);
  EXPECT_EQ(st.clients.charges, 100u);
  EXPECT_LT(st.clients.charge_rpcs, 10u);
  // One slot: memory.current is what the application holds plus at most
  // max_batch_pages of stock.
  const uint64_t current = server.CurrentPages("/app");
  EXPECT_GE(current, 300u);
  EXPECT_LE(current, 300u + options.client.max_batch_pages);
  ASSERT_TRUE(cc->Uncharge("/app", 300).ok());
  EXPECT_EQ(cc->held_pages("/app"), 0u);
  // Not routing's: at once, with the server's status.
  const auto t0 = Clock::now();
  EXPECT_EQ(cc->Charge("/app", 2000).status.code(),
            client::StatusCode::kResourceExhausted);
  EXPECT_EQ(cc->Charge("/nosuch", 1).status.code(),
            client::StatusCode::kNotFound);
  EXPECT_EQ(cc->Uncharge("/app", 100000).code(),
            client::StatusCode::kFailedPrecondition);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));
  ASSERT_TRUE(cc->Close().ok());
  EXPECT_EQ(server.CurrentPages("/app"), 0u);
  EXPECT_EQ(cc->Charge("/app", 1).status.code(),
            client::StatusCode::kFailedPrecondition);

  // Bad options name the option; a target nobody serves is UNAVAILABLE
  // naming it, once failover_timeout has passed.
  std::unique_ptr<client::ClusterClient> bad;
  client::Status s = client::ClusterClient::Open({}, options, &bad);
  EXPECT_EQ(s.code(), client::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), testing::HasSubstr("targets"));
  client::ClusterOptions zero = options;
  zero.failover_timeout = std::chrono::milliseconds(0);
  s = client::ClusterClient::Open({server.target}, zero, &bad);
  EXPECT_EQ(s.code(), client::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), testing::HasSubstr("failover_timeout"));
  client::ClusterOptions quick = options;
  quick.failover_timeout = std::chrono::milliseconds(1500);
  quick.client.call_timeout = std::chrono::milliseconds(300);
  const auto t1 = Clock::now();
  s = client::ClusterClient::Open({"127.0.0.1:1"}, quick, &bad);
  EXPECT_EQ(s.code(), client::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), testing::HasSubstr("127.0.0.1:1"));
  EXPECT_LT(Clock::now() - t1, std::chrono::seconds(5));
  EXPECT_EQ(bad, nullptr);
}

}  // namespace
}  // namespace cgacct
