// The load client's --json reports, written through nlohmann-json (Debian's
// nlohmann-json3-dev): this file is only the fluent Begin/Key/End front end
// the reports were written against; quoting, escaping, UTF-8 checking and
// layout are nlohmann::ordered_json's (keys keep the order written).
//
// Thread safety: JsonWriter is thread-compatible.
#ifndef CGACCT_CLIENT_LOAD_JSON_WRITER_H_
#define CGACCT_CLIENT_LOAD_JSON_WRITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace cgacct::load {

// Returns `text` as a quoted JSON string (RFC 8259), by nlohmann-json: '"',
// '\\' and control characters are escaped, each invalid UTF-8 byte becomes
// U+FFFD (written as UTF-8), everything else is copied as is.
std::string JsonQuote(absl::string_view text);

// Builds one JSON document (an nlohmann::ordered_json), pretty-printed with
// `indent` spaces per level (0: one line). Inside an object every value must
// be preceded by Key(). Doubles keep 15 significant digits (the old writer's
// "%.15g", so reports read the same) and integral ones print without ".0";
// non-finite doubles are written as null (JSON has no NaN or Infinity).
// Misuse (a value without a key inside an object, unbalanced End*) is a
// programming error caught by assert().
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
  // Uint(*value) or Double(*value), Null() when there is no value.
  JsonWriter& OptionalUint(std::optional<uint64_t> value);
  JsonWriter& OptionalDouble(std::optional<double> value);

  // The document, serialized; meaningful once every Begin has its End.
  std::string str() const;
  // True when at least one value was written and every container is closed.
  bool complete() const { return stack_.empty() && has_root_; }

 private:
  // Adds `value` where the document is: the root, the open array, or the
  // open object under the pending Key(). Returns the stored value.
  nlohmann::ordered_json& Add(nlohmann::ordered_json value);

  const int indent_;
  nlohmann::ordered_json root_;
  bool has_root_ = false;
  // The open containers, innermost last (pointers into root_; stable, as
  // only the innermost container grows).
  std::vector<nlohmann::ordered_json*> stack_;
  std::string pending_key_;
  bool has_key_ = false;
};

}  // namespace cgacct::load

#endif  // CGACCT_CLIENT_LOAD_JSON_WRITER_H_
