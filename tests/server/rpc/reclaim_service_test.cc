// Reclaim through the service: the Reclaim RPC, Charge's throttle_us, the
// reclaim metrics, and ports of the kernel's memcg selftests
// (tools/testing/selftests/cgroup/test_memcontrol.c; docs/DESIGN.md §10.5)
// that apply without swap, with the same values_close() tolerances.
//
// How the selftests map onto the service (a real Engine behind a real
// grpc::Server on 127.0.0.1 port 0, 4 CPU slots, 4 KiB pages):
//  - a cgroup is a group; memory.current is memory_current_bytes read with
//    GetStats (pages parked in per-CPU stocks included, as in the kernel);
//  - cg_run(cg, fn) is a "process": a sequence of Charge calls on one CPU
//    slot. A process that exits (or is OOM-killed) uncharges its ANON
//    pages; page cache it created stays charged, as in the kernel;
//  - alloc_anon() faults in 16-page (64 KiB) Charges of ANON and
//    alloc_pagecache() reads in 32-page (128 KiB, a readahead window)
//    Charges of FILE. The kernel charges per page or per folio: coarser
//    steps only make the tests faster;
//  - memory.swap.max = 0 is implied (the engine has no swap).
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/metrics/flush_observer.h"
#include "server/metrics/prometheus/collector.h"
#include "server/metrics/prometheus/families.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;
constexpr int kCpus = 4;
constexpr uint64_t kMaxBytes = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kAnonFaultPages = 16;
constexpr uint64_t kReadaheadPages = 32;

// MB(x) in bytes, as the selftests write it.
constexpr int64_t MB(int64_t x) { return x << 20; }

// The selftests' values_close(): |a - b| <= (a + b) / 100 * err, integer
// arithmetic, err in percent of the sum.
bool values_close(int64_t a, int64_t b, int err) {
  return std::llabs(a - b) <= (a + b) / 100 * err;
}

::testing::AssertionResult Ok(const grpc::Status& s) {
  if (s.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "code " << s.error_code() << ": " << s.error_message();
}

class ReclaimServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = kCpus;
    options.page_size_bytes = kPage;
    options.observer = &observer_;
    engine_ = std::move(*Engine::Create(options));
    service_ = std::make_unique<AccountingService>(*engine_, rpc_metrics_);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
  }
  void TearDown() override {
    server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
  }

  // --- RPCs ----------------------------------------------------------------

  grpc::Status Create(const std::string& path) {
    v1::CreateGroupRequest request;
    request.set_path(path);
    v1::Group response;
    grpc::ClientContext context;
    return stub_->CreateGroup(&context, request, &response);
  }
  // cg_write(path, "memory.<which>", value).
  grpc::Status Write(const std::string& path, const std::string& which,
                     uint64_t bytes) {
    v1::SetLimitsRequest request;
    request.set_path(path);
    v1::Limits* l = request.mutable_limits();
    if (which == "max") l->set_max_bytes(bytes);
    if (which == "high") l->set_high_bytes(bytes);
    if (which == "min") l->set_min_bytes(bytes);
    if (which == "low") l->set_low_bytes(bytes);
    v1::Group response;
    grpc::ClientContext context;
    return stub_->SetLimits(&context, request, &response);
  }
  grpc::Status Charge(const std::string& path, uint64_t nr_pages,
                      v1::PageKind kind, int cpu,
                      v1::ChargeResponse* out = nullptr) {
    v1::ChargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(kind);
    request.set_cpu(static_cast<uint32_t>(cpu));
    v1::ChargeResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub_->Charge(&context, request, &response);
    if (out != nullptr) *out = response;
    return s;
  }
  grpc::Status Uncharge(const std::string& path, uint64_t nr_pages,
                        v1::PageKind kind, int cpu) {
    v1::UnchargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(kind);
    request.set_cpu(static_cast<uint32_t>(cpu));
    v1::UnchargeResponse response;
    grpc::ClientContext context;
    return stub_->Uncharge(&context, request, &response);
  }
  grpc::Status Reclaim(const std::string& path, uint64_t nr_bytes,
                       uint64_t* reclaimed_bytes = nullptr) {
    v1::ReclaimRequest request;
    request.set_path(path);
    request.set_nr_bytes(nr_bytes);
    v1::ReclaimResponse response;
    grpc::ClientContext context;
    grpc::Status s = stub_->Reclaim(&context, request, &response);
    if (reclaimed_bytes != nullptr)
      *reclaimed_bytes = response.reclaimed_bytes();
    return s;
  }
  v1::GroupStats Stats(const std::string& path) {
    v1::GetStatsRequest request;
    request.set_path(path);
    v1::GroupStats stats;
    grpc::ClientContext context;
    EXPECT_TRUE(Ok(stub_->GetStats(&context, request, &stats)));
    return stats;
  }

  // --- The selftests' vocabulary -------------------------------------------

  // cg_read_long(cg, "memory.current").
  int64_t Current(const std::string& path) {
    return static_cast<int64_t>(Stats(path).memory_current_bytes());
  }
  int64_t Peak(const std::string& path) {
    return static_cast<int64_t>(Stats(path).memory_peak_bytes());
  }
  // cg_read_key_long(cg, "memory.stat", "<key> ").
  int64_t StatKey(const std::string& path, const std::string& key) {
    const v1::GroupStats stats = Stats(path);
    for (const v1::StatEntry& e : stats.stat())
      if (e.name() == key) return static_cast<int64_t>(e.value());
    ADD_FAILURE() << "no stat " << key;
    return -1;
  }

  // A process in cgroup `path` on CPU slot `cpu`: what it allocated, so it
  // can exit (ANON freed) or be OOM-killed.
  struct Process {
    std::string path;
    int cpu;
    uint64_t anon_pages = 0;
    bool killed = false;
  };
  // alloc_and_populate_anon(): false if the process was OOM-killed.
  bool AllocAnon(Process& p, int64_t bytes) {
    for (uint64_t done = 0; done < static_cast<uint64_t>(bytes) / kPage;) {
      const uint64_t n = std::min(kAnonFaultPages,
                                  static_cast<uint64_t>(bytes) / kPage - done);
      const grpc::Status s = Charge(p.path, n, v1::PAGE_KIND_ANON, p.cpu);
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        p.killed = true;
        return false;
      }
      EXPECT_TRUE(Ok(s));
      p.anon_pages += n;
      done += n;
    }
    return true;
  }
  // alloc_pagecache(): reads `bytes` of a new file through the page cache.
  // The throttle_us the service returns would be slept by a real client
  // (memory.high); the tests only add it up.
  bool AllocPagecache(Process& p, int64_t bytes,
                      uint64_t* throttle_us = nullptr) {
    for (uint64_t done = 0; done < static_cast<uint64_t>(bytes) / kPage;) {
      const uint64_t n = std::min(kReadaheadPages,
                                  static_cast<uint64_t>(bytes) / kPage - done);
      v1::ChargeResponse response;
      const grpc::Status s =
          Charge(p.path, n, v1::PAGE_KIND_FILE, p.cpu, &response);
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        p.killed = true;
        return false;
      }
      EXPECT_TRUE(Ok(s));
      if (throttle_us != nullptr) *throttle_us += response.throttle_us();
      done += n;
    }
    return true;
  }
  // Process exit: its anonymous memory is freed, its page cache stays.
  void Exit(Process& p) {
    if (p.anon_pages > 0) {
      EXPECT_TRUE(
          Ok(Uncharge(p.path, p.anon_pages, v1::PAGE_KIND_ANON, p.cpu)));
    }
    p.anon_pages = 0;
  }

  // alloc_anon_50M_check(): true if every check inside the child passed.
  bool AllocAnon50MCheck(const std::string& cg) {
    Process p{cg, 1};
    const int64_t size = MB(50);
    bool ok = AllocAnon(p, size);
    const int64_t current = Current(cg);
    ok = ok && current >= size && values_close(size, current, 3);
    const int64_t anon = StatKey(cg, "anon");
    ok = ok && anon >= 0 && values_close(anon, current, 3);
    Exit(p);
    return ok;
  }
  // alloc_pagecache_50M_check().
  bool AllocPagecache50MCheck(const std::string& cg) {
    Process p{cg, 2};
    const int64_t size = MB(50);
    if (!AllocPagecache(p, size)) return false;
    const int64_t current = Current(cg);
    if (current < size) return false;
    const int64_t file = StatKey(cg, "file");
    return file >= 0 && values_close(file, current, 10);
  }
  // alloc_pagecache_max_30M().
  bool AllocPagecacheMax30M(const std::string& cg) {
    const v1::GroupStats stats = Stats(cg);
    if (stats.limits().high_bytes() != static_cast<uint64_t>(MB(30)) &&
        stats.limits().max_bytes() != static_cast<uint64_t>(MB(30)))
      return false;
    Process p{cg, 3};
    if (!AllocPagecache(p, MB(50))) return false;
    return values_close(Current(cg), MB(30), 5);
  }
  // reclaim_until(): memory.reclaim until memory.current reaches goal; false
  // if memory.reclaim's answers make no sense.
  bool ReclaimUntil(const std::string& cg, int64_t goal) {
    bool reclaimed = false;
    for (int retries = 5; retries > 0; retries--) {
      const int64_t current = Current(cg);
      if (current < goal || values_close(current, goal, 3)) break;
      // Did memory.reclaim return 0 incorrectly?
      else if (reclaimed)
        return false;
      const grpc::Status s = Reclaim(cg, static_cast<uint64_t>(current - goal));
      if (s.ok())
        reclaimed = true;
      else if (s.error_code() != grpc::StatusCode::UNAVAILABLE)  // EAGAIN
        return false;
    }
    return reclaimed;
  }

  RstatFlushObserver observer_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

// --- The Reclaim RPC ---------------------------------------------------------

TEST_F(ReclaimServiceTest, ReclaimRpc) {
  ASSERT_TRUE(Ok(Create("/g")));
  ASSERT_TRUE(Ok(Charge("/g", 1000, v1::PAGE_KIND_FILE, 0)));
  uint64_t reclaimed = 0;
  // 100 pages and a bit: rounds down to 100 pages; reclaim works in chunks
  // of 32, so it may take a little more.
  ASSERT_TRUE(Ok(Reclaim("/g", 100 * kPage + 7, &reclaimed)));
  EXPECT_GE(reclaimed, 100 * kPage);
  EXPECT_LT(reclaimed, 200 * kPage);
  EXPECT_EQ(reclaimed % kPage, 0u);
  const v1::GroupStats s = Stats("/g");
  EXPECT_EQ(s.memory_current_bytes(), 1000 * kPage - reclaimed);
  EXPECT_EQ(StatKey("/g", "pgsteal_proactive") * kPage, reclaimed);
  // Less than a page is 0 pages: nothing to do.
  ASSERT_TRUE(Ok(Reclaim("/g", kPage - 1, &reclaimed)));
  EXPECT_EQ(reclaimed, 0u);
  // 0 bytes: nothing to do, as the kernel's `echo 0 > memory.reclaim`
  // (issue 25 item 6; was INVALID_ARGUMENT).
  const uint64_t before = Stats("/g").memory_current_bytes();
  reclaimed = 1;
  ASSERT_TRUE(Ok(Reclaim("/g", 0, &reclaimed)));
  EXPECT_EQ(reclaimed, 0u);
  EXPECT_EQ(Stats("/g").memory_current_bytes(), before);
  // Errors.
  EXPECT_EQ(Reclaim("/nope", kPage).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Reclaim("nope", kPage).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // More than is reclaimable: UNAVAILABLE (EAGAIN), the cache is gone.
  ASSERT_TRUE(Ok(Charge("/g", 100, v1::PAGE_KIND_ANON, 0)));
  const grpc::Status again = Reclaim("/g", 1 << 30);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(StatKey("/g", "file"), 0);
  EXPECT_EQ(Stats("/g").memory_current_bytes(), 100 * kPage);
}

TEST_F(ReclaimServiceTest, ChargeReturnsTheMemoryHighThrottle) {
  ASSERT_TRUE(Ok(Create("/g")));
  ASSERT_TRUE(Ok(Charge("/g", MB(110) / kPage - kChargeBatchPages,
                        v1::PAGE_KIND_ANON, 0)));
  ASSERT_TRUE(Ok(Write("/g", "high", MB(100))));
  v1::ChargeResponse response;
  ASSERT_TRUE(
      Ok(Charge("/g", kChargeBatchPages, v1::PAGE_KIND_ANON, 0, &response)));
  EXPECT_EQ(response.throttle_us(), 639000u);  // the kernel's table at 110M
  EXPECT_GT(Stats("/g").events().high(), 0u);
}

TEST_F(ReclaimServiceTest, LoweringMaxReclaimsThenOoms) {
  ASSERT_TRUE(Ok(Create("/g")));
  ASSERT_TRUE(Ok(Charge("/g", 1000, v1::PAGE_KIND_FILE, 0)));
  ASSERT_TRUE(Ok(Charge("/g", 100, v1::PAGE_KIND_ANON, 0)));
  ASSERT_TRUE(Ok(Write("/g", "max", 500 * kPage)));
  EXPECT_LE(Stats("/g").memory_current_bytes(), 500 * kPage);
  EXPECT_EQ(Stats("/g").events().oom(), 0u);
  ASSERT_TRUE(Ok(Write("/g", "max", 50 * kPage)));  // accepted, as in v2
  EXPECT_EQ(Stats("/g").memory_current_bytes(), 100 * kPage);
  EXPECT_EQ(Stats("/g").events().oom(), 1u);
}

TEST_F(ReclaimServiceTest, MetricsExportReclaimCyclesAndPages) {
  ASSERT_TRUE(Ok(Create("/g")));
  ASSERT_TRUE(Ok(Charge("/g", 1000, v1::PAGE_KIND_FILE, 0)));
  uint64_t reclaimed = 0;
  ASSERT_TRUE(Ok(Reclaim("/g", 64 * kPage, &reclaimed)));
  EXPECT_EQ(Reclaim("/", 1 << 30).error_code(), grpc::StatusCode::UNAVAILABLE);
  MetricsCollector collector(*engine_, observer_, rpc_metrics_);
  const std::string text = SerializeMetrics(collector);
  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_reclaim_cycle_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_reclaim_pages_total counter"));
  EXPECT_THAT(
      text, HasSubstr(absl::StrCat("cgacct_reclaim_pages_total{op=\"stolen\"} ",
                                   StatKey("/", "pgsteal"))));
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "cgacct_reclaim_pages_total{op=\"scanned\"} ",
                        StatKey("/", "pgscan"))));
  // The successful memory.reclaim used partial walks; the failing one ended
  // every cycle with a full walk.
  EXPECT_GT(observer_.reclaim_cycle(false).Collect().count, 0u);
  EXPECT_GE(observer_.reclaim_cycle(true).Collect().count, 17u);
  EXPECT_THAT(text, HasSubstr("cgacct_reclaim_cycle_seconds_count{walk="
                              "\"full\"}"));
  // The failed memory.reclaim is UNAVAILABLE in the count
  // grpc_server_handled_total reads (GrpcServerCollector).
  EXPECT_EQ(rpc_metrics_.handled(RpcMethod::kReclaim,
                                 grpc::StatusCode::UNAVAILABLE),
            1u);
}

// --- Kernel selftests --------------------------------------------------------

// test_memcg_current_peak. Not ported: the fd-local memory.peak
// steps (open/reset/close of several memory.peak fds), which the service
// does not model.
TEST_F(ReclaimServiceTest, SelftestCurrentPeak) {
  const std::string memcg = "/memcg_test";
  ASSERT_TRUE(Ok(Create(memcg)));
  EXPECT_EQ(Current(memcg), 0);
  EXPECT_EQ(Peak(memcg), 0);
  EXPECT_TRUE(AllocAnon50MCheck(memcg));
  EXPECT_GE(Peak(memcg), MB(50));
  EXPECT_TRUE(AllocPagecache50MCheck(memcg));
  EXPECT_GE(Peak(memcg), MB(50));
}

// test_memcg_high.
TEST_F(ReclaimServiceTest, SelftestHigh) {
  const std::string memcg = "/memcg_test";
  ASSERT_TRUE(Ok(Create(memcg)));
  EXPECT_EQ(Stats(memcg).limits().high_bytes(), kMaxBytes);  // "max\n"
  ASSERT_TRUE(Ok(Write(memcg, "high", MB(30))));
  // memory.high never kills.
  Process anon{memcg, 0};
  EXPECT_TRUE(AllocAnon(anon, MB(31)));
  Exit(anon);
  // High keeps the page cache near 30M: the 50M check must fail.
  EXPECT_FALSE(AllocPagecache50MCheck(memcg));
  EXPECT_TRUE(AllocPagecacheMax30M(memcg));
  EXPECT_GT(Stats(memcg).events().high(), 0u);
  EXPECT_EQ(Stats(memcg).events().oom(), 0u);
}

// test_memcg_max.
TEST_F(ReclaimServiceTest, SelftestMax) {
  const std::string memcg = "/memcg_test";
  ASSERT_TRUE(Ok(Create(memcg)));
  EXPECT_EQ(Stats(memcg).limits().max_bytes(), kMaxBytes);  // "max\n"
  ASSERT_TRUE(Ok(Write(memcg, "max", MB(30))));
  // Should be killed by the OOM killer.
  Process anon{memcg, 0};
  EXPECT_FALSE(AllocAnon(anon, MB(100)));
  EXPECT_TRUE(anon.killed);
  Exit(anon);
  EXPECT_TRUE(AllocPagecacheMax30M(memcg));
  const int64_t current = Current(memcg);
  EXPECT_LE(current, MB(30));
  EXPECT_NE(current, 0);
  EXPECT_GT(Stats(memcg).events().max(), 0u);
}

// test_memcg_reclaim, without swap: 50M of page cache, then
// memory.reclaim down to 30M.
TEST_F(ReclaimServiceTest, SelftestReclaim) {
  const std::string memcg = "/memcg_test";
  ASSERT_TRUE(Ok(Create(memcg)));
  EXPECT_EQ(Current(memcg), 0);
  Process cache{memcg, 0};  // alloc_pagecache_50M_noexit
  ASSERT_TRUE(AllocPagecache(cache, MB(50)));
  const int64_t expected_usage = MB(50);
  EXPECT_TRUE(values_close(Current(memcg), expected_usage, 10));
  EXPECT_TRUE(ReclaimUntil(memcg, MB(30)));
  EXPECT_TRUE(values_close(Current(memcg), MB(30), 3) ||
              Current(memcg) < MB(30));
}

// test_memcg_min and test_memcg_low (the protection selftests, beyond the
// list of docs/DESIGN.md §10.5): A (max 200M) / B (min or low 50M) / C (75M), D
// (25M), E (0), F (500M), with 50M of page cache in each of C, D and E; then
// A/G allocates 148M of ANON. The kernel expects B ~ 50M, C ~ 29M, D ~ 21M, F
// empty (the model in memcg_protection.m), then: a 170M allocation in G is
// OOM-killed under min and succeeds under low (B ~ 30M), memory.reclaim on C
// ignores C's own protection, and only C and D see `low` events.
class ProtectionSelftest : public ReclaimServiceTest,
                           public ::testing::WithParamInterface<bool> {};

TEST_P(ProtectionSelftest, MinOrLow) {
  const bool min = GetParam();
  const std::string attribute = min ? "min" : "low";
  const std::string parent[3] = {"/memcg_test_0", "/memcg_test_0/memcg_test_1",
                                 "/memcg_test_0/memcg_test_2"};
  ASSERT_TRUE(Ok(Create(parent[0])));
  ASSERT_TRUE(Ok(Write(parent[0], "max", MB(200))));
  ASSERT_TRUE(Ok(Create(parent[1])));
  ASSERT_TRUE(Ok(Create(parent[2])));
  std::string children[4];
  for (int i = 0; i < 4; ++i) {
    children[i] = absl::StrCat(parent[1], "/child_memcg", i);
    ASSERT_TRUE(Ok(Create(children[i])));
    if (i > 2) continue;
    Process cache{children[i], i};  // alloc_pagecache_50M_noexit
    ASSERT_TRUE(AllocPagecache(cache, MB(50)));
  }
  ASSERT_TRUE(Ok(Write(parent[1], attribute, MB(50))));
  ASSERT_TRUE(Ok(Write(children[0], attribute, MB(75))));
  ASSERT_TRUE(Ok(Write(children[1], attribute, MB(25))));
  ASSERT_TRUE(Ok(Write(children[2], attribute, 0)));
  ASSERT_TRUE(Ok(Write(children[3], attribute, MB(500))));
  ASSERT_TRUE(values_close(Current(parent[1]), MB(150), 3));

  Process g{parent[2], 3};
  ASSERT_TRUE(AllocAnon(g, MB(148)));
  Exit(g);
  EXPECT_TRUE(values_close(Current(parent[1]), MB(50), 3))
      << Current(parent[1]);
  int64_t c[4];
  for (int i = 0; i < 4; ++i) {
    c[i] = Current(children[i]);
    RecordProperty(absl::StrCat("c", i, "_bytes"), std::to_string(c[i]));
  }
  EXPECT_TRUE(values_close(c[0], MB(29), 15)) << c[0];
  EXPECT_TRUE(values_close(c[1], MB(21), 20)) << c[1];
  EXPECT_EQ(c[3], 0);

  Process big{parent[2], 3};
  const bool ok = AllocAnon(big, MB(170));
  Exit(big);
  EXPECT_EQ(ok, !min) << "min must OOM the allocation, low must not";
  const int64_t current = min ? MB(50) : MB(30);
  EXPECT_TRUE(values_close(Current(parent[1]), current, 3))
      << Current(parent[1]);

  EXPECT_TRUE(ReclaimUntil(children[0], MB(10)));
  if (min) return;
  for (int i = 0; i < 4; ++i) {
    const v1::GroupStats stats = Stats(children[i]);
    EXPECT_EQ(stats.events().oom(), 0u) << i;
    if (i <= 1) {
      EXPECT_GT(stats.events().low(), 0u) << i;
    } else {
      EXPECT_EQ(stats.events().low(), 0u) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Selftest, ProtectionSelftest, ::testing::Bool(),
                         [](const auto& info) {
                           return std::string(info.param ? "Min" : "Low");
                         });

}  // namespace
}  // namespace cgacct
