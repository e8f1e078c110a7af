#include "server/rpc/codec.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

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

// An enum is an int32 on the wire: a varint the parser keeps only the low 32
// bits of (not a sign-extended negative int32).
bool EnumTruncated(uint64_t value) {
  return value > 0x7fffffffu && value < 0xffffffff80000000u;
}

// "3 (ttl_ms)", or "3" for a field the type does not know.
std::string FieldLabel(uint32_t number, const pb::FieldDescriptor* field) {
  return field != nullptr ? absl::StrCat(number, " (", field->name(), ")")
                          : absl::StrCat(number);
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
    // The field as messages name it, built only for a message: this walk
    // runs on every request with a long varint run, so nothing is
    // allocated per field.
    auto text = [number, field] { return FieldLabel(number, field); };
    const size_t left_after_tag = b.size() - pos;
    auto truncated = [&](size_t need) {
      *why =
          absl::StrCat("truncated: field ", text(), " at byte ", at, " needs ",
                       need, " bytes, ", left_after_tag, " are left");
      return true;
    };
    switch (wire_type) {
      case 0: {  // varint
        uint64_t value;
        if (!ReadVarint(b, &pos, &value)) {
          *why = absl::StrCat("the varint of field ", text(), " at byte ", at,
                              " is truncated or longer than 10 bytes");
          return true;
        }
        if (field != nullptr &&
            field->type() == pb::FieldDescriptor::TYPE_UINT32 &&
            value > 0xffffffffu) {
          *why = absl::StrCat("field ", text(), " at byte ", at, " is ", value,
                              ", above the uint32 range (at most 4294967295)");
          return true;
        }
        if (field != nullptr &&
            field->type() == pb::FieldDescriptor::TYPE_ENUM &&
            EnumTruncated(value)) {
          *why = absl::StrCat("field ", text(), " at byte ", at, " is ", value,
                              ", outside an enum's 32-bit range (at most "
                              "2147483647)");
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
          *why = absl::StrCat("the length of field ", text(), " at byte ", at,
                              " is truncated");
          return true;
        }
        if (length > b.size() - pos) {
          *why = absl::StrCat("truncated: field ", text(), " at byte ", at,
                              " is ", length, " bytes long, ", b.size() - pos,
                              " are left");
          return true;
        }
        const absl::string_view value = b.substr(pos, length);
        if (field != nullptr &&
            field->type() == pb::FieldDescriptor::TYPE_STRING &&
            !IsUtf8(value)) {
          *why = absl::StrCat("field ", text(), " at byte ", at,
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
                absl::StrCat("in field ", text(), " at byte ", at, ": ", inner);
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
          *why = absl::StrCat("an end-group tag of field ", text(), " at byte ",
                              at, " closes no group");
          return true;
        }
        open_groups.pop_back();
        break;
      default:
        *why = absl::StrCat("field ", text(), " at byte ", at, " has wire type ",
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

// What the check of a parsed request needs of its type, by field number:
// which fields are uint32 or enums and which are messages (with their
// layout). Built
// once per type from its descriptor, so the check looks nothing up per
// field (Descriptor::FindFieldByNumber is a hash lookup).
struct WireLayout {
  enum Kind : uint8_t { kOther = 0, kUint32 = 1, kMessage = 2, kEnum = 3 };
  std::vector<Kind> kind;                // by field number; past it: kOther
  std::vector<const WireLayout*> nested;  // kMessage's layout
  // Some uint32 or enum field here or in a nested message: else nothing to
  // check. (Charge, Uncharge and ChargeBatch's ops carry `kind`, an enum:
  // the check of theirs is the cheap scan for a long varint, which a
  // well-formed request of theirs has only with a large 64-bit count.)
  bool has_uint32 = true;
};

// Layouts of every request type seen (and the types they nest), built on
// first use; never freed (descriptors of generated types live as long).
class WireLayouts {
 public:
  const WireLayout* Get(const pb::Descriptor* type) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::ReaderMutexLock l(&mu_);
      auto it = layouts_.find(type);
      if (it != layouts_.end()) return it->second.get();
    }
    absl::MutexLock l(&mu_);
    return BuildLocked(type);
  }

 private:
  const WireLayout* BuildLocked(const pb::Descriptor* type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [it, inserted] = layouts_.try_emplace(type);
    if (!inserted) return it->second.get();  // built, or being built (a cycle)
    it->second = std::make_unique<WireLayout>();
    WireLayout* layout = it->second.get();
    int max_number = 0;
    for (int i = 0; i < type->field_count(); ++i)
      max_number = std::max(max_number, type->field(i)->number());
    // Field numbers of the API are small; a type with huge ones is checked
    // up to 4096 (beyond: treated as kOther, the slow walk still names it).
    max_number = std::min(max_number, 4096);
    layout->kind.assign(static_cast<size_t>(max_number) + 1,
                        WireLayout::kOther);
    layout->nested.assign(static_cast<size_t>(max_number) + 1, nullptr);
    // While being built (a type that nests itself), a layout says it has
    // uint32 fields: the conservative answer.
    bool has_uint32 = false;
    for (int i = 0; i < type->field_count(); ++i) {
      const pb::FieldDescriptor* f = type->field(i);
      if (f->type() == pb::FieldDescriptor::TYPE_UINT32 ||
          f->type() == pb::FieldDescriptor::TYPE_ENUM)
        has_uint32 = true;
      if (f->number() > max_number) continue;
      const size_t n = static_cast<size_t>(f->number());
      if (f->type() == pb::FieldDescriptor::TYPE_UINT32) {
        layout->kind[n] = WireLayout::kUint32;
      } else if (f->type() == pb::FieldDescriptor::TYPE_ENUM) {
        layout->kind[n] = WireLayout::kEnum;
      } else if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
        layout->kind[n] = WireLayout::kMessage;
        layout->nested[n] = BuildLocked(f->message_type());
        has_uint32 |= layout->nested[n]->has_uint32;
      }
    }
    layout->has_uint32 = has_uint32;
    return layout;
  }

  absl::Mutex mu_;
  absl::flat_hash_map<const pb::Descriptor*, std::unique_ptr<WireLayout>>
      layouts_ ABSL_GUARDED_BY(mu_);
};

WireLayouts& Layouts() {
  static auto* layouts = new WireLayouts();
  return *layouts;
}

// Whether `b`, bytes protobuf's parser accepted as a message of `layout`,
// gives some uint32 field a varint above 2^32 - 1 (which the parser
// truncated). Fast and silent: the caller walks again with Walk() to say
// which. Anything unexpected answers true (the slow walk decides).
bool HasUint32Overflow(const WireLayout& layout, absl::string_view b,
                       int depth) {
  size_t pos = 0;
  while (pos < b.size()) {
    uint64_t tag;
    if (!ReadVarint(b, &pos, &tag)) return true;
    const uint64_t number = tag >> 3;
    const WireLayout::Kind kind = number < layout.kind.size()
                                      ? layout.kind[number]
                                      : WireLayout::kOther;
    switch (tag & 7) {
      case 0: {
        uint64_t value;
        if (!ReadVarint(b, &pos, &value)) return true;
        if (kind == WireLayout::kUint32 && value > 0xffffffffu) return true;
        if (kind == WireLayout::kEnum && EnumTruncated(value)) return true;
        break;
      }
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2: {
        uint64_t length;
        if (!ReadVarint(b, &pos, &length) || length > b.size() - pos)
          return true;
        if (kind == WireLayout::kMessage && depth < kMaxWalkDepth &&
            layout.nested[number]->has_uint32 &&
            HasUint32Overflow(*layout.nested[number], b.substr(pos, length),
                              depth + 1))
          return true;
        pos += length;
        break;
      }
      default:
        return true;  // groups: rare, let the slow walk look
    }
  }
  return pos != b.size();
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
  // A type without uint32 or enum fields anywhere has nothing the parser
  // could have truncated: done.
  const WireLayout& layout = *Layouts().Get(message->GetDescriptor());
  if (parsed && !layout.has_uint32) return absl::OkStatus();
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) slices.clear();
  if (parsed) {
    // Parsed: unless a uint32 or enum field was given more than 32 bits,
    // which the parser truncated silently (ttl_ms 2^32 + 1000 became 1000,
    // kind 2^32 + 2 became FILE).
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
  // The request's bytes in one piece: the slice itself when there is one
  // (no copy), else a copy.
  std::string copy;
  absl::string_view flat;
  if (slices.size() == 1) {
    flat = absl::string_view(
        reinterpret_cast<const char*>(slices[0].begin()), slices[0].size());
  } else {
    copy.reserve(bytes.Length());
    for (const grpc::Slice& slice : slices) {
      copy.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    flat = copy;
  }
  const pb::Descriptor& type = *message->GetDescriptor();
  if (parsed) {
    if (!HasUint32Overflow(layout, flat, 0))
      return absl::OkStatus();
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
