// OpValidator (server/pipeline/ops.h): a page op's checks, in their one
// order, the first failure answered naming its field.
#include "server/pipeline/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "server/idempotency/state_store.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPageCounterMax = uint64_t{1} << 40;

class OpValidatorTest : public ::testing::Test {
 protected:
  OpValidatorTest()
      : validator_(kPageCounterMax, /*nr_cpus=*/4, /*max_charge_pages=*/100),
        ids_(DedupTable::Options(), store_) {}

  absl::Status Charge(const v1::ChargeRequest& request) {
    PageOp op;
    return validator_.Charge(request, ids_, &op);
  }
  static std::string Message(const absl::Status& s) {
    return std::string(s.message());
  }

  MemoryStateStore store_;
  OpValidator validator_;
  DedupTable ids_;
};

v1::ChargeRequest Valid() {
  v1::ChargeRequest request;
  request.set_path("/a");
  request.set_nr_pages(3);
  request.set_kind(v1::PAGE_KIND_FILE);
  return request;
}

TEST_F(OpValidatorTest, AValidChargeBecomesATypedOp) {
  v1::ChargeRequest request = Valid();
  request.set_cpu(2);
  request.set_batch_pages(64);
  request.set_request_id("id-1");
  request.set_session_id("s");
  PageOp op;
  ASSERT_TRUE(validator_.Charge(request, ids_, &op).ok());
  EXPECT_EQ(op.path, "/a");
  EXPECT_EQ(op.nr_pages, 3u);
  EXPECT_EQ(op.kind, PageKind::kFile);
  EXPECT_EQ(op.cpu, 2);
  EXPECT_EQ(op.batch_pages, 64u);
  ASSERT_NE(op.request_id, nullptr);
  EXPECT_EQ(*op.request_id, "id-1");
  ASSERT_NE(op.session_id, nullptr);
  EXPECT_TRUE(op.charge);
}

// Each request below is wrong in every field from the one named on; the
// answer names the first in the documented order: path, the root,
// nr_pages, the cap, kind, cpu, batch_pages, request_id.
TEST_F(OpValidatorTest, TheFirstFieldInTheOrderIsNamed) {
  v1::ChargeRequest r;
  r.set_path("/a/");
  r.set_nr_pages(0);
  r.set_kind(v1::PAGE_KIND_UNSPECIFIED);
  r.set_cpu(99);
  r.set_batch_pages(1);
  r.set_request_id("");
  EXPECT_THAT(Message(Charge(r)), HasSubstr("path \"/a/\""));
  r.set_path("/");
  EXPECT_THAT(Message(Charge(r)), HasSubstr("path"));
  EXPECT_EQ(Charge(r).code(), absl::StatusCode::kInvalidArgument);
  r.set_path("/a");
  EXPECT_THAT(Message(Charge(r)), HasSubstr("nr_pages must be > 0"));
  r.set_nr_pages(101);
  EXPECT_THAT(Message(Charge(r)), HasSubstr("per-call cap of 100"));
  r.set_nr_pages(3);
  EXPECT_THAT(Message(Charge(r)), HasSubstr("kind"));
  r.set_kind(v1::PAGE_KIND_ANON);
  EXPECT_THAT(Message(Charge(r)), HasSubstr("cpu 99 out of range [0, 4)"));
  r.set_cpu(1);
  EXPECT_THAT(Message(Charge(r)), HasSubstr("batch_pages 1 is below nr_pages"));
  r.set_batch_pages(101);
  EXPECT_THAT(Message(Charge(r)), HasSubstr("batch_pages 101 pages exceed"));
  r.set_batch_pages(3);
  EXPECT_THAT(Message(Charge(r)), HasSubstr("request_id must not be empty"));
  r.set_request_id("x");
  EXPECT_TRUE(Charge(r).ok());
}

TEST_F(OpValidatorTest, UnchargesAreNotCapped) {
  v1::UnchargeRequest r;
  r.set_path("/a");
  r.set_nr_pages(1000);
  r.set_kind(v1::PAGE_KIND_ANON);
  PageOp op;
  ASSERT_TRUE(validator_.Uncharge(r, ids_, &op).ok());
  EXPECT_FALSE(op.charge);
  r.set_path("/");
  EXPECT_EQ(validator_.Uncharge(r, ids_, &op).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(OpValidatorTest, ABatchOpPassesTheSameChecksAsACharge) {
  v1::ChargeOp o;
  o.set_path("/");
  o.set_nr_pages(1);
  o.set_kind(v1::PAGE_KIND_ANON);
  PageOp op;
  v1::ChargeRequest same;
  same.set_path("/");
  same.set_nr_pages(1);
  same.set_kind(v1::PAGE_KIND_ANON);
  const absl::Status batch = validator_.BatchOp(o, false, &op);
  const absl::Status unary = Charge(same);
  EXPECT_EQ(batch.code(), unary.code());
  EXPECT_EQ(batch.message(), unary.message());
  // A path that passed before in the stream is not checked again; its
  // other fields are.
  o.set_nr_pages(0);
  EXPECT_THAT(Message(validator_.BatchOp(o, /*path_checked=*/true, &op)),
              HasSubstr("nr_pages must be > 0"));
  o.set_path("/a");
  o.set_nr_pages(5);
  o.set_uncharge(true);
  ASSERT_TRUE(validator_.BatchOp(o, false, &op).ok());
  EXPECT_FALSE(op.charge);
}

TEST_F(OpValidatorTest, BatchesOverTheOpCapAreRefusedWhole) {
  v1::ChargeBatchRequest batch;
  for (uint32_t i = 0; i <= kMaxBatchOps; ++i) batch.add_ops();
  EXPECT_THAT(Message(validator_.Batch(batch)),
              HasSubstr("ops has 4097 entries; at most 4096"));
  batch.mutable_ops()->RemoveLast();
  EXPECT_TRUE(validator_.Batch(batch).ok());
}

}  // namespace
}  // namespace cgacct
