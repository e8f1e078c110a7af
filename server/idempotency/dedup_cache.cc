#include "server/idempotency/dedup_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cgacct {

RequestDedupCache::RequestDedupCache(Options options)
    : capacity_(options.capacity > 0 ? options.capacity : 1),
      max_bytes_(options.max_bytes),
      window_ns_(absl::ToInt64Nanoseconds(options.window)),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()) {}

void RequestDedupCache::EvictLocked(int64_t now_ns) {
  while (!arrivals_.empty() && (!LiveAt(arrivals_.front().arrived_ns, now_ns) ||
                                arrivals_.size() >= capacity_)) {
    const Arrival& oldest = arrivals_.front();
    auto it = entries_.find(oldest.request_id);
    if (it != entries_.end() && it->second.ticket == oldest.ticket) {
      EraseLocked(it);
    }
    arrivals_.pop_front();
  }
}

void RequestDedupCache::EraseLocked(
    absl::flat_hash_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.answer.body.size();
  entries_.erase(it);
}

void RequestDedupCache::EvictBytesLocked() {
  if (max_bytes_ == 0) return;
  while (bytes_ > max_bytes_ && arrivals_.size() > 1) {
    const Arrival& oldest = arrivals_.front();
    auto it = entries_.find(oldest.request_id);
    if (it != entries_.end() && it->second.ticket == oldest.ticket) {
      EraseLocked(it);
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
  bytes_ -= entry.answer.body.size();  // an expired entry being replaced
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
  bytes_ += answer.body.size();
  it->second.answer = std::move(answer);
  EvictBytesLocked();
}

void RequestDedupCache::Abandon(const std::string& request_id,
                                uint64_t ticket) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(request_id);
  // Its arrival stays queued; eviction skips an arrival whose entry is gone.
  if (it != entries_.end() && it->second.ticket == ticket &&
      it->second.in_flight)
    EraseLocked(it);
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
  bytes_ += answer.body.size();
  entries_[request_id] = Entry{fingerprint, ticket, arrived_ns,
                               /*in_flight=*/false, std::move(answer)};
  arrivals_.push_back(Arrival{request_id, ticket, arrived_ns});
  EvictBytesLocked();
}

size_t RequestDedupCache::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

std::string DedupKey(absl::string_view identity, uint64_t scope,
                     absl::string_view request_id) {
  return absl::StrCat(identity.size(), ":", identity, "/", scope, "/",
                      request_id);
}

uint64_t StableDigest(absl::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace cgacct
