// Pipeline (server/pipeline/pipeline.h) without gRPC: a call's own stages
// (admission, authentication, the end recorded once) and the order of the
// stages a body runs, on CallContexts built as the rpc room builds them.
#include "server/pipeline/pipeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/clock.h"
#include "engine/engine.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-of-tenant-a-0123456789";
const auto kNoDeadline = std::chrono::system_clock::time_point::max();

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 2;
    options.charge_batch_pages = 1;  // no stock: usage = charges
    engine_ = std::move(*Engine::Create(options));
    ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
    ASSERT_TRUE(engine_->CreateGroup("/b", {}).ok());
  }

  void Start(bool access_control, uint32_t max_in_flight = 0) {
    PipelineOptions options;
    options.clock = &clock_;
    options.limits.max_in_flight_per_identity = max_in_flight;
    if (access_control) {
      AuthConfig config;
      config.tokens = *TokenTable::Parse(absl::StrCat("tenant-a ", kTokenA));
      config.policy = *AuthzPolicy::Parse("token:tenant-a rw /a\n");
      authorizer_ = std::make_unique<Authorizer>(std::move(config), &failures_);
      options.authorizer = authorizer_.get();
    }
    pipeline_ = std::make_unique<Pipeline>(*engine_, metrics_, options);
  }

  CallContext Call(
      RpcMethod method, const std::string& token = "",
      std::chrono::system_clock::time_point deadline = kNoDeadline) {
    Credentials credentials;
    if (!token.empty()) credentials.authorization = "Bearer " + token;
    return pipeline_->BeginCall(method, deadline, &credentials);
  }

  static v1::ChargeRequest ChargeOf(const std::string& path, uint64_t pages) {
    v1::ChargeRequest r;
    r.set_path(path);
    r.set_nr_pages(pages);
    r.set_kind(v1::PAGE_KIND_ANON);
    return r;
  }

  uint64_t Usage(const std::string& path) {
    return engine_->GetStats(path, FlushMode::kExact)->memory_current_pages;
  }

  ManualClock clock_;
  RpcMetrics metrics_;
  AuthFailureCounts failures_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<Pipeline> pipeline_;
};

TEST_F(PipelineTest, ACallIsRecordedOnceWithItsLatencyAndGivesItsPermitBack) {
  Start(false, /*max_in_flight=*/1);
  CallContext call = Call(RpcMethod::kCharge);
  ASSERT_TRUE(pipeline_->Admit(call, Admission::kMessage).ok());
  EXPECT_EQ(pipeline_->limiter().InUse(CallLimiter::Kind::kInFlight, ""), 1u);
  // A second call of the same identity is shed meanwhile.
  CallContext second = Call(RpcMethod::kGetStats);
  absl::Status shed = pipeline_->Admit(second, Admission::kMessage);
  EXPECT_EQ(ShedReasonOf(shed), ShedReason::kInFlightPerIdentity);
  EXPECT_EQ(metrics_.shed(ShedReason::kInFlightPerIdentity), 1u);
  ChargeRun run;
  v1::ChargeResponse response;
  ASSERT_TRUE(pipeline_->Charge(call, ChargeOf("/a", 2), &response, &run).ok());
  clock_.Advance(absl::Microseconds(40));
  pipeline_->EndCall(call, absl::OkStatus());
  EXPECT_EQ(pipeline_->limiter().InUse(CallLimiter::Kind::kInFlight, ""), 0u);
  EXPECT_EQ(metrics_.handled(RpcMethod::kCharge, 0), 1u);
  EXPECT_EQ(metrics_.latency(RpcMethod::kCharge).sum_ns, 40000u);
  EXPECT_EQ(Usage("/a"), 2u);
}

TEST_F(PipelineTest, ShutdownAndDeadlinesAreRefusedBeforeAnythingElse) {
  Start(false);
  CallContext late =
      Call(RpcMethod::kCharge, "",
           std::chrono::system_clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(pipeline_->Admit(late, Admission::kMessage).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(pipeline_->Admit(late, Admission::kStream).code(),
            absl::StatusCode::kDeadlineExceeded);
  pipeline_->BeginShutdown();
  CallContext call = Call(RpcMethod::kCharge);
  EXPECT_EQ(pipeline_->Admit(call, Admission::kMessage).code(),
            absl::StatusCode::kUnavailable);
  // GetEngineInfo, the readiness probe, is still served.
  CallContext probe = Call(RpcMethod::kGetEngineInfo);
  EXPECT_TRUE(pipeline_->Admit(probe, Admission::kProbe).ok());
  // A refused call is not a rejected charge: it never reached the body.
  pipeline_->EndCall(call, absl::UnavailableError("shutdown"));
  EXPECT_EQ(metrics_.charges_rejected(), 0u);
}

TEST_F(PipelineTest,
       TheCallerIsAuthenticatedOnceAndRefusalsAreCountedWhenAnswered) {
  Start(true);
  CallContext nobody = Call(RpcMethod::kCharge);
  EXPECT_EQ(nobody.identity(), "");
  ASSERT_TRUE(pipeline_->Admit(nobody, Admission::kMessage).ok());
  EXPECT_EQ(failures_.count(AuthFailure::kNoCredentials), 0u);
  const absl::Status refused = pipeline_->Authenticate(nobody);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(failures_.count(AuthFailure::kNoCredentials), 1u);
  // A Charge refused before its body is a rejected charge.
  pipeline_->EndCall(nobody, refused);
  EXPECT_EQ(metrics_.charges_rejected(), 1u);
  CallContext a = Call(RpcMethod::kCharge, kTokenA);
  EXPECT_EQ(a.identity(), "token:tenant-a");
  EXPECT_TRUE(pipeline_->Authenticate(a).ok());
}

// validate -> authorize -> engine: a request that fails validation is
// answered so whoever sends it, the same as through a batch op; one that
// passes it is then authorized before the engine is asked.
TEST_F(PipelineTest, ValidationComesBeforeAuthorizationAndTheEngine) {
  Start(true);
  CallContext a = Call(RpcMethod::kCharge, kTokenA);
  ASSERT_TRUE(pipeline_->Admit(a, Admission::kMessage).ok());
  v1::ChargeResponse response;
  ChargeRun run;
  absl::Status root = pipeline_->Charge(a, ChargeOf("/", 1), &response, &run);
  EXPECT_EQ(root.code(), absl::StatusCode::kInvalidArgument);
  absl::Status outside =
      pipeline_->Charge(a, ChargeOf("/b", 1), &response, &run);
  EXPECT_EQ(outside.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(failures_.count(AuthFailure::kOutsideGrants), 1u);
  // Unknown outside the grant: the same answer as for a group that exists.
  absl::Status missing =
      pipeline_->Charge(a, ChargeOf("/nope", 1), &response, &run);
  EXPECT_EQ(missing.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Usage("/b"), 0u);
  ASSERT_TRUE(pipeline_->Charge(a, ChargeOf("/a", 3), &response, &run).ok());
  EXPECT_EQ(response.nr_pages(), 3u);

  BatchRun batch_run;
  v1::ChargeBatchRequest batch;
  v1::ChargeOp* op = batch.add_ops();
  op->set_path("/");
  op->set_nr_pages(1);
  op->set_kind(v1::PAGE_KIND_ANON);
  v1::ChargeBatchResponse batch_response;
  ASSERT_TRUE(
      pipeline_->ChargeBatch(a, batch, &batch_response, &batch_run).ok());
  ASSERT_EQ(batch_response.results_size(), 1);
  EXPECT_EQ(batch_response.results(0).code(), static_cast<int>(root.code()));
  EXPECT_EQ(batch_response.results(0).message(),
            absl::StrCat("ops[0]: ", root.message()));
}

TEST_F(PipelineTest, AKeyedChargeIsAppliedOnceAndReplayed) {
  Start(false);
  CallContext call = Call(RpcMethod::kCharge);
  v1::ChargeRequest request = ChargeOf("/a", 4);
  request.set_request_id("once");
  v1::ChargeResponse first;
  v1::ChargeResponse second;
  ChargeRun run;
  ASSERT_TRUE(pipeline_->Charge(call, request, &first, &run).ok());
  ASSERT_TRUE(pipeline_->Charge(call, request, &second, &run).ok());
  EXPECT_FALSE(first.replayed());
  EXPECT_TRUE(second.replayed());
  EXPECT_EQ(Usage("/a"), 4u);
}

}  // namespace
}  // namespace cgacct
