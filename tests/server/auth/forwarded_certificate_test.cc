// ForwardedCertificateNames() (server/auth/forwarded_certificate.h) on
// certificates the openssl CLI makes now, and the Authorizer behind a
// trusted front proxy (--trusted_proxies): the caller is the client whose
// certificate the proxy passed on, never the proxy; the header from anyone
// else is refused.
#include "server/auth/forwarded_certificate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/auth/authorizer.h"
#include "tests/server/test_certs.h"

namespace cgacct {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The base64 of a PEM certificate's DER: its body without the armour lines
// (what HAProxy's %[ssl_c_der,base64] sends).
std::string Base64DerOf(const std::string& pem) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(pem, '\n')) {
    if (line.empty() || absl::StartsWith(line, "-----")) continue;
    absl::StrAppend(&out, line);
  }
  return out;
}

class ForwardedCertificateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok());
    ASSERT_EQ(certs_.MakeCa("ca"), 0);
    ASSERT_EQ(certs_.MakeLeaf("every", "ca", "every-cn",
                              "URI:spiffe://t/a,DNS:a.example,"
                              "email:a@example.com,IP:10.0.0.1,IP:::1",
                              "clientAuth"),
              0);
    ASSERT_EQ(certs_.MakeLeaf("two-uris", "ca", "two",
                              "URI:spiffe://t/zzz,URI:spiffe://t/b",
                              "clientAuth"),
              0);
    // "/" separates the -subj RDNs: escaped.
    ASSERT_EQ(certs_.MakeLeaf("cn-only", "ca", "spiffe:\\/\\/t\\/b", "",
                              "clientAuth"),
              0);
  }
  std::string Der64(const std::string& name) {
    return Base64DerOf(certs_.Read(name + ".pem"));
  }
  test_util::TestCerts certs_;
};

TEST_F(ForwardedCertificateTest, NamesAreTypedAsForADirectClient) {
  absl::StatusOr<std::vector<std::string>> names =
      ForwardedCertificateNames(Der64("every"));
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names,
              ElementsAre("uri:spiffe://t/a", "dns:a.example",
                          "email:a@example.com", "ip:10.0.0.1", "ip:::1",
                          "cn:every-cn"));
  // Two URI SANs name no URI identity (a SPIFFE ID is a certificate's one).
  names = ForwardedCertificateNames(Der64("two-uris"));
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("cn:two"));
  // A CN that reads like a URI is a cn:, never a uri:.
  names = ForwardedCertificateNames(Der64("cn-only"));
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ElementsAre("cn:spiffe://t/b"));
}

TEST_F(ForwardedCertificateTest, AnythingButOneCertificateIsInvalid) {
  std::string der;
  ASSERT_TRUE(absl::Base64Unescape(Der64("every"), &der));
  const std::vector<std::string> bad = {
      "",
      "not base64 at all!",
      absl::Base64Escape("a DER certificate this is not"),
      absl::Base64Escape(der + "x"),        // something after it
      absl::Base64Escape(der.substr(0, der.size() - 1)),  // cut short
      std::string(kMaxForwardedCertBytes * 2, 'A'),       // too long
  };
  for (const std::string& value : bad) {
    absl::StatusOr<std::vector<std::string>> names =
        ForwardedCertificateNames(value);
    ASSERT_FALSE(names.ok()) << value.substr(0, 40);
    EXPECT_EQ(names.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(names.status().message()),
                HasSubstr("x-cgacct-client-cert"));
  }
}

// The names of a value are parsed once and remembered (a client's every
// call carries the same header), up to the capacity; errors are not kept.
TEST_F(ForwardedCertificateTest, TheCacheParsesAValueOnce) {
  ForwardedCertificateCache cache(/*capacity=*/2);
  auto a = cache.Names(Der64("every"));
  ASSERT_TRUE(a.ok()) << a.status();
  auto again = cache.Names(Der64("every"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(a->get(), again->get());  // the same parse
  EXPECT_EQ((*a)->front(), "uri:spiffe://t/a");
  ASSERT_TRUE(cache.Names(Der64("two-uris")).ok());
  // A third value starts the map again: "every" is parsed anew.
  ASSERT_TRUE(cache.Names(Der64("cn-only")).ok());
  auto fresh = cache.Names(Der64("every"));
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(a->get(), fresh->get());
  EXPECT_EQ(**a, **fresh);
  EXPECT_EQ(cache.Names("not base64!").status().code(),
            absl::StatusCode::kInvalidArgument);
}

constexpr char kToken[] = "token-of-tenant-a-0123456789";

AuthConfig ProxyConfig(const std::string& policy) {
  AuthConfig config;
  config.client_certificates = true;
  config.tokens =
      *TokenTable::Parse(absl::StrCat("tenant-a ", kToken, "\n"));
  config.policy = *AuthzPolicy::Parse(policy);
  config.trusted_proxies = {"cn:front-proxy"};
  return config;
}

Credentials FromProxy(std::optional<std::string> forwarded) {
  Credentials c;
  c.certificate_names = {"dns:proxy.example", "cn:front-proxy"};
  c.forwarded_certificate = std::move(forwarded);
  return c;
}

TEST_F(ForwardedCertificateTest, BehindATrustedProxyTheClientIsTheCaller) {
  AuthFailureCounts counts;
  Authorizer authorizer(ProxyConfig("uri:spiffe://t/a rw /a\n"
                                    "uri:spiffe://t/b rw /b\n"
                                    "cn:front-proxy admin\n"
                                    "token:tenant-a rw /ta\n"),
                        &counts);
  Authentication a = authorizer.Authenticate(FromProxy(Der64("every")));
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.caller.identity(), "uri:spiffe://t/a");
  EXPECT_FALSE(a.caller.admin());
  EXPECT_TRUE(Authorizer::Allows(a.caller, Access::kWrite, "/a/x"));
  EXPECT_FALSE(Authorizer::Allows(a.caller, Access::kRead, "/b"));

  // Neither certificate names B by uri: a CN reading like B's SPIFFE ID,
  // and two URI SANs one of which is B's.
  for (const char* name : {"cn-only", "two-uris"}) {
    a = authorizer.Authenticate(FromProxy(Der64(name)));
    EXPECT_EQ(a.status.code(), absl::StatusCode::kPermissionDenied) << name;
    EXPECT_EQ(a.failure, AuthFailure::kUnknownIdentity) << name;
  }

  // The proxy without a certificate to pass on is nobody, not itself
  // (admin in this policy).
  a = authorizer.Authenticate(FromProxy(std::nullopt));
  EXPECT_EQ(a.status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a.failure, AuthFailure::kNoCredentials);
  EXPECT_EQ(a.caller.identity(), "");

  // A token through the proxy names its holder, with or without a
  // certificate passed on (a token wins, as for a direct client).
  Credentials token = FromProxy(Der64("every"));
  token.authorization = absl::StrCat("Bearer ", kToken);
  a = authorizer.Authenticate(token);
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.caller.identity(), "token:tenant-a");

  // What the proxy passed on is not a certificate.
  a = authorizer.Authenticate(FromProxy(absl::Base64Escape("junk")));
  EXPECT_EQ(a.status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a.failure, AuthFailure::kBadForwardedCertificate);
  EXPECT_THAT(std::string(a.status.message()),
              HasSubstr("x-cgacct-client-cert metadata"));
  EXPECT_EQ(authorizer.Refuse(a).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(counts.count(AuthFailure::kBadForwardedCertificate), 1u);
}

TEST_F(ForwardedCertificateTest, TheHeaderFromAnyoneButATrustedProxyIsRefused) {
  AuthFailureCounts counts;
  Authorizer authorizer(ProxyConfig("uri:spiffe://t/a rw /a\n"
                                    "cn:tenant-c rw /c\n"),
                        &counts);
  // A tenant with its own certificate forging A's, and a client with no
  // certificate (a token, or nothing): refused, whatever the header says.
  Credentials forged;
  forged.certificate_names = {"cn:tenant-c"};
  forged.forwarded_certificate = Der64("every");
  Credentials tokened;
  tokened.authorization = absl::StrCat("Bearer ", kToken);
  tokened.forwarded_certificate = Der64("every");
  Credentials bare;
  bare.forwarded_certificate = Der64("every");
  for (const Credentials* c : {&forged, &tokened, &bare}) {
    Authentication a = authorizer.Authenticate(*c);
    EXPECT_EQ(a.status.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(a.failure, AuthFailure::kUntrustedForwarder);
    EXPECT_THAT(std::string(a.status.message()),
                HasSubstr("accepted only from a front proxy named by "
                          "--trusted_proxies"));
    (void)authorizer.Refuse(a);
  }
  EXPECT_EQ(counts.count(AuthFailure::kUntrustedForwarder), 3u);
  // Both are UNAUTHENTICATED reasons, by these names in
  // cgacct_auth_failures_total.
  EXPECT_TRUE(IsUnauthenticated(AuthFailure::kUntrustedForwarder));
  EXPECT_TRUE(IsUnauthenticated(AuthFailure::kBadForwardedCertificate));
  EXPECT_STREQ(AuthFailureName(AuthFailure::kUntrustedForwarder),
               "untrusted_forwarder");
  EXPECT_STREQ(AuthFailureName(AuthFailure::kBadForwardedCertificate),
               "bad_forwarded_certificate");
  EXPECT_STREQ(AuthFailureName(AuthFailure::kUnknownIdentity),
               "unknown_identity");
  // Without the header the same tenant is itself.
  forged.forwarded_certificate.reset();
  EXPECT_EQ(authorizer.Authenticate(forged).caller.identity(), "cn:tenant-c");
  // A server with no trusted proxy refuses the header from everyone.
  AuthConfig none = ProxyConfig("cn:front-proxy admin\n");
  none.trusted_proxies.clear();
  Authorizer strict(std::move(none), nullptr);
  EXPECT_EQ(strict.Authenticate(FromProxy(Der64("every"))).failure,
            AuthFailure::kUntrustedForwarder);
}

}  // namespace
}  // namespace cgacct
