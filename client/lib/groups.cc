// cgacct::client::Groups and EventsWatch (include/cgacct/groups.h).
#include "cgacct/groups.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/lib/groups_impl.h"
#include "client/lib/grpc_status.h"
#include "client/lib/rpcs.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::client {
namespace {

using internal::FromGrpc;
using Stub = v1::Accounting::Stub;

Status Invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}

Status CheckOptions(const CallOptions& options) {
  if (options.max_attempts < 1) {
    return Invalid("cgacct::client::CallOptions: max_attempts must be >= 1");
  }
  if (options.call_timeout.count() <= 0 ||
      options.call_timeout > std::chrono::hours(24)) {
    // (now + milliseconds::max() overflows: every deadline was past.)
    return Invalid(
        "cgacct::client::CallOptions: call_timeout must be > 0 and at most 24 h");
  }
  return Status();
}

v1::Limits LimitsIn(const LimitsUpdate& u) {
  v1::Limits limits;
  if (u.max_bytes.has_value()) limits.set_max_bytes(*u.max_bytes);
  if (u.high_bytes.has_value()) limits.set_high_bytes(*u.high_bytes);
  if (u.min_bytes.has_value()) limits.set_min_bytes(*u.min_bytes);
  if (u.low_bytes.has_value()) limits.set_low_bytes(*u.low_bytes);
  if (u.oom_group.has_value()) limits.set_oom_group(*u.oom_group);
  return limits;
}

Limits LimitsOut(const v1::Limits& l) {
  // Responses set all five; an absent one reads as the kernel's default.
  Limits limits;
  if (l.has_max_bytes()) limits.max_bytes = l.max_bytes();
  if (l.has_high_bytes()) limits.high_bytes = l.high_bytes();
  limits.min_bytes = l.min_bytes();
  limits.low_bytes = l.low_bytes();
  limits.oom_group = l.oom_group();
  return limits;
}

Group GroupOut(const v1::Group& g) {
  return Group{g.path(), g.id(), LimitsOut(g.limits())};
}

EventCounts EventsOut(const v1::MemoryEvents& e) {
  EventCounts c;
  c.low = e.low();
  c.high = e.high();
  c.max = e.max();
  c.oom = e.oom();
  c.oom_kill = e.oom_kill();
  c.oom_group_kill = e.oom_group_kill();
  c.sock_throttled = e.sock_throttled();
  return c;
}

v1::FlushMode FlushIn(FlushMode mode) {
  switch (mode) {
    case FlushMode::kThreshold:
      return v1::FLUSH_MODE_THRESHOLD;
    case FlushMode::kNone:
      return v1::FLUSH_MODE_NONE;
    case FlushMode::kExact:
      break;
  }
  return v1::FLUSH_MODE_EXACT;
}

}  // namespace

std::optional<uint64_t> GroupStats::Stat(std::string_view name) const {
  for (const auto& [n, v] : stat) {
    if (n == name) return v;
  }
  return std::nullopt;
}

// --- EventsWatch -----------------------------------------------------------

struct EventsWatch::Impl {
  grpc::ClientContext context;
  std::unique_ptr<Stub> stub;
  std::unique_ptr<grpc::ClientReader<v1::EventsUpdate>> reader;
  // The stream's end, once Read() returned false (only the thread in
  // Next() or the destructor touches these).
  bool finished = false;
  Status end;
};

EventsWatch::EventsWatch(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

EventsWatch::~EventsWatch() {
  if (impl_->finished) return;
  impl_->context.TryCancel();
  v1::EventsUpdate ignored;
  while (impl_->reader->Read(&ignored)) {
  }
  impl_->reader->Finish().IgnoreError();
}

Result<EventsUpdate> EventsWatch::Next() {
  Impl& m = *impl_;
  if (m.finished) return m.end;
  v1::EventsUpdate update;
  if (m.reader->Read(&update)) {
    return EventsUpdate{update.path(), EventsOut(update.events()),
                        EventsOut(update.events_local())};
  }
  m.finished = true;
  m.end = FromGrpc(m.reader->Finish());
  if (m.end.ok()) {
    // The server never ends a watch OK; say so rather than return OK.
    m.end = Status(StatusCode::kUnavailable,
                   "WatchEvents: the server ended the stream");
  }
  return m.end;
}

void EventsWatch::Cancel() { impl_->context.TryCancel(); }

// --- Groups ----------------------------------------------------------------

std::unique_ptr<Groups::Impl> Groups::Impl::OneChannel(
    std::shared_ptr<grpc::Channel> channel, CallOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->channels = [channel]() {
    return Result<std::vector<std::shared_ptr<grpc::Channel>>>(
        std::vector<std::shared_ptr<grpc::Channel>>{channel});
  };
  impl->watch_channel = [channel](std::string_view) {
    return Result<std::shared_ptr<grpc::Channel>>(channel);
  };
  return impl;
}

namespace {

// Sends `call(stub, context)` over each of `impl`'s channels in turn (the
// next after UNAVAILABLE / DEADLINE_EXCEEDED), `attempts` attempts per
// channel while it fails with a retryable code.
template <typename Call>
Status Send(const Groups::Impl& impl, bool retried, Call call) {
  Result<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      impl.channels();
  if (!channels.ok()) return channels.status();
  Status last(StatusCode::kUnavailable, "no node to send the call to");
  const int attempts = retried ? impl.options.max_attempts : 1;
  for (const std::shared_ptr<grpc::Channel>& channel : *channels) {
    std::unique_ptr<Stub> stub = v1::Accounting::NewStub(channel);
    const grpc::Status s = internal::CallWithRetries(
        attempts, impl.options.call_timeout,
        [&](grpc::ClientContext* context) { return call(*stub, context); });
    if (s.ok()) return Status();
    last = FromGrpc(s);
    if (last.code() != StatusCode::kUnavailable &&
        last.code() != StatusCode::kDeadlineExceeded) {
      return last;
    }
  }
  return last;
}

}  // namespace

Groups::Groups(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Groups::~Groups() = default;

Result<std::unique_ptr<Groups>> Groups::Open(
    std::shared_ptr<grpc::Channel> channel, CallOptions options) {
  if (channel == nullptr) return Invalid("channel: null");
  if (Status s = CheckOptions(options); !s.ok()) return s;
  return std::unique_ptr<Groups>(
      new Groups(Impl::OneChannel(std::move(channel), options)));
}

Result<std::unique_ptr<Groups>> Groups::Open(const std::string& target,
                                             const ConnectOptions& connect,
                                             CallOptions options) {
  Result<std::shared_ptr<grpc::Channel>> channel = MakeChannel(target, connect);
  if (!channel.ok()) return channel.status();
  return Open(std::move(*channel), options);
}

Result<Group> Groups::CreateGroup(std::string_view path,
                                  const LimitsUpdate& limits) {
  v1::CreateGroupRequest request;
  request.set_path(std::string(path));
  *request.mutable_limits() = LimitsIn(limits);
  v1::Group group;
  Status s = Send(*impl_, /*retried=*/false,
                  [&](Stub& stub, grpc::ClientContext* context) {
                    return stub.CreateGroup(context, request, &group);
                  });
  if (!s.ok()) return s;
  return GroupOut(group);
}

Result<uint64_t> Groups::DeleteGroup(std::string_view path) {
  v1::DeleteGroupRequest request;
  request.set_path(std::string(path));
  v1::DeleteGroupResponse response;
  Status s = Send(*impl_, /*retried=*/false,
                  [&](Stub& stub, grpc::ClientContext* context) {
                    return stub.DeleteGroup(context, request, &response);
                  });
  if (!s.ok()) return s;
  return uint64_t{response.reparented_pages()};
}

Result<Group> Groups::SetLimits(std::string_view path,
                                const LimitsUpdate& limits) {
  v1::SetLimitsRequest request;
  request.set_path(std::string(path));
  *request.mutable_limits() = LimitsIn(limits);
  v1::Group group;
  Status s = Send(*impl_, /*retried=*/true,
                  [&](Stub& stub, grpc::ClientContext* context) {
                    return stub.SetLimits(context, request, &group);
                  });
  if (!s.ok()) return s;
  return GroupOut(group);
}

Result<std::vector<std::string>> Groups::ListGroups(std::string_view path,
                                                    bool recursive) {
  v1::ListGroupsRequest request;
  request.set_path(std::string(path));
  request.set_recursive(recursive);
  std::vector<std::string> paths;
  while (true) {
    v1::ListGroupsResponse response;
    Status s = Send(*impl_, /*retried=*/true,
                    [&](Stub& stub, grpc::ClientContext* context) {
                      return stub.ListGroups(context, request, &response);
                    });
    if (!s.ok()) return s;
    for (const std::string& p : response.paths()) paths.push_back(p);
    if (response.next_page_token().empty()) return paths;
    request.set_page_token(response.next_page_token());
  }
}

Result<GroupStats> Groups::GetStats(std::string_view path, FlushMode flush) {
  v1::GetStatsRequest request;
  request.set_path(std::string(path));
  request.set_flush(FlushIn(flush));
  v1::GroupStats s;
  Status status = Send(*impl_, /*retried=*/true,
                       [&](Stub& stub, grpc::ClientContext* context) {
                         return stub.GetStats(context, request, &s);
                       });
  if (!status.ok()) return status;
  GroupStats out;
  out.path = s.path();
  out.memory_current_bytes = s.memory_current_bytes();
  out.memory_peak_bytes = s.memory_peak_bytes();
  out.limits = LimitsOut(s.limits());
  out.stat.reserve(s.stat_size());
  for (const v1::StatEntry& e : s.stat()) out.stat.emplace_back(e.name(), e.value());
  out.events = EventsOut(s.events());
  out.events_local = EventsOut(s.events_local());
  out.failcnt = s.failcnt();
  out.emin_bytes = s.emin_bytes();
  out.elow_bytes = s.elow_bytes();
  out.flushed = s.flushed();
  out.max_staleness_us = s.max_staleness_us();
  out.summed_shards.assign(s.summed_shards().begin(), s.summed_shards().end());
  out.missing_shards.assign(s.missing_shards().begin(),
                            s.missing_shards().end());
  return out;
}

Result<uint64_t> Groups::Reclaim(std::string_view path, uint64_t nr_bytes) {
  if (nr_bytes == 0) return Invalid("nr_bytes: must be > 0");
  v1::ReclaimRequest request;
  request.set_path(std::string(path));
  request.set_nr_bytes(nr_bytes);
  v1::ReclaimResponse response;
  Status s = Send(*impl_, /*retried=*/false,
                  [&](Stub& stub, grpc::ClientContext* context) {
                    return stub.Reclaim(context, request, &response);
                  });
  if (!s.ok()) return s;
  return uint64_t{response.reclaimed_bytes()};
}

Result<std::unique_ptr<EventsWatch>> Groups::WatchEvents(
    std::string_view path, std::chrono::milliseconds timeout) {
  if (timeout.count() < 0 || timeout > std::chrono::hours(24 * 366))
    return Invalid("timeout: must be from 0 (no end) to 366 days");
  Result<std::shared_ptr<grpc::Channel>> channel = impl_->watch_channel(path);
  if (!channel.ok()) return channel.status();
  auto impl = std::make_unique<EventsWatch::Impl>();
  if (timeout.count() > 0) {
    impl->context.set_deadline(std::chrono::system_clock::now() + timeout);
  }
  impl->stub = v1::Accounting::NewStub(*channel);
  v1::WatchEventsRequest request;
  request.set_path(std::string(path));
  impl->reader = impl->stub->WatchEvents(&impl->context, request);
  return std::unique_ptr<EventsWatch>(new EventsWatch(std::move(impl)));
}

}  // namespace cgacct::client
