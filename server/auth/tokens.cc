// The bearer-token table (server/auth/tokens.h).
#include "server/auth/tokens.h"

#include "absl/strings/str_cat.h"
#include "server/auth/config_text.h"
#include "server/common/read_file.h"

namespace cgacct {
namespace {

// Constant-time (in the contents of `a`) equality.
bool SameBytes(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  if (a.empty()) return b.empty();
  for (size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i % a.size()] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text) {
  TokenTable table;
  for (const auth_internal::ConfigLine& line :
       auth_internal::ConfigLines(text)) {
    const std::vector<absl::string_view>& words = line.words;
    if (words.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line.number, ": ", words.size(),
                       " words (want \"NAME TOKEN\")"));
    }
    if (!auth_internal::IsWord(words[0]) || !auth_internal::IsWord(words[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line.number, ": non-printable bytes"));
    }
    if (words[1].size() < kMinTokenBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line.number, ": token of ", words[1].size(),
                       " bytes; at least ", kMinTokenBytes));
    }
    for (const Entry& e : table.entries_) {
      if (e.token == words[1]) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line.number, ": token already given to ",
                         auth_internal::Quote(e.identity)));
      }
    }
    table.entries_.push_back(
        Entry{std::string(words[1]), std::string(words[0])});
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<TokenTable> table = Parse(*text);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

std::optional<std::string> TokenTable::Lookup(absl::string_view token) const {
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    // No early exit: the time does not tell which entry matched.
    if (SameBytes(e.token, token)) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return found->identity;
}

}  // namespace cgacct
