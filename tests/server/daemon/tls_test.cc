// The daemon's transport security (server/daemon/tls.h): the TLS files'
// checks at start and the loopback test of listen addresses.
#include "server/daemon/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/server/test_certs.h"

namespace cgacct {
namespace {

using test_util::TestCerts;
using ::testing::HasSubstr;

TEST(LoopbackTest, OnlyLocalAddressesAreLoopback) {
  EXPECT_TRUE(IsLoopbackListenAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackListenAddress("127.1.2.3:0"));
  EXPECT_TRUE(IsLoopbackListenAddress("[::1]:50051"));
  EXPECT_TRUE(IsLoopbackListenAddress("localhost:50051"));
  EXPECT_TRUE(IsLoopbackListenAddress("unix:/run/cgacct.sock"));
  EXPECT_FALSE(IsLoopbackListenAddress("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackListenAddress("[::]:50051"));
  EXPECT_FALSE(IsLoopbackListenAddress("10.0.0.1:50051"));
  EXPECT_FALSE(IsLoopbackListenAddress("127.0.0.1.evil.com:1"));
  EXPECT_FALSE(IsLoopbackListenAddress("[::1:1"));
}

TEST(TlsCredentialsTest, BadFilesAreRefusedNamingTheFlag) {
  TestCerts certs;
  ASSERT_TRUE(certs.ok());
  certs.Write("junk.pem", "not a certificate\n");
  TlsFiles files;
  files.cert = certs.Path("missing.pem");
  files.key = certs.Path("junk.pem");
  absl::Status s = MakeTlsServerCredentials(files).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("--tls_cert="));
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot read"));
  ASSERT_EQ(certs.MakeCa("ca"), 0) << "openssl could not make a CA";
  files.cert = certs.Path("ca.pem");
  s = MakeTlsServerCredentials(files).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("--tls_key=" + certs.Path("junk.pem") +
                        ": no PEM PRIVATE KEY block"));
}

}  // namespace
}  // namespace cgacct
