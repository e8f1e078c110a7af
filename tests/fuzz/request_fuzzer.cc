// libFuzzer target: the service's request decoding path (docs/DESIGN.md §12,
// issue 11 item 5). Raw bytes go to cgacct.v1.Accounting methods exactly as
// a network client's would arrive, minus the network: through an in-process
// channel (grpc::Server::InProcessChannel) into gRPC's own deserialisation of
// each request type (ChargeStream's messages one by one), the service's
// validation and the engine.
//
// Input: a sequence of calls, each [method: 1 byte][length: 2 bytes, little
// endian][that many bytes of request] (the last call takes what is left).
// For ChargeStream the request bytes are themselves a sequence of
// [length: 2 bytes][message] frames, one stream message each. Before every
// input the engine is reset to a fixture: /a (max 4 MiB) with /a/b under
// it, and /c, holding some ANON and FILE pages, so that single calls on
// existing groups get past validation.
//
// Checked for every call:
//   - it ends (a 10 s deadline; DEADLINE_EXCEEDED means a hang);
//   - its code is one the method's contract allows (docs/DESIGN.md §4.2);
//     a request that is not valid protobuf is INVALID_ARGUMENT naming its
//     type ("request is not a valid cgacct.v1.X: ..."), and a ChargeStream
//     message of such bytes is never answered and never ends the stream OK;
//   - an error has a message without control bytes (§4.1: client text is
//     escaped); an INVALID_ARGUMENT message names the field (§4.1: path,
//     nr_pages, kind, cpu, flush, nr_bytes, ops, request_id, page_token,
//     session_id, ttl_ms, client_name);
//   - a refused call (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//     FAILED_PRECONDITION, or an undecodable request) changes nothing: the
//     groups, their limits, usage, peaks, failcnt, events and memory.stat
//     are as before;
//   - an OK answer decodes as the method's response type; a Charge answers
//     its nr_pages; ChargeBatch and ChargeStream answer one result per op,
//     in order, with the op's id, and a failed op's message starts with
//     "ops[i]: ".
// A violation prints what differs and aborts.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.pb.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "google/protobuf/stubs/logging.h"
#include "server/rpc/accounting_service.h"
#include "server/events/events_hub.h"
#include "server/metrics/rpc_metrics.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;

[[noreturn]] void Violation(const char* format, ...)
    __attribute__((format(printf, 1, 2)));
void Violation(const char* format, ...) {
  std::fprintf(stderr, "request_fuzzer: violated: ");
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\n");
  std::abort();
}

#define FUZZ_CHECK(cond, ...)            \
  do {                                   \
    if (!(cond)) Violation(__VA_ARGS__); \
  } while (0)

using grpc::StatusCode;

enum class Kind { kUnary, kBidi, kServerStream };

struct Method {
  const char* name;
  Kind kind;
  // Parses the bytes as the method's request type: false if gRPC's
  // deserialisation would refuse them too.
  bool (*parse)(const std::string& bytes);
  std::set<StatusCode> allowed;  // for a decodable request
};

template <typename Proto>
bool Parse(const std::string& bytes) {
  Proto p;
  return p.ParseFromString(bytes);
}

const std::vector<Method>& Methods() {
  using S = StatusCode;
  static const std::vector<Method>* methods = new std::vector<Method>{
      {"CreateGroup", Kind::kUnary, Parse<v1::CreateGroupRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND, S::ALREADY_EXISTS}},
      {"DeleteGroup", Kind::kUnary, Parse<v1::DeleteGroupRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND, S::FAILED_PRECONDITION}},
      {"ListGroups", Kind::kUnary, Parse<v1::ListGroupsRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND}},
      {"SetLimits", Kind::kUnary, Parse<v1::SetLimitsRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND}},
      {"Charge", Kind::kUnary, Parse<v1::ChargeRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND, S::RESOURCE_EXHAUSTED}},
      {"Uncharge", Kind::kUnary, Parse<v1::UnchargeRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND, S::FAILED_PRECONDITION}},
      {"ChargeBatch", Kind::kUnary, Parse<v1::ChargeBatchRequest>,
       {S::OK, S::INVALID_ARGUMENT}},
      {"ChargeStream", Kind::kBidi, Parse<v1::ChargeBatchRequest>,
       {S::OK, S::INVALID_ARGUMENT}},
      {"GetStats", Kind::kUnary, Parse<v1::GetStatsRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND}},
      {"Reclaim", Kind::kUnary, Parse<v1::ReclaimRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::NOT_FOUND, S::UNAVAILABLE}},
      // §4.9: the fuzzer cancels a stream after its first message
      // (CANCELLED); a group deleted meanwhile ends it NOT_FOUND.
      {"WatchEvents", Kind::kServerStream, Parse<v1::WatchEventsRequest>,
       {S::INVALID_ARGUMENT, S::NOT_FOUND, S::CANCELLED}},
      {"GetEngineInfo", Kind::kUnary, Parse<v1::GetEngineInfoRequest>,
       {S::OK}},
      // Sessions (§4.14): an input cannot know a session_id (128 random
      // bits), so Close/Get answer NOT_FOUND or INVALID_ARGUMENT, and a
      // Charge/Uncharge naming one NOT_FOUND (nothing applied); opens pile
      // up to --max_sessions_per_identity (then RESOURCE_EXHAUSTED) and
      // expire in 10 s.
      {"OpenSession", Kind::kUnary, Parse<v1::OpenSessionRequest>,
       {S::OK, S::INVALID_ARGUMENT, S::RESOURCE_EXHAUSTED}},
      {"CloseSession", Kind::kUnary, Parse<v1::CloseSessionRequest>,
       {S::INVALID_ARGUMENT, S::NOT_FOUND}},
      {"GetSession", Kind::kUnary, Parse<v1::GetSessionRequest>,
       {S::INVALID_ARGUMENT, S::NOT_FOUND}},
      // memory.peak watermarks (§4.17): an open needs a session the input
      // cannot know (NOT_FOUND), a watermark_id names none of the
      // fuzzer's (nothing is ever opened).
      {"OpenPeakWatermark", Kind::kUnary,
       Parse<v1::OpenPeakWatermarkRequest>,
       {S::INVALID_ARGUMENT, S::NOT_FOUND}},
      {"ResetPeakWatermark", Kind::kUnary, Parse<v1::PeakWatermarkRequest>,
       {S::INVALID_ARGUMENT, S::NOT_FOUND}},
      {"ReadPeakWatermark", Kind::kUnary, Parse<v1::PeakWatermarkRequest>,
       {S::INVALID_ARGUMENT, S::NOT_FOUND}},
      {"ClosePeakWatermark", Kind::kUnary, Parse<v1::PeakWatermarkRequest>,
       {S::INVALID_ARGUMENT, S::NOT_FOUND}},
      // §4.18: a single-node server answers cluster_mode false.
      {"GetClusterMap", Kind::kUnary, Parse<v1::GetClusterMapRequest>,
       {S::OK}},
  };
  return *methods;
}

// Error messages echo client text escaped (docs/DESIGN.md §4.1): no byte
// below 0x20, and no DEL.
bool HasControlBytes(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// Splits `bytes` into [u16 length][payload] frames; the last frame takes
// what is left.
std::vector<std::string> Frames(const std::string& bytes, size_t max_frames) {
  std::vector<std::string> frames;
  size_t pos = 0;
  while (pos < bytes.size() && frames.size() < max_frames) {
    size_t len = static_cast<uint8_t>(bytes[pos]);
    if (pos + 1 < bytes.size())
      len |= static_cast<size_t>(static_cast<uint8_t>(bytes[pos + 1])) << 8;
    pos = std::min(pos + 2, bytes.size());
    len = std::min(len, bytes.size() - pos);
    frames.push_back(bytes.substr(pos, len));
    pos += len;
  }
  return frames;
}

// What a refused call must leave alone.
struct Snapshot {
  std::vector<std::string> lines;
  bool operator==(const Snapshot& o) const { return lines == o.lines; }
};

class Env {
 public:
  Env() {
    // gRPC and protobuf log every refused message; the fuzzer judges the
    // answers instead.
    google::protobuf::SetLogHandler(nullptr);
    EngineOptions options;
    options.nr_cpus = 4;
    options.periodic_flush_interval = absl::ZeroDuration();
    options.clock = &clock_;
    options.observer = &hub_;  // WatchEvents' source of changes (§4.9)
    engine_ = std::move(Engine::Create(options)).value();
    AccountingServiceOptions service_options;
    service_options.clock = &clock_;
    service_options.events_hub = &hub_;
    service_ = std::make_unique<AccountingService>(*engine_, rpc_metrics_,
                                                   service_options);
    grpc::ServerBuilder builder;
    service_->RegisterOn(builder);
    server_ = builder.BuildAndStart();
    FUZZ_CHECK(server_ != nullptr, "the in-process server did not start");
    service_->StartSessionStreams();
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  }

  // Back to the fixture: every group but the root deleted (the root holds
  // no pages of its own), then /a, /a/b, /c with pages; and past the request_id
  // window, so an id used by an earlier input is new again. Groups are
  // deleted and created through the service, so that its state store holds
  // exactly the engine's groups (a group made behind the service's back has
  // no stored row, and deleting it through the service is then INTERNAL).
  void Reset() {
    absl::StatusOr<std::vector<std::string>> paths =
        engine_->ListGroups("/", true);
    FUZZ_CHECK(paths.ok(), "ListGroups(/): %s",
               paths.status().ToString().c_str());
    // Deepest first: children before parents.
    std::sort(paths->begin(), paths->end(),
              [](const std::string& x, const std::string& y) {
                return std::count(x.begin(), x.end(), '/') >
                       std::count(y.begin(), y.end(), '/');
              });
    auto stub = v1::Accounting::NewStub(channel_);
    for (const std::string& p : *paths) {
      grpc::ClientContext context;
      v1::DeleteGroupRequest request;
      request.set_path(p);
      v1::DeleteGroupResponse response;
      const grpc::Status s = stub->DeleteGroup(&context, request, &response);
      FUZZ_CHECK(s.ok(), "reset: delete %s: %s", p.c_str(),
                 s.error_message().c_str());
    }
    auto create = [&](const char* path, uint64_t max_pages) {
      grpc::ClientContext context;
      v1::CreateGroupRequest request;
      request.set_path(path);
      if (max_pages != 0)
        request.mutable_limits()->set_max_bytes(max_pages *
                                                engine_->page_size_bytes());
      v1::Group group;
      const grpc::Status s = stub->CreateGroup(&context, request, &group);
      FUZZ_CHECK(s.ok(), "reset: create %s: %s", path,
                 s.error_message().c_str());
    };
    create("/a", 1024);
    create("/a/b", 0);
    create("/c", 0);
    FUZZ_CHECK(engine_->Charge("/a/b", 100, PageKind::kAnon, 0).ok(),
               "reset: charge /a/b");
    FUZZ_CHECK(engine_->Charge("/a/b", 300, PageKind::kFile, 1).ok(),
               "reset: charge /a/b");
    FUZZ_CHECK(engine_->Charge("/c", 50, PageKind::kFile, 2).ok(),
               "reset: charge /c");
    clock_.Advance(absl::Seconds(61));
  }

  void RunCall(const Method& method, const std::string& bytes) {
    std::vector<std::string> messages;
    if (method.kind == Kind::kBidi) {
      messages = Frames(bytes, 64);
    } else {
      messages.push_back(bytes);
    }
    bool all_decodable = true;
    for (const std::string& m : messages)
      all_decodable = all_decodable && method.parse(m);

    const Snapshot before = Take();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    const std::string full = absl::StrCat("/cgacct.v1.Accounting/", method.name);
    grpc::Status status;
    std::vector<std::string> responses;
    switch (method.kind) {
      case Kind::kUnary: {
        grpc::ByteBuffer response;
        status = grpc::internal::BlockingUnaryCall(
            channel_.get(),
            grpc::internal::RpcMethod(full.c_str(),
                                      grpc::internal::RpcMethod::NORMAL_RPC),
            &context, ToBuffer(bytes), &response);
        if (status.ok()) responses.push_back(FromBuffer(response));
        break;
      }
      case Kind::kServerStream: {
        std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
            grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
                channel_.get(),
                grpc::internal::RpcMethod(
                    full.c_str(), grpc::internal::RpcMethod::SERVER_STREAMING),
                &context, ToBuffer(bytes)));
        // The first message (the current counts), then cancel: the
        // stream would wait for the next change.
        grpc::ByteBuffer response;
        if (reader->Read(&response)) {
          responses.push_back(FromBuffer(response));
          context.TryCancel();
        }
        status = reader->Finish();
        break;
      }
      case Kind::kBidi: {
        std::unique_ptr<
            grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
            stream(grpc::internal::ClientReaderWriterFactory<
                   grpc::ByteBuffer, grpc::ByteBuffer>::
                       Create(channel_.get(),
                              grpc::internal::RpcMethod(
                                  full.c_str(),
                                  grpc::internal::RpcMethod::BIDI_STREAMING),
                              &context));
        // One message, then its answer (the server answers each in order).
        grpc::ByteBuffer response;
        for (const std::string& m : messages) {
          if (!stream->Write(ToBuffer(m))) break;
          if (!stream->Read(&response)) break;
          responses.push_back(FromBuffer(response));
        }
        stream->WritesDone();
        while (stream->Read(&response)) responses.push_back(FromBuffer(response));
        status = stream->Finish();
        break;
      }
    }
    const StatusCode code = status.error_code();
    const char* name = method.name;
    FUZZ_CHECK(code != StatusCode::DEADLINE_EXCEEDED,
               "%s: no answer within 10 s", name);

    if (!all_decodable) {
      // The service parses requests itself (server/raw_request.h): bytes
      // that are no request are INVALID_ARGUMENT naming the request type.
      const std::string& message = status.error_message();
      if (method.kind == Kind::kBidi) {
        // The decodable messages before the first bad one are answered
        // (one of them may end the stream with its own error first); the
        // bad one is never answered and the stream never ends OK. (Until
        // ChargeStream was read as raw bytes it ended OK, unanswered: found
        // by this fuzzer, seed-stream-undecodable.) Each stream the server
        // ends before the client half-closes, with any status, leaves
        // ~27-34 KB in gRPC 1.51's in-process transport (not over TCP:
        // docs/DESIGN.md §4.10), which ends long runs of this fuzzer at
        // -rss_limit_mb after ~300,000 inputs.
        size_t first_bad = 0;
        while (first_bad < messages.size() &&
               method.parse(messages[first_bad])) {
          ++first_bad;
        }
        FUZZ_CHECK(!status.ok(), "%s: an undecodable message ended OK", name);
        FUZZ_CHECK(responses.size() <= first_bad,
                   "%s: %zu responses, message %zu is undecodable", name,
                   responses.size(), first_bad);
        if (responses.size() == first_bad &&
            absl::StrContains(message, "is not a valid")) {
          FUZZ_CHECK(code == StatusCode::INVALID_ARGUMENT &&
                         absl::StrContains(
                             message, absl::StrCat("request ", first_bad + 1,
                                                   ": request is not a valid "
                                                   "cgacct.v1.")),
                     "%s: undecodable message %zu: code %d (%s)", name,
                     first_bad, static_cast<int>(code), message.c_str());
        }
        return;
      } else {
        FUZZ_CHECK(
            code == StatusCode::INVALID_ARGUMENT &&
                absl::StrContains(message, "request is not a valid cgacct.v1."),
            "%s: an undecodable request answered code %d (%s)", name,
            static_cast<int>(code), message.c_str());
        FUZZ_CHECK(Take() == before,
                   "%s: an undecodable request changed the engine", name);
        return;
      }
    }
    {
      FUZZ_CHECK(method.allowed.count(code) > 0, "%s: code %d (%s) not allowed",
                 name, static_cast<int>(code), status.error_message().c_str());
    }
    if (!status.ok()) {
      FUZZ_CHECK(!status.error_message().empty(), "%s: code %d without message",
                 name, static_cast<int>(code));
      FUZZ_CHECK(!HasControlBytes(status.error_message()),
                 "%s: control bytes in the message", name);
    }
    if (code == StatusCode::INVALID_ARGUMENT) {
      static constexpr const char* kFields[] = {
          "path", "nr_pages", "kind", "cpu", "flush", "nr_bytes", "ops",
          "request_id", "page_token", "session_id", "ttl_ms", "client_name",
          "watermark_id"};
      bool named = false;
      for (const char* f : kFields)
        named = named || absl::StrContains(status.error_message(), f);
      FUZZ_CHECK(named, "%s: INVALID_ARGUMENT names no field: %s", name,
                 status.error_message().c_str());
    }
    const bool refused = code == StatusCode::INVALID_ARGUMENT ||
                         code == StatusCode::NOT_FOUND ||
                         code == StatusCode::ALREADY_EXISTS ||
                         code == StatusCode::FAILED_PRECONDITION;
    if (refused && method.kind != Kind::kBidi) {
      FUZZ_CHECK(Take() == before, "%s: refused with code %d (%s) but changed "
                 "the engine", name, static_cast<int>(code),
                 status.error_message().c_str());
    }
    CheckResponses(method, bytes, messages, status, responses);
  }

 private:
  void CheckResponses(const Method& method, const std::string& bytes,
                      const std::vector<std::string>& messages,
                      const grpc::Status& status,
                      const std::vector<std::string>& responses) {
    const std::string name = method.name;
    if (name == "Charge" && status.ok()) {
      v1::ChargeRequest req;
      v1::ChargeResponse resp;
      FUZZ_CHECK(req.ParseFromString(bytes) && responses.size() == 1 &&
                     resp.ParseFromString(responses[0]),
                 "Charge: OK without a ChargeResponse");
      FUZZ_CHECK(resp.nr_pages() == req.nr_pages(),
                 "Charge: answered %llu pages of %llu",
                 static_cast<unsigned long long>(resp.nr_pages()),
                 static_cast<unsigned long long>(req.nr_pages()));
    }
    if (name == "ChargeBatch" || name == "ChargeStream") {
      // One response per request answered, each one result per op.
      FUZZ_CHECK(responses.size() <= messages.size(),
                 "%s: more responses than requests", name.c_str());
      for (size_t i = 0; i < responses.size(); ++i) {
        v1::ChargeBatchRequest req;
        v1::ChargeBatchResponse resp;
        FUZZ_CHECK(req.ParseFromString(messages[i]) &&
                       resp.ParseFromString(responses[i]),
                   "%s: response %zu does not decode", name.c_str(), i);
        FUZZ_CHECK(resp.results_size() == req.ops_size(),
                   "%s: %d results for %d ops", name.c_str(),
                   resp.results_size(), req.ops_size());
        for (int j = 0; j < resp.results_size(); ++j) {
          const v1::OpResult& r = resp.results(j);
          FUZZ_CHECK(r.id() == req.ops(j).id(), "%s: result %d has id %llu",
                     name.c_str(), j, static_cast<unsigned long long>(r.id()));
          if (r.code() != 0) {
            FUZZ_CHECK(!HasControlBytes(r.message()),
                       "%s: control bytes in op %d's message", name.c_str(), j);
            FUZZ_CHECK(absl::StartsWith(r.message(), absl::StrCat("ops[", j,
                                                                  "]: ")),
                       "%s: op %d's message: %s", name.c_str(), j,
                       r.message().c_str());
          } else if (!req.ops(j).uncharge()) {
            FUZZ_CHECK(r.nr_pages() == req.ops(j).nr_pages(),
                       "%s: op %d charged %llu of %llu pages", name.c_str(), j,
                       static_cast<unsigned long long>(r.nr_pages()),
                       static_cast<unsigned long long>(req.ops(j).nr_pages()));
          }
        }
      }
    }
    if (name == "GetEngineInfo") {
      v1::EngineInfo info;
      FUZZ_CHECK(status.ok() && responses.size() == 1 &&
                     info.ParseFromString(responses[0]) &&
                     info.nr_cpus() == 4,
                 "GetEngineInfo: bad answer");
    }
  }

  // The engine's observable state, flushed (a flush changes no total).
  Snapshot Take() {
    Snapshot s;
    absl::StatusOr<std::vector<std::string>> paths =
        engine_->ListGroups("/", true);
    FUZZ_CHECK(paths.ok(), "ListGroups(/)");
    paths->insert(paths->begin(), "/");
    for (const std::string& p : *paths) {
      absl::StatusOr<GroupStats> st = engine_->GetStats(p, FlushMode::kExact);
      FUZZ_CHECK(st.ok(), "stats of %s", p.c_str());
      std::string line = absl::StrCat(
          p, " cur=", st->memory_current_pages, " peak=", st->memory_peak_pages,
          " max=", st->limits.max_pages, " high=", st->limits.high_pages,
          " min=", st->limits.min_pages, " low=", st->limits.low_pages,
          " failcnt=", st->failcnt, " ev=", st->events.low, ",",
          st->events.high, ",", st->events.max, ",", st->events.oom, ",",
          st->events.oom_kill, " evl=", st->events_local.low, ",",
          st->events_local.high, ",", st->events_local.max, ",",
          st->events_local.oom, ",", st->events_local.oom_kill);
      for (const StatEntry& e : st->stat)
        absl::StrAppend(&line, " ", e.name, "=", e.value);
      s.lines.push_back(std::move(line));
    }
    return s;
  }

  ManualClock clock_;
  EventsHub hub_;  // before the engine, which notifies it
  std::unique_ptr<Engine> engine_;
  RpcMetrics rpc_metrics_;
  std::unique_ptr<AccountingService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace
}  // namespace cgacct

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Built once, kept for the process (libFuzzer never returns to main).
  static cgacct::Env* env = new cgacct::Env();
  env->Reset();
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto& methods = cgacct::Methods();
  size_t pos = 0;
  int calls = 0;
  while (pos < input.size() && calls++ < 16) {
    const auto& method = methods[static_cast<uint8_t>(input[pos]) %
                                 methods.size()];
    ++pos;
    size_t len = 0;
    if (pos < input.size()) len = static_cast<uint8_t>(input[pos]);
    if (pos + 1 < input.size())
      len |= static_cast<size_t>(static_cast<uint8_t>(input[pos + 1])) << 8;
    pos = std::min(pos + 2, input.size());
    len = std::min(len, input.size() - pos);
    env->RunCall(method, input.substr(pos, len));
    pos += len;
  }
  return 0;
}
