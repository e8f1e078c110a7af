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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/accounting_service.h"
#include "server/metrics.h"
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
  // Charges refused by validation are counted like unary ones (ops 1-4).
  EXPECT_EQ(rpc_metrics_.charges_rejected(), 4u);
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
