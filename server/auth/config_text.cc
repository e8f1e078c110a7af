// The auth files' line format (server/auth/config_text.h).
#include "server/auth/config_text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cgacct::auth_internal {

std::vector<ConfigLine> ConfigLines(absl::string_view text) {
  std::vector<ConfigLine> out;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (!words.empty()) out.push_back(ConfigLine{number, std::move(words)});
  }
  return out;
}

bool IsWord(absl::string_view s) {
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return !s.empty();
}

std::string Quote(absl::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, 256)), "\"");
}

}  // namespace cgacct::auth_internal
