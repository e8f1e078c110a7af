// DedupTable (server/idempotency/dedup_table.h).
#include "server/idempotency/dedup_table.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cgacct {

DedupTable::DedupTable(Options options, StateStore& store)
    : field_(std::move(options.field)),
      mismatch_detail_(std::move(options.mismatch_detail)),
      max_stored_bytes_(options.max_stored_bytes),
      cache_(options.cache),
      store_(store) {}

absl::Status DedupTable::ValidateKey(absl::string_view key) const {
  if (key.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(field_, " must not be empty when present"));
  if (key.size() > kMaxRequestIdBytes)
    return absl::InvalidArgumentError(
        absl::StrCat(field_, " is ", key.size(), " bytes; at most ",
                     kMaxRequestIdBytes, " allowed"));
  return absl::OkStatus();
}

absl::Status DedupTable::Begin(std::string key,
                               const DedupFingerprint& fingerprint,
                               absl::string_view client_key, Entry* entry,
                               std::optional<DedupAnswer>* replay) {
  RequestDedupCache::BeginResult begin = cache_.Begin(key, fingerprint);
  switch (begin.verdict) {
    case RequestDedupCache::Verdict::kReplay:
      *replay = std::move(begin.answer);
      return absl::OkStatus();
    case RequestDedupCache::Verdict::kMismatch:
      return absl::InvalidArgumentError(absl::StrCat(
          field_, " \"", absl::CHexEscape(client_key),
          "\" was already used for a different request ", mismatch_detail_));
    case RequestDedupCache::Verdict::kInFlight:
      return absl::AbortedError(absl::StrCat(field_, " \"",
                                             absl::CHexEscape(client_key),
                                             "\" is in flight; retry"));
    case RequestDedupCache::Verdict::kProceed:
      break;
  }
  entry->key = std::move(key);
  entry->ticket = begin.ticket;
  return absl::OkStatus();
}

absl::Status DedupTable::Complete(const Entry& entry, StoredRequest stored,
                                  DedupAnswer answer) {
  const absl::Time now = absl::Now();
  stored.arrived_unix_ns = absl::ToUnixNanos(now);
  WindowBounds bounds;
  bounds.expire_before_unix_ns = absl::ToUnixNanos(now - cache_.window());
  bounds.capacity = cache_.capacity();
  bounds.max_bytes = max_stored_bytes_;
  absl::Status persisted = store_.PutRequest(stored, bounds);
  cache_.Complete(entry.key, entry.ticket, std::move(answer));
  return persisted;
}

}  // namespace cgacct
