// cgacct::client::Status and Result<T>: how every call of the cgacct
// client library (cgacct/client.h, cgacct/groups.h, cgacct/cluster_client.h,
// cgacct/channel.h) says it failed, without exposing gRPC's types.
//
// A Status is a code and a message. The codes are google.rpc.Code's, with
// the same numbers as grpc::StatusCode and absl::StatusCode, so that a
// server's answer passes through unchanged: RESOURCE_EXHAUSTED at
// memory.max, NOT_FOUND for a missing group, INVALID_ARGUMENT naming the
// field, UNAVAILABLE / DEADLINE_EXCEEDED from the transport after the last
// attempt. The message is the server's (it names the field), or the
// library's when it refused a call before sending it (it names the
// argument or option).
//
// A Result<T> is a T or a Status that is not OK (absl::StatusOr's shape).
//
// Thread safety: values; a const Status or Result may be read from any
// number of threads.
#ifndef CGACCT_STATUS_H_
#define CGACCT_STATUS_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace cgacct::client {

// google.rpc.Code (the numbers of grpc::StatusCode).
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// The canonical name ("RESOURCE_EXHAUSTED"); "CODE_N" for a number outside
// google.rpc.Code.
std::string StatusCodeName(StatusCode code);

class Status {
 public:
  // OK.
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK", "CODE" or "CODE: message".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }
  friend bool operator!=(const Status& a, const Status& b) {
    return !(a == b);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A T, or the Status of why there is none (never OK then).
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  // `status` must not be OK; an OK one becomes INTERNAL (a library bug).
  Result(Status status)  // NOLINT: implicit by design
      : status_(status.ok() ? Status(StatusCode::kInternal,
                                     "Result made from an OK Status")
                            : std::move(status)) {}

  bool ok() const { return value_.has_value(); }
  // OK when there is a value.
  const Status& status() const { return status_; }
  // The value; calling these when !ok() is a bug (std::bad_optional_access).
  T& value() & { return value_.value(); }
  const T& value() const& { return value_.value(); }
  T&& value() && { return std::move(value_).value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace cgacct::client

#endif  // CGACCT_STATUS_H_
