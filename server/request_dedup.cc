#include "server/request_dedup.h"

#include <utility>

namespace cgacct {

RequestDedupCache::RequestDedupCache(Options options)
    : capacity_(options.capacity > 0 ? options.capacity : 1),
      window_ns_(absl::ToInt64Nanoseconds(options.window)),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()) {}

void RequestDedupCache::EvictLocked(int64_t now_ns) {
  while (!arrivals_.empty() && (!LiveAt(arrivals_.front().arrived_ns, now_ns) ||
                                arrivals_.size() >= capacity_)) {
    const Arrival& oldest = arrivals_.front();
    auto it = entries_.find(oldest.request_id);
    if (it != entries_.end() && it->second.ticket == oldest.ticket) {
      entries_.erase(it);
    }
    arrivals_.pop_front();
  }
}

RequestDedupCache::BeginResult RequestDedupCache::Begin(
    const std::string& request_id, const DedupFingerprint& fingerprint) {
  const int64_t now_ns = clock_.NowNs();
  BeginResult result;
  absl::MutexLock l(&mu_);
  auto it = entries_.find(request_id);
  if (it != entries_.end() && LiveAt(it->second.arrived_ns, now_ns)) {
    const Entry& entry = it->second;
    if (entry.fingerprint != fingerprint) {
      result.verdict = Verdict::kMismatch;
    } else if (entry.in_flight) {
      result.verdict = Verdict::kInFlight;
    } else {
      result.verdict = Verdict::kReplay;
      result.answer = entry.answer;
    }
    return result;
  }
  // Absent or expired: this arrival is the first one. Make room before
  // inserting so the table never exceeds capacity_.
  EvictLocked(now_ns);
  const uint64_t ticket = next_ticket_++;
  Entry& entry = entries_[request_id];
  entry = Entry{fingerprint, ticket, now_ns, /*in_flight=*/true, DedupAnswer()};
  arrivals_.push_back(Arrival{request_id, ticket, now_ns});
  result.verdict = Verdict::kProceed;
  result.ticket = ticket;
  return result;
}

void RequestDedupCache::Complete(const std::string& request_id, uint64_t ticket,
                                 DedupAnswer answer) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(request_id);
  if (it == entries_.end() || it->second.ticket != ticket) return;
  it->second.in_flight = false;
  it->second.answer = std::move(answer);
}

void RequestDedupCache::Restore(const std::string& request_id,
                                const DedupFingerprint& fingerprint,
                                DedupAnswer answer, absl::Duration age) {
  const int64_t now_ns = clock_.NowNs();
  const int64_t arrived_ns = now_ns - absl::ToInt64Nanoseconds(age);
  if (age < absl::ZeroDuration() || !LiveAt(arrived_ns, now_ns)) return;
  absl::MutexLock l(&mu_);
  if (entries_.contains(request_id)) return;
  EvictLocked(now_ns);
  const uint64_t ticket = next_ticket_++;
  entries_[request_id] = Entry{fingerprint, ticket, arrived_ns,
                               /*in_flight=*/false, std::move(answer)};
  arrivals_.push_back(Arrival{request_id, ticket, arrived_ns});
}

size_t RequestDedupCache::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

}  // namespace cgacct
