#include "server/common/log_line.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cgacct {

std::string FormatLogLine(absl::string_view text, absl::Time now) {
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", now, absl::UTCTimeZone()),
      " cgacctd: ", text, "\n");
}

void LogLine(absl::string_view text) {
  const std::string line = FormatLogLine(text, absl::Now());
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace cgacct
