#include "server/rpc/codec.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cgacct {

namespace {

namespace pb = ::google::protobuf;

// Nested messages walked into before giving up on finding the fault.
constexpr int kMaxWalkDepth = 16;

// A base-128 varint at *pos (at most 10 bytes, the last holding 1 bit).
bool ReadVarint(absl::string_view b, size_t* pos, uint64_t* value) {
  uint64_t result = 0;
  for (int i = 0; i < 10 && *pos < b.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(b[(*pos)++]);
    if (i == 9 && c > 1) return false;
    result |= uint64_t{c & 0x7fu} << (7 * i);
    if ((c & 0x80) == 0) {
      *value = result;
      return true;
    }
  }
  return false;
}

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates, or code
// points past U+10FFFF), as protobuf requires of a proto3 string.
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    int n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(n) >= s.size()) return false;  // cut short
    for (int k = 1; k <= n; ++k) {
      const uint8_t d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = cp << 6 | (d & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

// True when `b` holds a run of four bytes with their top bit set: the start
// of a varint of five bytes or more, which a uint32 field's value above
// 2^32 - 1 needs. Far cheaper than walking the message: requests whose
// varints are all short (every well-formed request but those with large
// 64-bit counts) skip the walk.
bool MayHoldLongVarint(absl::string_view b, int* run) {
  for (char ch : b) {
    if (static_cast<uint8_t>(ch) & 0x80) {
      if (++*run >= 4) return true;
    } else {
      *run = 0;
    }
  }
  return false;
}

// Walks `b` (a message of `type`, null = unknown) at offset `base` of the
// outermost message; true and *why set at the first fault. Besides the wire
// format it finds what protobuf's parser lets through or refuses without
// saying which field: a uint32 field given a larger varint (the parser keeps
// its low 32 bits) and a proto3 string that is not UTF-8.
bool Walk(const pb::Descriptor* type, absl::string_view b, size_t base,
          int depth, std::string* why) {
  size_t pos = 0;
  std::vector<uint32_t> open_groups;
  while (pos < b.size()) {
    const size_t at = base + pos;
    uint64_t tag = 0;
    if (!ReadVarint(b, &pos, &tag) || tag > 0xffffffffu) {
      *why = absl::StrCat("a field tag at byte ", at,
                          " is truncated or longer than 32 bits");
      return true;
    }
    const uint32_t number = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire_type = static_cast<uint32_t>(tag & 7);
    if (number == 0) {
      *why = absl::StrCat("field number 0 (which does not exist) at byte ", at);
      return true;
    }
    const pb::FieldDescriptor* field =
        type != nullptr ? type->FindFieldByNumber(static_cast<int>(number))
                        : nullptr;
    const std::string label =
        field != nullptr ? absl::StrCat(number, " (", field->name(), ")")
                         : absl::StrCat(number);
    const size_t left_after_tag = b.size() - pos;
    auto truncated = [&](size_t need) {
      *why =
          absl::StrCat("truncated: field ", label, " at byte ", at, " needs ",
                       need, " bytes, ", left_after_tag, " are left");
      return true;
    };
    switch (wire_type) {
      case 0: {  // varint
        uint64_t value;
        if (!ReadVarint(b, &pos, &value)) {
          *why = absl::StrCat("the varint of field ", label, " at byte ", at,
                              " is truncated or longer than 10 bytes");
          return true;
        }
        if (field != nullptr &&
            field->type() == pb::FieldDescriptor::TYPE_UINT32 &&
            value > 0xffffffffu) {
          *why = absl::StrCat("field ", label, " at byte ", at, " is ", value,
                              ", above the uint32 range (at most 4294967295)");
          return true;
        }
        break;
      }
      case 1:  // fixed64
        if (left_after_tag < 8) return truncated(8);
        pos += 8;
        break;
      case 5:  // fixed32
        if (left_after_tag < 4) return truncated(4);
        pos += 4;
        break;
      case 2: {  // length-delimited
        uint64_t length = 0;
        if (!ReadVarint(b, &pos, &length)) {
          *why = absl::StrCat("the length of field ", label, " at byte ", at,
                              " is truncated");
          return true;
        }
        if (length > b.size() - pos) {
          *why = absl::StrCat("truncated: field ", label, " at byte ", at,
                              " is ", length, " bytes long, ", b.size() - pos,
                              " are left");
          return true;
        }
        const absl::string_view value = b.substr(pos, length);
        if (field != nullptr &&
            field->type() == pb::FieldDescriptor::TYPE_STRING &&
            !IsUtf8(value)) {
          *why = absl::StrCat("field ", label, " at byte ", at,
                              " is not valid UTF-8 (a string field)");
          return true;
        }
        if (field != nullptr &&
            field->type() == pb::FieldDescriptor::TYPE_MESSAGE &&
            depth < kMaxWalkDepth) {
          std::string inner;
          if (Walk(field->message_type(), value, base + pos, depth + 1,
                   &inner)) {
            *why =
                absl::StrCat("in field ", label, " at byte ", at, ": ", inner);
            return true;
          }
        }
        pos += length;
        break;
      }
      case 3:  // start group
        open_groups.push_back(number);
        break;
      case 4:  // end group
        if (open_groups.empty() || open_groups.back() != number) {
          *why = absl::StrCat("an end-group tag of field ", label, " at byte ",
                              at, " closes no group");
          return true;
        }
        open_groups.pop_back();
        break;
      default:
        *why = absl::StrCat("field ", label, " at byte ", at, " has wire type ",
                            wire_type, ", which does not exist");
        return true;
    }
  }
  if (!open_groups.empty()) {
    *why = absl::StrCat("truncated: group field ", open_groups.back(),
                        " is not closed");
    return true;
  }
  return false;
}

}  // namespace

std::string DescribeUndecodable(const pb::Descriptor& type,
                                absl::string_view bytes) {
  std::string why;
  if (!Walk(&type, bytes, 0, 0, &why)) {
    why =
        "the bytes are well-formed protobuf wire format, but protobuf "
        "refused them (e.g. nested deeper than its limit)";
  }
  return absl::StrCat(why, " (", bytes.size(), " bytes)");
}

absl::Status ParseRequest(const grpc::ByteBuffer& bytes, pb::Message* message) {
  if (!bytes.Valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request is not a valid ", message->GetDescriptor()->full_name(),
        ": the call carried no request message"));
  }
  bool parsed;
  {
    // As grpc::GenericDeserialize, without consuming the buffer (its bytes
    // are needed to say what is wrong). The reader only reads.
    grpc::ProtoBufferReader reader(const_cast<grpc::ByteBuffer*>(&bytes));
    parsed = reader.status().ok() && message->ParseFromZeroCopyStream(&reader);
  }
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) slices.clear();
  if (parsed) {
    // Parsed: unless a uint32 field was given more than 32 bits, which the
    // parser truncated silently (ttl_ms 2^32 + 1000 became 1000).
    int run = 0;
    bool suspect = false;
    for (const grpc::Slice& slice : slices) {
      suspect |= MayHoldLongVarint(
          absl::string_view(reinterpret_cast<const char*>(slice.begin()),
                            slice.size()),
          &run);
    }
    if (!suspect) return absl::OkStatus();
  }
  std::string flat;
  flat.reserve(bytes.Length());
  for (const grpc::Slice& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  const pb::Descriptor& type = *message->GetDescriptor();
  if (parsed) {
    std::string why;
    if (!Walk(&type, flat, 0, 0, &why)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "request is not a valid ", type.full_name(), ": ", why, " (",
        flat.size(), " bytes)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("request is not a valid ", type.full_name(), ": ",
                   DescribeUndecodable(type, flat)));
}

absl::Status SerializeResponse(const pb::Message& message,
                               grpc::ByteBuffer* bytes) {
  bool own_buffer;
  bytes->Clear();  // ProtoBufferWriter wants an empty buffer
  const grpc::Status s =
      grpc::GenericSerialize<grpc::ProtoBufferWriter, pb::Message>(
          message, bytes, &own_buffer);
  if (!s.ok()) {
    return absl::InternalError(
        absl::StrCat("the ", message.GetDescriptor()->full_name(),
                     " response could not be serialized: ", s.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace cgacct
