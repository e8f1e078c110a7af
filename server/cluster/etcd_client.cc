// EtcdClient (server/cluster/etcd_client.h).
#include "server/cluster/etcd_client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cgacct {

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // etcd: every key
}

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options_.credentials != nullptr ? options_.credentials
                                      : grpc::InsecureChannelCredentials();
  for (const std::string& endpoint : options_.endpoints) {
    Member m;
    m.endpoint = endpoint;
    grpc::ChannelArguments args;
    // A member that went away is noticed within seconds, not minutes.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    m.channel = grpc::CreateCustomChannel(endpoint, credentials, args);
    m.kv = etcdserverpb::KV::NewStub(m.channel);
    m.lease = etcdserverpb::Lease::NewStub(m.channel);
    m.watch = etcdserverpb::Watch::NewStub(m.channel);
    members_.push_back(std::move(m));
  }
}

const EtcdClient::Member& EtcdClient::Current() const {
  return members_[current_.load(std::memory_order_relaxed) % members_.size()];
}

std::string EtcdClient::CurrentEndpoint() const { return Current().endpoint; }

void EtcdClient::NextEndpoint() {
  current_.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<etcdserverpb::Watch::Stub> EtcdClient::WatchStub() {
  return Current().watch;
}

std::shared_ptr<etcdserverpb::Lease::Stub> EtcdClient::LeaseStub() {
  return Current().lease;
}

void EtcdClient::SetDeadline(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(options_.call_timeout));
  // Wait for a member being (re)connected, within the deadline.
  context->set_wait_for_ready(true);
}

absl::Status EtcdClient::Failed(const char* call, const Member& member,
                                const grpc::Status& status) {
  const bool moved = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                     status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (moved && &Current() == &member) NextEndpoint();
  // etcd answers "etcdserver: request timed out" and the like as
  // UNAVAILABLE or UNKNOWN: both mean the cluster could not commit now.
  return absl::UnavailableError(absl::StrCat(
      "etcd ", call, " at ", member.endpoint, " failed: ",
      status.error_message().empty() ? "(no message)" : status.error_message(),
      " (code ", static_cast<int>(status.error_code()), ")"));
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request) {
  const Member& m = Current();
  grpc::ClientContext context;
  SetDeadline(&context);
  etcdserverpb::TxnResponse response;
  grpc::Status s = m.kv->Txn(&context, request, &response);
  if (!s.ok()) return Failed("Txn", m, s);
  return response;
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& request) {
  const Member& m = Current();
  grpc::ClientContext context;
  SetDeadline(&context);
  etcdserverpb::RangeResponse response;
  grpc::Status s = m.kv->Range(&context, request, &response);
  if (!s.ok()) return Failed("Range", m, s);
  return response;
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(
    absl::Duration ttl) {
  const Member& m = Current();
  grpc::ClientContext context;
  SetDeadline(&context);
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(absl::ToInt64Seconds(ttl));
  etcdserverpb::LeaseGrantResponse response;
  grpc::Status s = m.lease->LeaseGrant(&context, request, &response);
  if (!s.ok()) return Failed("LeaseGrant", m, s);
  if (!response.error().empty())
    return absl::UnavailableError(
        absl::StrCat("etcd LeaseGrant at ", m.endpoint, ": ", response.error()));
  return response;
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  const Member& m = Current();
  grpc::ClientContext context;
  SetDeadline(&context);
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  grpc::Status s = m.lease->LeaseRevoke(&context, request, &response);
  if (!s.ok()) return Failed("LeaseRevoke", m, s);
  return absl::OkStatus();
}

}  // namespace cgacct
