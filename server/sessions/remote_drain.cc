// SessionRegistry's half that is drain_all_stock() over the network
// (server/sessions/session_registry.h, engine/remote_stock.h): drain
// requests out on the sessions' streams, their answers back, and the
// waiting charges that asked for them.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "server/common/wire.h"
#include "server/sessions/charger_scope.h"
#include "server/sessions/session_registry.h"
#include "server/sessions/session_state.h"

namespace cgacct {

namespace {
// How far up a drain answer's path is followed to the holding it names.
constexpr int kMaxAncestorSteps = 32;
}  // namespace

void SessionRegistry::DrainAnswer(
    absl::string_view session_id, SessionStreamSink* sink, uint64_t drain_id,
    const google::protobuf::RepeatedPtrField<v1::SessionHolding>& returned) {
  std::vector<RemoteStockReturn> late;
  {
    absl::MutexLock l(&mu_);
    auto sit = sessions_.find(session_id);
    if (sit == sessions_.end() || sit->second->stream != sink) return;
    Session& s = *sit->second;
    auto ait = s.asked.find(drain_id);
    auto dit = drains_.find(drain_id);
    Drain* drain = dit == drains_.end() ? nullptr : dit->second;
    if (ait == s.asked.end() &&
        (drain == nullptr || drain->pending.count(&s) == 0)) {
      // Not a request it was sent (or one of more than kMaxAskedRequests
      // ago whose charge no longer waits): not an answer, and what it lists
      // is not looked at (those pages stay held by the session until it
      // closes). Before, made-up answers of 10,000 entries were matched
      // against every holding, ~145 ms each under this mutex: one tenant
      // expired every other tenant's sessions (issue 22's re-attack, S1).
      return;
    }
    // A prompt answer (within half the bound of the last request) ends any
    // silence. A slow one returns its pages all the same but is a step
    // towards silent, as a request left unanswered is: a client answering
    // each request just inside the bound (or trickling a page at a time)
    // would otherwise make every refused charge under a shared limit wait
    // most of the bound, for ever (issue 22's attack round: 20.9 ms and
    // 312 ms per charge).
    if (options_.drain_timeout <= absl::ZeroDuration() ||
        absl::Now() - s.last_request_at <= options_.drain_timeout / 2) {
      HearFromLocked(s);
    } else {
      s.silent_request_out = false;  // answered: another may be sent
      ++stats_.drain_answers_slow;
      StrikeLocked(s);
    }
    uint64_t returned_pages = 0;
    // Its holdings by (path, kind): each entry costs a lookup per ancestor
    // of its path, not a pass over every holding.
    absl::flat_hash_map<std::pair<absl::string_view, PageKind>, Holding*>
        by_path;
    by_path.reserve(s.holdings.size());
    for (auto& [key, h] : s.holdings) {
      if (h.nr_pages != 0) by_path[{absl::string_view(h.path), h.kind}] = &h;
    }
    for (const v1::SessionHolding& r : returned) {
      const PageKind kind = PageKindFromProto(r.kind());
      // The holding the client names, or, if that group was deleted since
      // (its holding moved up, OnGroupDeleted), the nearest ancestor's.
      // A path longer than any group's is nobody's; the walk up stops after
      // kMaxAncestorSteps levels (a holding moves to the nearest surviving
      // ancestor when its group is deleted; hierarchies are shallow): a
      // path of 120,000 levels cost quadratic hashing under this mutex and
      // expired another tenant's sessions (issue 22's focused re-attack).
      if (r.path().size() > kMaxPathBytes) continue;
      Holding* match = nullptr;
      int steps = 0;
      for (absl::string_view path = r.path();
           match == nullptr && steps <= kMaxAncestorSteps; ++steps) {
        auto hit = by_path.find({path, kind});
        if (hit != by_path.end() && hit->second->nr_pages != 0) {
          match = hit->second;
          break;
        }
        if (path.empty() || path == "/") break;
        const size_t slash = path.rfind('/');
        if (slash == absl::string_view::npos) break;
        path = slash == 0 ? absl::string_view("/") : path.substr(0, slash);
      }
      if (match != nullptr) {
        Holding& h = *match;
        const uint64_t take = std::min(h.nr_pages, r.nr_pages());
        NoteHoldingLocked(s, h.path, h.nr_pages, h.nr_pages - take);
        h.nr_pages -= take;
        s.held -= take;
        returned_pages += take;
        stats_.drain_returned_pages += take;
        RemoteStockReturn back{h.group, h.path, kind, take};
        if (drain != nullptr) {
          drain->returned_pages += take;
          drain->returned_by_identity[s.identity] += take;
          drain->returned.push_back(std::move(back));
        } else {
          late.push_back(std::move(back));
        }
      }
    }
    // Less than asked: the client gave all the stock it had at or below
    // the drain's group (a well-behaved one keeps none back). Not waited
    // for there by other tenants' charges until it refills its stock (a
    // charge that charged more than it asked for): a client returning
    // nothing, or a page per answer and charging it again, at once or just
    // inside half the bound, would otherwise cost every refused charge of
    // the others under a shared limit its answer time, for ever (issue
    // 22's attack round: 6.2 and 7.6 ms per charge with 5 ms answers).
    // Judged against its own request.
    if (ait != s.asked.end()) {
      const Session::AskedRequest request = std::move(ait->second);
      s.asked.erase(ait);
      if (returned_pages >= request.nr_pages) {
        s.stock_empty_below.clear();
      } else if (s.refills == request.refills) {
        ++stats_.drain_answers_short;
        MarkStockEmptyLocked(s, request.path);
      }
    }
    if (drain != nullptr && drain->pending.erase(&s) > 0) {
      ++stats_.drain_requests_answered;
      // The last answer, or pages that may cover the charge: wake it.
      if (drain->pending.empty() || drain->returned_pages > 0)
        cv_.SignalAll();
    }
  }
  // Nobody waits for these any more: uncharge them here (no reader slot is
  // held by this thread).
  for (const RemoteStockReturn& r : late) UnchargeHolding(r);
}

std::vector<RemoteStockReturn> SessionRegistry::DrainRemoteStock(
    uint64_t over_id, absl::string_view over_path, uint64_t nr_pages) {
  (void)over_id;
  if (attached_.load(std::memory_order_relaxed) == 0) return {};
  Drain drain;
  drain.nr_pages = nr_pages;
  const std::string* charger = ChargerScope::Current();
  if (charger != nullptr) drain.waiters.insert(*charger);
  absl::MutexLock l(&mu_);
  if (shut_down_) return {};
  v1::SessionServerMessage message;
  for (Session* s : DrainableBelowLocked(over_path)) {
    const bool silent = !AwaitedLocked(*s, over_path);
    if (silent && s->silent_request_out) continue;  // one at a time
    if (drain.id == 0) {
      drain.id = ++next_drain_id_;
      message.set_drain_id(drain.id);
      message.set_drain_path(std::string(over_path));
    }
    message.set_expires_in_ms(static_cast<uint64_t>(
        std::max<int64_t>(0, s->deadline_ms - NowMs())));
    message.set_charges_applied(
        s->charges_applied.load(std::memory_order_relaxed));
    if (silent) {
      // Asked, not waited for: its answer comes back as a late one
      // (uncharged by the answering thread) and ends the silence.
      s->silent_request_out = true;
      ++stats_.drain_requests_not_awaited;
    } else {
      drain.pending.insert(s);
      drain.awaited_identities.insert(s->identity);
    }
    if (s->asked.size() >= Session::kMaxAskedRequests) {
      // Drop the oldest (drain ids only grow).
      auto oldest = s->asked.begin();
      for (auto it = s->asked.begin(); it != s->asked.end(); ++it)
        if (it->first < oldest->first) oldest = it;
      s->asked.erase(oldest);
    }
    s->asked[drain.id] = Session::AskedRequest{nr_pages, std::string(over_path),
                                               s->refills};
    s->last_request_at = absl::Now();
    s->stream->Send(message);
  }
  if (drain.pending.empty()) {
    // Nobody holds pages here now, but a drain in flight for an overlapping
    // group may be bringing some back (answered: out of the holdings, not
    // yet uncharged by its charge). Join it, as the kernel's trylock makes a
    // second drainer leave the drain to the first: wait until it is over and
    // its pages are room in the counters (RemoteStockReturned), at most the
    // bound, then retry the charge. Without this, such a charge found
    // nothing to ask, retried before the pages were uncharged, and failed.
    JoinInFlightLocked(over_path, absl::Now() + options_.drain_timeout);
    return {};
  }
  ++stats_.drains;
  drain.over_path = std::string(over_path);
  drains_.emplace(drain.id, &drain);
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  // The wait releases mu_: the answers (DrainAnswer) take it. Pages that
  // cover the charge end it early: they are room now, and a charge that
  // joined this drain (or sent its own to the same silent session) waits
  // for them to be uncharged, not for a session that will not answer.
  bool timed_out = false;
  while (!drain.pending.empty() && drain.returned_pages < nr_pages &&
         !shut_down_) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) {
      timed_out = true;
      break;
    }
  }
  if (timed_out || drain.returned_pages < nr_pages) {
    stats_.drain_requests_timeout += drain.pending.size();
    // Sessions that let the whole bound pass: a step towards silent.
    if (timed_out && !shut_down_) {
      for (Session* s : drain.pending) StrikeLocked(*s);
    }
  } else {
    stats_.drain_requests_unneeded += drain.pending.size();
  }
  JudgeWaitLocked(drain);
  drains_.erase(drain.id);
  cv_.SignalAll();  // joiners: the drain is over
  if (drain.returned.empty()) {
    // Nothing came back (the sessions did not answer in time, or another
    // drain had taken their pages first): join the drains in flight,
    // within what is left of the bound, and wait for the pages they
    // brought back. Not counted as a join: this charge asked itself.
    JoinInFlightLocked(over_path, deadline, /*count=*/false);
    return {};
  }
  // The engine uncharges these, then calls RemoteStockReturned.
  ++unsettled_[drain.over_path];
  return std::move(drain.returned);
}

void SessionRegistry::JoinInFlightLocked(absl::string_view over_path,
                                         absl::Time deadline, bool count) {
  // Only drains waiting for a session this charge would wait for itself:
  // a drain another identity's charge started for that identity's own
  // sessions (which this one does not wait for: known empty, cooled) would
  // otherwise hold this charge as long as they take to answer (issue 22's
  // re-attack: 20 ms per refused charge of B, with three threads of A
  // charging at the shared max).
  if (!OverlapsAwaitedDrainLocked(over_path, /*join=*/false) &&
      !OverlapsUnsettledLocked(over_path))
    return;
  if (count) ++stats_.drains_joined;
  while (OverlapsAwaitedDrainLocked(over_path, /*join=*/true) && !shut_down_) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  // Pages answered but not yet uncharged are room a moment from now: a
  // charge whose own wait ended while they were in transit must not fail
  // for want of them. Bounded all the same (a second bound).
  const absl::Time settle_deadline =
      std::max(deadline, absl::Now()) + options_.drain_timeout;
  while (OverlapsUnsettledLocked(over_path) && !shut_down_) {
    if (cv_.WaitWithDeadline(&mu_, settle_deadline)) break;
  }
}

bool SessionRegistry::RemoteDrainWouldWait(uint64_t over_id,
                                           absl::string_view over_path) {
  (void)over_id;
  // A bound of 0: the drain asks and never waits.
  if (attached_.load(std::memory_order_relaxed) == 0 ||
      options_.drain_timeout <= absl::ZeroDuration())
    return false;
  absl::MutexLock l(&mu_);
  if (shut_down_) return false;
  bool would_wait = OverlapsAwaitedDrainLocked(over_path, /*join=*/false) ||
                    OverlapsUnsettledLocked(over_path);
  if (!would_wait) {
    for (Session* s : DrainableBelowLocked(over_path)) {
      if (AwaitedLocked(*s, over_path)) {
        would_wait = true;
        break;
      }
    }
  }
  if (would_wait) ++stats_.drains_deferred;
  return would_wait;
}

void SessionRegistry::RemoteStockReturned(uint64_t over_id,
                                          absl::string_view over_path) {
  (void)over_id;
  absl::MutexLock l(&mu_);
  auto it = unsettled_.find(over_path);
  if (it == unsettled_.end()) return;
  if (--it->second == 0) unsettled_.erase(it);
  cv_.SignalAll();
}

bool SessionRegistry::SilentLocked(const Session& s) const {
  return s.unanswered_drains >= options_.silent_after_unanswered_drains;
}

bool SessionRegistry::AwaitedLocked(const Session& s,
                                    absl::string_view over_path) const {
  if (SilentLocked(s)) return false;
  const bool known_empty =
      std::any_of(s.stock_empty_below.begin(), s.stock_empty_below.end(),
                  [&](const std::string& path) {
                    return PathAtOrBelow(over_path, path);
                  });
  // Its own tenant's charges wait for it, as before (a cooperating
  // client's stock can refill in ways the server cannot see:
  // ClientLibTest.ConcurrentClientsAtMax... saw 1 false OOM in 90 runs when
  // no charge waited for a known-empty one); so does a charge without an
  // identity (a limit write).
  const std::string* charger = ChargerScope::Current();
  if (charger == nullptr || *charger == s.identity) return true;
  // Another tenant's charge does not wait for a stock known empty, nor for
  // an identity cooled by waits that brought nothing (JudgeWaitLocked).
  return !known_empty && !CooledLocked(s.identity);
}

void SessionRegistry::JudgeWaitLocked(const Drain& drain) {
  if (shut_down_ || drain.awaited_identities.empty()) return;
  const bool covered = drain.returned_pages >= drain.nr_pages;
  const absl::Time now = absl::Now();
  for (const std::string& identity : drain.awaited_identities) {
    // Only a wait by another identity's charge is judged: a tenant's own
    // charges always wait for its sessions.
    const bool other_waited =
        std::any_of(drain.waiters.begin(), drain.waiters.end(),
                    [&](const std::string& w) { return w != identity; });
    if (!other_waited) continue;
    auto it = drain_cooldowns_.find(identity);
    if (covered) {
      // A wait it helped to cover: one level down, and none left once the
      // cool-down is over; not the cool-down itself (another identity of the
      // same tenant, charging in a loop, erased it while B waited: issue 22's
      // re-attack, 21-25 waits of B per 8 s against 7).
      auto by = drain.returned_by_identity.find(identity);
      if (it != drain_cooldowns_.end() &&
          by != drain.returned_by_identity.end() && by->second > 0) {
        if (it->second.level > 0) --it->second.level;
        if (it->second.level == 0 && it->second.until <= now)
          drain_cooldowns_.erase(it);
      }
      continue;
    }
    // The charge waited for its sessions and what came back (from them and
    // any other) did not cover it: a wait for nothing. Its sessions are not
    // waited for by other identities' charges for a while, whichever of
    // them answered and however (a refill inside the wait, a fresh session
    // charged a page as the wait began, or answers just inside half the
    // bound: issue 22's re-attack, 6.8 and 7 ms per refused charge of B).
    if (it == drain_cooldowns_.end()) {
      if (drain_cooldowns_.size() >= kMaxDrainCooldowns) {
        for (auto e = drain_cooldowns_.begin(); e != drain_cooldowns_.end();) {
          if (e->second.until < now) {
            drain_cooldowns_.erase(e++);
          } else {
            ++e;
          }
        }
      }
      if (drain_cooldowns_.size() >= kMaxDrainCooldowns) continue;
      it = drain_cooldowns_.emplace(identity, DrainCooldown{}).first;
    } else if (now - it->second.last_cooled >
               2 * (kDrainCooldownBase * (1 << kDrainCooldownMaxLevel))) {
      it->second.level = 0;  // long ago: starts again at the base
    } else if (it->second.level < kDrainCooldownMaxLevel) {
      ++it->second.level;
    }
    it->second.last_cooled = now;
    it->second.until = now + kDrainCooldownBase * (1 << it->second.level);
    ++stats_.drain_identity_cooldowns;
  }
}

bool SessionRegistry::CooledLocked(const std::string& identity) const {
  auto it = drain_cooldowns_.find(identity);
  return it != drain_cooldowns_.end() && absl::Now() < it->second.until;
}

void SessionRegistry::MarkStockEmptyLocked(Session& s,
                                           const std::string& path) {
  for (const std::string& p : s.stock_empty_below)
    if (PathAtOrBelow(path, p)) return;  // already covered
  // Groups below the new one are covered by it.
  s.stock_empty_below.erase(
      std::remove_if(s.stock_empty_below.begin(), s.stock_empty_below.end(),
                     [&](const std::string& p) { return PathAtOrBelow(p, path); }),
      s.stock_empty_below.end());
  if (s.stock_empty_below.size() >= Session::kMaxAskedRequests)
    s.stock_empty_below.erase(s.stock_empty_below.begin());
  s.stock_empty_below.push_back(path);
}

void SessionRegistry::StrikeLocked(Session& s) {
  if (++s.unanswered_drains == options_.silent_after_unanswered_drains) {
    ++stats_.sessions_silenced;
    ++stats_.sessions_silent;
  }
}

void SessionRegistry::HearFromLocked(Session& s) {
  if (SilentLocked(s)) --stats_.sessions_silent;
  s.unanswered_drains = 0;
  s.silent_request_out = false;
}

void SessionRegistry::NoteHoldingLocked(Session& s, const std::string& path,
                                        uint64_t before, uint64_t after) {
  if ((before == 0) == (after == 0)) return;
  // The path, then each ancestor up to the root.
  absl::string_view at = path;
  while (true) {
    if (after > 0) {
      ++holders_[at][&s];
    } else if (auto h = holders_.find(at); h != holders_.end()) {
      auto c = h->second.find(&s);
      if (c != h->second.end() && --c->second == 0) {
        h->second.erase(c);
        if (h->second.empty()) holders_.erase(h);
      }
    }
    if (at.empty() || at == "/") break;
    const size_t slash = at.rfind('/');
    if (slash == absl::string_view::npos) break;
    at = slash == 0 ? absl::string_view("/") : at.substr(0, slash);
  }
}

std::vector<SessionRegistry::Session*> SessionRegistry::DrainableBelowLocked(
    absl::string_view over_path) const {
  std::vector<Session*> out;
  auto it = holders_.find(over_path);
  if (it == holders_.end()) return out;
  out.reserve(it->second.size());
  for (const auto& [s, count] : it->second)
    if (s->stream != nullptr && !s->closing) out.push_back(s);
  return out;
}

namespace {
// One of the two groups is the other or its ancestor.
bool Overlap(absl::string_view a, absl::string_view b) {
  return PathAtOrBelow(a, b) || PathAtOrBelow(b, a);
}
}  // namespace

bool SessionRegistry::OverlapsAwaitedDrainLocked(absl::string_view over_path,
                                                 bool join) {
  const std::string* charger = ChargerScope::Current();
  bool found = false;
  for (auto& [id, drain] : drains_) {
    if (!Overlap(drain->over_path, over_path)) continue;
    // Over but for its charge's thread taking mu_ back (it waits for
    // nobody now), or waiting for a session this charge waits for.
    bool awaited =
        drain->pending.empty() || drain->returned_pages >= drain->nr_pages;
    for (auto it = drain->pending.begin(); !awaited && it != drain->pending.end();
         ++it)
      awaited = AwaitedLocked(**it, over_path);
    if (!awaited) continue;
    found = true;
    if (!join) break;
    if (charger != nullptr) drain->waiters.insert(*charger);
  }
  return found;
}

bool SessionRegistry::OverlapsUnsettledLocked(
    absl::string_view over_path) const {
  for (const auto& [path, n] : unsettled_)
    if (Overlap(path, over_path)) return true;
  return false;
}

}  // namespace cgacct
