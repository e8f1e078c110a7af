#include "client/json_writer.h"

#include <cassert>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace cgacct::client {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if invalid
// (overlong forms, surrogates and values past U+10FFFF are invalid).
size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) {
    return static_cast<unsigned char>(text[i + k]);
  };
  const unsigned char c = byte(0);
  size_t len = 0;
  uint32_t min_code = 0;
  uint32_t code = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    min_code = 0x80;
    code = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    min_code = 0x800;
    code = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    min_code = 0x10000;
    code = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(k) & 0x3F);
  }
  if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
    return 0;
  return len;
}

}  // namespace

std::string JsonQuote(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else if (c >= 0x80) {
          const size_t len = Utf8SequenceLength(text, i);
          if (len == 0) {
            out += "\\ufffd";
            ++i;
          } else {
            out.append(text.data() + i, len);
            i += len;
          }
          continue;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
  return out;
}

void JsonWriter::NewLine(size_t depth) {
  if (indent_ <= 0) return;
  out_.push_back('\n');
  out_.append(depth * static_cast<size_t>(indent_), ' ');
}

void JsonWriter::BeforeValue() {
  if (stack_.empty()) {
    assert(out_.empty() && "JsonWriter: only one top-level value");
    return;
  }
  Level& level = stack_.back();
  if (level.is_object) {
    assert(level.has_key && "JsonWriter: value inside an object needs Key()");
    level.has_key = false;
    ++level.nr_items;
    return;  // Key() already wrote the separator
  }
  if (level.nr_items > 0) out_.push_back(',');
  NewLine(stack_.size());
  ++level.nr_items;
}

void JsonWriter::BeforeKeyOrEnd(bool is_end) {
  assert(!stack_.empty());
  const Level& level = stack_.back();
  if (is_end) {
    assert(!level.has_key && "JsonWriter: Key() without a value");
    if (level.nr_items > 0) NewLine(stack_.size() - 1);
    return;
  }
  if (level.nr_items > 0) out_.push_back(',');
  NewLine(stack_.size());
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  stack_.push_back({/*is_object=*/true, 0, false});
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  assert(!stack_.empty() && stack_.back().is_object);
  BeforeKeyOrEnd(/*is_end=*/true);
  stack_.pop_back();
  out_.push_back('}');
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  stack_.push_back({/*is_object=*/false, 0, false});
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  assert(!stack_.empty() && !stack_.back().is_object);
  if (stack_.back().nr_items > 0) NewLine(stack_.size() - 1);
  stack_.pop_back();
  out_.push_back(']');
  return *this;
}

JsonWriter& JsonWriter::Key(absl::string_view key) {
  assert(!stack_.empty() && stack_.back().is_object && !stack_.back().has_key &&
         "JsonWriter: Key() outside an object");
  BeforeKeyOrEnd(/*is_end=*/false);
  out_ += JsonQuote(key);
  out_ += indent_ > 0 ? ": " : ":";
  stack_.back().has_key = true;
  return *this;
}

JsonWriter& JsonWriter::String(absl::string_view value) {
  BeforeValue();
  out_ += JsonQuote(value);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", value);
  out_ += buf;
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
  return *this;
}

}  // namespace cgacct::client
