#include "server/idempotency/dedup_cache.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cgacct {

RequestDedupCache::RequestDedupCache(Options options)
    : capacity_(options.capacity > 0 ? options.capacity : 1),
      max_bytes_(options.max_bytes),
      window_ns_(absl::ToInt64Nanoseconds(options.window)),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()) {}

RequestDedupCache::Partition& RequestDedupCache::PartitionOfLocked(
    absl::string_view request_id) {
  return partitions_[DedupKeyIdentity(request_id)];
}

void RequestDedupCache::PopOldestLocked(Partition& p) {
  const Arrival& oldest = p.arrivals.front();
  auto it = entries_.find(oldest.request_id);
  if (it != entries_.end() && it->second.ticket == oldest.ticket)
    EraseLocked(p, it);
  p.arrivals.pop_front();
}

void RequestDedupCache::EvictLocked(Partition& p, int64_t now_ns) {
  while (!p.arrivals.empty() && (!LiveAt(p.arrivals.front().arrived_ns, now_ns) ||
                                 p.arrivals.size() >= capacity_)) {
    PopOldestLocked(p);
  }
}

void RequestDedupCache::EraseLocked(
    Partition& p, absl::flat_hash_map<std::string, Entry>::iterator it) {
  p.bytes -= it->second.answer.body.size();
  --p.entries;
  entries_.erase(it);
}

void RequestDedupCache::EvictBytesLocked(Partition& p) {
  if (max_bytes_ == 0) return;
  while (p.bytes > max_bytes_ && p.arrivals.size() > 1) PopOldestLocked(p);
}

void RequestDedupCache::SweepLocked(int64_t now_ns) {
  for (auto it = partitions_.begin(); it != partitions_.end();) {
    Partition& p = it->second;
    while (!p.arrivals.empty() && !LiveAt(p.arrivals.front().arrived_ns, now_ns))
      PopOldestLocked(p);
    if (p.entries == 0) {
      partitions_.erase(it++);
    } else {
      ++it;
    }
  }
}

RequestDedupCache::BeginResult RequestDedupCache::Begin(
    const std::string& request_id, const DedupFingerprint& fingerprint) {
  const int64_t now_ns = clock_.NowNs();
  BeginResult result;
  absl::MutexLock l(&mu_);
  if (--until_sweep_ <= 0) {
    until_sweep_ = kSweepEvery;
    SweepLocked(now_ns);
  }
  Partition& partition = PartitionOfLocked(request_id);
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
  // inserting so the partition never exceeds capacity_.
  EvictLocked(partition, now_ns);
  const uint64_t ticket = next_ticket_++;
  auto [slot, inserted] = entries_.try_emplace(request_id);
  if (inserted) {
    ++partition.entries;
  } else {
    partition.bytes -= slot->second.answer.body.size();  // expired, replaced
  }
  slot->second =
      Entry{fingerprint, ticket, now_ns, /*in_flight=*/true, DedupAnswer()};
  partition.arrivals.push_back(Arrival{request_id, ticket, now_ns});
  result.verdict = Verdict::kProceed;
  result.ticket = ticket;
  return result;
}

void RequestDedupCache::Complete(const std::string& request_id, uint64_t ticket,
                                 DedupAnswer answer) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(request_id);
  if (it == entries_.end() || it->second.ticket != ticket) return;
  Partition& partition = PartitionOfLocked(request_id);
  it->second.in_flight = false;
  partition.bytes += answer.body.size();
  it->second.answer = std::move(answer);
  EvictBytesLocked(partition);
}

void RequestDedupCache::Abandon(const std::string& request_id,
                                uint64_t ticket) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(request_id);
  // Its arrival stays queued; eviction skips an arrival whose entry is gone.
  if (it != entries_.end() && it->second.ticket == ticket &&
      it->second.in_flight)
    EraseLocked(PartitionOfLocked(request_id), it);
}

void RequestDedupCache::Restore(const std::string& request_id,
                                const DedupFingerprint& fingerprint,
                                DedupAnswer answer, absl::Duration age) {
  const int64_t now_ns = clock_.NowNs();
  const int64_t arrived_ns = now_ns - absl::ToInt64Nanoseconds(age);
  if (age < absl::ZeroDuration() || !LiveAt(arrived_ns, now_ns)) return;
  absl::MutexLock l(&mu_);
  if (entries_.contains(request_id)) return;
  Partition& partition = PartitionOfLocked(request_id);
  EvictLocked(partition, now_ns);
  const uint64_t ticket = next_ticket_++;
  partition.bytes += answer.body.size();
  ++partition.entries;
  entries_[request_id] = Entry{fingerprint, ticket, arrived_ns,
                               /*in_flight=*/false, std::move(answer)};
  partition.arrivals.push_back(Arrival{request_id, ticket, arrived_ns});
  EvictBytesLocked(partition);
}

size_t RequestDedupCache::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}

size_t RequestDedupCache::size_of(absl::string_view identity) const {
  absl::MutexLock l(&mu_);
  auto it = partitions_.find(identity);
  return it == partitions_.end() ? 0 : it->second.entries;
}

std::string DedupKey(absl::string_view identity, uint64_t scope,
                     absl::string_view request_id) {
  return absl::StrCat(identity.size(), ":", identity, "/", scope, "/",
                      request_id);
}

absl::string_view DedupKeyIdentity(absl::string_view key) {
  const size_t colon = key.find(':');
  size_t length = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(key.substr(0, colon), &length) ||
      length > key.size() - colon - 1)
    return absl::string_view();  // not a DedupKey: the anonymous partition
  return key.substr(colon + 1, length);
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
