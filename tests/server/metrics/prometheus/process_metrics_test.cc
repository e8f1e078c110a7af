// ProcessCollector and BuildInfoCollector (server/metrics/prometheus/
// process_metrics.h).
#include "server/metrics/prometheus/process_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <regex>
#include <string>

#include "server/metrics/prometheus/families.h"

namespace cgacct {
namespace {

using ::testing::HasSubstr;

// The value of the one series `series` ("name{labels}") in `text`, or -1.
double SeriesValue(const std::string& text, const std::string& series) {
  const std::string prefix = series + " ";
  size_t at = 0;
  while ((at = text.find(prefix, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      return std::stod(text.substr(at + prefix.size()));
    }
    at += prefix.size();
  }
  return -1;
}

TEST(ProcessCollectorTest, ReadsThisProcess) {
  const std::string text = SerializeMetrics(ProcessCollector());
  for (const char* family :
       {"# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_THAT(text, HasSubstr(family));
  }
  const double rss = SeriesValue(text, "process_resident_memory_bytes");
  const double vsz = SeriesValue(text, "process_virtual_memory_bytes");
  EXPECT_GT(rss, 1 << 20);  // a gtest binary with gRPC: megabytes
  EXPECT_GE(vsz, rss);
  // Open a descriptor: the count follows.
  const double fds = SeriesValue(text, "process_open_fds");
  EXPECT_GE(fds, 3);  // stdin, stdout, stderr at least
  const int fd = dup(0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(
      SeriesValue(SerializeMetrics(ProcessCollector()), "process_open_fds"),
      fds + 1);
  close(fd);
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  EXPECT_EQ(SeriesValue(text, "process_max_fds"),
            static_cast<double>(nofile.rlim_cur));
  const double start = SeriesValue(text, "process_start_time_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);  // this test started less than an hour ago
  EXPECT_GE(SeriesValue(text, "process_cpu_seconds_total"), 0);
}

TEST(BuildInfoTest, VersionAndRevision) {
  const std::string text = SerializeMetrics(BuildInfoCollector());
  EXPECT_THAT(text, HasSubstr("# TYPE cgacct_build_info gauge"));
  static const std::regex kLine(
      R"re(\ncgacct_build_info\{revision="([0-9a-f]{12}|unknown)",version="[0-9]+\.[0-9]+\.[0-9]+"\} 1\n)re");
  EXPECT_TRUE(std::regex_search(text, kLine)) << text;
  EXPECT_EQ(std::string(CgacctVersion()).empty(), false);
}

}  // namespace
}  // namespace cgacct
