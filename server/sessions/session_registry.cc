#include "server/sessions/session_registry.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/group_path.h"
#include "server/common/wire.h"
#include "server/sessions/session_state.h"

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;

constexpr size_t kMaxClientNameBytes = 128;
// Longest session_id quoted back in a message.
constexpr size_t kMaxQuotedIdBytes = 64;

v1::PageKind PageKindToProto(PageKind kind) {
  return kind == PageKind::kFile ? v1::PAGE_KIND_FILE : v1::PAGE_KIND_ANON;
}

const char* PageKindName(PageKind kind) {
  return kind == PageKind::kFile ? "FILE" : "ANON";
}

std::string QuoteId(absl::string_view id) {
  return absl::StrCat("\"", absl::CHexEscape(id.substr(0, kMaxQuotedIdBytes)),
                      id.size() > kMaxQuotedIdBytes ? "...\"" : "\"");
}

absl::Status NoSuchSession(absl::string_view id) {
  return absl::NotFoundError(absl::StrCat(
      "session_id ", QuoteId(id),
      ": no such session (closed, expired, or not opened by this caller)"));
}

// 128 random bits from the kernel's CSPRNG (std::random_device reads
// /dev/urandom or getrandom() on Linux), as 32 lower-case hex digits.
std::string NewSessionId() {
  static std::random_device* const device = new std::random_device();
  static absl::Mutex device_mu;
  uint32_t words[4];
  {
    absl::MutexLock l(&device_mu);
    for (uint32_t& w : words) w = (*device)();
  }
  return absl::StrFormat("%08x%08x%08x%08x", words[0], words[1], words[2],
                         words[3]);
}

}  // namespace

absl::Status SessionOptions::Validate() const {
  if (min_ttl_ms < 1)
    return absl::InvalidArgumentError("session_min_ttl_ms must be >= 1");
  if (max_ttl_ms < min_ttl_ms)
    return absl::InvalidArgumentError(
        absl::StrCat("session_max_ttl_ms ", max_ttl_ms,
                     " is below session_min_ttl_ms ", min_ttl_ms));
  if (default_ttl_ms < min_ttl_ms || default_ttl_ms > max_ttl_ms)
    return absl::InvalidArgumentError(absl::StrCat(
        "session_default_ttl_ms ", default_ttl_ms, " out of [", min_ttl_ms,
        ", ", max_ttl_ms, "] (session_min_ttl_ms, session_max_ttl_ms)"));
  if (max_pages < 1)
    return absl::InvalidArgumentError("session_max_pages must be >= 1");
  if (max_sessions_per_identity < 1)
    return absl::InvalidArgumentError("max_sessions_per_identity must be >= 1");
  if (drain_timeout < absl::ZeroDuration())
    return absl::InvalidArgumentError("session_drain_timeout_ms must be >= 0");
  if (silent_after_unanswered_drains < 1)
    return absl::InvalidArgumentError(
        "silent_after_unanswered_drains must be >= 1");
  if (drain_wait_threads < 1 || drain_wait_threads > 4096)
    return absl::InvalidArgumentError(
        absl::StrCat("session_drain_wait_threads ", drain_wait_threads,
                     " out of [1, 4096]"));
  if (max_peak_watermarks_per_identity < 1)
    return absl::InvalidArgumentError(
        "max_peak_watermarks_per_identity must be >= 1");
  return absl::OkStatus();
}

SessionRegistry::SessionRegistry(Engine& engine, SessionOptions options)
    : engine_(engine),
      options_(options),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()) {
  reaper_ = std::thread([this] { ReaperLoop(); });
  engine_.SetRemoteStockDrainer(this);
}

SessionRegistry::~SessionRegistry() {
  Shutdown();
  engine_.SetRemoteStockDrainer(nullptr);
}

int64_t SessionRegistry::NowMs() const { return clock_.NowNs() / 1000000; }

void SessionRegistry::Shutdown() {
  {
    absl::MutexLock l(&mu_);
    if (!shut_down_) {
      shut_down_ = true;
      for (auto& [id, s] : sessions_) {
        if (s->stream == nullptr) continue;
        s->stream->End(absl::UnavailableError(
            "cgacctd is shutting down; the session ends with it (usage is "
            "not persisted)"));
        s->stream = nullptr;
        attached_.fetch_sub(1, std::memory_order_relaxed);
      }
      for (auto& [id, drain] : drains_) drain->pending.clear();
    }
    cv_.SignalAll();
  }
  if (reaper_.joinable()) reaper_.join();
}

absl::StatusOr<std::shared_ptr<SessionRegistry::Session>>
SessionRegistry::FindLocked(const std::string* identity,
                            absl::string_view session_id) const {
  if (session_id.empty())
    return absl::InvalidArgumentError(
        "session_id must not be empty when present");
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() || it->second->closing ||
      (identity != nullptr && it->second->identity != *identity))
    return NoSuchSession(session_id);
  return it->second;
}

absl::StatusOr<v1::OpenSessionResponse> SessionRegistry::Open(
    const std::string& identity, const v1::OpenSessionRequest& request) {
  uint32_t ttl_ms = request.ttl_ms();
  if (ttl_ms == 0) ttl_ms = options_.default_ttl_ms;
  if (ttl_ms < options_.min_ttl_ms || ttl_ms > options_.max_ttl_ms)
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl_ms ", ttl_ms, " out of [", options_.min_ttl_ms, ", ",
        options_.max_ttl_ms,
        "] (--session_min_ttl_ms, --session_max_ttl_ms; 0 means the default ",
        options_.default_ttl_ms, ")"));
  if (request.client_name().size() > kMaxClientNameBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("client_name is ", request.client_name().size(),
                     " bytes; at most ", kMaxClientNameBytes, " allowed"));
  // SessionInfo.client_name is a proto `string`: only printable ASCII goes
  // back out (a "host:pid" label), so GetSession never sends invalid UTF-8.
  for (const char c : request.client_name()) {
    if (c < 0x20 || c > 0x7e)
      return absl::InvalidArgumentError(absl::StrCat(
          "client_name \"", absl::CHexEscape(request.client_name()),
          "\": only printable ASCII (0x20-0x7e) is allowed"));
  }
  auto session = std::make_shared<Session>();
  session->id = NewSessionId();
  session->identity = identity;
  session->client_name = request.client_name();
  session->ttl_ms = ttl_ms;
  absl::MutexLock l(&mu_);
  if (shut_down_)
    return absl::UnavailableError("cgacctd is shutting down; no new sessions");
  uint32_t& count = per_identity_[identity];
  if (count >= options_.max_sessions_per_identity) {
    if (count == 0) per_identity_.erase(identity);
    return absl::ResourceExhaustedError(
        absl::StrCat("this caller already has ", count,
                     " open sessions (--max_sessions_per_identity ",
                     options_.max_sessions_per_identity, "); close one first"));
  }
  ++count;
  session->deadline_ms = NowMs() + ttl_ms;
  sessions_.emplace(session->id, session);
  ++stats_.opened;
  v1::OpenSessionResponse response;
  response.set_session_id(session->id);
  response.set_ttl_ms(ttl_ms);
  response.set_max_held_pages(options_.max_pages);
  return response;
}

absl::StatusOr<uint64_t> SessionRegistry::Close(const std::string& identity,
                                                absl::string_view session_id) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock l(&mu_);
    absl::StatusOr<std::shared_ptr<Session>> found =
        FindLocked(&identity, session_id);
    if (!found.ok()) return found.status();
    session = *std::move(found);
    session->closing = true;
  }
  return Finish(std::move(session), EndReason::kClose);
}

absl::Status SessionRegistry::Get(const std::string& identity,
                                  absl::string_view session_id,
                                  v1::SessionInfo* out) const {
  absl::MutexLock l(&mu_);
  absl::StatusOr<std::shared_ptr<Session>> found =
      FindLocked(&identity, session_id);
  if (!found.ok()) return found.status();
  const Session& s = **found;
  out->set_session_id(s.id);
  out->set_client_name(s.client_name);
  out->set_ttl_ms(s.ttl_ms);
  out->set_expires_in_ms(
      static_cast<uint64_t>(std::max<int64_t>(0, s.deadline_ms - NowMs())));
  out->set_attached(s.stream != nullptr);
  out->set_held_pages(s.held);
  out->set_max_held_pages(options_.max_pages);
  std::vector<const Holding*> sorted;
  for (const auto& [key, h] : s.holdings)
    if (h.nr_pages > 0) sorted.push_back(&h);
  std::sort(sorted.begin(), sorted.end(),
            [](const Holding* a, const Holding* b) {
              return std::tie(a->path, a->kind) < std::tie(b->path, b->kind);
            });
  for (const Holding* h : sorted) {
    v1::SessionHolding* o = out->add_holdings();
    o->set_path(h->path);
    o->set_kind(PageKindToProto(h->kind));
    o->set_nr_pages(h->nr_pages);
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionRegistry::Op> SessionRegistry::BeginOp(
    const std::string& identity, absl::string_view session_id,
    GroupHandle group, absl::string_view path, PageKind kind, uint64_t nr_pages,
    bool charge) {
  absl::MutexLock l(&mu_);
  absl::StatusOr<std::shared_ptr<Session>> found =
      FindLocked(&identity, session_id);
  if (!found.ok()) return found.status();
  Session& s = **found;
  if (charge) {
    const uint64_t after = s.held + s.reserved + nr_pages;
    if (after > options_.max_pages || after < nr_pages)
      return absl::ResourceExhaustedError(
          absl::StrCat("session_id ", QuoteId(session_id), " holds ", s.held,
                       " pages (", s.reserved, " more being charged); ",
                       nr_pages, " more would exceed its max_held_pages of ",
                       options_.max_pages, " (--session_max_pages)"));
    s.reserved += nr_pages;
  } else {
    auto it =
        s.holdings.find(std::make_pair(group.id(), static_cast<int>(kind)));
    const uint64_t have = it == s.holdings.end() ? 0 : it->second.nr_pages;
    if (nr_pages > have)
      return absl::FailedPreconditionError(
          absl::StrCat("session_id ", QuoteId(session_id), " holds ", have, " ",
                       PageKindName(kind), " pages of ", QuotePath(path),
                       "; cannot uncharge ", nr_pages, " in its name"));
    NoteHoldingLocked(s, it->second.path, it->second.nr_pages,
                      it->second.nr_pages - nr_pages);
    it->second.nr_pages -= nr_pages;
    s.held -= nr_pages;
  }
  ++s.in_flight;
  Op op;
  op.session = *std::move(found);
  op.group = group;
  op.kind = kind;
  op.nr_pages = nr_pages;
  op.charge = charge;
  op.path = std::string(path);
  // The path is kept with the holding for GetSession and reparenting.
  if (charge) {
    Holding& h =
        op.session
            ->holdings[std::make_pair(group.id(), static_cast<int>(kind))];
    if (h.path.empty()) {
      h.group = group;
      h.path = std::string(path);
      h.kind = kind;
    }
  }
  return op;
}

void SessionRegistry::EndOp(const Op& op, bool applied,
                            uint64_t charged_pages, bool refilled) {
  absl::MutexLock l(&mu_);
  Session& s = *op.session;
  Holding& h =
      s.holdings[std::make_pair(op.group.id(), static_cast<int>(op.kind))];
  if (h.path.empty()) {  // moved away by OnGroupDeleted meanwhile
    h.group = op.group;
    h.path = op.path;
    h.kind = op.kind;
  }
  if (op.charge) {
    s.reserved -= op.nr_pages;
    if (applied) {
      const uint64_t held = std::min(charged_pages, op.nr_pages);
      NoteHoldingLocked(s, h.path, h.nr_pages, h.nr_pages + held);
      h.nr_pages += held;
      s.held += held;
    }
  } else if (!applied) {
    NoteHoldingLocked(s, h.path, h.nr_pages, h.nr_pages + op.nr_pages);
    h.nr_pages += op.nr_pages;
    s.held += op.nr_pages;
  }
  if (applied && refilled) {
    ++s.refills;
    s.stock_empty_below.clear();
  }
  if (--s.in_flight == 0 && s.closing) cv_.SignalAll();
}

void SessionRegistry::ChargeApplied(const Op& op) {
  op.session->charges_applied.fetch_add(1, std::memory_order_relaxed);
}

uint64_t SessionRegistry::UnchargeHolding(const RemoteStockReturn& h) {
  if (h.nr_pages == 0) return 0;
  // At most: pages the session recorded may have been uncharged without
  // naming it (an unowned Uncharge of the same group); from the heir if the
  // group was deleted since (Engine::UnchargeAtMost).
  absl::StatusOr<UnchargeResult> r =
      engine_.UnchargeAtMost(h.group, h.path, h.nr_pages, h.kind);
  return r.ok() ? r->nr_pages : 0;
}

absl::Status SessionRegistry::EndStatus(const Session& s, EndReason reason) {
  switch (reason) {
    case EndReason::kClose:
      return absl::OkStatus();
    case EndReason::kExpire:
      return absl::NotFoundError(
          absl::StrCat("session_id ", QuoteId(s.id), " expired: no keepalive for ",
                       s.ttl_ms, " ms; its pages were uncharged"));
    case EndReason::kOomKill:
      break;
    case EndReason::kShardMoved:
      return absl::NotFoundError(absl::StrCat(
          "session_id ", QuoteId(s.id),
          " ended: it held pages in a shard this node no longer owns "
          "(cluster mode: the shard moved, or this node lost its etcd lease); "
          "its pages were uncharged here: open a session at the shard's owner "
          "(GetClusterMap) and charge them again"));
  }
  // "session_id ..." NOT_FOUND, as an expiry: the session is gone (the
  // client library opens a new one and rebuilds its books).
  return absl::NotFoundError(absl::StrCat(
      "session_id ", QuoteId(s.id), " was OOM-killed: an OOM in ",
      QuotePath(s.oom_killed_by),
      " killed the whole group (memory.oom.group), and this session held "
      "pages in it; its pages were uncharged"));
}

uint64_t SessionRegistry::Finish(std::shared_ptr<Session> session,
                                 EndReason reason) {
  std::vector<RemoteStockReturn> holdings;
  std::vector<std::pair<std::string, uint64_t>> watermarks;
  {
    absl::MutexLock l(&mu_);
    Session* s = session.get();
    while (s->in_flight > 0) cv_.Wait(&mu_);
    sessions_.erase(s->id);
    auto count = per_identity_.find(s->identity);
    if (count != per_identity_.end() && --count->second == 0)
      per_identity_.erase(count);
    DropFromDrainsLocked(s);
    HearFromLocked(*s);  // no longer counted as silent
    watermarks = TakeWatermarksLocked(*s);
    if (s->stream != nullptr) {
      s->stream->End(EndStatus(*s, reason));
      s->stream = nullptr;
      attached_.fetch_sub(1, std::memory_order_relaxed);
    }
    for (auto& [key, h] : s->holdings) {
      if (h.nr_pages == 0) continue;
      NoteHoldingLocked(*s, h.path, h.nr_pages, 0);
      holdings.push_back(
          RemoteStockReturn{h.group, h.path, h.kind, h.nr_pages});
    }
    s->holdings.clear();
    s->held = 0;
  }
  // Its open memory.peak files close with it (gone with a deleted group).
  for (const auto& [path, id] : watermarks)
    engine_.ClosePeakWatermark(path, id).IgnoreError();
  uint64_t returned = 0;
  for (const RemoteStockReturn& h : holdings) returned += UnchargeHolding(h);
  // The uncharges went through the engine's per-CPU stock, which keeps up
  // to a batch per CPU charged. A task's exit in the kernel leaves such
  // stocked pages charged until the stock is reused or drained; cgacct
  // drains the groups' stock (drain_all_stock(memcg), as the kernel does when
  // a memcg goes offline) so that a closed or expired client leaves
  // memory.current exact: 0 once every client is gone. Closes are rare.
  absl::flat_hash_set<uint64_t> drained;
  for (const RemoteStockReturn& h : holdings)
    if (drained.insert(h.group.id()).second)
      engine_.DrainStock(h.group, h.path).IgnoreError();  // gone: nothing
  absl::MutexLock l(&mu_);
  switch (reason) {
    case EndReason::kClose:
      ++stats_.closed;
      stats_.returned_pages_close += returned;
      break;
    case EndReason::kExpire:
      ++stats_.expired;
      stats_.returned_pages_expire += returned;
      break;
    case EndReason::kOomKill:
      ++stats_.oom_killed;
      stats_.returned_pages_oom_kill += returned;
      break;
    case EndReason::kShardMoved:
      ++stats_.shard_moved;
      stats_.returned_pages_shard_moved += returned;
      break;
  }
  return returned;
}

void SessionRegistry::DropFromDrainsLocked(Session* session) {
  bool signal = false;
  for (auto& [id, drain] : drains_) signal |= drain->pending.erase(session) > 0;
  if (signal) cv_.SignalAll();
}

size_t SessionRegistry::ReapExpired() {
  std::vector<std::shared_ptr<Session>> expired;
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return 0;
    const int64_t now = NowMs();
    for (auto& [id, s] : sessions_) {
      if (!s->closing && s->deadline_ms <= now) {
        s->closing = true;
        expired.push_back(s);
      }
    }
  }
  for (std::shared_ptr<Session>& s : expired)
    Finish(std::move(s), EndReason::kExpire);
  return expired.size();
}

size_t SessionRegistry::EndSessionsHolding(
    const std::vector<std::string>& roots) {
  std::vector<std::shared_ptr<Session>> ended;
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return 0;
    for (auto& [id, s] : sessions_) {
      if (s->closing) continue;
      bool holds = false;
      for (const auto& [key, holding] : s->holdings) {
        for (const std::string& root : roots)
          holds |= holding.nr_pages > 0 && PathAtOrBelow(holding.path, root);
        if (holds) break;
      }
      if (holds) {
        s->closing = true;
        ended.push_back(s);
      }
    }
  }
  for (std::shared_ptr<Session>& s : ended)
    Finish(std::move(s), EndReason::kShardMoved);
  return ended.size();
}

void SessionRegistry::ReaperLoop() {
  absl::MutexLock l(&mu_);
  while (!shut_down_) {
    cv_.WaitWithTimeout(&mu_, options_.reap_interval);
    if (shut_down_) break;
    mu_.Unlock();
    ReapExpired();
    RunOomGroupKills();
    mu_.Lock();
  }
}

absl::StatusOr<uint64_t> SessionRegistry::Attach(const std::string& identity,
                                                 absl::string_view session_id,
                                                 SessionStreamSink* sink) {
  absl::MutexLock l(&mu_);
  if (shut_down_) return absl::UnavailableError("cgacctd is shutting down");
  absl::StatusOr<std::shared_ptr<Session>> found =
      FindLocked(&identity, session_id);
  if (!found.ok()) return found.status();
  Session& s = **found;
  if (s.stream != nullptr) {
    // Reconnect: the newer stream wins; the older one may be half-dead.
    DropFromDrainsLocked(&s);
    s.stream->End(absl::AbortedError(absl::StrCat(
        "session_id ", QuoteId(s.id), ": replaced by a newer SessionStream")));
  } else {
    attached_.fetch_add(1, std::memory_order_relaxed);
  }
  s.stream = sink;
  s.deadline_ms = NowMs() + s.ttl_ms;
  HearFromLocked(s);  // a new stream: ask it as any other
  // Not stock_empty_below: the client's stock does not change with its
  // stream (the libraries hold it off until a refill), and a client that
  // reattached after each short answer would be waited for each time.
  return uint64_t{s.ttl_ms};
}

absl::StatusOr<uint64_t> SessionRegistry::KeepAlive(
    absl::string_view session_id, SessionStreamSink* sink) {
  absl::MutexLock l(&mu_);
  absl::StatusOr<std::shared_ptr<Session>> found =
      FindLocked(nullptr, session_id);
  if (!found.ok() || (*found)->stream != sink) return NoSuchSession(session_id);
  Session& s = **found;
  s.deadline_ms = NowMs() + s.ttl_ms;
  return uint64_t{s.ttl_ms};
}

void SessionRegistry::Detach(absl::string_view session_id,
                             SessionStreamSink* sink) {
  absl::MutexLock l(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() || it->second->stream != sink) return;
  it->second->stream = nullptr;
  attached_.fetch_sub(1, std::memory_order_relaxed);
  DropFromDrainsLocked(it->second.get());
}

void SessionRegistry::OnGroupDeleted(uint64_t group_id,
                                     absl::string_view path) {
  // The parent answers for the pages (the root for a top-level group: its
  // uncharges then take them from the dying group, as a parent's do).
  const absl::string_view parent_path = ParentPath(path);
  absl::StatusOr<GroupHandle> parent = engine_.ResolveGroup(parent_path);
  absl::MutexLock l(&mu_);
  // Its open memory.peak files went with it (the engine closed them).
  std::vector<uint64_t> gone;
  for (const auto& [id, w] : watermarks_)
    if (w.group_id == group_id) gone.push_back(id);
  for (uint64_t id : gone) UnlinkWatermarkLocked(id);
  for (auto& [id, s] : sessions_) {
    for (int kind : {static_cast<int>(PageKind::kAnon),
                     static_cast<int>(PageKind::kFile)}) {
      auto it = s->holdings.find(std::make_pair(group_id, kind));
      if (it == s->holdings.end()) continue;
      Holding moved = std::move(it->second);
      s->holdings.erase(it);
      NoteHoldingLocked(*s, moved.path, moved.nr_pages, 0);
      if (!parent.ok()) {
        // The parent went too (a race with its own deletion): its
        // deletion moved its holdings on already; these are returned by
        // nobody.
        s->held -= moved.nr_pages;
        continue;
      }
      Holding& h = s->holdings[std::make_pair(parent->id(), kind)];
      if (h.path.empty()) {
        h.group = *parent;
        h.path = std::string(parent_path);
        h.kind = moved.kind;
      }
      NoteHoldingLocked(*s, h.path, h.nr_pages, h.nr_pages + moved.nr_pages);
      h.nr_pages += moved.nr_pages;
    }
  }
}

SessionStats SessionRegistry::stats() const {
  absl::MutexLock l(&mu_);
  SessionStats out = stats_;
  out.sessions = sessions_.size();
  out.peak_watermarks = watermarks_.size();
  return out;
}

}  // namespace cgacct
