#include "client/lib/rpcs.h"

#include <unistd.h>

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"

namespace cgacct::client::internal {
namespace {

std::string RandomRequestPrefix() {
  std::random_device rd;
  return absl::StrCat("cgacct-client-", rd(), rd(), rd());
}

}  // namespace

bool NotServedHere(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::FAILED_PRECONDITION ||
         code == grpc::StatusCode::CANCELLED;
}

bool Retryable(grpc::StatusCode code) {
  // CANCELLED: a node shutting down cancels the calls in flight; the
  // library never cancels its own unary calls.
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::ABORTED ||
         code == grpc::StatusCode::CANCELLED;
}

bool SessionGone(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::NOT_FOUND &&
         s.error_message().rfind("session_id", 0) == 0;
}

Rpcs::Rpcs(std::shared_ptr<grpc::Channel> channel, const Options& options)
    : options_(options),
      stub_(v1::Accounting::NewStub(std::move(channel))),
      request_prefix_(RandomRequestPrefix()) {}

std::string Rpcs::NextRequestId() {
  return absl::StrCat(request_prefix_, "-",
                      request_seq_.fetch_add(1, std::memory_order_relaxed));
}

template <typename Request>
void Rpcs::FillPageRequest(const std::string& sid, std::string_view group,
                           uint64_t nr_pages, int kind, Request* request) {
  request->set_path(std::string(group));
  request->set_nr_pages(nr_pages);
  request->set_kind(static_cast<v1::PageKind>(kind));
  request->set_request_id(NextRequestId());
  request->set_session_id(sid);
}

grpc::Status Rpcs::Charge(const std::string& sid, std::string_view group,
                          uint64_t nr_pages, int kind, uint64_t* throttle_us,
                          uint64_t batch_pages, uint64_t* charged,
                          bool resume) {
  v1::ChargeRequest request;
  FillPageRequest(sid, group, nr_pages, kind, &request);
  if (batch_pages > nr_pages) request.set_batch_pages(batch_pages);
  if (resume) request.set_resume(true);
  v1::ChargeResponse response;
  grpc::Status s = WithRetries([&](grpc::ClientContext* c) {
    charge_rpcs_.fetch_add(1, std::memory_order_relaxed);
    return stub_->Charge(c, request, &response);
  });
  if (s.ok() && throttle_us != nullptr) *throttle_us = response.throttle_us();
  if (s.ok() && charged != nullptr) *charged = response.nr_pages();
  if (!s.ok() && Retryable(s.error_code())) needs_reconcile_.store(true);
  return s;
}

grpc::Status Rpcs::Uncharge(const std::string& sid, std::string_view group,
                            uint64_t nr_pages, int kind, bool restock) {
  v1::UnchargeRequest request;
  FillPageRequest(sid, group, nr_pages, kind, &request);
  if (restock) request.set_restock(true);
  v1::UnchargeResponse response;
  grpc::Status s = WithRetries([&](grpc::ClientContext* c) {
    uncharge_rpcs_.fetch_add(1, std::memory_order_relaxed);
    return stub_->Uncharge(c, request, &response);
  });
  if (!s.ok() && Retryable(s.error_code())) needs_reconcile_.store(true);
  return s;
}

grpc::Status Rpcs::OpenSession(v1::OpenSessionResponse* response) {
  v1::OpenSessionRequest request;
  request.set_ttl_ms(static_cast<uint32_t>(options_.session_ttl.count()));
  std::string name = options_.client_name;
  if (name.empty()) {
    char host[64] = {};
    gethostname(host, sizeof(host) - 1);
    name = absl::StrCat(host, ":", getpid());
  }
  request.set_client_name(name);
  return WithRetries([&](grpc::ClientContext* c) {
    return stub_->OpenSession(c, request, response);
  });
}

grpc::Status Rpcs::GetSession(const std::string& sid, v1::SessionInfo* info) {
  v1::GetSessionRequest request;
  request.set_session_id(sid);
  return WithRetries([&](grpc::ClientContext* c) {
    return stub_->GetSession(c, request, info);
  });
}

grpc::Status Rpcs::CloseSession(const std::string& sid) {
  v1::CloseSessionRequest request;
  request.set_session_id(sid);
  v1::CloseSessionResponse response;
  return WithRetries([&](grpc::ClientContext* c) {
    return stub_->CloseSession(c, request, &response);
  });
}

std::unique_ptr<Rpcs::SessionStream> Rpcs::OpenStream(
    grpc::ClientContext* context) {
  return stub_->SessionStream(context);
}

void Rpcs::AddCounts(ClientStats* stats) const {
  stats->charge_rpcs += charge_rpcs_.load();
  stats->uncharge_rpcs += uncharge_rpcs_.load();
  stats->retries += retries_.load();
}

}  // namespace cgacct::client::internal
