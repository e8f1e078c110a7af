// cgacct::client::Groups: the cgroup files and directories of cgacct.v1,
// the rest of the API besides charging (docs/DESIGN.md §4.15):
//
//   CreateGroup / DeleteGroup   mkdir / rmdir of a cgroup
//   SetLimits                   writes memory.max, .high, .min, .low,
//                               memory.oom.group
//   ListGroups                  the directory (every page of ListGroups)
//   GetStats                    memory.current, .peak, .stat, .events,
//                               .events.local, the limits, emin/elow
//   Reclaim                     memory.reclaim
//   WatchEvents                 poll() on memory.events
//
// Get one from Groups::Open (a target or a channel, no session), or from
// Client::groups() / ClusterClient::groups(), which share the client's
// channels and options (in a cluster: unary calls go to any node, which
// forwards them to the owner of the group's shard; a watch goes to the
// owner).
//
// Units: bytes for every limit and usage (as the cgroup files), pages only
// where the API counts pages (DeleteGroup's reparented pages). A limit of
// kUnlimited reads "max". Paths: absolute ("/tenants/acme"); the server
// checks them (INVALID_ARGUMENT naming `path`).
//
// Retries: SetLimits, ListGroups and GetStats are repeated (call_timeout
// each, up to max_attempts) on UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED and
// CANCELLED (a node shutting down):
// applying them twice does no harm. CreateGroup, DeleteGroup and Reclaim
// are sent once per node: a second attempt of an applied create would
// answer ALREADY_EXISTS, of a delete NOT_FOUND, and a reclaim would take
// twice.
//
// Errors: the server's status, unchanged (NOT_FOUND for a missing group,
// ALREADY_EXISTS, FAILED_PRECONDITION for a delete with children,
// PERMISSION_DENIED under access control, INVALID_ARGUMENT naming the
// field), or the transport's after the last attempt; INVALID_ARGUMENT
// naming the argument for what the library refuses before sending.
//
// Thread safety: every method may be called from any number of threads at
// once. An EventsWatch is used by one thread at a time, except Cancel().
#ifndef CGACCT_GROUPS_H_
#define CGACCT_GROUPS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <grpcpp/channel.h>

#include "cgacct/channel.h"
#include "cgacct/status.h"

namespace cgacct::client {

// What a limit file reads as "max" (PAGE_COUNTER_MAX, in bytes).
inline constexpr uint64_t kUnlimited = ~uint64_t{0};

// A group's limits as the server answers them (all five set).
struct Limits {
  uint64_t max_bytes = kUnlimited;   // memory.max
  uint64_t high_bytes = kUnlimited;  // memory.high
  uint64_t min_bytes = 0;            // memory.min
  uint64_t low_bytes = 0;            // memory.low
  bool oom_group = false;            // memory.oom.group
};

// Limits to write: a field not set is left as it is (for CreateGroup: the
// default, "max" or 0). kUnlimited writes "max".
struct LimitsUpdate {
  std::optional<uint64_t> max_bytes;
  std::optional<uint64_t> high_bytes;
  std::optional<uint64_t> min_bytes;
  std::optional<uint64_t> low_bytes;
  std::optional<bool> oom_group;
};

// A group as CreateGroup and SetLimits answer it.
struct Group {
  std::string path;
  uint64_t id = 0;
  Limits limits;
};

// memory.events (or .local): every line of the kernel's file.
struct EventCounts {
  uint64_t low = 0;
  uint64_t high = 0;
  uint64_t max = 0;
  uint64_t oom = 0;
  uint64_t oom_kill = 0;
  uint64_t oom_group_kill = 0;
  uint64_t sock_throttled = 0;  // always 0: no socket memory
};

// GetStats of one group.
struct GroupStats {
  std::string path;
  uint64_t memory_current_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  Limits limits;
  // memory.stat: (name, value) in the file's order and units.
  std::vector<std::pair<std::string, uint64_t>> stat;
  EventCounts events;
  EventCounts events_local;
  uint64_t failcnt = 0;  // the cgroup v1 file's count
  uint64_t emin_bytes = 0;
  uint64_t elow_bytes = 0;
  // Whether this read flushed rstat, and how old the newest flush covering
  // the group is (0 when this read flushed), microseconds.
  bool flushed = false;
  uint64_t max_staleness_us = 0;
  // Cluster mode, a group above the shard roots: the shard roots summed,
  // and those missing from the sums (docs/DESIGN.md §4.18). Empty
  // elsewhere.
  std::vector<std::string> summed_shards;
  std::vector<std::string> missing_shards;

  // The memory.stat line `name`, if the file has one.
  std::optional<uint64_t> Stat(std::string_view name) const;
};

// How GetStats flushes rstat first (cgacct.v1.FlushMode).
enum class FlushMode {
  // Fold every update acknowledged before the read (exact numbers).
  kExact,
  // The kernel's memory.stat: flush only past 64 x nr_cpus pending updates.
  kThreshold,
  // No flush: what the last flush left.
  kNone,
};

// One WatchEvents update.
struct EventsUpdate {
  std::string path;
  EventCounts events;
  EventCounts events_local;
};

// Deadline and attempts of each call (as Client's Options).
struct CallOptions {
  std::chrono::milliseconds call_timeout{2000};  // > 0, at most 24 h
  int max_attempts = 4;  // >= 1
};

// A WatchEvents stream (Groups::WatchEvents). One thread at a time calls
// Next(); Cancel() may be called from any thread. A watch waits for the
// node as long as its timeout (none: for ever): a node that stops answering
// without closing the connection (SIGSTOP, a partition) is noticed only by
// the timeout or a Cancel().
class EventsWatch {
 public:
  // Cancels the stream if it has not ended. Must not run while another
  // thread is in Next() (gRPC aborts the process): Cancel(), wait for that
  // Next() to return, then destroy.
  ~EventsWatch();
  EventsWatch(const EventsWatch&) = delete;
  EventsWatch& operator=(const EventsWatch&) = delete;

  // Blocks for the next update: the first is memory.events at subscribe,
  // then one after each change (the newest counts, not a backlog). Ends
  // with NOT_FOUND once the group is deleted, DEADLINE_EXCEEDED after the
  // watch's timeout, CANCELLED after Cancel(), UNAVAILABLE when the node
  // went away (in a cluster: the shard moved; watch again); every later
  // Next() returns the same status.
  Result<EventsUpdate> Next();

  // Ends the watch; a Next() blocked in another thread returns CANCELLED.
  // Thread-safe.
  void Cancel();

 private:
  friend class Groups;
  struct Impl;
  explicit EventsWatch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Groups {
 public:
  // Calls over `channel` (e.g. from MakeChannel()). Errors:
  // INVALID_ARGUMENT naming the option or a null channel.
  static Result<std::unique_ptr<Groups>> Open(
      std::shared_ptr<grpc::Channel> channel, CallOptions options = {});
  // Calls to `target` over MakeChannel(target, connect). Errors:
  // MakeChannel's, and the above.
  static Result<std::unique_ptr<Groups>> Open(const std::string& target,
                                              const ConnectOptions& connect,
                                              CallOptions options = {});

  ~Groups();
  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;

  // mkdir (CreateGroup) with the limits given. ALREADY_EXISTS if it
  // exists; NOT_FOUND if its parent does not.
  Result<Group> CreateGroup(std::string_view path,
                            const LimitsUpdate& limits = {});

  // rmdir (DeleteGroup): FAILED_PRECONDITION if it has children. Returns the
  // pages still charged, moved to the parent as the kernel reparents a
  // dying memcg's.
  Result<uint64_t> DeleteGroup(std::string_view path);

  // Writes the limits given (SetLimits); a lowered memory.max reclaims
  // first (memory_max_write()). Returns the group with all its limits.
  Result<Group> SetLimits(std::string_view path, const LimitsUpdate& limits);

  // The groups below `path`, sorted: its children, or with `recursive` its
  // whole subtree (every page of ListGroups).
  Result<std::vector<std::string>> ListGroups(std::string_view path = "/",
                                              bool recursive = false);

  // GetStats of `path`, after the flush `flush` asks for.
  Result<GroupStats> GetStats(std::string_view path,
                              FlushMode flush = FlushMode::kExact);

  // memory.reclaim: reclaims `nr_bytes` (> 0) from `path`'s subtree and
  // returns the bytes reclaimed (more than asked, as the kernel's reclaim
  // overshoots by up to a batch: 180224 for 4096 was seen); UNAVAILABLE (the kernel's EAGAIN) when it
  // could not reclaim them all (page cache only: anon is never reclaimed).
  Result<uint64_t> Reclaim(std::string_view path, uint64_t nr_bytes);

  // Subscribes to memory.events of `path` (WatchEvents). `timeout` > 0 ends
  // the stream with DEADLINE_EXCEEDED after that long (at most 366 days);
  // 0: no end. Errors show in Next(); in a cluster, UNAVAILABLE here when no
  // node owns the group's shard now.
  Result<std::unique_ptr<EventsWatch>> WatchEvents(
      std::string_view path,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // The library's (client/lib/groups_impl.h); not part of the API.
  struct Impl;

 private:
  friend class Client;
  friend class ClusterClient;
  explicit Groups(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cgacct::client

#endif  // CGACCT_GROUPS_H_
