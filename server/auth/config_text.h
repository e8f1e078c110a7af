// The line format the auth room's files share (--authz_policy and
// --tokens_file): whitespace-separated words, '#' to the end of a line is a
// comment, blank lines ignored. Internal to server/auth/.
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_SERVER_AUTH_CONFIG_TEXT_H_
#define CGACCT_SERVER_AUTH_CONFIG_TEXT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace cgacct::auth_internal {

// A non-empty line: its 1-based number and its words.
struct ConfigLine {
  int number = 0;
  std::vector<absl::string_view> words;  // into the text
};

// The lines of `text` that hold words, comments dropped.
std::vector<ConfigLine> ConfigLines(absl::string_view text);

// An identity or token word: non-empty printable ASCII without spaces.
bool IsWord(absl::string_view s);

// `s` (at most 256 bytes of it) C-escaped in double quotes, for messages.
std::string Quote(absl::string_view s);

}  // namespace cgacct::auth_internal

#endif  // CGACCT_SERVER_AUTH_CONFIG_TEXT_H_
