#include "server/common/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/engine.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;

TEST(PageKindFromProtoTest, KnownKindsMapAndTheRestIsRejectedByTheEngine) {
  EXPECT_EQ(PageKindFromProto(v1::PAGE_KIND_ANON), PageKind::kAnon);
  EXPECT_EQ(PageKindFromProto(v1::PAGE_KIND_FILE), PageKind::kFile);
  for (int kind : {int{v1::PAGE_KIND_UNSPECIFIED}, 3, 7, 257, -1}) {
    const absl::Status s = ValidatePageKind(PageKindFromProto(kind));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << kind;
    EXPECT_EQ(s.message(), "kind must be ANON or FILE") << kind;
  }
}

TEST(CpuFromProtoTest, AbsentStaysAbsentPresentIsResolveCpus) {
  absl::StatusOr<std::optional<int>> absent = CpuFromProto(std::nullopt, 4);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
  absl::StatusOr<std::optional<int>> three = CpuFromProto(3u, 4);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(*three, std::optional<int>(3));
  for (uint32_t cpu : {4u, 100u}) {
    const absl::Status s = CpuFromProto(cpu, 4).status();
    EXPECT_EQ(s, ResolveCpu(static_cast<int>(cpu), 4).status());
  }
  // Past INT_MAX: ResolveCpu's words, with the wire's number.
  EXPECT_EQ(CpuFromProto(std::numeric_limits<uint32_t>::max(), 4).status(),
            absl::InvalidArgumentError("cpu 4294967295 out of range [0, 4)"));
}

TEST(DurationToMicrosTest, ClampsAtZeroAndSaturates) {
  EXPECT_EQ(DurationToMicros(absl::Microseconds(7)), 7u);
  EXPECT_EQ(DurationToMicros(absl::Nanoseconds(1999)), 1u);
  EXPECT_EQ(DurationToMicros(-absl::Seconds(1)), 0u);
  EXPECT_EQ(DurationToMicros(absl::InfiniteDuration()),
            static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

}  // namespace
}  // namespace cgacct
