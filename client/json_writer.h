// A small streaming JSON writer for the load client's --json report.
//
// Thread safety: JsonWriter is thread-compatible.
#ifndef CGACCT_CLIENT_JSON_WRITER_H_
#define CGACCT_CLIENT_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cgacct::client {

// Returns `text` as a quoted JSON string (RFC 8259): '"', '\\' and control
// characters are escaped, invalid UTF-8 bytes become U+FFFD, everything else
// is copied as is.
std::string JsonQuote(absl::string_view text);

// Builds one JSON document, pretty-printed with `indent` spaces per level (0:
// one line). Inside an object every value must be preceded by Key(); commas
// and indentation are inserted automatically. Non-finite doubles are written
// as null (JSON has no NaN or Infinity). Misuse (a value without a key inside
// an object, unbalanced End*) is a programming error caught by assert().
//
//   JsonWriter w;
//   w.BeginObject().Key("reads").Uint(12).Key("path").String("/a").EndObject();
//   std::string doc = w.str();
class JsonWriter {
 public:
  explicit JsonWriter(int indent = 2) : indent_(indent) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);

  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  // Written with up to 15 significant digits; null when not finite.
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();

  // The document written so far; complete once every Begin has its End.
  const std::string& str() const { return out_; }
  // True when at least one value was written and every container is closed.
  bool complete() const { return stack_.empty() && !out_.empty(); }

 private:
  struct Level {
    bool is_object = false;
    int nr_items = 0;
    bool has_key = false;  // objects: Key() written, value pending
  };

  // Writes the separator and indentation that precede a value or key.
  void BeforeValue();
  void BeforeKeyOrEnd(bool is_end);
  void NewLine(size_t depth);

  const int indent_;
  std::string out_;
  std::vector<Level> stack_;
};

}  // namespace cgacct::client

#endif  // CGACCT_CLIENT_JSON_WRITER_H_
