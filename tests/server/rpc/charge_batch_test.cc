// ChargeBatch and ChargeStream end to end: a real Engine behind a real
// grpc::Server on 127.0.0.1 port 0. Per-op results must be exactly what
// Charge/Uncharge answer (partial success, in order, bad ops in the middle
// change nothing), the batch cap rejects the whole request, a stream answers
// one response per request in order, and a cancelled stream ends cleanly.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/common/wire.h"
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
using ::testing::StartsWith;

constexpr uint64_t kPage = 4096;
constexpr int kCpus = 4;

v1::ChargeOp Op(uint64_t id, bool uncharge, const std::string& path,
                uint64_t nr_pages, v1::PageKind kind = v1::PAGE_KIND_ANON,
                int cpu = 0) {
  v1::ChargeOp op;
  op.set_id(id);
  op.set_uncharge(uncharge);
  op.set_path(path);
  op.set_nr_pages(nr_pages);
  op.set_kind(kind);
  if (cpu >= 0) op.set_cpu(static_cast<uint32_t>(cpu));
  return op;
}

class ChargeBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = kCpus;
    options.page_size_bytes = kPage;
    engine_ = std::move(*Engine::Create(options));
    service_ = std::make_unique<AccountingService>(*engine_, rpc_metrics_);
    InProcessServer started = StartInProcessServer(service_.get());
    ASSERT_NE(started.server, nullptr);
    server_ = std::move(started.server);
    stub_ = std::move(started.stub);
    LimitsUpdate max;
    max.max_pages = 100;
    ASSERT_TRUE(engine_->CreateGroup("/a", max).ok());
    ASSERT_TRUE(engine_->CreateGroup("/b", {}).ok());
  }

  void TearDown() override {
    server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  grpc::Status Batch(const std::vector<v1::ChargeOp>& ops,
                     v1::ChargeBatchResponse* response) {
    v1::ChargeBatchRequest request;
    for (const v1::ChargeOp& op : ops) *request.add_ops() = op;
    grpc::ClientContext context;
    return stub_->ChargeBatch(&context, request, response);
  }

  uint64_t Anon(const std::string& path) {
    auto stats = engine_->GetStats(path, FlushMode::kExact);
    EXPECT_TRUE(stats.ok());
    for (const StatEntry& e : stats->stat)
      if (e.name == "anon") return e.value / kPage;
    return 0;
  }

  uint64_t DrainedCurrent(const std::string& path) {
    engine_->DrainAllStock();
    return engine_->GetStats(path, FlushMode::kExact)->memory_current_pages;
  }

  RpcMetrics rpc_metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

TEST_F(ChargeBatchTest, PartialSuccessInOrderWithTheFieldNamed) {
  v1::ChargeBatchResponse response;
  const grpc::Status s = Batch(
      {
          Op(10, false, "/a", 5),                             // ok
          Op(11, false, "/a", 0),                             // nr_pages
          Op(12, false, "/a", 1, v1::PAGE_KIND_UNSPECIFIED),  // kind
          Op(13, false, "/a", 1, v1::PAGE_KIND_ANON, kCpus),  // cpu
          Op(14, false, "a/", 1),                             // path
          Op(15, false, "/missing", 1),                       // not found
          Op(16, true, "/a", 6),                              // more than held
          Op(17, false, "/a", 200),                           // OOM
          Op(18, true, "/a", 5, v1::PAGE_KIND_ANON, -1),      // ok, no cpu
          Op(19, false, "/b", 2, v1::PAGE_KIND_FILE),         // ok, other path
      },
      &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.results_size(), 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(response.results(i).id(), 10u + i);
  const auto& r = response.results();
  EXPECT_EQ(r[0].code(), grpc::StatusCode::OK);
  EXPECT_EQ(r[0].nr_pages(), 5u);
  EXPECT_EQ(r[1].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r[1].message(), StartsWith("ops[1]: nr_pages"));
  EXPECT_EQ(r[2].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r[2].message(), StartsWith("ops[2]: kind"));
  EXPECT_EQ(r[3].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r[3].message(), StartsWith("ops[3]: cpu"));
  EXPECT_EQ(r[4].code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r[4].message(), StartsWith("ops[4]: path"));
  EXPECT_EQ(r[5].code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(r[5].message(), HasSubstr("/missing"));
  EXPECT_EQ(r[6].code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(r[6].message(), HasSubstr("holds only 5"));
  EXPECT_EQ(r[7].code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r[7].message(), HasSubstr("memory.max of /a"));
  EXPECT_EQ(r[8].code(), grpc::StatusCode::OK);
  EXPECT_EQ(r[8].nr_pages(), 5u);
  EXPECT_EQ(r[9].code(), grpc::StatusCode::OK);
  EXPECT_TRUE(r[9].message().empty());
  // Only the good ops changed anything.
  EXPECT_EQ(Anon("/a"), 0u);
  EXPECT_EQ(DrainedCurrent("/a"), 0u);
  EXPECT_EQ(DrainedCurrent("/b"), 2u);
  EXPECT_EQ(engine_->GetCounters().charges_ok, 2u);
  // Charge ops answered with an error other than OOM are counted like
  // unary ones (ops 1-5; not the uncharge 6 nor the OOM 7).
  EXPECT_EQ(rpc_metrics_.charges_rejected(), 5u);
  EXPECT_EQ(rpc_metrics_.handled(RpcMethod::kChargeBatch, grpc::StatusCode::OK),
            1u);
}

TEST_F(ChargeBatchTest, SameAnswersAsUnaryCharge) {
  // The message of a failed op is "ops[i]: " + what Charge says.
  v1::ChargeRequest charge;
  charge.set_path("/a");
  charge.set_nr_pages(1000);
  charge.set_kind(v1::PAGE_KIND_ANON);
  charge.set_cpu(0);
  v1::ChargeResponse unary_response;
  grpc::ClientContext context;
  const grpc::Status unary = stub_->Charge(&context, charge, &unary_response);
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(Batch({Op(1, false, "/a", 1000)}, &response).ok());
  EXPECT_EQ(response.results(0).code(), unary.error_code());
  EXPECT_EQ(response.results(0).message(),
            absl::StrCat("ops[0]: ", unary.error_message()));
}

// One bad charge, and what every RPC must answer for it.
struct BadCharge {
  v1::ChargeOp op;
  grpc::StatusCode code;
  std::string message;  // exact, without ChargeBatch's "ops[i]: "
  bool engine_sees_it;  // the engine can be given these arguments
};

std::vector<BadCharge> BadCharges(uint64_t page_counter_max) {
  const uint64_t max = page_counter_max;
  const uint64_t u64_max = std::numeric_limits<uint64_t>::max();
  auto op = [](const std::string& path, uint64_t nr_pages, int kind,
               std::optional<uint32_t> cpu) {
    v1::ChargeOp op = Op(0, false, path, nr_pages,
                         static_cast<v1::PageKind>(kind), /*cpu=*/-1);
    if (cpu.has_value()) op.set_cpu(*cpu);
    return op;
  };
  const grpc::StatusCode kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  return {
      {op("/a", 0, v1::PAGE_KIND_ANON, 0), kInvalid, "nr_pages must be > 0",
       true},
      {op("/a", max + 1, v1::PAGE_KIND_ANON, 0), kInvalid,
       absl::StrCat("nr_pages ", max + 1, " exceeds PAGE_COUNTER_MAX (", max,
                    ")"),
       true},
      {op("/a", u64_max, v1::PAGE_KIND_FILE, std::nullopt), kInvalid,
       absl::StrCat("nr_pages ", u64_max, " exceeds PAGE_COUNTER_MAX (", max,
                    ")"),
       true},
      {op("/a", 1, v1::PAGE_KIND_UNSPECIFIED, 0), kInvalid,
       "kind must be ANON or FILE", true},
      {op("/a", 1, 7, 0), kInvalid, "kind must be ANON or FILE", true},
      {op("/a", 1, v1::PAGE_KIND_ANON, kCpus), kInvalid,
       "cpu 4 out of range [0, 4)", true},
      {op("/a", 1, v1::PAGE_KIND_ANON, 2147483648u), kInvalid,
       "cpu 2147483648 out of range [0, 4)", false},
      {op("/a", 1, v1::PAGE_KIND_ANON, std::numeric_limits<uint32_t>::max()),
       kInvalid, "cpu 4294967295 out of range [0, 4)", false},
      {op("a/", 1, v1::PAGE_KIND_ANON, 0), kInvalid,
       std::string(ValidateGroupPath("a/").message()), true},
      {op("/missing", 1, v1::PAGE_KIND_ANON, 0), grpc::StatusCode::NOT_FOUND,
       "path \"/missing\": no such group", true},
  };
}

v1::ChargeRequest AsCharge(const v1::ChargeOp& op) {
  v1::ChargeRequest charge;
  charge.set_path(op.path());
  charge.set_nr_pages(op.nr_pages());
  charge.set_kind(op.kind());
  if (op.has_cpu()) charge.set_cpu(op.cpu());
  return charge;
}

TEST_F(ChargeBatchTest,
       SameWordsThroughChargeChargeBatchChargeStreamAndEngine) {
  const std::vector<BadCharge> cases = BadCharges(engine_->page_counter_max());
  v1::ChargeBatchRequest batch;
  for (const BadCharge& c : cases) *batch.add_ops() = c.op;
  v1::ChargeBatchResponse batch_response;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->ChargeBatch(&context, batch, &batch_response).ok());
  }
  ASSERT_EQ(batch_response.results_size(), static_cast<int>(cases.size()));
  grpc::ClientContext stream_context;
  auto stream = stub_->ChargeStream(&stream_context);
  for (size_t i = 0; i < cases.size(); ++i) {
    const BadCharge& c = cases[i];
    SCOPED_TRACE(c.op.ShortDebugString());
    // Charge: the engine's words, exactly.
    v1::ChargeResponse unary_response;
    grpc::ClientContext context;
    const grpc::Status unary =
        stub_->Charge(&context, AsCharge(c.op), &unary_response);
    EXPECT_EQ(unary.error_code(), c.code);
    EXPECT_EQ(unary.error_message(), c.message);
    // The engine itself, given the same arguments, says the same.
    if (c.engine_sees_it) {
      const absl::Status engine =
          engine_
              ->Charge(c.op.path(), c.op.nr_pages(),
                       PageKindFromProto(c.op.kind()),
                       c.op.has_cpu()
                           ? std::optional<int>(static_cast<int>(c.op.cpu()))
                           : std::nullopt)
              .status();
      EXPECT_EQ(engine.raw_code(), static_cast<int>(c.code));
      EXPECT_EQ(engine.message(), c.message);
    }
    // ChargeBatch: "ops[i]: " and the same.
    EXPECT_EQ(batch_response.results(static_cast<int>(i)).code(), c.code);
    EXPECT_EQ(batch_response.results(static_cast<int>(i)).message(),
              absl::StrCat("ops[", i, "]: ", c.message));
    // ChargeStream: one op per request, so "ops[0]: ".
    v1::ChargeBatchRequest request;
    *request.add_ops() = c.op;
    v1::ChargeBatchResponse response;
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_EQ(response.results_size(), 1);
    EXPECT_EQ(response.results(0).code(), c.code);
    EXPECT_EQ(response.results(0).message(),
              absl::StrCat("ops[0]: ", c.message));
  }
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(DrainedCurrent("/a"), 0u);
}

// Parses `name{labels} value` out of a metrics text; -1 when absent.
double MetricValue(const std::string& text, const std::string& series) {
  const std::string needle = series + " ";
  const size_t pos = text.find("\n" + needle);
  if (pos == std::string::npos) return -1;
  return std::stod(text.substr(pos + 1 + needle.size()));
}

TEST_F(ChargeBatchTest, EveryChargeIsCountedOnceInChargesTotal) {
  const std::vector<BadCharge> bad = BadCharges(engine_->page_counter_max());
  uint64_t charges = 0;
  // Charge: every bad one, one OOM, two ok.
  for (const BadCharge& c : bad) {
    v1::ChargeResponse response;
    grpc::ClientContext context;
    EXPECT_FALSE(stub_->Charge(&context, AsCharge(c.op), &response).ok());
    ++charges;
  }
  {
    v1::ChargeRequest charge = AsCharge(Op(0, false, "/a", 200));  // > max
    v1::ChargeResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(stub_->Charge(&context, charge, &response).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
    ++charges;
    charge = AsCharge(Op(0, false, "/b", 1));
    for (int i = 0; i < 2; ++i) {
      grpc::ClientContext ok_context;
      EXPECT_TRUE(stub_->Charge(&ok_context, charge, &response).ok());
      ++charges;
    }
  }
  // A rejected Charge retried with its request_id: one charge, one answer.
  {
    v1::ChargeRequest charge = AsCharge(Op(0, false, "/missing", 1));
    charge.set_request_id("missing-1");
    for (int i = 0; i < 3; ++i) {
      v1::ChargeResponse response;
      grpc::ClientContext context;
      EXPECT_EQ(stub_->Charge(&context, charge, &response).error_code(),
                grpc::StatusCode::NOT_FOUND);
    }
    ++charges;
  }
  // ChargeBatch: every bad one, an OOM, an ok, and a bad uncharge (not a
  // charge: not counted).
  {
    std::vector<v1::ChargeOp> ops;
    for (const BadCharge& c : bad) ops.push_back(c.op);
    ops.push_back(Op(0, false, "/a", 200));
    ops.push_back(Op(0, false, "/b", 1));
    ops.push_back(Op(0, true, "/b", 0));
    v1::ChargeBatchResponse response;
    ASSERT_TRUE(Batch(ops, &response).ok());
    charges += bad.size() + 2;
  }
  // ChargeStream: every bad one, then a charge through a handle whose group
  // was deleted and re-created (the engine refuses the stale handle, the
  // service re-resolves and applies it: one charge, ok).
  {
    grpc::ClientContext context;
    auto stream = stub_->ChargeStream(&context);
    v1::ChargeBatchRequest request;
    for (const BadCharge& c : bad) *request.add_ops() = c.op;
    *request.add_ops() = Op(0, false, "/b", 1);
    v1::ChargeBatchResponse response;
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->Read(&response));
    charges += bad.size() + 1;
    engine_->DrainAllStock();
    ASSERT_TRUE(engine_->DeleteGroup("/b").ok());
    ASSERT_TRUE(engine_->CreateGroup("/b", {}).ok());
    request.Clear();
    *request.add_ops() = Op(0, false, "/b", 1);
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.results(0).code(), grpc::StatusCode::OK)
        << response.results(0).message();
    ++charges;
    ASSERT_TRUE(stream->WritesDone());
    ASSERT_TRUE(stream->Finish().ok());
  }

  const uint64_t rejected = 3 * bad.size() + 1;  // + the request_id one
  EXPECT_EQ(rpc_metrics_.charges_rejected(), rejected);
  RstatFlushObserver flush_observer;
  MetricsCollector collector(*engine_, flush_observer, rpc_metrics_);
  const std::string text = SerializeMetrics(collector);
  const double ok = MetricValue(text, "cgacct_charges_total{result=\"ok\"}");
  const double oom = MetricValue(text, "cgacct_charges_total{result=\"oom\"}");
  const double refused =
      MetricValue(text, "cgacct_charges_total{result=\"refused\"}");
  const double rejected_series =
      MetricValue(text, "cgacct_charges_total{result=\"rejected\"}");
  EXPECT_EQ(rejected_series, static_cast<double>(rejected)) << text;
  // The two 200-page charges over /a's max are refused without an OOM (a
  // costly charge: mem_cgroup_oom() returns early).
  EXPECT_EQ(oom, 0.0);
  EXPECT_EQ(refused, 2.0);
  EXPECT_EQ(ok, 5.0);
  // Each charge request is in exactly one series.
  EXPECT_EQ(ok + oom + refused + rejected_series, static_cast<double>(charges));
  // The engine's own count also saw the stale handle it refused (and the
  // direct NOT_FOUNDs): that is why the exported series does not add it.
  EXPECT_GT(engine_->GetCounters().charges_rejected, 0u);
}

// The root is charged only through its children: a batch or stream op on
// "/" is INVALID_ARGUMENT naming `path` (checked with the path, before
// nr_pages), and changes nothing.
TEST_F(ChargeBatchTest, OpsOnTheRootAreRefused) {
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(Batch({Op(1, false, "/", 5), Op(2, true, "/", 1),
                     Op(3, false, "/", 0), Op(4, false, "/b", 2),
                     Op(5, false, "/", 1, v1::PAGE_KIND_FILE, 1)},
                    &response)
                  .ok());
  ASSERT_EQ(response.results_size(), 5);
  for (int i : {0, 1, 2, 4}) {
    EXPECT_EQ(response.results(i).code(), grpc::StatusCode::INVALID_ARGUMENT)
        << i;
    EXPECT_THAT(response.results(i).message(),
                StartsWith(absl::StrCat("ops[", i, "]: path \"/\"")));
  }
  EXPECT_EQ(response.results(3).code(), grpc::StatusCode::OK);

  grpc::ClientContext context;
  auto stream = stub_->ChargeStream(&context);
  v1::ChargeBatchRequest request;
  *request.add_ops() = Op(7, false, "/", 3);
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();
  v1::ChargeBatchResponse streamed;
  ASSERT_TRUE(stream->Read(&streamed));
  ASSERT_EQ(streamed.results_size(), 1);
  EXPECT_EQ(streamed.results(0).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(streamed.results(0).message(), StartsWith("ops[0]: path \"/\""));
  EXPECT_TRUE(stream->Finish().ok());

  // The root holds /b's two pages only (its usage is its children's).
  EXPECT_EQ(DrainedCurrent("/"), 2u);
  EXPECT_EQ(Anon("/"), 2u);
  EXPECT_EQ(Anon("/b"), 2u);
}

TEST_F(ChargeBatchTest, EmptyBatchAndCap) {
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(Batch({}, &response).ok());
  EXPECT_EQ(response.results_size(), 0);

  std::vector<v1::ChargeOp> ops(kMaxBatchOps, Op(0, false, "/b", 1));
  ASSERT_TRUE(Batch(ops, &response).ok());
  EXPECT_EQ(response.results_size(), static_cast<int>(kMaxBatchOps));
  EXPECT_EQ(DrainedCurrent("/b"), kMaxBatchOps);

  ops.push_back(Op(0, false, "/b", 1));
  v1::ChargeBatchResponse rejected;
  const grpc::Status s = Batch(ops, &rejected);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("4097"));
  EXPECT_THAT(s.error_message(), HasSubstr("4096"));
  EXPECT_EQ(DrainedCurrent("/b"), kMaxBatchOps);  // nothing applied
}

TEST_F(ChargeBatchTest, BatchSeesAGroupDeletedAndRecreatedMidStream) {
  grpc::ClientContext context;
  auto stream = stub_->ChargeStream(&context);
  v1::ChargeBatchRequest request;
  *request.add_ops() = Op(1, false, "/b", 3);
  *request.add_ops() = Op(2, true, "/b", 3);
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.results(0).code(), grpc::StatusCode::OK);
  // The stream cached /b's handle; delete it: NOT_FOUND by path.
  ASSERT_TRUE(engine_->DeleteGroup("/b").ok());
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.results(0).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(response.results(0).message(), HasSubstr("\"/b\""));
  // Re-created: the stream finds the new /b.
  ASSERT_TRUE(engine_->CreateGroup("/b", {}).ok());
  *request.add_ops() = Op(3, false, "/b", 4);
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 3);
  for (const v1::OpResult& r : response.results())
    EXPECT_EQ(r.code(), grpc::StatusCode::OK) << r.message();
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(Anon("/b"), 4u);
}

TEST_F(ChargeBatchTest, StreamAnswersEveryRequestInOrder) {
  grpc::ClientContext context;
  auto stream = stub_->ChargeStream(&context);
  constexpr int kRequests = 300;
  // Write everything before reading: the server must pipeline and keep order.
  std::thread writer([&] {
    for (int i = 0; i < kRequests; ++i) {
      v1::ChargeBatchRequest request;
      const int n = 1 + i % 7;
      for (int j = 0; j < n; ++j) {
        const uint64_t id = static_cast<uint64_t>(i) * 100 + j;
        *request.add_ops() = Op(id, j % 2 == 1, j % 3 == 0 ? "/a" : "/b", 1,
                                v1::PAGE_KIND_ANON, j % kCpus);
      }
      if (i == 150) *request.add_ops() = Op(150 * 100 + 99, false, "/x", 1);
      ASSERT_TRUE(stream->Write(request));
    }
    stream->WritesDone();
  });
  v1::ChargeBatchResponse response;
  int seen = 0;
  while (stream->Read(&response)) {
    const int n = 1 + seen % 7 + (seen == 150 ? 1 : 0);
    ASSERT_EQ(response.results_size(), n) << "response " << seen;
    for (int j = 0; j < n; ++j) {
      const uint64_t want = seen == 150 && j == n - 1
                                ? static_cast<uint64_t>(seen) * 100 + 99
                                : static_cast<uint64_t>(seen) * 100 + j;
      EXPECT_EQ(response.results(j).id(), want);
    }
    ++seen;
  }
  writer.join();
  EXPECT_EQ(seen, kRequests);
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(
      rpc_metrics_.handled(RpcMethod::kChargeStream, grpc::StatusCode::OK), 1u);
}

TEST_F(ChargeBatchTest, StreamOverTheCapEndsWithInvalidArgument) {
  grpc::ClientContext context;
  auto stream = stub_->ChargeStream(&context);
  v1::ChargeBatchRequest small;
  *small.add_ops() = Op(1, false, "/b", 1);
  v1::ChargeBatchRequest big;
  for (uint32_t i = 0; i <= kMaxBatchOps; ++i)
    *big.add_ops() = Op(2, false, "/b", 1);
  ASSERT_TRUE(stream->Write(small));
  stream->Write(big);
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(stream->Read(&response));  // the first request's answer
  EXPECT_EQ(response.results_size(), 1);
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("at most 4096"));
  EXPECT_EQ(DrainedCurrent("/b"), 1u);  // the big request applied nothing
}

TEST_F(ChargeBatchTest, CancelledStreamEndsCleanly) {
  // Many big responses left unread, then cancel: the server's writes fail
  // and the reactor must finish (Shutdown in TearDown waits for it).
  // Each request charges and uncharges the same pages, so whatever prefix
  // was applied leaves nothing charged.
  for (int round = 0; round < 3; ++round) {
    grpc::ClientContext context;
    auto stream = stub_->ChargeStream(&context);
    v1::ChargeBatchRequest request;
    for (int i = 0; i < 2000; ++i) {
      *request.add_ops() = Op(i, false, "/b", 1, v1::PAGE_KIND_ANON, i % kCpus);
      *request.add_ops() = Op(i, true, "/b", 1, v1::PAGE_KIND_ANON, i % kCpus);
    }
    // Writes may block on flow control once the server stops reading
    // (it parks one response and stops): write from another thread.
    std::thread writer([&] {
      for (int i = 0; i < 40 && stream->Write(request); ++i) {
      }
    });
    v1::ChargeBatchResponse response;
    if (round == 1) {
      ASSERT_TRUE(stream->Read(&response));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    context.TryCancel();
    writer.join();
    while (stream->Read(&response)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The server still serves, and nothing leaked into the books.
  v1::ChargeBatchResponse response;
  ASSERT_TRUE(
      Batch({Op(1, false, "/b", 1), Op(2, true, "/b", 1)}, &response).ok());
  EXPECT_EQ(response.results(1).code(), grpc::StatusCode::OK);
  // Give the server a moment to finish the cancelled reactors.
  for (int i = 0;
       i < 100 && rpc_metrics_.handled(RpcMethod::kChargeStream,
                                       grpc::StatusCode::CANCELLED) < 3;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(rpc_metrics_.handled(RpcMethod::kChargeStream,
                                 grpc::StatusCode::CANCELLED),
            3u)
      << "OK "
      << rpc_metrics_.handled(RpcMethod::kChargeStream, grpc::StatusCode::OK)
      << " UNKNOWN "
      << rpc_metrics_.handled(RpcMethod::kChargeStream,
                              grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(Anon("/b"), 0u);
  EXPECT_EQ(DrainedCurrent("/b"), 0u);
}

}  // namespace
}  // namespace cgacct
