// AuthzPolicy (server/auth/policy.h): the --authz_policy file's grammar.
#include "server/auth/policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/string_view.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

TEST(AuthzPolicyTest, ParsesGrantsAndRefusesBadLines) {
  absl::StatusOr<AuthzPolicy> p = AuthzPolicy::Parse(
      "# comment\n"
      "root@ops admin\n"
      "tenant-a rw /a   # trailing comment\n"
      "tenant-a ro /shared\n"
      "\n");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_NE(p->Find("root@ops"), nullptr);
  EXPECT_TRUE(p->Find("root@ops")->admin);
  const Principal* a = p->Find("tenant-a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->grants.size(), 2u);
  EXPECT_EQ(a->grants[0].subtree, "/a");
  EXPECT_TRUE(a->grants[0].write);
  EXPECT_FALSE(a->grants[1].write);
  EXPECT_EQ(p->Find("nobody"), nullptr);

  auto message = [](absl::string_view text) {
    return std::string(AuthzPolicy::Parse(text).status().message());
  };
  EXPECT_THAT(message("x rw /a/\n"), HasSubstr("line 1"));
  EXPECT_THAT(message("x rw /a/\n"), HasSubstr("must not end with '/'"));
  EXPECT_THAT(message("ok admin\nx write /a\n"),
              HasSubstr("line 2: right \"write\" is not admin, ro or rw"));
  EXPECT_THAT(message("x rw\n"), HasSubstr("2 words"));
  EXPECT_THAT(message("x\x01y admin\n"), HasSubstr("non-printable"));
}

}  // namespace
}  // namespace cgacct
