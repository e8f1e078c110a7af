// TokenTable (server/auth/tokens.h): the --tokens_file table.
#include "server/auth/tokens.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-of-tenant-a-0123456789";
constexpr char kTokenAdmin[] = "token-of-the-admin-0123456789";

TEST(TokenTableTest, LooksUpAndRefusesShortOrDuplicateTokens) {
  absl::StatusOr<TokenTable> t = TokenTable::Parse(
      absl::StrCat("tenant-a ", kTokenA, "\nadmin ", kTokenAdmin, "\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->Lookup(kTokenA), "tenant-a");
  EXPECT_EQ(t->Lookup(kTokenAdmin), "admin");
  EXPECT_EQ(t->Lookup("token-of-tenant-a-012345678"), std::nullopt);
  EXPECT_EQ(t->Lookup(""), std::nullopt);
  EXPECT_THAT(std::string(TokenTable::Parse("x short\n").status().message()),
              HasSubstr("at least 16"));
  absl::Status dup =
      TokenTable::Parse(absl::StrCat("x ", kTokenA, "\ny ", kTokenA)).status();
  EXPECT_THAT(std::string(dup.message()), HasSubstr("line 2"));
  // A message never quotes the token itself.
  EXPECT_THAT(std::string(dup.message()), ::testing::Not(HasSubstr(kTokenA)));
}

}  // namespace
}  // namespace cgacct
