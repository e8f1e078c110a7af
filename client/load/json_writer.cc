#include "client/load/json_writer.h"

#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace cgacct::load {
namespace {

using Json = nlohmann::ordered_json;

// Invalid UTF-8 becomes U+FFFD instead of an exception.
constexpr auto kReplace = Json::error_handler_t::replace;

}  // namespace

std::string JsonQuote(absl::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, kReplace);
}

Json& JsonWriter::Add(Json value) {
  if (stack_.empty()) {
    assert(!has_root_ && "JsonWriter: only one top-level value");
    root_ = std::move(value);
    has_root_ = true;
    return root_;
  }
  Json& parent = *stack_.back();
  if (parent.is_object()) {
    assert(has_key_ && "JsonWriter: value inside an object needs Key()");
    has_key_ = false;
    Json& slot = parent[pending_key_];
    slot = std::move(value);
    return slot;
  }
  parent.push_back(std::move(value));
  return parent.back();
}

JsonWriter& JsonWriter::BeginObject() {
  stack_.push_back(&Add(Json::object()));
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  assert(!stack_.empty() && stack_.back()->is_object() && !has_key_);
  stack_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  stack_.push_back(&Add(Json::array()));
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  assert(!stack_.empty() && stack_.back()->is_array());
  stack_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::Key(absl::string_view key) {
  assert(!stack_.empty() && stack_.back()->is_object() && !has_key_ &&
         "JsonWriter: Key() outside an object");
  pending_key_ = std::string(key);
  has_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(absl::string_view value) {
  Add(Json(std::string(value)));
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  Add(Json(value));
  return *this;
}

JsonWriter& JsonWriter::Uint(uint64_t value) {
  Add(Json(value));
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  if (!std::isfinite(value)) {
    Add(Json(nullptr));
    return *this;
  }
  // 15 significant digits, as the reports always had; nlohmann then prints
  // the shortest form that reads back the same, which is those digits.
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", value);
  const double rounded = std::strtod(buf, nullptr);
  if (rounded == std::trunc(rounded) && std::fabs(rounded) < 1e15) {
    Add(Json(static_cast<int64_t>(rounded)));  // "100", not "100.0"
  } else {
    Add(Json(rounded));
  }
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  Add(Json(value));
  return *this;
}

JsonWriter& JsonWriter::Null() {
  Add(Json(nullptr));
  return *this;
}

JsonWriter& JsonWriter::OptionalUint(std::optional<uint64_t> value) {
  return value.has_value() ? Uint(*value) : Null();
}

JsonWriter& JsonWriter::OptionalDouble(std::optional<double> value) {
  return value.has_value() ? Double(*value) : Null();
}

std::string JsonWriter::str() const {
  return has_root_
             ? root_.dump(indent_ > 0 ? indent_ : -1, ' ', false, kReplace)
             : std::string();
}

}  // namespace cgacct::load
