// Requests read as raw bytes and parsed by the service itself (docs/DESIGN.md
// §4.10, issue 11 item 7): gRPC's own deserialization failure of the
// callback API answers UNIMPLEMENTED with an empty message for a unary call,
// and reports a failed read (like a half-close) for a stream message; reading
// grpc::ByteBuffer (the generated WithRawCallbackMethod_*) and parsing here
// lets the service answer INVALID_ARGUMENT saying what is wrong.
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_SERVER_RPC_CODEC_H_
#define CGACCT_SERVER_RPC_CODEC_H_

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace cgacct {

// Parses `bytes` (one gRPC message, left as it is) into `*message`, the way
// gRPC's own deserializer does (a zero-copy read of its slices). Errors:
// INVALID_ARGUMENT "request is not a valid cgacct.v1.ChargeRequest: <why>"
// (see DescribeUndecodable; "...: the call carried no request message" for
// a call without one), *message then holds an unspecified partial parse.
// Cost on success: the same as gRPC's typed path.
absl::Status ParseRequest(const grpc::ByteBuffer& bytes,
                          google::protobuf::Message* message);

// Serializes `message` into `*bytes` (replacing what it held), the way
// gRPC's typed path does. Errors: INTERNAL (protobuf could not serialize:
// over 2 GiB).
absl::Status SerializeResponse(const google::protobuf::Message& message,
                               grpc::ByteBuffer* bytes);

// Why `bytes` do not parse as message type `type`: the first wire-format
// fault found walking them (and, for a length-delimited field of message
// type, walking into it), e.g. "field 15 has wire type 7, which does not
// exist, at byte 0", "truncated: field 1 (path) needs 200 bytes at byte 2,
// 3 are left", "in field 1 (ops) at byte 0: ...". Offsets are from the
// start of the outermost message. Bytes that walk cleanly but still do not
// parse (a protobuf limit, e.g. nesting depth) get a generic reason. The
// answer never quotes the bytes themselves.
std::string DescribeUndecodable(const google::protobuf::Descriptor& type,
                                absl::string_view bytes);

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_CODEC_H_
