// The bearer-token table (--tokens_file, docs/DESIGN.md §4.11).
//
// Thread safety: TokenTable is immutable once parsed (thread-safe to read).
#ifndef CGACCT_SERVER_AUTH_TOKENS_H_
#define CGACCT_SERVER_AUTH_TOKENS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cgacct {

// One "NAME TOKEN" per line, the caller then token:NAME ('#' comments,
// blank lines ignored). Tokens are at least kMinTokenBytes printable
// non-space ASCII bytes and unique.
// Lookups compare against every token in constant time per token (no early
// exit on the first differing byte, nor on a match). Messages never quote a
// token.
class TokenTable {
 public:
  static constexpr size_t kMinTokenBytes = 16;
  // Errors: INVALID_ARGUMENT naming the line.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text);
  // Errors: NOT_FOUND (cannot read), or Parse's prefixed with the file name.
  static absl::StatusOr<TokenTable> LoadFile(const std::string& path);

  // The identity `token` belongs to, or nullopt.
  std::optional<std::string> Lookup(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string token;
    std::string identity;
  };
  std::vector<Entry> entries_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_AUTH_TOKENS_H_
