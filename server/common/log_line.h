// LogLine(): one line of cgacctd's own on stderr, stamped with the time, as
// gRPC's lines are and as operators grep logs that did not pass through
// journald or `docker logs -t` (files, `kubectl logs`, a terminal):
//
//   2026-12-07T12:34:56.789Z cgacctd: SIGHUP: tokens and policy reloaded
//
// RFC 3339, UTC, milliseconds. The line is written with one fwrite() (stderr
// is unbuffered), so lines from several threads do not interleave.
// Thread-safe.
#ifndef CGACCT_SERVER_COMMON_LOG_LINE_H_
#define CGACCT_SERVER_COMMON_LOG_LINE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cgacct {

// "<time> cgacctd: <text>\n" for `now` (FormatLogLine, for tests), written
// to stderr (LogLine). `text` has no newline of its own.
std::string FormatLogLine(absl::string_view text, absl::Time now);
void LogLine(absl::string_view text);

}  // namespace cgacct

#endif  // CGACCT_SERVER_COMMON_LOG_LINE_H_
