#include "client/cli/cli_util.h"

#include <cstdint>
#include <string>

#include "absl/flags/marshalling.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace cgacct::cli {
namespace {

// page_counter_memparse() over memparse() (lib/cmdline.c): base 0 numbers,
// one K/M/G/T/P/E suffix in either case, "max" spelled exactly.
TEST(ParseSizeBytesTest, AcceptsWhatTheKernelsMemparseAccepts) {
  const struct {
    const char* text;
    uint64_t bytes;
  } cases[] = {
      {"0", 0},
      {"4096", 4096},
      {"1k", 1024},
      {"1K", 1024},
      {"64M", 64ull << 20},
      {"64m", 64ull << 20},
      {"2G", 2ull << 30},
      {"3T", 3ull << 40},
      {"1P", 1ull << 50},
      {"1p", 1ull << 50},
      {"2E", 2ull << 60},
      {"15e", 15ull << 60},
      {"0x1000", 4096},
      {"0X10k", 16ull << 10},
      {"0x1E", 30},  // 'E' is a hex digit there, as simple_strtoull reads it
      {"0x1G", 1ull << 30},
      {"0755", 493},  // octal
      {"010M", 8ull << 20},
      {"00", 0},
      {" 12 ", 12},  // strstrip()
      {"max", UINT64_MAX},
      {" max\n", UINT64_MAX},
      {"18446744073709551615", UINT64_MAX},
      {"0xffffffffffffffff", UINT64_MAX},
      {"16777215T", 16777215ull << 40},
  };
  for (const auto& c : cases) {
    absl::StatusOr<uint64_t> got = ParseSizeBytes(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status();
    EXPECT_EQ(*got, c.bytes) << c.text;
  }
}

TEST(ParseSizeBytesTest, RejectsWhatTheKernelRefuses) {
  // EINVAL in the kernel: a suffix must end the text ("50MiB", "64MB"), one
  // suffix only, no sign, no fraction, "max" only in lower case, an octal
  // number has no 8 or 9, "0x" needs a hex digit. Refused here although the
  // kernel takes them: "" (the kernel reads 0) and values past 2^64 - 1 (the
  // kernel wraps them).
  for (const char* text : {"",          " ",
                           "M",         "12X",
                           "-1",        "+1",
                           "1.5G",      "1 G",
                           "1GG",       "1iB",
                           "50MiB",     "64MB",
                           "64mib",     "100B",
                           "MAX",       "Max",
                           "maximum",   "08",
                           "0x",        "0xg",
                           "1KK",       "18446744073709551616",
                           "16777216T", "17179869184G",
                           "16E",       "0x10000000000000000"}) {
    absl::StatusOr<uint64_t> got = ParseSizeBytes(text);
    EXPECT_FALSE(got.ok()) << "\"" << text << "\" parsed as " << *got;
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(ParseMemparseBytesTest, SizesButNotMax) {
  EXPECT_EQ(*ParseMemparseBytes("10M"), 10ull << 20);
  EXPECT_EQ(*ParseMemparseBytes("0x1000"), 4096u);
  EXPECT_FALSE(ParseMemparseBytes("max").ok());
  EXPECT_FALSE(ParseMemparseBytes("10MiB").ok());
}

TEST(VersionTextTest, ProgramVersionAndRevision) {
  const std::string text = VersionText("cgacctctl");
  EXPECT_EQ(text.rfind("cgacctctl 0.", 0), 0u) << text;
  EXPECT_NE(text.find(" (git "), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find("Debug build"), std::string::npos);
}

TEST(FormatSizeBytesTest, MaxAndDecimal) {
  EXPECT_EQ(FormatSizeBytes(UINT64_MAX), "max");
  EXPECT_EQ(FormatSizeBytes(0), "0");
  EXPECT_EQ(FormatSizeBytes(67108864), "67108864");
}

TEST(ByteSizeFlagTest, ParsesThroughAbslFlagMarshalling) {
  ByteSize size;
  std::string error;
  ASSERT_TRUE(absl::ParseFlag("64M", &size, &error)) << error;
  EXPECT_EQ(size.bytes, 64ull << 20);
  ASSERT_TRUE(absl::ParseFlag("max", &size, &error)) << error;
  EXPECT_EQ(size.bytes, UINT64_MAX);
  EXPECT_EQ(absl::UnparseFlag(size), "max");
  EXPECT_EQ(absl::UnparseFlag(ByteSize{4096}), "4096");
  EXPECT_FALSE(absl::ParseFlag("64Q", &size, &error));
  EXPECT_NE(error.find("64Q"), std::string::npos) << error;
}

// The flag marshalling path absl::Duration flags (--duration, timeouts) use;
// the absl::string_view argument selects it over a deprecated overload.
bool ParseDurationFlag(absl::string_view text, absl::Duration* d,
                       std::string* error) {
  return absl::ParseFlag(text, d, error);
}

TEST(DurationFlagTest, AbslDurationFlagSyntax) {
  absl::Duration d;
  std::string error;
  ASSERT_TRUE(ParseDurationFlag("10s", &d, &error)) << error;
  EXPECT_EQ(d, absl::Seconds(10));
  ASSERT_TRUE(ParseDurationFlag("1m30s", &d, &error)) << error;
  EXPECT_EQ(d, absl::Seconds(90));
  ASSERT_TRUE(ParseDurationFlag("250ms", &d, &error)) << error;
  EXPECT_EQ(d, absl::Milliseconds(250));
  EXPECT_FALSE(ParseDurationFlag("10", &d, &error));  // a unit is required
}

TEST(SplitHostPortTest, Valid) {
  absl::StatusOr<HostPort> hp = SplitHostPort("127.0.0.1:50051");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 50051);

  hp = SplitHostPort("[::1]:9464");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 9464);

  hp = SplitHostPort("localhost:65535");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "localhost");
  EXPECT_EQ(hp->port, 65535);
}

TEST(SplitHostPortTest, Invalid) {
  for (const char* text :
       {"", "127.0.0.1", ":80", "host:", "host:0", "host:65536", "host:8a",
        "host:-1", "::1:80", "[::1]80", "[::1]", "[::1]:", "[]:80"}) {
    EXPECT_FALSE(SplitHostPort(text).ok()) << text;
  }
}

TEST(JoinHostPortTest, BracketsIpv6) {
  EXPECT_EQ(JoinHostPort("127.0.0.1", 9464), "127.0.0.1:9464");
  EXPECT_EQ(JoinHostPort("::1", 9464), "[::1]:9464");
}

TEST(MetricsTargetForTest, SwapsThePort) {
  EXPECT_EQ(*MetricsTargetFor("127.0.0.1:50051"), "127.0.0.1:9464");
  EXPECT_EQ(*MetricsTargetFor("[::1]:50051"), "[::1]:9464");
  EXPECT_EQ(*MetricsTargetFor("localhost:50551", 9561), "localhost:9561");
  EXPECT_FALSE(MetricsTargetFor("unix:/run/cgacct.sock").ok());
  EXPECT_FALSE(MetricsTargetFor("dns:///localhost:50051").ok());
}

}  // namespace
}  // namespace cgacct::cli
