// Authorizer (server/auth/authorizer.h) on Credentials alone, no gRPC: who
// a call's credentials name (the caller identity every per-caller table
// keys on), the refusals and what they count, and the checks of paths.
#include "server/auth/authorizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-of-tenant-a-0123456789";

Credentials Token(const std::string& token) {
  Credentials c;
  c.authorization = absl::StrCat("Bearer ", token);
  return c;
}

Credentials Certificate(std::vector<std::string> ids) {
  Credentials c;
  c.certificate_names = std::move(ids);
  return c;
}

AuthConfig Config(bool client_certificates, const std::string& policy) {
  AuthConfig config;
  config.client_certificates = client_certificates;
  absl::StatusOr<TokenTable> tokens =
      TokenTable::Parse(absl::StrCat("tenant-a ", kTokenA, "\n"));
  config.tokens = *std::move(tokens);
  if (!policy.empty()) config.policy = *AuthzPolicy::Parse(policy);
  return config;
}

TEST(AuthenticateTest, NoAccessControlMakesEveryCallerTheAnonymousAdmin) {
  Authorizer authorizer(AuthConfig(), nullptr);
  Authentication a = authorizer.Authenticate(Credentials());
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.caller.identity(), "");
  EXPECT_TRUE(a.caller.admin());
}

TEST(AuthenticateTest, TokenNamesTheCallerBeforeTheCertificate) {
  Authorizer authorizer(Config(true, ""), nullptr);
  Credentials both = Token(kTokenA);
  both.certificate_names = {"uri:spiffe://t/other"};
  Authentication a = authorizer.Authenticate(both);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.caller.identity(), "token:tenant-a");
}

TEST(AuthenticateTest, TheFirstCertificateIdentityThePolicyNamesIsTheCaller) {
  Authorizer authorizer(Config(true, "uri:spiffe://t/b rw /b\n"), nullptr);
  Authentication a = authorizer.Authenticate(
      Certificate({"dns:dns.example", "uri:spiffe://t/b", "cn:c"}));
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.caller.identity(), "uri:spiffe://t/b");
  EXPECT_FALSE(a.caller.admin());
  // Without a policy: the first identity, admin.
  Authorizer open(Config(true, ""), nullptr);
  a = open.Authenticate(Certificate({"dns:dns.example", "uri:spiffe://t/b"}));
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.caller.identity(), "dns:dns.example");
  EXPECT_TRUE(a.caller.admin());
}

TEST(AuthenticateTest,
     RefusalsKeepAnIdentityForAdmissionAndCountOnlyWhenAnswered) {
  AuthFailureCounts counts;
  Authorizer authorizer(Config(true, "token:tenant-a rw /a\n"), &counts);
  // A certificate the policy does not name: refused, but its identity is
  // what the per-identity limits key on.
  Authentication unknown = authorizer.Authenticate(Certificate({"cn:stranger"}));
  EXPECT_EQ(unknown.status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(unknown.caller.identity(), "cn:stranger");
  EXPECT_EQ(counts.count(AuthFailure::kUnknownIdentity), 0u);
  EXPECT_EQ(authorizer.Refuse(unknown).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(counts.count(AuthFailure::kUnknownIdentity), 1u);
  // A bad token proves nothing: anonymous.
  Authentication bad = authorizer.Authenticate(Token("not-a-token-at-all-123"));
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad.caller.identity(), "");
  EXPECT_EQ(bad.failure, AuthFailure::kBadToken);
  // Malformed authorization, and nothing at all.
  Credentials malformed;
  malformed.authorization = "Basic abc";
  EXPECT_EQ(authorizer.Authenticate(malformed).failure,
            AuthFailure::kMalformedAuthorization);
  Authentication none = authorizer.Authenticate(Credentials());
  EXPECT_EQ(none.failure, AuthFailure::kNoCredentials);
  EXPECT_THAT(std::string(none.status.message()),
              HasSubstr("no client certificate and no bearer token"));
  EXPECT_TRUE(authorizer.Refuse(authorizer.Authenticate(Token(kTokenA))).ok());
}

TEST(AuthorizerCheckTest, GrantsCoverSubtreesAndConfigureOnlyBelowTheirRoot) {
  AuthFailureCounts counts;
  Authorizer authorizer(Config(false, "token:tenant-a rw /a\ntoken:tenant-a ro /shared\n"),
                        &counts);
  const Caller a = authorizer.Authenticate(Token(kTokenA)).caller;
  EXPECT_TRUE(authorizer.Check(a, Access::kWrite, "/a/x").ok());
  EXPECT_TRUE(authorizer.Check(a, Access::kConfigure, "/a/x").ok());
  EXPECT_EQ(authorizer.Check(a, Access::kConfigure, "/a").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(authorizer.Check(a, Access::kRead, "/shared/y").ok());
  EXPECT_EQ(authorizer.Check(a, Access::kWrite, "/shared/y").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(authorizer.Check(a, Access::kRead, "/ab").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(counts.count(AuthFailure::kGrantRoot), 1u);
  EXPECT_EQ(counts.count(AuthFailure::kReadOnly), 1u);
  EXPECT_EQ(counts.count(AuthFailure::kOutsideGrants), 1u);
  // Listing an ancestor of a grant is allowed (the answer is filtered).
  EXPECT_TRUE(authorizer.CheckList(a, "/").ok());
  EXPECT_TRUE(Authorizer::CanRead(a, "/a/x"));
  EXPECT_FALSE(Authorizer::CanRead(a, "/b"));
  // Allows() answers as Check() does, without counting.
  const uint64_t counted = counts.count(AuthFailure::kOutsideGrants);
  EXPECT_TRUE(Authorizer::Allows(a, Access::kWrite, "/a/x"));
  EXPECT_FALSE(Authorizer::Allows(a, Access::kConfigure, "/a"));
  EXPECT_TRUE(Authorizer::Allows(a, Access::kRead, "/shared/y"));
  EXPECT_FALSE(Authorizer::Allows(a, Access::kWrite, "/shared/y"));
  EXPECT_FALSE(Authorizer::Allows(a, Access::kWrite, "/b"));
  EXPECT_EQ(counts.count(AuthFailure::kOutsideGrants), counted);
}

TEST(AuthorizerReloadTest, CallersKeepTheSnapshotTheyAuthenticatedWith) {
  Authorizer authorizer(Config(false, "token:tenant-a rw /a\n"), nullptr);
  const Caller before = authorizer.Authenticate(Token(kTokenA)).caller;
  authorizer.Reload(*TokenTable::Parse(absl::StrCat("tenant-a ", kTokenA)),
                    *AuthzPolicy::Parse("token:tenant-a rw /b\n"));
  EXPECT_TRUE(authorizer.Check(before, Access::kWrite, "/a/x").ok());
  const Caller after = authorizer.Authenticate(Token(kTokenA)).caller;
  EXPECT_FALSE(authorizer.Check(after, Access::kWrite, "/a/x").ok());
  EXPECT_TRUE(authorizer.Check(after, Access::kWrite, "/b/x").ok());
}

}  // namespace
}  // namespace cgacct
