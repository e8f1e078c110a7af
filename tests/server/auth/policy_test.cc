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
      "cn:root@ops admin\n"
      "token:tenant-a rw /a   # trailing comment\n"
      "token:tenant-a ro /shared\n"
      "\n");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_NE(p->Find("cn:root@ops"), nullptr);
  EXPECT_TRUE(p->Find("cn:root@ops")->admin);
  const Principal* a = p->Find("token:tenant-a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->grants.size(), 2u);
  EXPECT_EQ(a->grants[0].subtree, "/a");
  EXPECT_TRUE(a->grants[0].write);
  EXPECT_FALSE(a->grants[1].write);
  EXPECT_EQ(p->Find("nobody"), nullptr);

  auto message = [](absl::string_view text) {
    return std::string(AuthzPolicy::Parse(text).status().message());
  };
  EXPECT_THAT(message("dns:x rw /a/\n"), HasSubstr("line 1"));
  EXPECT_THAT(message("dns:x rw /a/\n"), HasSubstr("must not end with '/'"));
  EXPECT_THAT(message("cn:ok admin\ncn:x write /a\n"),
              HasSubstr("line 2: right \"write\" is not admin, ro or rw"));
  EXPECT_THAT(message("cn:x rw\n"), HasSubstr("2 words"));
  EXPECT_THAT(message("x\x01y admin\n"), HasSubstr("non-printable"));
  // A grant names the kind of identity it grants.
  EXPECT_THAT(message("tenant-a rw /a\n"),
              HasSubstr("line 1: identity \"tenant-a\" names no kind"));
  EXPECT_THAT(message("uri: rw /a\n"), HasSubstr("names no kind"));
  EXPECT_THAT(message("spiffe://t/a rw /a\n"), HasSubstr("names no kind"));
}

}  // namespace
}  // namespace cgacct
