// WatchEvents end to end (server/rpc/watch_events.h): a real Engine whose
// observer is the EventsHub, behind a real grpc::Server on 127.0.0.1 port 0.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/events/events_hub.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;

class WatchEventsTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(AccountingServiceOptions()); }
  void StartServer(AccountingServiceOptions options) {
    hub_ = std::make_unique<EventsHub>(&flush_observer_);
    EngineOptions engine_options;
    engine_options.nr_cpus = 2;
    engine_options.page_size_bytes = kPage;
    engine_options.observer = hub_.get();
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(engine_options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    options.events_hub = hub_.get();
    service_ =
        std::make_unique<AccountingService>(*engine_, rpc_metrics_, options);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
  }
  void TearDown() override { StopServer(); }
  void StopServer() {
    hub_->Shutdown();
    if (server_) server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
    hub_.reset();
  }

  void Create(const std::string& path, uint64_t max_pages = 0) {
    LimitsUpdate limits;
    if (max_pages != 0) limits.max_pages = max_pages;
    ASSERT_TRUE(engine_->CreateGroup(path, limits).ok()) << path;
  }
  // An OOM: a 2-page charge (not costly) that cannot fit under a 1-page
  // memory.max: `max` event(s) and `oom` on the limiting group, `oom_kill`
  // on `path`.
  void FailOneCharge(const std::string& path) {
    EXPECT_EQ(engine_->Charge(path, 2, PageKind::kAnon).status().code(),
              absl::StatusCode::kResourceExhausted);
  }

  struct Watch {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::EventsUpdate>> reader;
  };
  std::unique_ptr<Watch> StartWatch(const std::string& path) {
    auto w = std::make_unique<Watch>();
    w->context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(30));
    v1::WatchEventsRequest request;
    request.set_path(path);
    w->reader = stub_->WatchEvents(&w->context, request);
    return w;
  }
  // Reads updates until one has events.oom_kill >= want (or the stream ends).
  bool ReadUntilOomKill(Watch* w, uint64_t want, v1::EventsUpdate* last) {
    while (w->reader->Read(last)) {
      if (last->events().oom_kill() >= want) return true;
    }
    return false;
  }

  RstatFlushObserver flush_observer_;
  std::unique_ptr<EventsHub> hub_;
  std::unique_ptr<Engine> engine_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST_F(WatchEventsTest, CurrentCountsOnSubscribeThenEachChange) {
  Create("/p", /*max_pages=*/1);
  Create("/p/c");
  ASSERT_TRUE(engine_->Charge("/p/c", 1, PageKind::kAnon).ok());
  FailOneCharge("/p/c");  // before the watch: max, oom on /p; oom_kill on /p/c

  auto w = StartWatch("/p/c");
  v1::EventsUpdate update;
  ASSERT_TRUE(w->reader->Read(&update));
  EXPECT_EQ(update.path(), "/p/c");
  EXPECT_EQ(update.events().oom_kill(), 1u);  // the current counts
  EXPECT_EQ(update.events_local().oom_kill(), 1u);
  EXPECT_EQ(update.events().max(), 0u);  // max and oom were /p's

  FailOneCharge("/p/c");
  ASSERT_TRUE(ReadUntilOomKill(w.get(), 2, &update));
  EXPECT_EQ(update.events().oom_kill(), 2u);
  EXPECT_EQ(update.events_local().oom_kill(), 2u);

  // The parent's stream sees hierarchical counts and its own local ones.
  auto wp = StartWatch("/p");
  ASSERT_TRUE(wp->reader->Read(&update));
  EXPECT_EQ(update.events().oom_kill(), 2u);  // from /p/c
  EXPECT_EQ(update.events_local().oom_kill(), 0u);
  EXPECT_GE(update.events_local().max(), 2u);
  EXPECT_EQ(update.events_local().oom(), 2u);
  w->context.TryCancel();
  wp->context.TryCancel();
}

TEST_F(WatchEventsTest, BadPathAndMissingGroup) {
  auto w = StartWatch("/no/such");
  v1::EventsUpdate update;
  EXPECT_FALSE(w->reader->Read(&update));
  grpc::Status s = w->reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  auto bad = StartWatch("/a/");
  EXPECT_FALSE(bad->reader->Read(&update));
  s = bad->reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("path"));
}

TEST_F(WatchEventsTest, DeleteEndsTheStreamWithNotFound) {
  Create("/p", 1);
  Create("/p/c");
  auto w = StartWatch("/p/c");
  v1::EventsUpdate update;
  ASSERT_TRUE(w->reader->Read(&update));
  ASSERT_TRUE(engine_->DeleteGroup("/p/c").ok());
  // The same path again: the stream followed the deleted instance.
  Create("/p/c");
  EXPECT_FALSE(w->reader->Read(&update));
  const grpc::Status s = w->reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("\"/p/c\" was deleted"));
}

TEST_F(WatchEventsTest, ClientCancelEndsCleanlyAndUnsubscribes) {
  Create("/p", 1);
  auto w = StartWatch("/p");
  v1::EventsUpdate update;
  ASSERT_TRUE(w->reader->Read(&update));
  EXPECT_EQ(hub_->nr_watchers(), 1);
  w->context.TryCancel();
  while (w->reader->Read(&update)) {
  }
  EXPECT_EQ(w->reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (hub_->nr_watchers() != 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(hub_->nr_watchers(), 0);
  FailOneCharge("/p");  // no watcher left to call
}

TEST_F(WatchEventsTest, ShutdownEndsStreamsWithUnavailable) {
  Create("/p", 1);
  auto w = StartWatch("/p");
  v1::EventsUpdate update;
  ASSERT_TRUE(w->reader->Read(&update));
  hub_->Shutdown();
  EXPECT_FALSE(w->reader->Read(&update));
  const grpc::Status s = w->reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  // New streams are refused too.
  auto late = StartWatch("/p");
  EXPECT_FALSE(late->reader->Read(&update));
  EXPECT_EQ(late->reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(WatchEventsTest, ManyWatchersOnOneGroup) {
  Create("/p", 1);
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < 32; ++i) watches.push_back(StartWatch("/p"));
  v1::EventsUpdate update;
  for (auto& w : watches) ASSERT_TRUE(w->reader->Read(&update));
  FailOneCharge("/p");
  FailOneCharge("/p");
  for (auto& w : watches) {
    ASSERT_TRUE(ReadUntilOomKill(w.get(), 2, &update));
    EXPECT_EQ(update.events_local().oom(), 2u);
    w->context.TryCancel();
  }
}

TEST_F(WatchEventsTest, OneClientWatchesManyGroups) {
  constexpr int kGroups = 40;
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < kGroups; ++i) {
    const std::string path = absl::StrCat("/g", i);
    Create(path, 1);
    watches.push_back(StartWatch(path));
  }
  v1::EventsUpdate update;
  for (auto& w : watches) ASSERT_TRUE(w->reader->Read(&update));
  // Group i fails i+1 charges: every stream must end on its own count.
  for (int i = 0; i < kGroups; ++i)
    for (int k = 0; k <= i; ++k) FailOneCharge(absl::StrCat("/g", i));
  for (int i = 0; i < kGroups; ++i) {
    ASSERT_TRUE(ReadUntilOomKill(watches[i].get(), i + 1, &update)) << i;
    EXPECT_EQ(update.path(), absl::StrCat("/g", i));
    EXPECT_EQ(update.events().oom_kill(), static_cast<uint64_t>(i + 1));
    watches[i]->context.TryCancel();
  }
}

TEST_F(WatchEventsTest, ASlowReaderGetsTheLatestCountsNotABacklog) {
  Create("/p", 1);
  auto w = StartWatch("/p");
  v1::EventsUpdate update;
  ASSERT_TRUE(w->reader->Read(&update));
  constexpr int kEvents = 3000;
  for (int i = 0; i < kEvents; ++i) FailOneCharge("/p");
  // Now read: the counts only grow, the last update has every event, and
  // far fewer updates than events were sent (changes coalesced).
  int updates = 0;
  uint64_t previous = 0;
  while (update.events().oom_kill() < kEvents) {
    ASSERT_TRUE(w->reader->Read(&update));
    ++updates;
    EXPECT_GE(update.events().oom_kill(), previous);
    previous = update.events().oom_kill();
  }
  EXPECT_EQ(update.events_local().oom(), static_cast<uint64_t>(kEvents));
  EXPECT_GE(update.events_local().max(), static_cast<uint64_t>(kEvents));
  // Without coalescing a reader would get one update per change, and each
  // failed charge is many changes (`max` on every retry, `oom`,
  // `oom_kill`). How many coalesce depends on how fast charges come against
  // the writes (the HTTP/2 windows buffer thousands of these small
  // messages): under ASan the charger is slower, and 3,948 updates came for
  // 3,000 charges (~60,000 changes), so the bound is on changes, not on
  // charges.
  const uint64_t changes = update.events_local().max() +
                           update.events_local().oom() +
                           update.events_local().oom_kill();
  EXPECT_LT(static_cast<uint64_t>(updates), changes / 2);
  w->context.TryCancel();
}

TEST_F(WatchEventsTest, AWatchCountsAgainstTheCallersStreams) {
  StopServer();
  AccountingServiceOptions options;
  options.limits.max_streams_per_identity = 1;
  StartServer(options);
  Create("/p", 1);
  auto first = StartWatch("/p");
  v1::EventsUpdate update;
  ASSERT_TRUE(first->reader->Read(&update));
  auto second = StartWatch("/p");
  EXPECT_FALSE(second->reader->Read(&update));
  const grpc::Status s = second->reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("shedding load"));
  first->context.TryCancel();
}

// --- The hub on its own ----------------------------------------------------

}  // namespace
}  // namespace cgacct
