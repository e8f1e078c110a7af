#include "client/cli/wire_names.h"

#include "gtest/gtest.h"

namespace cgacct::cli {
namespace {

TEST(ParseFlushModeTest, NamesTheThreeModes) {
  EXPECT_EQ(ParseFlushMode("exact"), v1::FLUSH_MODE_EXACT);
  EXPECT_EQ(ParseFlushMode("threshold"), v1::FLUSH_MODE_THRESHOLD);
  EXPECT_EQ(ParseFlushMode("none"), v1::FLUSH_MODE_NONE);
}

TEST(ParseFlushModeTest, RefusesAnythingElse) {
  EXPECT_EQ(ParseFlushMode(""), std::nullopt);
  EXPECT_EQ(ParseFlushMode("Exact"), std::nullopt);
  EXPECT_EQ(ParseFlushMode("exact "), std::nullopt);
  EXPECT_EQ(ParseFlushMode("unspecified"), std::nullopt);
}

TEST(ParsePageKindTest, NamesAnonAndFile) {
  EXPECT_EQ(ParsePageKind("anon"), v1::PAGE_KIND_ANON);
  EXPECT_EQ(ParsePageKind("file"), v1::PAGE_KIND_FILE);
  EXPECT_EQ(ParsePageKind("ANON"), std::nullopt);
  EXPECT_EQ(ParsePageKind(""), std::nullopt);
  EXPECT_EQ(ParsePageKind("shmem"), std::nullopt);
}

}  // namespace
}  // namespace cgacct::cli
