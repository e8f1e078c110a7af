// End-to-end tests of AccountingService: a real Engine (4 CPU slots, 4 KiB
// pages) behind a real grpc::Server on 127.0.0.1 port 0, reached through a
// real channel. Every implemented RPC is checked with its bad inputs, and
// every rejected request is checked to change nothing.
#include "server/rpc/accounting_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/prometheus/collector.h"
#include "server/metrics/prometheus/families.h"
#include "server/metrics/rpc_metrics.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr uint64_t kPage = 4096;
constexpr int kCpus = 4;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

::testing::AssertionResult HasCode(const grpc::Status& status,
                                   grpc::StatusCode code) {
  if (status.error_code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "code " << status.error_code() << " (want " << code
         << "), message: " << status.error_message();
}
#define EXPECT_CODE(status, code_name) \
  EXPECT_TRUE(HasCode((status), grpc::StatusCode::code_name))
#define ASSERT_OK(status) ASSERT_TRUE(HasCode((status), grpc::StatusCode::OK))

uint64_t StatValue(const v1::GroupStats& stats, const std::string& name) {
  for (const v1::StatEntry& entry : stats.stat()) {
    if (entry.name() == name) return entry.value();
  }
  ADD_FAILURE() << "no stat entry " << name;
  return 0;
}

class AccountingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(AccountingServiceOptions()); }

  void TearDown() override { StopServer(); }

  void StartServer(AccountingServiceOptions options) {
    EngineOptions engine_options;
    engine_options.nr_cpus = kCpus;
    engine_options.page_size_bytes = kPage;
    engine_options.observer = &flush_observer_;
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(engine_options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    service_ = std::make_unique<AccountingService>(*engine_, rpc_metrics_,
                                                   std::move(options));
    grpc::EnableDefaultHealthCheckService(true);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    channel_ = std::move(started.channel);
    stub_ = std::move(started.stub);
  }

  void StopServer() {
    if (server_) server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  // --- RPC helpers (each uses a fresh ClientContext) -----------------------

  grpc::Status CreateGroup(const std::string& path,
                           std::optional<v1::Limits> limits = std::nullopt,
                           v1::Group* out = nullptr) {
    v1::CreateGroupRequest request;
    request.set_path(path);
    if (limits) *request.mutable_limits() = *limits;
    v1::Group response;
    grpc::ClientContext context;
    grpc::Status s = stub_->CreateGroup(&context, request, &response);
    if (out != nullptr) *out = response;
    return s;
  }

  grpc::Status DeleteGroup(const std::string& path,
                           uint64_t* reparented = nullptr) {
    v1::DeleteGroupRequest request;
    request.set_path(path);
    v1::DeleteGroupResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub_->DeleteGroup(&context, request, &response);
    if (reparented != nullptr) *reparented = response.reparented_pages();
    return s;
  }

  grpc::Status ListGroups(const std::string& path, bool recursive,
                          v1::ListGroupsResponse* out,
                          const std::string& token = "",
                          uint32_t page_size = 0) {
    v1::ListGroupsRequest request;
    request.set_path(path);
    request.set_recursive(recursive);
    request.set_page_token(token);
    request.set_page_size(page_size);
    grpc::ClientContext context;
    return stub_->ListGroups(&context, request, out);
  }

  std::vector<std::string> AllGroups() {
    v1::ListGroupsResponse response;
    EXPECT_TRUE(ListGroups("/", true, &response).ok());
    return {response.paths().begin(), response.paths().end()};
  }

  grpc::Status SetLimits(const std::string& path, const v1::Limits& limits,
                         v1::Group* out = nullptr) {
    v1::SetLimitsRequest request;
    request.set_path(path);
    *request.mutable_limits() = limits;
    v1::Group response;
    grpc::ClientContext context;
    grpc::Status s = stub_->SetLimits(&context, request, &response);
    if (out != nullptr) *out = response;
    return s;
  }

  grpc::Status Charge(const v1::ChargeRequest& request,
                      v1::ChargeResponse* out = nullptr) {
    v1::ChargeResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub_->Charge(&context, request, &response);
    if (out != nullptr) *out = response;
    return s;
  }

  grpc::Status Charge(const std::string& path, uint64_t nr_pages,
                      v1::PageKind kind = v1::PAGE_KIND_ANON, int cpu = 0,
                      v1::ChargeResponse* out = nullptr) {
    return Charge(MakeCharge(path, nr_pages, kind, cpu), out);
  }

  static v1::ChargeRequest MakeCharge(const std::string& path,
                                      uint64_t nr_pages, v1::PageKind kind,
                                      int cpu = 0) {
    v1::ChargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(kind);
    if (cpu >= 0) request.set_cpu(static_cast<uint32_t>(cpu));
    return request;
  }

  grpc::Status Uncharge(const v1::UnchargeRequest& request,
                        v1::UnchargeResponse* out = nullptr) {
    v1::UnchargeResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub_->Uncharge(&context, request, &response);
    if (out != nullptr) *out = response;
    return s;
  }

  static v1::UnchargeRequest MakeUncharge(const std::string& path,
                                          uint64_t nr_pages, v1::PageKind kind,
                                          int cpu = 0) {
    v1::UnchargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(kind);
    if (cpu >= 0) request.set_cpu(static_cast<uint32_t>(cpu));
    return request;
  }

  grpc::Status GetStats(const std::string& path, v1::GroupStats* out,
                        v1::FlushMode flush = v1::FLUSH_MODE_UNSPECIFIED) {
    v1::GetStatsRequest request;
    request.set_path(path);
    request.set_flush(flush);
    grpc::ClientContext context;
    return stub_->GetStats(&context, request, out);
  }

  v1::GroupStats Stats(const std::string& path) {
    v1::GroupStats stats;
    const grpc::Status s = GetStats(path, &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return stats;
  }

  // memory.current with the per-CPU stocks drained: exactly what is charged.
  uint64_t DrainedCurrentBytes(const std::string& path) {
    engine_->DrainAllStock();
    return Stats(path).memory_current_bytes();
  }

  // What a rejected request must leave untouched.
  struct Snapshot {
    uint64_t current = 0;
    uint64_t anon = 0;
    uint64_t file = 0;
    uint64_t oom = 0;
    uint64_t max = 0;
    uint64_t charges_ok = 0;
    uint64_t uncharges = 0;
    bool operator==(const Snapshot& o) const {
      return current == o.current && anon == o.anon && file == o.file &&
             oom == o.oom && max == o.max && charges_ok == o.charges_ok &&
             uncharges == o.uncharges;
    }
  };
  Snapshot Take(const std::string& path) {
    const v1::GroupStats stats = Stats(path);
    const EngineCounters counters = engine_->GetCounters();
    return Snapshot{stats.memory_current_bytes(),
                    StatValue(stats, "anon"),
                    StatValue(stats, "file"),
                    stats.events().oom(),
                    stats.events().max(),
                    counters.charges_ok,
                    counters.uncharges};
  }

  RstatFlushObserver flush_observer_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

v1::Limits MaxBytes(uint64_t bytes) {
  v1::Limits limits;
  limits.set_max_bytes(bytes);
  return limits;
}

// --- CreateGroup -----------------------------------------------------------

TEST_F(AccountingServiceTest, CreateGroupReturnsGroupWithAllLimits) {
  v1::Group group;
  ASSERT_OK(CreateGroup("/a", std::nullopt, &group));
  EXPECT_EQ(group.path(), "/a");
  EXPECT_GT(group.id(), 0u);
  ASSERT_TRUE(group.limits().has_max_bytes());
  ASSERT_TRUE(group.limits().has_high_bytes());
  ASSERT_TRUE(group.limits().has_min_bytes());
  ASSERT_TRUE(group.limits().has_low_bytes());
  EXPECT_EQ(group.limits().max_bytes(), kMax);
  EXPECT_EQ(group.limits().high_bytes(), kMax);
  EXPECT_EQ(group.limits().min_bytes(), 0u);
  EXPECT_EQ(group.limits().low_bytes(), 0u);

  v1::Limits limits;
  limits.set_max_bytes(10 * kPage + 4095);  // rounds down to 10 pages
  limits.set_low_bytes(3 * kPage);
  v1::Group child;
  ASSERT_OK(CreateGroup("/a/b", limits, &child));
  EXPECT_EQ(child.limits().max_bytes(), 10 * kPage);
  EXPECT_EQ(child.limits().low_bytes(), 3 * kPage);
  EXPECT_EQ(child.limits().high_bytes(), kMax);
  EXPECT_NE(child.id(), group.id());
}

TEST_F(AccountingServiceTest, CreateGroupRejectsBadPathsAndChangesNothing) {
  ASSERT_OK(CreateGroup("/a"));
  for (const char* path :
       {"a", "/a//b", "/a/..", "", "/a/", "/a/./b", "/a/b c", "/a/\xc3\xa9"}) {
    const grpc::Status s = CreateGroup(path);
    EXPECT_CODE(s, INVALID_ARGUMENT) << "path " << path;
    // The engine's own check, in its words.
    EXPECT_EQ(s.error_message(), ValidateGroupPath(path).message()) << path;
  }
  EXPECT_THAT(AllGroups(), ElementsAre("/a"));
}

TEST_F(AccountingServiceTest, CreatingTheRootIsAlreadyExistsAsTheEngineSays) {
  // mkdir of the cgroup2 root is EEXIST; the engine decides it, the service
  // passes its answer through unchanged.
  const grpc::Status s = CreateGroup("/");
  EXPECT_CODE(s, ALREADY_EXISTS);
  EXPECT_EQ(s.error_message(), "path \"/\": the root always exists");
  const absl::Status engine = engine_->CreateGroup("/", {}).status();
  EXPECT_EQ(static_cast<int>(s.error_code()), engine.raw_code());
  EXPECT_EQ(s.error_message(), engine.message());
  EXPECT_THAT(AllGroups(), IsEmpty());
  EXPECT_EQ(rpc_metrics_.handled(RpcMethod::kCreateGroup,
                                 grpc::StatusCode::ALREADY_EXISTS),
            1u);
}

TEST_F(AccountingServiceTest, CreateGroupNeedsParentAndUniquePath) {
  const grpc::Status missing = CreateGroup("/x/y");
  EXPECT_CODE(missing, NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("/x"));
  ASSERT_OK(CreateGroup("/x"));
  EXPECT_CODE(CreateGroup("/x"), ALREADY_EXISTS);
  EXPECT_THAT(AllGroups(), ElementsAre("/x"));
}

// --- DeleteGroup -----------------------------------------------------------

TEST_F(AccountingServiceTest, DeleteGroupErrors) {
  EXPECT_CODE(DeleteGroup("/nope"), NOT_FOUND);
  EXPECT_CODE(DeleteGroup("/"), INVALID_ARGUMENT);
  EXPECT_CODE(DeleteGroup("nope"), INVALID_ARGUMENT);
  ASSERT_OK(CreateGroup("/p"));
  ASSERT_OK(CreateGroup("/p/c"));
  const grpc::Status busy = DeleteGroup("/p");
  EXPECT_CODE(busy, FAILED_PRECONDITION);
  EXPECT_THAT(AllGroups(), ElementsAre("/p", "/p/c"));
}

TEST_F(AccountingServiceTest, DeleteGroupReparentsWhatIsStillCharged) {
  ASSERT_OK(CreateGroup("/p"));
  ASSERT_OK(CreateGroup("/p/c"));
  ASSERT_OK(Charge("/p/c", 5, v1::PAGE_KIND_ANON, /*cpu=*/1));
  ASSERT_OK(Charge("/p/c", 2, v1::PAGE_KIND_FILE, /*cpu=*/2));
  // Without a limit the charges went through the batch: the stocks hold
  // the rest of it, which deletion gives back instead of reparenting.
  uint64_t reparented = 0;
  ASSERT_OK(DeleteGroup("/p/c", &reparented));
  EXPECT_EQ(reparented, 7u);
  EXPECT_THAT(AllGroups(), ElementsAre("/p"));
  EXPECT_EQ(DrainedCurrentBytes("/p"), 7 * kPage);
  const v1::GroupStats parent = Stats("/p");
  EXPECT_EQ(StatValue(parent, "anon"), 5 * kPage);
  EXPECT_EQ(StatValue(parent, "file"), 2 * kPage);
  // The parent now holds the pages: it can uncharge them.
  ASSERT_OK(Uncharge(MakeUncharge("/p", 5, v1::PAGE_KIND_ANON)));
  EXPECT_EQ(DrainedCurrentBytes("/p"), 2 * kPage);
  // A re-created path starts from zero.
  ASSERT_OK(CreateGroup("/p/c"));
  EXPECT_EQ(Stats("/p/c").memory_current_bytes(), 0u);
  EXPECT_EQ(DeleteGroup("/p/c", &reparented).error_code(),
            grpc::StatusCode::OK);
  EXPECT_EQ(reparented, 0u);
}

// --- ListGroups ------------------------------------------------------------

class ListGroupsTest : public AccountingServiceTest {
 protected:
  void SetUp() override {
    AccountingServiceTest::SetUp();
    for (const char* path : {"/b", "/a", "/c", "/a/y", "/a/x", "/b/z"}) {
      ASSERT_OK(CreateGroup(path));
    }
  }
};

TEST_F(ListGroupsTest, ChildrenOnlyOrWholeSubtreeSorted) {
  v1::ListGroupsResponse response;
  ASSERT_OK(ListGroups("/", false, &response));
  EXPECT_THAT(response.paths(), ElementsAre("/a", "/b", "/c"));
  EXPECT_THAT(response.next_page_token(), IsEmpty());

  response.Clear();
  ASSERT_OK(ListGroups("/", true, &response));
  EXPECT_THAT(response.paths(),
              ElementsAre("/a", "/a/x", "/a/y", "/b", "/b/z", "/c"));

  response.Clear();
  ASSERT_OK(ListGroups("/a", false, &response));
  EXPECT_THAT(response.paths(), ElementsAre("/a/x", "/a/y"));

  response.Clear();
  ASSERT_OK(ListGroups("/c", true, &response));
  EXPECT_THAT(response.paths(), IsEmpty());
}

TEST_F(ListGroupsTest, PagesOfTwo) {
  std::vector<std::string> all;
  std::string token;
  int pages = 0;
  do {
    v1::ListGroupsResponse response;
    ASSERT_OK(ListGroups("/", true, &response, token, /*page_size=*/2));
    EXPECT_LE(response.paths_size(), 2);
    all.insert(all.end(), response.paths().begin(), response.paths().end());
    token = response.next_page_token();
    ++pages;
    ASSERT_LE(pages, 10) << "paging does not end";
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_THAT(all, ElementsAre("/a", "/a/x", "/a/y", "/b", "/b/z", "/c"));
}

TEST_F(ListGroupsTest, PagingSurvivesDeletionOfTheTokenPath) {
  v1::ListGroupsResponse first;
  ASSERT_OK(ListGroups("/", true, &first, "", 2));
  ASSERT_THAT(first.paths(), ElementsAre("/a", "/a/x"));
  ASSERT_OK(DeleteGroup("/a/x"));
  v1::ListGroupsResponse second;
  ASSERT_OK(ListGroups("/", true, &second, first.next_page_token(), 2));
  EXPECT_THAT(second.paths(), ElementsAre("/a/y", "/b"));
}

TEST_F(ListGroupsTest, PageSizeZeroOrHugeMeansAll) {
  for (uint32_t page_size : {0u, 10001u, 4000000000u}) {
    v1::ListGroupsResponse response;
    ASSERT_OK(ListGroups("/", true, &response, "", page_size));
    EXPECT_EQ(response.paths_size(), 6) << page_size;
    EXPECT_THAT(response.next_page_token(), IsEmpty());
  }
}

TEST_F(ListGroupsTest, Errors) {
  v1::ListGroupsResponse response;
  EXPECT_CODE(ListGroups("/nope", false, &response), NOT_FOUND);
  EXPECT_CODE(ListGroups("a", false, &response), INVALID_ARGUMENT);
}

// --- SetLimits -------------------------------------------------------------

TEST_F(AccountingServiceTest, SetLimitsRoundsDownAndReportsMax) {
  ASSERT_OK(CreateGroup("/g"));
  v1::Limits limits;
  limits.set_max_bytes(10 * kPage + 4095);
  limits.set_high_bytes(kMax);
  limits.set_min_bytes(kPage - 1);  // less than a page: 0
  v1::Group group;
  ASSERT_OK(SetLimits("/g", limits, &group));
  EXPECT_EQ(group.limits().max_bytes(), 10 * kPage);
  EXPECT_EQ(group.limits().high_bytes(), kMax);
  EXPECT_EQ(group.limits().min_bytes(), 0u);
  EXPECT_EQ(group.limits().low_bytes(), 0u);

  // Absent fields are unchanged.
  v1::Limits low_only;
  low_only.set_low_bytes(2 * kPage);
  ASSERT_OK(SetLimits("/g", low_only, &group));
  EXPECT_EQ(group.limits().max_bytes(), 10 * kPage);
  EXPECT_EQ(group.limits().low_bytes(), 2 * kPage);

  // At or above PAGE_COUNTER_MAX pages is "max", shown as UINT64_MAX.
  const uint64_t pcm = engine_->page_counter_max();
  for (uint64_t bytes : {kMax - 1, pcm * kPage, (pcm + 1) * kPage}) {
    ASSERT_OK(SetLimits("/g", MaxBytes(bytes), &group));
    EXPECT_EQ(group.limits().max_bytes(), kMax) << bytes;
  }
  // Just below is a real limit.
  ASSERT_OK(SetLimits("/g", MaxBytes((pcm - 1) * kPage), &group));
  EXPECT_EQ(group.limits().max_bytes(), (pcm - 1) * kPage);

  // GetStats shows the same.
  ASSERT_OK(SetLimits("/g", MaxBytes(7 * kPage)));
  EXPECT_EQ(Stats("/g").limits().max_bytes(), 7 * kPage);
  EXPECT_EQ(Stats("/g").limits().high_bytes(), kMax);
}

TEST_F(AccountingServiceTest, SetLimitsErrors) {
  const grpc::Status root = SetLimits("/", MaxBytes(kPage));
  EXPECT_CODE(root, INVALID_ARGUMENT);
  EXPECT_THAT(root.error_message(), HasSubstr("/"));
  EXPECT_EQ(Stats("/").limits().max_bytes(), kMax);
  EXPECT_CODE(SetLimits("/nope", MaxBytes(kPage)), NOT_FOUND);
  EXPECT_CODE(SetLimits("nope", MaxBytes(kPage)), INVALID_ARGUMENT);
}

// --- Charge / Uncharge -----------------------------------------------------

TEST_F(AccountingServiceTest, ChargeAndUnchargeAccountExactly) {
  ASSERT_OK(CreateGroup("/g"));
  v1::ChargeResponse charged;
  ASSERT_OK(Charge("/g", 3, v1::PAGE_KIND_ANON, 0, &charged));
  EXPECT_EQ(charged.nr_pages(), 3u);
  EXPECT_EQ(charged.throttle_us(), 0u);
  ASSERT_OK(Charge("/g", 2, v1::PAGE_KIND_FILE, 3));
  // Without a limit a charge reserves a whole batch into the CPU's stock:
  // memory.current counts it until the stocks are drained.
  EXPECT_GE(Stats("/g").memory_current_bytes(), 5 * kPage);
  EXPECT_EQ(DrainedCurrentBytes("/g"), 5 * kPage);

  v1::UnchargeResponse uncharged;
  ASSERT_OK(Uncharge(MakeUncharge("/g", 2, v1::PAGE_KIND_ANON, 1), &uncharged));
  EXPECT_EQ(uncharged.nr_pages(), 2u);
  ASSERT_OK(
      Uncharge(MakeUncharge("/g", 2, v1::PAGE_KIND_FILE, -1), &uncharged));
  EXPECT_EQ(uncharged.nr_pages(), 2u);
  EXPECT_EQ(DrainedCurrentBytes("/g"), 1 * kPage);
  const v1::GroupStats stats = Stats("/g");
  EXPECT_EQ(StatValue(stats, "anon"), 1 * kPage);
  EXPECT_EQ(StatValue(stats, "file"), 0u);
}

TEST_F(AccountingServiceTest, ChargeWithoutCpuUsesTheServingThreadsCpu) {
  ASSERT_OK(CreateGroup("/g"));
  ASSERT_OK(Charge("/g", 4, v1::PAGE_KIND_ANON, /*cpu=*/-1));
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 4 * kPage);
}

TEST_F(AccountingServiceTest, BadChargesAreRejectedAndChangeNothing) {
  ASSERT_OK(CreateGroup("/g"));
  ASSERT_OK(Charge("/g", 3, v1::PAGE_KIND_ANON));
  const Snapshot before = Take("/g");

  struct Case {
    v1::ChargeRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  const uint64_t max = engine_->page_counter_max();
  cases.push_back({MakeCharge("/g", 0, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::INVALID_ARGUMENT, "nr_pages must be > 0"});
  cases.push_back({MakeCharge("/g", max + 1, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat("nr_pages ", max + 1,
                                " exceeds PAGE_COUNTER_MAX (", max, ")")});
  cases.push_back({MakeCharge("/g", kMax, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat("nr_pages ", kMax,
                                " exceeds PAGE_COUNTER_MAX (", max, ")")});
  cases.push_back({MakeCharge("/g", 1, v1::PAGE_KIND_UNSPECIFIED),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "kind must be ANON or FILE"});
  cases.push_back({MakeCharge("/g", 1, static_cast<v1::PageKind>(7)),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "kind must be ANON or FILE"});
  cases.push_back({MakeCharge("/g", 1, v1::PAGE_KIND_ANON, 7),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "cpu 7 out of range [0, 4)"});
  cases.push_back({MakeCharge("/g", 1, v1::PAGE_KIND_ANON, 4),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "cpu 4 out of range [0, 4)"});
  v1::ChargeRequest huge_cpu = MakeCharge("/g", 1, v1::PAGE_KIND_ANON);
  huge_cpu.set_cpu(std::numeric_limits<uint32_t>::max());
  cases.push_back({huge_cpu, grpc::StatusCode::INVALID_ARGUMENT,
                   "cpu 4294967295 out of range [0, 4)"});
  cases.push_back({MakeCharge("g", 1, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::INVALID_ARGUMENT, "path"});
  cases.push_back({MakeCharge("/g/../g", 1, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::INVALID_ARGUMENT, "path"});
  cases.push_back({MakeCharge("/missing", 1, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::NOT_FOUND, "/missing"});
  v1::ChargeRequest empty_id = MakeCharge("/g", 1, v1::PAGE_KIND_ANON);
  empty_id.set_request_id("");
  cases.push_back({empty_id, grpc::StatusCode::INVALID_ARGUMENT, "request_id"});
  v1::ChargeRequest long_id = MakeCharge("/g", 1, v1::PAGE_KIND_ANON);
  long_id.set_request_id(std::string(kMaxRequestIdBytes + 1, 'x'));
  cases.push_back({long_id, grpc::StatusCode::INVALID_ARGUMENT, "request_id"});

  for (const Case& c : cases) {
    const grpc::Status s = Charge(c.request);
    EXPECT_EQ(s.error_code(), c.code)
        << c.request.ShortDebugString() << " -> " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message))
        << c.request.ShortDebugString();
    EXPECT_TRUE(Take("/g") == before) << c.request.ShortDebugString();
  }
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 3 * kPage);
  // Each of them counts once as a rejected charge.
  EXPECT_EQ(rpc_metrics_.charges_rejected(), cases.size());
}

TEST_F(AccountingServiceTest, BadUnchargesAreRejectedAndChangeNothing) {
  ASSERT_OK(CreateGroup("/g"));
  ASSERT_OK(Charge("/g", 3, v1::PAGE_KIND_ANON));
  ASSERT_OK(Charge("/g", 2, v1::PAGE_KIND_FILE));
  const Snapshot before = Take("/g");

  struct Case {
    v1::UnchargeRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({MakeUncharge("/g", 0, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::INVALID_ARGUMENT, "nr_pages must be > 0"});
  cases.push_back({MakeUncharge("/g", 1, v1::PAGE_KIND_UNSPECIFIED),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "kind must be ANON or FILE"});
  cases.push_back({MakeUncharge("/g", 1, v1::PAGE_KIND_ANON, 7),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "cpu 7 out of range [0, 4)"});
  cases.push_back({MakeUncharge("/g/", 1, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::INVALID_ARGUMENT, "path"});
  cases.push_back({MakeUncharge("/missing", 1, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::NOT_FOUND, "/missing"});
  // More ANON than held: refused as a whole.
  cases.push_back({MakeUncharge("/g", 4, v1::PAGE_KIND_ANON),
                   grpc::StatusCode::FAILED_PRECONDITION, "ANON"});
  v1::UnchargeRequest empty_id = MakeUncharge("/g", 1, v1::PAGE_KIND_ANON);
  empty_id.set_request_id("");
  cases.push_back({empty_id, grpc::StatusCode::INVALID_ARGUMENT, "request_id"});

  for (const Case& c : cases) {
    const grpc::Status s = Uncharge(c.request);
    EXPECT_EQ(s.error_code(), c.code)
        << c.request.ShortDebugString() << " -> " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message))
        << c.request.ShortDebugString();
    EXPECT_TRUE(Take("/g") == before) << c.request.ShortDebugString();
  }
  EXPECT_EQ(DrainedCurrentBytes("/g"), 5 * kPage);
  const v1::GroupStats stats = Stats("/g");
  EXPECT_EQ(StatValue(stats, "anon"), 3 * kPage);
  EXPECT_EQ(StatValue(stats, "file"), 2 * kPage);
}

TEST_F(AccountingServiceTest, OomNamesTheLimitingGroupAndRaisesEvents) {
  ASSERT_OK(CreateGroup("/p", MaxBytes(10 * kPage)));
  ASSERT_OK(CreateGroup("/p/c"));
  ASSERT_OK(Charge("/p/c", 8, v1::PAGE_KIND_ANON, 0));
  // The limit makes the charge exact: nothing parked in stocks.
  EXPECT_EQ(Stats("/p/c").memory_current_bytes(), 8 * kPage);
  const Snapshot before = Take("/p/c");

  const grpc::Status oom = Charge("/p/c", 3, v1::PAGE_KIND_ANON, 1);
  EXPECT_CODE(oom, RESOURCE_EXHAUSTED);
  // Names /p itself, not only as the prefix of /p/c.
  EXPECT_THAT(absl::StrReplaceAll(oom.error_message(), {{"/p/c", ""}}),
              HasSubstr("/p"))
      << oom.error_message();

  const v1::GroupStats parent = Stats("/p");
  EXPECT_GE(parent.events().max(), 1u);
  EXPECT_EQ(parent.events().oom(), 1u);
  EXPECT_GE(parent.events_local().max(), 1u);
  EXPECT_EQ(parent.events_local().oom(), 1u);
  EXPECT_EQ(parent.memory_current_bytes(), 8 * kPage);
  const v1::GroupStats child = Stats("/p/c");
  EXPECT_EQ(child.memory_current_bytes(), 8 * kPage);
  EXPECT_EQ(StatValue(child, "anon"), 8 * kPage);
  EXPECT_EQ(child.events_local().oom(), 0u);
  EXPECT_EQ(engine_->GetCounters().charges_ok, before.charges_ok);
  EXPECT_EQ(engine_->GetCounters().charges_oom, 1u);

  // Exactly up to the limit still fits.
  ASSERT_OK(Charge("/p/c", 2, v1::PAGE_KIND_ANON, 2));
  EXPECT_EQ(Stats("/p").memory_current_bytes(), 10 * kPage);
}

// A failed charge of more than 8 pages (order > PAGE_ALLOC_COSTLY_ORDER) is
// ENOMEM without the OOM killer: `max` only, as mem_cgroup_oom() returns early.
TEST_F(AccountingServiceTest, FailedCostlyChargeRaisesMaxButNoOom) {
  ASSERT_OK(CreateGroup("/g", MaxBytes(128 * kPage)));
  ASSERT_OK(Charge("/g", 128, v1::PAGE_KIND_ANON, 0));
  EXPECT_CODE(Charge("/g", 64, v1::PAGE_KIND_ANON, 1), RESOURCE_EXHAUSTED);
  v1::GroupStats stats = Stats("/g");
  EXPECT_GE(stats.events().max(), 1u);
  EXPECT_EQ(stats.events().oom(), 0u);
  EXPECT_EQ(stats.events().oom_kill(), 0u);
  EXPECT_CODE(Charge("/g", 1, v1::PAGE_KIND_ANON, 1), RESOURCE_EXHAUSTED);
  stats = Stats("/g");
  EXPECT_EQ(stats.events().oom(), 1u);
  EXPECT_EQ(stats.events().oom_kill(), 1u);
  // Both are refused; only the second is an OOM (issue 26, item 8:
  // cgacct_charges_total{result="oom"} counted both).
  EXPECT_EQ(engine_->GetCounters().charges_oom, 1u);
  EXPECT_EQ(engine_->GetCounters().charges_refused, 1u);
}

// The root is charged only through its children (try_charge() returns 0 for
// it): Charge and Uncharge of "/" are INVALID_ARGUMENT naming `path`, checked
// before the request_id table, so the id stays free.
TEST_F(AccountingServiceTest, ChargesToTheRootAreRefusedBeforeDedup) {
  ASSERT_OK(CreateGroup("/g"));
  v1::ChargeRequest request = MakeCharge("/", 3, v1::PAGE_KIND_ANON);
  request.set_request_id("root-1");
  const grpc::Status refused = Charge(request);
  EXPECT_CODE(refused, INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("path \"/\""));
  // The root check comes with the path's, before nr_pages and cpu.
  EXPECT_THAT(Charge("/", 0, v1::PAGE_KIND_ANON, 99).error_message(),
              HasSubstr("path \"/\""));
  v1::UnchargeRequest uncharge = MakeUncharge("/", 1, v1::PAGE_KIND_ANON);
  uncharge.set_request_id("root-2");
  EXPECT_CODE(Uncharge(uncharge), INVALID_ARGUMENT);
  EXPECT_EQ(DrainedCurrentBytes("/"), 0u);
  EXPECT_EQ(StatValue(Stats("/"), "anon"), 0u);
  // Neither id was stored: reusing them for a valid request applies it.
  request.set_path("/g");
  ASSERT_OK(Charge(request));
  uncharge.set_path("/g");
  ASSERT_OK(Uncharge(uncharge));
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 2 * kPage);
  EXPECT_EQ(rpc_metrics_.charges_rejected(), 2u);
  // The root's usage is its children's.
  EXPECT_EQ(DrainedCurrentBytes("/"), 2 * kPage);
}

// memory.events on the wire: every line of the kernel's file, in its order,
// zero where the engine has no such event.
TEST_F(AccountingServiceTest, MemoryEventsHaveEveryKernelLine) {
  const google::protobuf::Descriptor* d = v1::MemoryEvents::descriptor();
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i)
    names.push_back(d->field(i)->name());
  EXPECT_THAT(names, ElementsAre("low", "high", "max", "oom", "oom_kill",
                                 "oom_group_kill", "sock_throttled"));
  ASSERT_OK(CreateGroup("/g", MaxBytes(4 * kPage)));
  ASSERT_OK(Charge("/g", 4, v1::PAGE_KIND_ANON));
  EXPECT_CODE(Charge("/g", 1, v1::PAGE_KIND_ANON), RESOURCE_EXHAUSTED);
  const v1::GroupStats stats = Stats("/g");
  EXPECT_EQ(stats.events().oom_kill(), 1u);
  EXPECT_EQ(stats.events().oom_group_kill(), 0u);
  EXPECT_EQ(stats.events().sock_throttled(), 0u);
  EXPECT_EQ(stats.events_local().oom_group_kill(), 0u);
}

// --- request_id ------------------------------------------------------------

TEST_F(AccountingServiceTest, RetriedChargeIsAppliedOnce) {
  ASSERT_OK(CreateGroup("/g"));
  v1::ChargeRequest request = MakeCharge("/g", 3, v1::PAGE_KIND_ANON);
  request.set_request_id("charge-1");
  v1::ChargeResponse first;
  v1::ChargeResponse retry;
  ASSERT_OK(Charge(request, &first));
  ASSERT_OK(Charge(request, &retry));
  EXPECT_EQ(retry.nr_pages(), first.nr_pages());
  EXPECT_EQ(retry.throttle_us(), first.throttle_us());
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 3 * kPage);
  EXPECT_EQ(engine_->GetCounters().charges_ok, 1u);

  // Same id, different request.
  const Snapshot before = Take("/g");
  v1::ChargeRequest other = request;
  other.set_nr_pages(4);
  const grpc::Status mismatch = Charge(other);
  EXPECT_CODE(mismatch, INVALID_ARGUMENT);
  EXPECT_THAT(mismatch.error_message(), HasSubstr("request_id"));
  EXPECT_THAT(mismatch.error_message(), HasSubstr("charge-1"));
  v1::UnchargeRequest as_uncharge = MakeUncharge("/g", 3, v1::PAGE_KIND_ANON);
  as_uncharge.set_request_id("charge-1");
  EXPECT_CODE(Uncharge(as_uncharge), INVALID_ARGUMENT);
  v1::ChargeRequest other_cpu = request;
  other_cpu.set_cpu(1);
  EXPECT_CODE(Charge(other_cpu), INVALID_ARGUMENT);
  EXPECT_TRUE(Take("/g") == before);

  // A new id is a new charge.
  request.set_request_id("charge-2");
  ASSERT_OK(Charge(request));
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 6 * kPage);
}

TEST_F(AccountingServiceTest, RetriedUnchargeIsAppliedOnce) {
  ASSERT_OK(CreateGroup("/g"));
  ASSERT_OK(Charge("/g", 5, v1::PAGE_KIND_ANON));
  v1::UnchargeRequest request = MakeUncharge("/g", 2, v1::PAGE_KIND_ANON);
  request.set_request_id("u-1");
  v1::UnchargeResponse first;
  v1::UnchargeResponse retry;
  ASSERT_OK(Uncharge(request, &first));
  ASSERT_OK(Uncharge(request, &retry));
  EXPECT_EQ(first.nr_pages(), 2u);
  EXPECT_EQ(retry.nr_pages(), 2u);
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 3 * kPage);
  EXPECT_EQ(engine_->GetCounters().uncharges, 1u);
}

TEST_F(AccountingServiceTest, RetryOfAFailedChargeGetsTheSameError) {
  ASSERT_OK(CreateGroup("/p", MaxBytes(2 * kPage)));
  v1::ChargeRequest request = MakeCharge("/p", 3, v1::PAGE_KIND_ANON);
  request.set_request_id("oom-1");
  EXPECT_CODE(Charge(request), RESOURCE_EXHAUSTED);
  ASSERT_OK(SetLimits("/p", MaxBytes(10 * kPage)));
  // Answered from the first result even though it would fit now.
  EXPECT_CODE(Charge(request), RESOURCE_EXHAUSTED);
  EXPECT_EQ(Stats("/p").memory_current_bytes(), 0u);
  EXPECT_EQ(Stats("/p").events().oom(), 1u);
}

TEST_F(AccountingServiceTest, DedupCapacityForgetsTheOldest) {
  StopServer();
  AccountingServiceOptions options;
  options.dedup.capacity = 2;
  StartServer(std::move(options));
  ASSERT_OK(CreateGroup("/g"));
  for (const char* id : {"a", "b", "c"}) {
    v1::ChargeRequest request = MakeCharge("/g", 1, v1::PAGE_KIND_ANON);
    request.set_request_id(id);
    ASSERT_OK(Charge(request));
  }
  v1::ChargeRequest again = MakeCharge("/g", 1, v1::PAGE_KIND_ANON);
  again.set_request_id("c");
  ASSERT_OK(Charge(again));  // remembered
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 3 * kPage);
  again.set_request_id("a");
  ASSERT_OK(Charge(again));  // forgotten: applied again
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), 4 * kPage);
}

TEST_F(AccountingServiceTest, ConcurrentRetriesAreAppliedExactlyOnce) {
  ASSERT_OK(CreateGroup("/g"));
  constexpr int kThreads = 8;
  constexpr int kIds = 50;
  // Every id is sent by two threads at once and then retried: each id must
  // be applied once; a duplicate that overlaps the first is ABORTED or
  // answered from it, never applied.
  std::atomic<int> aborted{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIds; ++i) {
        v1::ChargeRequest request =
            MakeCharge("/g", 1, v1::PAGE_KIND_ANON, (t / 2) % kCpus);
        request.set_request_id(absl::StrCat("pair-", t / 2, "-", i));
        for (int attempt = 0; attempt < 2; ++attempt) {
          const grpc::Status s = Charge(request);
          if (s.error_code() == grpc::StatusCode::ABORTED) {
            ++aborted;
          } else if (!s.ok()) {
            ++failed;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(StatValue(Stats("/g"), "anon"), (kThreads / 2) * kIds * kPage);
  EXPECT_EQ(DrainedCurrentBytes("/g"), (kThreads / 2) * kIds * kPage);
  EXPECT_EQ(engine_->GetCounters().charges_ok,
            static_cast<uint64_t>((kThreads / 2) * kIds));
}

// --- GetStats --------------------------------------------------------------

TEST_F(AccountingServiceTest, GetStatsReportsBytesStatAndEvents) {
  v1::Limits limits;
  limits.set_max_bytes(1000 * kPage);
  limits.set_min_bytes(4 * kPage);
  ASSERT_OK(CreateGroup("/g", limits));
  ASSERT_OK(Charge("/g", 3, v1::PAGE_KIND_ANON, 0));
  ASSERT_OK(Charge("/g", 2, v1::PAGE_KIND_FILE, 1));

  v1::GroupStats stats;
  ASSERT_OK(GetStats("/g", &stats));  // UNSPECIFIED = EXACT
  EXPECT_EQ(stats.path(), "/g");
  EXPECT_TRUE(stats.flushed());
  EXPECT_EQ(stats.max_staleness_us(), 0u);
  ASSERT_GE(stats.stat_size(), 2);
  EXPECT_EQ(stats.stat(0).name(), "anon");  // memory.stat order
  EXPECT_EQ(stats.stat(1).name(), "file");
  EXPECT_EQ(StatValue(stats, "anon"), 3 * kPage);
  EXPECT_EQ(StatValue(stats, "file"), 2 * kPage);
  EXPECT_EQ(stats.limits().max_bytes(), 1000 * kPage);
  EXPECT_EQ(stats.limits().min_bytes(), 4 * kPage);
  EXPECT_EQ(stats.limits().high_bytes(), kMax);
  EXPECT_EQ(stats.limits().low_bytes(), 0u);
  EXPECT_GE(stats.memory_peak_bytes(), stats.memory_current_bytes());
  EXPECT_EQ(stats.events().oom(), 0u);
  EXPECT_EQ(stats.events().max(), 0u);
  EXPECT_EQ(stats.failcnt(), 0u);
  EXPECT_EQ(stats.memory_current_bytes() % kPage, 0u);
  EXPECT_EQ(DrainedCurrentBytes("/g"), 5 * kPage);

  // The parent (root) sees the child's pages after an exact flush.
  v1::GroupStats root;
  ASSERT_OK(GetStats("/", &root, v1::FLUSH_MODE_EXACT));
  EXPECT_EQ(StatValue(root, "anon"), 3 * kPage);

  // NONE does not flush and says how stale it may be.
  ASSERT_OK(Charge("/g", 1, v1::PAGE_KIND_ANON, 2));
  v1::GroupStats none;
  ASSERT_OK(GetStats("/g", &none, v1::FLUSH_MODE_NONE));
  EXPECT_FALSE(none.flushed());
  EXPECT_GT(none.max_staleness_us(), 0u);
  v1::GroupStats threshold;
  ASSERT_OK(GetStats("/g", &threshold, v1::FLUSH_MODE_THRESHOLD));
}

TEST_F(AccountingServiceTest, GetStatsErrors) {
  v1::GroupStats stats;
  EXPECT_CODE(GetStats("/nope", &stats), NOT_FOUND);
  EXPECT_CODE(GetStats("nope", &stats), INVALID_ARGUMENT);
  const grpc::Status bad_mode =
      GetStats("/", &stats, static_cast<v1::FlushMode>(9));
  EXPECT_CODE(bad_mode, INVALID_ARGUMENT);
  EXPECT_THAT(bad_mode.error_message(), HasSubstr("flush"));
}

// --- GetEngineInfo, WatchEvents without a hub, health ----------------------

TEST_F(AccountingServiceTest, GetEngineInfo) {
  ASSERT_OK(CreateGroup("/a"));
  ASSERT_OK(CreateGroup("/a/b"));
  v1::EngineInfo info;
  grpc::ClientContext context;
  ASSERT_OK(stub_->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info));
  EXPECT_EQ(info.nr_cpus(), static_cast<uint32_t>(kCpus));
  EXPECT_EQ(info.page_size_bytes(), kPage);
  EXPECT_EQ(info.charge_batch_pages(), 64u);
  EXPECT_EQ(info.flush_lock_policy(), "per_cpu");
  EXPECT_EQ(info.nr_stock_slots(), 7u);
  EXPECT_EQ(info.nr_groups(), 3u);  // root included
  EXPECT_EQ(info.max_batch_ops(), kMaxBatchOps);
  EXPECT_EQ(info.periodic_flush_interval_ms(), 2000u);
  EXPECT_EQ(info.flush_hold_budget_us(), 0u);     // per_cpu has no budget
  EXPECT_EQ(info.flush_preempt_model(), "none");  // EngineOptions' default
}

TEST_F(AccountingServiceTest, GetEngineInfoListsTheLongestFlushHolds) {
  ASSERT_OK(CreateGroup("/a"));
  // Updates on CPU 1: the first read of /a folds its subtree there, /a
  // alone (1 entry).
  ASSERT_OK(Charge("/a", 3, v1::PAGE_KIND_FILE, /*cpu=*/1));
  for (int i = 0; i < 20; ++i) {  // some flush will not be preempted
    grpc::ClientContext context;
    v1::GetStatsRequest request;
    request.set_path("/a");
    v1::GroupStats stats;
    ASSERT_OK(stub_->GetStats(&context, request, &stats));
  }
  v1::EngineInfo info;
  grpc::ClientContext context;
  ASSERT_OK(stub_->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info));
  ASSERT_GT(info.longest_flush_holds_size(), 0);
  EXPECT_LE(info.longest_flush_holds_size(), 16);
  const v1::FlushLockHold& longest = info.longest_flush_holds(0);
  EXPECT_EQ(longest.policy(), "per_cpu");
  EXPECT_EQ(longest.cpus_walked(), 1u);  // per_cpu: one CPU per hold
  EXPECT_EQ(longest.preempt_model(), "none");
  EXPECT_LE(longest.groups_folded(), 3u);  // at most /a, / and nothing else
  EXPECT_GT(longest.when_unix_us(), 0);
  EXPECT_EQ(longest.hold_ns() / 1000, info.flush_lock_hold_max_us());
  EXPECT_GE(info.flush_lock_hold_wall_max_us(), info.flush_lock_hold_max_us());
  for (int i = 1; i < info.longest_flush_holds_size(); ++i)
    EXPECT_GE(info.longest_flush_holds(i - 1).hold_ns(),
              info.longest_flush_holds(i).hold_ns());
  // The most work in one hold, whichever hold was longest in time.
  EXPECT_EQ(info.flush_lock_hold_max_cpus_walked(), 1u);
  EXPECT_EQ(info.flush_lock_hold_max_groups_folded(), 1u);
}

// ChargeBatch and ChargeStream: charge_batch_test.cc.
// Reclaim: reclaim_service_test.cc.
// WatchEvents itself: watch_events_test.cc. A service built without an
// events hub says so instead of pretending to watch.
TEST_F(AccountingServiceTest, WatchEventsWithoutAHubIsUnavailable) {
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  request.set_path("/");
  auto reader = stub_->WatchEvents(&context, request);
  v1::EventsUpdate update;
  EXPECT_FALSE(reader->Read(&update));
  const grpc::Status s = reader->Finish();
  EXPECT_CODE(s, UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("events hub"));
}

TEST_F(AccountingServiceTest, HealthCheckServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;  // "" = the whole server
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_OK(health->Check(&context, request, &response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// --- Metrics ---------------------------------------------------------------

TEST_F(AccountingServiceTest, MetricsTextHasEveryFamily) {
  ASSERT_OK(CreateGroup("/p", MaxBytes(4 * kPage)));
  ASSERT_OK(CreateGroup("/p/c"));
  ASSERT_OK(CreateGroup("/p/c/d"));
  ASSERT_OK(Charge("/p/c", 2, v1::PAGE_KIND_ANON));
  EXPECT_CODE(Charge("/p/c", 3, v1::PAGE_KIND_ANON), RESOURCE_EXHAUSTED);
  EXPECT_CODE(Charge("/p/c", 0, v1::PAGE_KIND_ANON), INVALID_ARGUMENT);
  ASSERT_OK(Uncharge(MakeUncharge("/p/c", 1, v1::PAGE_KIND_ANON)));
  v1::GroupStats stats;
  ASSERT_OK(GetStats("/p", &stats));  // an exact flush
  engine_->DrainAllStock();           // the uncharged page sat in a stock

  MetricsCollector collector(*engine_, flush_observer_, rpc_metrics_,
                             MetricsOptions{/*group_depth=*/2});
  const std::string text = SerializeMetrics(collector);
  for (const char* family : {
           "# TYPE cgacct_rstat_flush_lock_hold_seconds histogram",
           "# TYPE cgacct_rstat_flush_lock_wait_seconds histogram",
           "# TYPE cgacct_rstat_flush_lock_hold_max_seconds gauge",
           "# TYPE cgacct_rstat_flush_duration_seconds histogram",
           "# TYPE cgacct_rstat_flush_cpus_total counter",
           "# TYPE cgacct_rstat_flushes_total counter",
           "# TYPE cgacct_charges_total counter",
           "# TYPE cgacct_uncharges_total counter",
           "# TYPE cgacct_stock_hits_total counter",
           "# TYPE cgacct_stock_victim_hits_total counter",
           "# TYPE cgacct_stock_pool_hits_total counter",
           "# TYPE cgacct_stock_drains_total counter",
           "# TYPE cgacct_oom_total counter",
           "# TYPE cgacct_groups gauge",
           "# TYPE cgacct_group_memory_current_bytes gauge",
       }) {
    EXPECT_THAT(text, HasSubstr(family));
  }
  EXPECT_THAT(text, HasSubstr("cgacct_charges_total{result=\"ok\"} 1"));
  EXPECT_THAT(text, HasSubstr("cgacct_charges_total{result=\"oom\"} 1"));
  EXPECT_THAT(text, HasSubstr("cgacct_charges_total{result=\"refused\"} 0"));
  EXPECT_THAT(text, HasSubstr("cgacct_charges_total{result=\"rejected\"} 1"));
  EXPECT_THAT(text, HasSubstr("cgacct_uncharges_total 1"));
  EXPECT_THAT(text, HasSubstr("cgacct_oom_total 1"));
  EXPECT_THAT(text, HasSubstr("cgacct_groups 4"));
  // One gRPC family (issue 26, item 8): the project's own
  // cgacct_grpc_server_* duplicated grpc_server_* with other label names.
  EXPECT_THAT(text, Not(HasSubstr("cgacct_grpc_server")));
  EXPECT_THAT(text,
              HasSubstr("cgacct_rstat_flush_lock_hold_seconds_bucket{policy="
                        "\"per_cpu\",le=\"+Inf\"}"));
  // Hold buckets start at 50 ns (1-2-5 series), RPC buckets at 1 µs.
  EXPECT_THAT(text,
              HasSubstr("cgacct_rstat_flush_lock_hold_seconds_bucket{policy="
                        "\"per_cpu\",le=\"5e-08\"}"));
  EXPECT_THAT(text,
              HasSubstr("cgacct_rstat_flush_lock_hold_seconds_bucket{policy="
                        "\"per_cpu\",le=\"0.001\"}"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr(
                        "cgacct_rstat_flush_lock_hold_seconds_bucket{policy="
                        "\"per_cpu\",le=\"1.048576\"}")));
  // Groups down to depth 2.
  EXPECT_THAT(text, HasSubstr("cgacct_group_memory_current_bytes{path=\"/\"}"));
  EXPECT_THAT(text,
              HasSubstr("cgacct_group_memory_current_bytes{path=\"/p\"} 4096"));
  EXPECT_THAT(text, HasSubstr("cgacct_group_memory_current_bytes{path=\"/p/"
                              "c\"} 4096"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("path=\"/p/c/d\"")));

  // The exact flush above went through the observer.
  EXPECT_GT(flush_observer_.lock_hold(FlushLockPolicy::kPerCpu).Collect().count,
            0u);
  EXPECT_GT(flush_observer_.flush_duration().Collect().count, 0u);

  // Depth 0 turns the per-group family off.
  MetricsCollector no_groups(*engine_, flush_observer_, rpc_metrics_,
                             MetricsOptions{/*group_depth=*/0});
  EXPECT_THAT(SerializeMetrics(no_groups),
              ::testing::Not(HasSubstr("cgacct_group_memory_current_bytes")));
}

}  // namespace
}  // namespace cgacct
