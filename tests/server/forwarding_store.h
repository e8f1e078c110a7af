// A StateStore for tests that forwards every call to an in-memory store
// (MemoryStateStore); a test derives from it and overrides the calls it
// makes fail or hold, calling the base for the rest.
#ifndef CGACCT_TESTS_SERVER_FORWARDING_STORE_H_
#define CGACCT_TESTS_SERVER_FORWARDING_STORE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/idempotency/state_store.h"

namespace cgacct {

class ForwardingStateStore : public StateStore {
 public:
  absl::StatusOr<Snapshot> Load(int64_t since) override {
    return store_.Load(since);
  }
  using StateStore::CreateGroup;
  absl::StatusOr<uint64_t> CreateGroup(absl::string_view path,
                                       const Limits& limits, bool oom_group,
                                       absl::string_view creator) override {
    return store_.CreateGroup(path, limits, oom_group, creator);
  }
  absl::Status SetLimits(absl::string_view path, const Limits& limits,
                         bool oom_group) override {
    return store_.SetLimits(path, limits, oom_group);
  }
  absl::Status DeleteGroup(absl::string_view path) override {
    return store_.DeleteGroup(path);
  }
  absl::Status PutRequest(const StoredRequest& request,
                          const WindowBounds& bounds) override {
    return store_.PutRequest(request, bounds);
  }

 private:
  MemoryStateStore store_;
};

}  // namespace cgacct

#endif  // CGACCT_TESTS_SERVER_FORWARDING_STORE_H_
