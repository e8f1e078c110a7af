// Requests as they arrive on the wire (server/rpc/codec.h and what the
// pipeline makes of raw input), each through a real channel to an in-process
// server with the default options: bytes that are not a valid request get
// INVALID_ARGUMENT naming the request type and what is wrong (gRPC's own
// deserialization answered UNIMPLEMENTED with no message, and ended a
// ChargeStream OK, unanswered); a path of invalid UTF-8; control bytes
// escaped in every message; page tokens validated; one charge cannot fill the
// root; stream errors name paths, never internal group ids.
//
// Raw requests are sent with grpc::internal::BlockingUnaryCall over
// grpc::ByteBuffer: the bytes on the wire are exactly the test's, whatever
// the generated stubs would validate or refuse to serialize.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_context.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "engine/engine.h"
#include "server/metrics/rpc_metrics.h"
#include "server/rpc/accounting_service.h"
#include "server/rpc/codec.h"
#include "tests/server/in_process_server.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kPage = 4096;
constexpr int kCpus = 4;

// Protobuf wire encoding, by hand: field `number` as a length-delimited
// value, and as a varint.
std::string LengthDelimited(int number, const std::string& value) {
  std::string out;
  out.push_back(static_cast<char>(number << 3 | 2));
  uint64_t n = value.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>(n | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + value;
}
std::string Varint(int number, uint64_t value) {
  std::string out;
  out.push_back(static_cast<char>(number << 3 | 0));
  while (value >= 0x80) {
    out.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}

// True when `text` has a byte a terminal or a log parser would act on.
bool HasControlBytes(const std::string& text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

class RequestInputTest : public ::testing::Test {
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
    channel_ = std::move(started.channel);
    stub_ = std::move(started.stub);
  }

  void TearDown() override {
    server_->Shutdown();
    // Before the server goes: its queue's last completions need it.
    if (service_) service_->StopSessionStreams();
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  // Sends `bytes` as the request of `method` ("Charge", ...).
  grpc::Status RawCall(const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    const std::string name = absl::StrCat("/cgacct.v1.Accounting/", method);
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer,
                                             grpc::ByteBuffer>(
        channel_.get(),
        grpc::internal::RpcMethod(name.c_str(),
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &context, request, &response);
  }

  grpc::Status Charge(const std::string& path, uint64_t nr_pages,
                      v1::ChargeResponse* response = nullptr) {
    v1::ChargeRequest request;
    request.set_path(path);
    request.set_nr_pages(nr_pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeResponse ignored;
    grpc::ClientContext context;
    return stub_->Charge(&context, request,
                         response != nullptr ? response : &ignored);
  }

  RpcMetrics rpc_metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Accounting::Stub> stub_;
};

// "One request starves everyone": a charge just under PAGE_COUNTER_MAX into a
// group with no max filled the root, and every other group's charges failed.
TEST_F(RequestInputTest, OneChargeCannotFillTheRoot) {
  ASSERT_TRUE(engine_->CreateGroup("/evil", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/other", {}).ok());
  const uint64_t huge = engine_->page_counter_max() - 100;
  const grpc::Status evil = Charge("/evil", huge);
  EXPECT_EQ(evil.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << evil.error_message();
  EXPECT_THAT(evil.error_message(), HasSubstr("nr_pages"));
  EXPECT_THAT(evil.error_message(), HasSubstr("--max_charge_pages"));
  EXPECT_EQ(engine_->GetStats("/", FlushMode::kNone)->memory_current_pages, 0u);
  // The same through a batch op.
  {
    v1::ChargeBatchRequest request;
    v1::ChargeOp* op = request.add_ops();
    op->set_path("/evil");
    op->set_nr_pages(huge);
    op->set_kind(v1::PAGE_KIND_ANON);
    v1::ChargeBatchResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->ChargeBatch(&context, request, &response).ok());
    ASSERT_EQ(response.results_size(), 1);
    EXPECT_EQ(response.results(0).code(), grpc::StatusCode::INVALID_ARGUMENT)
        << response.results(0).message();
  }
  EXPECT_TRUE(Charge("/other", 64).ok());
}

// "A request that is not valid UTF-8 gets UNIMPLEMENTED with an empty
// message": a path of invalid UTF-8 is now an INVALID_ARGUMENT naming path.
TEST_F(RequestInputTest, InvalidUtf8PathIsInvalidArgumentWithMessage) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  const std::string bad_path = "/a\xff\xfe";
  const std::string charge = LengthDelimited(1, bad_path) + Varint(2, 1) +
                             Varint(3, v1::PAGE_KIND_ANON);
  const grpc::Status s = RawCall("Charge", charge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_code() << " " << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("path"));
  EXPECT_FALSE(HasControlBytes(s.error_message()));
  EXPECT_THAT(s.error_message(), HasSubstr("\\xff"));

  // Every RPC whose request carries client text.
  for (const char* method : {"CreateGroup", "DeleteGroup", "ListGroups",
                             "SetLimits", "Uncharge", "GetStats", "Reclaim"}) {
    std::string request = LengthDelimited(1, bad_path);
    if (std::string(method) == "Uncharge") {
      request += Varint(2, 1) + Varint(3, v1::PAGE_KIND_ANON);
    }
    if (std::string(method) == "Reclaim") request += Varint(2, 4096);
    const grpc::Status status = RawCall(method, request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << status.error_code() << " "
        << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("path")) << method;
  }
  // A request_id of invalid UTF-8 is just bytes: accepted and de-duplicated.
  const std::string with_id = LengthDelimited(1, "/a") + Varint(2, 1) +
                              Varint(3, v1::PAGE_KIND_ANON) +
                              LengthDelimited(5, "id-\xff");
  EXPECT_TRUE(RawCall("Charge", with_id).ok());
  EXPECT_TRUE(RawCall("Charge", with_id).ok());
  uint64_t anon_bytes = 0;
  const absl::StatusOr<GroupStats> stats =
      engine_->GetStats("/a", FlushMode::kExact);
  ASSERT_TRUE(stats.ok());
  for (const StatEntry& entry : stats->stat) {
    if (entry.name == "anon") anon_bytes = entry.value;
  }
  EXPECT_EQ(anon_bytes, kPage);  // applied once
}

// "page_token is never validated".
TEST_F(RequestInputTest, PageTokenIsValidated) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/a/x", {}).ok());
  ASSERT_TRUE(engine_->CreateGroup("/b", {}).ok());
  for (const std::string& token :
       {std::string("garbage"), std::string("/b"), std::string("/a/"),
        std::string("/a"), std::string("/a/\x01")}) {
    v1::ListGroupsRequest request;
    request.set_path("/a");
    request.set_page_token(token);
    v1::ListGroupsResponse response;
    grpc::ClientContext context;
    const grpc::Status s = stub_->ListGroups(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << "token " << token << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("page_token"));
    EXPECT_FALSE(HasControlBytes(s.error_message()));
  }
  // A real token still pages (and one for a path deleted since is fine).
  v1::ListGroupsRequest request;
  request.set_path("/");
  request.set_recursive(true);
  request.set_page_token("/a/gone");
  v1::ListGroupsResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->ListGroups(&context, request, &response).ok());
  ASSERT_EQ(response.paths_size(), 2);
  EXPECT_EQ(response.paths(0), "/a/x");
  EXPECT_EQ(response.paths(1), "/b");
}

// "Error messages echo raw control bytes".
TEST_F(RequestInputTest, ControlBytesAreEscapedInMessages) {
  const std::string path = "/a\n\x1b[31mred\r\x7f";
  const grpc::Status s = Charge(path, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(HasControlBytes(s.error_message())) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("\\n"));

  // A request_id reused for another request is echoed in the message.
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  const std::string id = "id\n\x1b";
  for (uint64_t nr_pages : {1, 2}) {
    v1::ChargeRequest request;
    request.set_path("/g");
    request.set_nr_pages(nr_pages);
    request.set_kind(v1::PAGE_KIND_ANON);
    request.set_request_id(id);
    v1::ChargeResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub_->Charge(&context, request, &response);
    if (nr_pages == 1) {
      ASSERT_TRUE(status.ok()) << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(status.error_message(), HasSubstr("request_id"));
      EXPECT_FALSE(HasControlBytes(status.error_message()))
          << status.error_message();
    }
  }
}

// "One stream error names an internal group id instead of the path": a
// group deleted and re-created while a stream charges it. Whatever the
// interleaving, every error names the path. The id surfaced only when the
// group went again between the op's re-resolve and its retry, a window this
// churn did not hit on 700b79d in our runs: a guard, not a reproduction.
TEST_F(RequestInputTest, StreamErrorsNamePathsNotGroupIds) {
  ASSERT_TRUE(engine_->CreateGroup("/g", {}).ok());
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load()) {
      (void)engine_->DeleteGroup("/g");
      (void)engine_->CreateGroup("/g", {});
    }
  });
  grpc::ClientContext context;
  auto stream = stub_->ChargeStream(&context);
  v1::ChargeBatchRequest request;
  for (int i = 0; i < 1024; ++i) {
    v1::ChargeOp* op = request.add_ops();
    op->set_path("/g");
    op->set_nr_pages(1);
    op->set_kind(v1::PAGE_KIND_FILE);
    op->set_uncharge(i % 2 == 1);
  }
  int errors = 0;
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(stream->Write(request));
    v1::ChargeBatchResponse response;
    ASSERT_TRUE(stream->Read(&response));
    for (const v1::OpResult& result : response.results()) {
      if (result.code() == 0) continue;
      ++errors;
      EXPECT_THAT(result.message(), Not(HasSubstr("group id")));
      EXPECT_THAT(result.message(), HasSubstr("\"/g\""));
    }
  }
  stop = true;
  churn.join();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_GT(errors, 0) << "the churn never hit the stream";
}

}  // namespace
}  // namespace cgacct

namespace cgacct {
namespace {

// Sends `bytes` as the request of `method` through a grpc::GenericStub (the
// bytes on the wire are exactly these) and waits for the answer.
grpc::Status GenericUnary(const std::shared_ptr<grpc::Channel>& channel,
                          const std::string& method, const std::string& bytes,
                          std::string* response_bytes = nullptr) {
  grpc::GenericStub stub(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, absl::StrCat("/cgacct.v1.Accounting/", method),
                 grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                   std::lock_guard<std::mutex> l(mu);
                   status = std::move(s);
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  if (response_bytes != nullptr) {
    std::vector<grpc::Slice> slices;
    response_bytes->clear();
    if (response.Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices)
        response_bytes->append(reinterpret_cast<const char*>(slice.begin()),
                               slice.size());
    }
  }
  return status;
}

// GenericUnary's answer bytes (empty unless OK).
std::string GenericUnaryResponse(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
    const std::string& bytes) {
  std::string out;
  const grpc::Status s = GenericUnary(channel, method, bytes, &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out;
}

uint64_t AnonBytes(Engine& engine, const std::string& path) {
  const absl::StatusOr<GroupStats> stats =
      engine.GetStats(path, FlushMode::kExact);
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (!stats.ok()) return 0;
  for (const StatEntry& entry : stats->stat) {
    if (entry.name == "anon") return entry.value;
  }
  return 0;
}

// "A request that is not valid protobuf gets UNIMPLEMENTED with an empty
// message (clients conclude the method does not exist)": every unary method
// answers INVALID_ARGUMENT naming its request type and what is wrong, and
// nothing changes.
TEST_F(RequestInputTest, UndecodableRequestIsInvalidArgumentNamingType) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  ASSERT_TRUE(Charge("/a", 3).ok());
  const struct {
    const char* method;
    const char* type;
  } kMethods[] = {
      {"CreateGroup", "cgacct.v1.CreateGroupRequest"},
      {"DeleteGroup", "cgacct.v1.DeleteGroupRequest"},
      {"ListGroups", "cgacct.v1.ListGroupsRequest"},
      {"SetLimits", "cgacct.v1.SetLimitsRequest"},
      {"Charge", "cgacct.v1.ChargeRequest"},
      {"Uncharge", "cgacct.v1.UnchargeRequest"},
      {"ChargeBatch", "cgacct.v1.ChargeBatchRequest"},
      {"GetStats", "cgacct.v1.GetStatsRequest"},
      {"Reclaim", "cgacct.v1.ReclaimRequest"},
      {"GetEngineInfo", "cgacct.v1.GetEngineInfoRequest"},
      {"OpenSession", "cgacct.v1.OpenSessionRequest"},
      {"CloseSession", "cgacct.v1.CloseSessionRequest"},
      {"GetSession", "cgacct.v1.GetSessionRequest"},
      {"OpenPeakWatermark", "cgacct.v1.OpenPeakWatermarkRequest"},
      {"ReadPeakWatermark", "cgacct.v1.PeakWatermarkRequest"},
  };
  // A tag whose varint never ends.
  const std::string garbage("\xff\xff\xff\xff", 4);
  for (const auto& m : kMethods) {
    const grpc::Status s = GenericUnary(channel_, m.method, garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << m.method << ": " << s.error_code() << " " << s.error_message();
    EXPECT_THAT(s.error_message(),
                HasSubstr(absl::StrCat("request is not a valid ", m.type)))
        << m.method;
    EXPECT_THAT(s.error_message(), HasSubstr("byte 0")) << m.method;
    EXPECT_FALSE(HasControlBytes(s.error_message())) << m.method;
  }
  // The fault is named: a wire type that does not exist, after a valid
  // path field ...
  const std::string bad_wire_type = LengthDelimited(1, "/a") + "\x0f";
  grpc::Status s = GenericUnary(channel_, "Charge", bad_wire_type);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(
      s.error_message(),
      HasSubstr("field 1 (path) at byte 4 has wire type 7, which does not "
                "exist"));
  // ... a length past the end ...
  s = GenericUnary(channel_, "Uncharge", std::string("\x0a\x40/a", 4));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("truncated: field 1 (path) at byte 0 is 64 bytes "
                        "long, 2 are left"));
  // ... and inside a nested message (ChargeBatch's ops[0]).
  s = GenericUnary(channel_, "ChargeBatch",
                   LengthDelimited(1, LengthDelimited(1, "/a") + "\x0f"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("in field 1 (ops) at byte 0: field 1 (id) at byte 6 "
                        "has wire type 7"));
  // Nothing applied, and the server still serves.
  EXPECT_EQ(AnonBytes(*engine_, "/a"), 3 * kPage);
  EXPECT_TRUE(Charge("/a", 1).ok());
  EXPECT_EQ(AnonBytes(*engine_, "/a"), 4 * kPage);
  // An undecodable Charge counts as a rejected charge, as any other
  // INVALID_ARGUMENT Charge.
  EXPECT_GE(rpc_metrics_.charges_rejected(), 2u);
}

// The same for SessionStream (issue 13): a message that is not protobuf ends
// the stream INVALID_ARGUMENT naming the message and its type, and nothing
// is attached.
TEST_F(RequestInputTest,
       UndecodableSessionStreamMessageEndsStreamInvalidArgument) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      rw(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer,
                                                   grpc::ByteBuffer>::
             Create(channel_.get(),
                    grpc::internal::RpcMethod(
                        "/cgacct.v1.Accounting/SessionStream",
                        grpc::internal::RpcMethod::BIDI_STREAMING),
                    &context));
  grpc::Slice slice(std::string("\xff\xff\xff\xff", 4));
  rw->Write(grpc::ByteBuffer(&slice, 1));
  rw->WritesDone();
  grpc::ByteBuffer extra;
  EXPECT_FALSE(rw->Read(&extra));
  const grpc::Status s = rw->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("message 1: request is not a valid "
                                           "cgacct.v1.SessionClientMessage"));
  EXPECT_THAT(s.error_message(), HasSubstr("byte 0"));
}

// "A ChargeStream message that is not protobuf ends the stream OK,
// unanswered": the stream answers the requests before it (applied), then
// ends INVALID_ARGUMENT naming the message's index; nothing from it on is
// applied.
TEST_F(RequestInputTest, UndecodableStreamMessageEndsStreamInvalidArgument) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  auto charge = [](uint64_t nr_pages) {
    v1::ChargeBatchRequest request;
    v1::ChargeOp* op = request.add_ops();
    op->set_path("/a");
    op->set_nr_pages(nr_pages);
    op->set_kind(v1::PAGE_KIND_ANON);
    return request.SerializeAsString();
  };
  auto buffer = [](const std::string& bytes) {
    grpc::Slice slice(bytes);
    return grpc::ByteBuffer(&slice, 1);
  };
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      rw(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer,
                                                   grpc::ByteBuffer>::
             Create(channel_.get(),
                    grpc::internal::RpcMethod(
                        "/cgacct.v1.Accounting/ChargeStream",
                        grpc::internal::RpcMethod::BIDI_STREAMING),
                    &context));
  for (uint64_t pages : {1, 2}) {
    ASSERT_TRUE(rw->Write(buffer(charge(pages))));
    grpc::ByteBuffer answer;
    ASSERT_TRUE(rw->Read(&answer));
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(answer.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    v1::ChargeBatchResponse response;
    ASSERT_TRUE(response.ParseFromString(bytes));
    ASSERT_EQ(response.results_size(), 1);
    EXPECT_EQ(response.results(0).code(), grpc::StatusCode::OK);
  }
  rw->Write(buffer(std::string("\xff\xff\xff\xff", 4)));
  rw->Write(buffer(charge(4)));  // after the bad one: never applied
  rw->WritesDone();
  grpc::ByteBuffer extra;
  EXPECT_FALSE(rw->Read(&extra));  // no answer to the bad request
  const grpc::Status s = rw->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_code() << " " << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("request 3: request is not a valid "
                                           "cgacct.v1.ChargeBatchRequest"));
  EXPECT_THAT(s.error_message(), HasSubstr("2 requests answered before it"));
  EXPECT_EQ(AnonBytes(*engine_, "/a"), 3 * kPage);
}

// A uint32 field given a larger value is refused naming the field (issue
// 22 item 14): protobuf's parser keeps the low 32 bits, so on main at
// 949c495 ttl_ms 2^32 + 1000 was granted as a 1000 ms lease and cpu
// 2^32 + 1 charged CPU 1.
TEST_F(RequestInputTest, AUint32FieldAbove32BitsIsRefusedNamingIt) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  grpc::Status s = GenericUnary(channel_, "OpenSession",
                                Varint(1, (uint64_t{1} << 32) + 1000));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("field 1 (ttl_ms) at byte 0 is 4294968296, above the "
                        "uint32 range"));
  EXPECT_EQ(service_->sessions().stats().sessions, 0u);
  // cpu is uint64 on the wire: 2^32 + 1 is refused as out of range, naming
  // it, not read as CPU 1.
  const std::string charge = LengthDelimited(1, "/a") + Varint(2, 1) +
                             Varint(3, 1) + Varint(4, (uint64_t{1} << 32) + 1);
  s = GenericUnary(channel_, "Charge", charge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("cpu 4294967297 out of range"));
  EXPECT_EQ(engine_->GetStats("/a", FlushMode::kExact)->memory_current_pages,
            0u);
  // A large uint64 is not a uint32's: nr_pages 2^40 goes through parsing
  // (and is refused by the page cap, naming nr_pages).
  s = GenericUnary(channel_, "Charge",
                   LengthDelimited(1, "/a") + Varint(2, uint64_t{1} << 40) +
                       Varint(3, 1));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("nr_pages"));
  // Inside a batch's ops too.
  const std::string op = LengthDelimited(3, "/a") + Varint(4, 1) +
                         Varint(5, 1) + Varint(6, (uint64_t{1} << 32) + 1);
  v1::ChargeBatchResponse batch;
  ASSERT_TRUE(batch.ParseFromString(
      GenericUnaryResponse(channel_, "ChargeBatch", LengthDelimited(1, op))));
  ASSERT_EQ(batch.results_size(), 1);
  EXPECT_EQ(batch.results(0).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(batch.results(0).message(),
              HasSubstr("cpu 4294967297 out of range"));
  // A uint32 inside a nested message is still found: a ListGroups
  // page_size of 2^32 + 10 was a page of 10.
  s = GenericUnary(channel_, "ListGroups",
                   LengthDelimited(1, "/") +
                       Varint(4, (uint64_t{1} << 32) + 10));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("field 4 (page_size)"));
}

// An enum given more than 32 bits is refused naming the field (issue 22's
// re-attack at a54c733, row 14b): protobuf keeps an enum's low 32 bits, so
// a Charge of kind 2^32 + 2 charged FILE pages and 2^33 + 1 ANON ones. A
// negative kind (sign-extended, as int32 is on the wire) parses and is
// refused by validation as an unknown kind.
TEST_F(RequestInputTest, AnEnumAbove32BitsIsRefusedNamingIt) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  for (uint64_t kind : {(uint64_t{1} << 32) + 2, (uint64_t{1} << 33) + 1}) {
    grpc::Status s =
        GenericUnary(channel_, "Charge",
                     LengthDelimited(1, "/a") + Varint(2, 1) + Varint(3, kind));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("field 3 (kind) at byte"));
    EXPECT_THAT(s.error_message(), HasSubstr("outside an enum's 32-bit range"));
    s = GenericUnary(channel_, "Uncharge",
                     LengthDelimited(1, "/a") + Varint(2, 1) + Varint(3, kind));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("field 3 (kind)"));
    // A batch op's kind: the request is refused whole, nothing applied.
    const std::string op =
        LengthDelimited(3, "/a") + Varint(4, 1) + Varint(5, kind);
    s = GenericUnary(channel_, "ChargeBatch", LengthDelimited(1, op));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("field 5 (kind)"));
  }
  grpc::Status s = GenericUnary(
      channel_, "GetStats",
      LengthDelimited(1, "/a") + Varint(2, (uint64_t{1} << 32) + 3));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("field 2 (flush)"));
  EXPECT_EQ(engine_->GetStats("/a", FlushMode::kExact)->memory_current_pages,
            0u);
  // -1, sign-extended to ten bytes: an int32 the parser keeps whole, an
  // unknown kind the validation refuses.
  s = GenericUnary(channel_, "Charge",
                   LengthDelimited(1, "/a") + Varint(2, 1) +
                       Varint(3, ~uint64_t{0}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("kind"));
  EXPECT_EQ(engine_->GetStats("/a", FlushMode::kExact)->memory_current_pages,
            0u);
}

// An idempotency_key is bytes (issue 26 item 9: one type per concept, as
// request_id): a key that is not UTF-8 is accepted, and a retry with it is
// answered from the first answer, not applied again.
TEST_F(RequestInputTest, ANonUtf8IdempotencyKeyIsJustBytes) {
  ASSERT_TRUE(engine_->CreateGroup("/a", {}).ok());
  const std::string op = LengthDelimited(3, "/a") + Varint(4, 1) + Varint(5, 1);
  // Field 20's tag is two bytes (the helper writes one-byte tags).
  const std::string key_field = std::string("\xa2\x01\x03k\xff\xfe", 6);
  const std::string batch = LengthDelimited(1, op) + key_field;
  EXPECT_TRUE(GenericUnary(channel_, "ChargeBatch", batch).ok());
  EXPECT_TRUE(GenericUnary(channel_, "ChargeBatch", batch).ok());
  EXPECT_EQ(AnonBytes(*engine_, "/a"), kPage);  // applied once
}

// A string field that is not UTF-8 is named (issue 22 item 14): protobuf
// refuses it without saying which. No request of cgacct.v1 has a string
// field any more (issue 26 item 9), so the walk is checked on a message
// that does (OpResult.message), as it would be for a future one.
TEST(DescribeUndecodableTest, ANonUtf8StringFieldIsNamed) {
  const std::string result = Varint(1, 7) + LengthDelimited(3, "ok\xff\xfe");
  const std::string why =
      DescribeUndecodable(*v1::OpResult::descriptor(), result);
  EXPECT_THAT(why, HasSubstr("field 3 (message) at byte 2"));
  EXPECT_THAT(why, HasSubstr("is not valid UTF-8"));
  EXPECT_FALSE(HasControlBytes(why));
  // The same bytes in a bytes field walk cleanly.
  EXPECT_THAT(DescribeUndecodable(*v1::ChargeBatchRequest::descriptor(),
                                  std::string("\xa2\x01\x03k\xff\xfe", 6)),
              Not(HasSubstr("UTF-8")));
}

}  // namespace
}  // namespace cgacct
