// cgacct::client's API besides charging (cgacct/groups.h), its Status and
// its channel factory (cgacct/channel.h), against the real cgacctd on
// loopback (issue 26, item 4, the C++ half): every Groups method and its
// errors, WatchEvents' updates and its three ends, MakeChannel's refusals
// naming the field, and TLS + mTLS + a bearer token from files against a
// daemon with access control (certificates by the real openssl).
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/client.h"
#include "cgacct/groups.h"
#include "cgacct/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/daemon.h"
#include "tests/server/test_certs.h"

namespace cgacct::client {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

constexpr std::chrono::seconds kTimeout(20);
constexpr uint64_t kPage = 4096;

// cgacctd on 127.0.0.1 with `extra` flags; its target once it started.
struct Server {
  explicit Server(std::vector<std::string> extra = {},
                  const std::string& host = "127.0.0.1") {
    std::vector<std::string> flags = {
        absl::StrCat("--listen=", host, ":0"), "--metrics_listen=", "--cpus=2",
        // memory.current is then exactly what is charged.
        "--charge_batch_pages=1", "--stock_pool_buckets=0"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    daemon = std::make_unique<test_util::Daemon>(flags);
    const std::string line = daemon->ReadStdoutLine(kTimeout);
    static const std::regex kLine(R"(listening on [0-9.]+:(\d+))");
    std::smatch m;
    EXPECT_TRUE(std::regex_search(line, m, kLine)) << line;
    if (!m.empty()) target = absl::StrCat("127.0.0.1:", m[1].str());
  }
  std::unique_ptr<test_util::Daemon> daemon;
  std::string target;
};

std::unique_ptr<Groups> OpenGroups(const std::string& target) {
  Result<std::unique_ptr<Groups>> g = Groups::Open(target, ConnectOptions{});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(*g) : nullptr;
}

TEST(StatusTest, NamesAndText) {
  EXPECT_EQ(StatusCodeName(StatusCode::kResourceExhausted),
            "RESOURCE_EXHAUSTED");
  EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(99)), "CODE_99");
  EXPECT_EQ(Status().ToString(), "OK");
  EXPECT_EQ(Status(StatusCode::kNotFound, "path: /x").ToString(),
            "NOT_FOUND: path: /x");
  const Result<int> value(7);
  EXPECT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
  // A Result made from an OK status has no value: it says so.
  const Result<int> odd{Status()};
  EXPECT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInternal);
}

TEST(ChannelTest, RefusalsNameTheField) {
  ConnectOptions o;
  o.tls_cert_file = "/tmp/c.pem";
  Result<std::shared_ptr<grpc::Channel>> c = MakeChannel("127.0.0.1:1", o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("tls_key_file"));

  o = {};
  o.tls_ca_file = "/nonexistent/ca.pem";
  c = MakeChannel("127.0.0.1:1", o);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("tls_ca_file: cannot read /nonexistent/ca.pem"));

  o = {};
  o.token = "t";
  o.token_file = "/tmp/t";
  EXPECT_THAT(MakeChannel("127.0.0.1:1", o).status().message(),
              HasSubstr("token, token_file"));
  o = {};
  o.tls_server_name = "localhost";
  EXPECT_THAT(MakeChannel("127.0.0.1:1", o).status().message(),
              HasSubstr("tls_server_name"));
  EXPECT_THAT(MakeChannel("", {}).status().message(), HasSubstr("target"));

  // Client::Open and Groups::Open pass them on, opening nothing.
  Options options;
  options.connect.token_file = "/nonexistent/token";
  std::unique_ptr<Client> client;
  const Status s = Client::Open("127.0.0.1:1", options, &client);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("token_file: cannot read"));
  EXPECT_EQ(client, nullptr);
  CallOptions bad;
  bad.max_attempts = 0;
  EXPECT_THAT(Groups::Open("127.0.0.1:1", {}, bad).status().message(),
              HasSubstr("max_attempts"));
  // Bounds a new user hit: 1 << 30 slots aborted Open (bad_alloc), and
  // milliseconds::max() overflowed every deadline into the past.
  bad = {};
  bad.call_timeout = std::chrono::milliseconds::max();
  EXPECT_THAT(Groups::Open("127.0.0.1:1", {}, bad).status().message(),
              HasSubstr("call_timeout"));
  for (int i = 0; i < 3; ++i) {
    Options o;
    if (i == 0) o.nr_slots = 1 << 30;
    if (i == 1) o.stock_groups = 1000;
    if (i == 2) o.call_timeout = std::chrono::milliseconds::max();
    const Status refused = Client::Open("127.0.0.1:1", o, &client);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << i;
    EXPECT_THAT(refused.message(),
                HasSubstr(i == 0   ? "nr_slots"
                          : i == 1 ? "stock_groups"
                                   : "call_timeout"));
  }
}

// Every Groups method over one channel, as Python's test of the same API
// (tests/python/pyclient_test.py) does it.
TEST(GroupsTest, TheWholeApi) {
  Server server;
  std::unique_ptr<Groups> g = OpenGroups(server.target);
  ASSERT_NE(g, nullptr);

  LimitsUpdate limits;
  limits.max_bytes = 1 << 20;
  limits.low_bytes = kUnlimited;
  Result<Group> api = g->CreateGroup("/api", limits);
  ASSERT_TRUE(api.ok()) << api.status().ToString();
  EXPECT_EQ(api->path, "/api");
  EXPECT_GT(api->id, 0u);
  EXPECT_EQ(api->limits.max_bytes, 1u << 20);
  EXPECT_EQ(api->limits.high_bytes, kUnlimited);
  EXPECT_EQ(api->limits.low_bytes, kUnlimited);
  EXPECT_EQ(api->limits.min_bytes, 0u);
  ASSERT_TRUE(g->CreateGroup("/api/a").ok());
  ASSERT_TRUE(g->CreateGroup("/api/a/x").ok());
  ASSERT_TRUE(g->CreateGroup("/api/b").ok());
  EXPECT_EQ(g->CreateGroup("/api/a").status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(g->CreateGroup("/nosuch/x").status().code(),
            StatusCode::kNotFound);
  const Result<Group> bad_path = g->CreateGroup("api");
  EXPECT_EQ(bad_path.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_path.status().message(), HasSubstr("path"));

  Result<std::vector<std::string>> listed = g->ListGroups("/api");
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(*listed, ElementsAre("/api/a", "/api/b"));
  listed = g->ListGroups("/api", /*recursive=*/true);
  ASSERT_TRUE(listed.ok());
  EXPECT_THAT(*listed, ElementsAre("/api/a", "/api/a/x", "/api/b"));

  // Only the limits given change.
  limits = {};
  limits.high_bytes = 512 << 10;
  limits.oom_group = true;
  Result<Group> set = g->SetLimits("/api", limits);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->limits.max_bytes, 1u << 20);
  EXPECT_EQ(set->limits.high_bytes, 512u << 10);
  EXPECT_TRUE(set->limits.oom_group);
  EXPECT_EQ(g->SetLimits("/nosuch", limits).status().code(),
            StatusCode::kNotFound);

  // Pages through a Client opened by target; its groups() is the same API.
  Options options;
  options.batch_pages = 0;  // no stock: memory.current is what is charged
  options.max_batch_pages = 0;
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Open(server.target, options, &c).ok());
  ASSERT_TRUE(c->Charge("/api/a/x", 16, PageKind::kFile).ok());
  // A kind no RPC could charge is refused before the stock takes it (it was
  // stocked, then handed out by Charge() from the stock).
  const Status odd_kind = c->Uncharge("/api/a/x", 1, static_cast<PageKind>(7));
  EXPECT_EQ(odd_kind.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(odd_kind.message(), HasSubstr("kind"));
  EXPECT_EQ(c->Charge("/api/a/x", 1, static_cast<PageKind>(7)).status.code(),
            StatusCode::kInvalidArgument);
  Result<GroupStats> st = c->groups().GetStats("/api/a");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->path, "/api/a");
  EXPECT_EQ(st->memory_current_bytes, 16 * kPage);
  EXPECT_EQ(st->Stat("file"), std::optional<uint64_t>(16 * kPage));
  EXPECT_EQ(st->Stat("anon"), std::optional<uint64_t>(0));
  EXPECT_EQ(st->Stat("nosuch"), std::nullopt);
  EXPECT_TRUE(st->flushed);
  EXPECT_TRUE(st->summed_shards.empty());
  st = g->GetStats("/api", FlushMode::kNone);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->limits.max_bytes, 1u << 20);

  // memory.reclaim: file pages come back; more than there is: EAGAIN.
  Result<uint64_t> reclaimed = g->Reclaim("/api/a", 4 * kPage);
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status().ToString();
  EXPECT_GE(*reclaimed, 4 * kPage);
  EXPECT_EQ(g->Reclaim("/api/a", 1 << 30).status().code(),
            StatusCode::kUnavailable);
  const Result<uint64_t> zero = g->Reclaim("/api/a", 0);
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("nr_bytes"));

  // rmdir: not with children; the pages still charged go to the parent.
  EXPECT_EQ(g->DeleteGroup("/api/a").status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c->Charge("/api/b", 3).ok());
  Result<uint64_t> reparented = g->DeleteGroup("/api/b");
  ASSERT_TRUE(reparented.ok()) << reparented.status().ToString();
  EXPECT_EQ(*reparented, 3u);
  EXPECT_EQ(g->GetStats("/api/b").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c->Close().ok());
  // groups() outlives Close(): no session needed.
  EXPECT_TRUE(c->groups().ListGroups("/").ok());
}

// WatchEvents: the counts at subscribe, an update after memory.events
// changes, and the three ends: the group deleted (NOT_FOUND), the timeout
// (DEADLINE_EXCEEDED), Cancel() from another thread (CANCELLED).
TEST(GroupsTest, WatchEvents) {
  Server server;
  std::unique_ptr<Groups> g = OpenGroups(server.target);
  ASSERT_NE(g, nullptr);
  LimitsUpdate limits;
  limits.max_bytes = 64 * kPage;
  ASSERT_TRUE(g->CreateGroup("/w", limits).ok());
  Result<std::unique_ptr<EventsWatch>> watch =
      g->WatchEvents("/w", std::chrono::seconds(30));
  ASSERT_TRUE(watch.ok());
  Result<EventsUpdate> first = (*watch)->Next();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->path, "/w");
  EXPECT_EQ(first->events.max, 0u);

  Options options;
  options.batch_pages = 0;
  options.max_batch_pages = 0;
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Open(server.target, options, &c).ok());
  EXPECT_EQ(c->Charge("/w", 100).status.code(),
            StatusCode::kResourceExhausted);
  Result<EventsUpdate> next = (*watch)->Next();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GE(next->events.max, 1u);
  EXPECT_GE(next->events_local.max, 1u);
  ASSERT_TRUE(c->Close().ok());

  ASSERT_TRUE(g->DeleteGroup("/w").ok());
  Result<EventsUpdate> end = (*watch)->Next();
  while (end.ok()) end = (*watch)->Next();  // updates before the delete
  EXPECT_EQ(end.status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*watch)->Next().status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(g->CreateGroup("/t").ok());
  watch = g->WatchEvents("/t", std::chrono::milliseconds(300));
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE((*watch)->Next().ok());
  EXPECT_EQ((*watch)->Next().status().code(), StatusCode::kDeadlineExceeded);

  watch = g->WatchEvents("/t");
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE((*watch)->Next().ok());
  EventsWatch* w = watch->get();
  std::thread cancel([w] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    w->Cancel();
  });
  EXPECT_EQ(w->Next().status().code(), StatusCode::kCancelled);
  cancel.join();
  // Destroying a watch still open ends it (no hang).
  watch = g->WatchEvents("/t");
  ASSERT_TRUE(watch.ok());
  watch->reset();
  EXPECT_EQ(g->WatchEvents("/t", std::chrono::milliseconds(-1))
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(g->WatchEvents("/t", std::chrono::milliseconds::max())
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

// An operator deletes a top-level group while a client still stocks (and
// holds) pages of it: the pages stay charged to the dying group, which "/"
// answers for, until the session ends; then they go (they stayed in "/"
// for ever before: the session dropped holdings reparented to the root).
TEST(GroupsTest, ADeletedTopLevelGroupsPagesGoWithTheSession) {
  Server server;
  std::unique_ptr<Groups> g = OpenGroups(server.target);
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(g->CreateGroup("/top").ok());
  std::unique_ptr<Client> c;
  ASSERT_TRUE(Client::Open(server.target, Options{}, &c).ok());
  ASSERT_TRUE(c->Charge("/top", 1).ok());  // a batch: 63 pages stocked
  const uint64_t charged = c->held_pages("/top") + c->stocked_pages();
  ASSERT_GT(charged, 1u);
  Result<uint64_t> reparented = g->DeleteGroup("/top");
  ASSERT_TRUE(reparented.ok()) << reparented.status().ToString();
  EXPECT_EQ(*reparented, charged);
  EXPECT_EQ(g->GetStats("/")->memory_current_bytes, charged * kPage);
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(g->GetStats("/")->memory_current_bytes, 0u);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// ConnectOptions carries what access control wants: TLS verified against a
// CA (server name override), a client certificate, a bearer token from a
// file. The tenant's certificate may write its subtree only; the token is
// admin; nothing at all is refused.
TEST(ChannelTest, TlsCertificateAndTokenFromFiles) {
  test_util::TestCerts certs;
  ASSERT_TRUE(certs.ok());
  ASSERT_EQ(certs.MakeCa("ca"), 0);
  ASSERT_EQ(certs.MakeServer("server", "ca"), 0);
  ASSERT_EQ(certs.MakeLeaf("tenant", "ca", "tenant-a", "", "clientAuth"), 0);
  WriteFile(certs.Path("tokens"), "ops ops-token-0123456789abcdef\n");
  WriteFile(certs.Path("token"), "  ops-token-0123456789abcdef\n");
  WriteFile(certs.Path("policy"), "cn:tenant-a rw /a\ntoken:ops admin\n");
  Server server({"--tls_cert=" + certs.Path("server.pem"),
                 "--tls_key=" + certs.Path("server.key"),
                 "--client_ca=" + certs.Path("ca.pem"),
                 "--tokens_file=" + certs.Path("tokens"),
                 "--authz_policy=" + certs.Path("policy")},
                "0.0.0.0");
  ASSERT_FALSE(server.target.empty());

  ConnectOptions admin;
  admin.tls_ca_file = certs.Path("ca.pem");
  admin.tls_server_name = "localhost";
  admin.token_file = certs.Path("token");
  Result<std::unique_ptr<Groups>> as_admin = Groups::Open(server.target, admin);
  ASSERT_TRUE(as_admin.ok());
  Result<Group> a = (*as_admin)->CreateGroup("/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*as_admin)->CreateGroup("/b").ok());

  ConnectOptions tenant;
  tenant.tls_ca_file = certs.Path("ca.pem");
  tenant.tls_server_name = "localhost";
  tenant.tls_cert_file = certs.Path("tenant.pem");
  tenant.tls_key_file = certs.Path("tenant.key");
  Options options;
  options.connect = tenant;
  options.batch_pages = 0;
  options.max_batch_pages = 0;
  std::unique_ptr<Client> c;
  const Status opened = Client::Open(server.target, options, &c);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  EXPECT_TRUE(c->Charge("/a", 2).ok());
  EXPECT_EQ(c->groups().GetStats("/a")->memory_current_bytes, 2 * kPage);
  EXPECT_EQ(c->groups().GetStats("/b").status().code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(c->Close().ok());

  // TLS without a client certificate or token: verified, but nobody.
  ConnectOptions anonymous;
  anonymous.tls_ca_file = certs.Path("ca.pem");
  anonymous.tls_server_name = "localhost";
  CallOptions quick;
  quick.max_attempts = 1;
  Result<std::unique_ptr<Groups>> nobody =
      Groups::Open(server.target, anonymous, quick);
  ASSERT_TRUE(nobody.ok());
  const StatusCode code = (*nobody)->ListGroups("/").status().code();
  EXPECT_TRUE(code == StatusCode::kUnauthenticated ||
              code == StatusCode::kPermissionDenied)
      << StatusCodeName(code);
}

}  // namespace
}  // namespace cgacct::client
