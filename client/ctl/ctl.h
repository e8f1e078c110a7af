// cgacctctl's commands, a file per group:
//   info.cc       info
//   groups.cc     create, delete, ls, set (groups and their limits)
//   charge.cc     charge, uncharge, reclaim (pages in and out)
//   stats.cc      stat, cat, events (the cgroup files of one group)
//   tree_top.cc   tree, top (a subtree at a glance)
// Each takes the Ctl (the connection and what every command shares) and
// the parsed Invocation, prints on stdout (--json: JSON), errors on stderr
// in one line, and returns the exit status (exit_status.h).
//
// Thread safety: a Ctl is used by one thread (main).
#ifndef CGACCT_CLIENT_CTL_CTL_H_
#define CGACCT_CLIENT_CTL_CTL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "client/ctl/cgroup_files.h"
#include "client/ctl/exit_status.h"
#include "client/ctl/invocation.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace cgacct::ctl {

// One group of a tree or top view.
struct GroupRow {
  std::string path;
  v1::GroupStats stats;
};

class Ctl {
 public:
  Ctl(std::shared_ptr<grpc::Channel> channel, bool json,
      absl::Duration timeout);

  v1::Accounting::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  bool json() const { return json_; }

  // A context whose deadline is --timeout from now.
  std::unique_ptr<grpc::ClientContext> Context() const;

  grpc::Status GetStats(const std::string& path, v1::FlushMode flush,
                        v1::GroupStats* stats);

  // Every path below `path` (sorted), all pages.
  grpc::Status ListAll(const std::string& path, bool recursive,
                       std::vector<std::string>* paths);

  // `path` and its whole subtree with their stats; groups deleted between
  // the listing and their read are left out. `path` itself is rows[0].
  grpc::Status ReadSubtree(const std::string& path, v1::FlushMode flush,
                           std::vector<GroupRow>* rows);

 private:
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Accounting::Stub> stub_;
  const bool json_;
  const absl::Duration timeout_;
};

// A response as JSON, in the one shape every --json output has (README,
// "cgacctctl --json"): keys are the proto's field names, except that
// Limits fields are their cgroup files (LimitsJson), GroupStats is
// GroupStatsJson and Group is GroupJson; integers of every width are JSON
// numbers (not protobuf's strings for 64-bit ones), enums their names,
// bytes and strings text (the server answers ASCII in them), repeated
// fields arrays, nested messages objects. Every field is printed, zeros
// included, but an absent `optional` one.
Json MessageJson(const google::protobuf::Message& message);

// `json` on stdout, indented by 2 (or on one line), and a '\n'. Bytes
// that are not UTF-8 are printed as U+FFFD.
void PrintJson(const Json& json, bool pretty = true);

// A command's answer on stdout: with --json `json`, otherwise what
// `print_text()` prints. kExitOk.
template <typename PrintText>
int PrintAnswer(const Ctl& ctl, const Json& json, PrintText print_text) {
  if (ctl.json()) {
    PrintJson(json);
  } else {
    print_text();
  }
  return kExitOk;
}

// "NAME VALUE\n" on stdout.
void Line(absl::string_view name, absl::string_view value);
void Line(absl::string_view name, uint64_t value);

// Runs the command `inv` names; the exit status.
int RunCommand(Ctl& ctl, const Invocation& inv);

// The commands (RunCommand's dispatch).
int Info(Ctl& ctl, const Invocation& inv);
int Cluster(Ctl& ctl, const Invocation& inv);
// health [SERVICE]: grpc.health.v1 Check of SERVICE ("" the whole server):
// prints SERVING / NOT_SERVING / ...; exit 0 when SERVING, 5 otherwise (a
// container HEALTHCHECK, a script waiting for the daemon), 3 when the server
// does not know SERVICE.
int Health(Ctl& ctl, const Invocation& inv);
int Create(Ctl& ctl, const Invocation& inv);
int Delete(Ctl& ctl, const Invocation& inv);
int List(Ctl& ctl, const Invocation& inv);
int Set(Ctl& ctl, const Invocation& inv);
int ChargeOrUncharge(Ctl& ctl, const Invocation& inv);
int Reclaim(Ctl& ctl, const Invocation& inv);
int Stat(Ctl& ctl, const Invocation& inv);
int Cat(Ctl& ctl, const Invocation& inv);
int Events(Ctl& ctl, const Invocation& inv);
int Tree(Ctl& ctl, const Invocation& inv);
int Top(Ctl& ctl, const Invocation& inv);
int Peak(Ctl& ctl, const Invocation& inv);

}  // namespace cgacct::ctl

#endif  // CGACCT_CLIENT_CTL_CTL_H_
