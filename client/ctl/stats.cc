// cgacctctl stat, cat and events: the cgroup files of one group.
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"

namespace cgacct::ctl {
namespace {

// One EventsUpdate: the memory.events (or, --local, memory.events.local)
// file's lines, or (--json) {"path": ..., FILE: {name: count}}.
void PrintEventsUpdate(const Ctl& ctl, const v1::EventsUpdate& update,
                       bool local, bool pretty) {
  if (ctl.json()) {
    PrintJson({{"path", update.path()},
               {local ? "memory.events.local" : "memory.events",
                EventsJson(local ? update.events_local() : update.events())}},
              pretty);
  } else {
    for (const auto& [name, value] :
         EventLines(local ? update.events_local() : update.events())) {
      Line(name, value);
    }
  }
  std::cout.flush();
}

// events --watch: WatchEvents, the counts on subscribe, then the latest
// after every change. Text: one file's worth of lines per update, a blank
// line between updates; JSON: one object per line (JSON Lines).
int WatchEvents(Ctl& ctl, const Invocation& inv) {
  grpc::ClientContext context;  // no deadline: runs until told to stop
  v1::WatchEventsRequest request;
  request.set_path(inv.path);
  std::unique_ptr<grpc::ClientReader<v1::EventsUpdate>> reader =
      ctl.stub().WatchEvents(&context, request);
  v1::EventsUpdate update;
  int printed = 0;
  while (reader->Read(&update)) {
    if (printed > 0 && !ctl.json()) std::cout << "\n";
    PrintEventsUpdate(ctl, update, inv.local, /*pretty=*/false);
    ++printed;
    if (inv.iterations > 0 && printed >= inv.iterations) {
      context.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (inv.iterations > 0 && printed >= inv.iterations) return kExitOk;
  if (status.error_code() == grpc::StatusCode::NOT_FOUND && printed > 0) {
    std::cerr << "cgacctctl: events " << inv.path
              << ": the group was deleted\n";
    return kExitNotFound;
  }
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("events --watch ", inv.path), status);
  }
  return kExitOk;
}

// Cluster mode, a group above the shard roots: the sums miss the shards
// listed (their owner did not answer, or none now). Said on stderr, so that
// the files on stdout keep their shape.
void WarnMissingShards(const std::string& what, const v1::GroupStats& stats) {
  if (stats.missing_shards().empty()) return;
  std::cerr << "cgacctctl: " << what << ": the sums above the shard roots miss "
            << stats.missing_shards_size() << " shard(s):";
  for (const std::string& root : stats.missing_shards()) std::cerr << " " << root;
  std::cerr << " (no owner now, or the owner did not answer)\n";
}

}  // namespace

// memory.stat exactly as the file prints it; --json prints everything
// GetStats answers (GroupStatsJson: memory.stat with every other file, the
// flush metadata included).
int Stat(Ctl& ctl, const Invocation& inv) {
  v1::GroupStats stats;
  const grpc::Status status = ctl.GetStats(inv.path, inv.flush, &stats);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("stat ", inv.path), status);
  }
  WarnMissingShards(absl::StrCat("stat ", inv.path), stats);
  return PrintAnswer(ctl, GroupStatsJson(stats),
                     [&] { std::cout << CatText(stats, "memory.stat"); });
}

int Cat(Ctl& ctl, const Invocation& inv) {
  v1::GroupStats stats;
  const grpc::Status status = ctl.GetStats(inv.path, inv.flush, &stats);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("cat ", inv.path), status);
  }
  WarnMissingShards(absl::StrCat("cat ", inv.path), stats);
  if (ctl.json()) {
    Json json = {{"path", stats.path()}};
    for (const std::string& file : inv.files) {
      json[file] = CatJson(stats, file);
    }
    PrintJson(json);
    return kExitOk;
  }
  for (const std::string& file : inv.files) std::cout << CatText(stats, file);
  return kExitOk;
}

int Events(Ctl& ctl, const Invocation& inv) {
  if (inv.watch) return WatchEvents(ctl, inv);
  v1::GroupStats stats;
  const grpc::Status status = ctl.GetStats(inv.path, inv.flush, &stats);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("events ", inv.path), status);
  }
  WarnMissingShards(absl::StrCat("events ", inv.path), stats);
  v1::EventsUpdate update;
  update.set_path(stats.path());
  *update.mutable_events() = stats.events();
  *update.mutable_events_local() = stats.events_local();
  PrintEventsUpdate(ctl, update, inv.local, /*pretty=*/true);
  return kExitOk;
}

}  // namespace cgacct::ctl
