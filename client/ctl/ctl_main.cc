// cgacctctl: the operator CLI for cgacctd, as fluent as cgroupfs. Reads print
// what the cgroup v2 file would (`cat PATH memory.current`, `stat PATH` is
// memory.stat, `events PATH` is memory.events), writes take the kernel's
// memparse() syntax (`set PATH memory.max=50M`, `reclaim PATH 10M`), and
// `tree`/`top` are systemd-cgls/systemd-cgtop for cgacct groups. `--json`
// turns every read into JSON (protobuf's JSON printer for RPC responses).
//
// Exit status (exit_status.h; README "cgacctctl"): 0 ok, 2 usage,
// 3 not found, 4 refused, 5 unavailable, 1 anything else. Errors are one line
// on stderr.
//
// This file is main: the commands are in a file per group (ctl.h), the
// command line in invocation.h.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli/cli_util.h"
#include "client/cli/grpc_util.h"
#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"
#include "client/ctl/invocation.h"

namespace cgacct::ctl {
namespace {

constexpr char kUsage[] =
    "operator CLI for cgacctd, as fluent as cgroupfs.\n"
    "cgacctctl [--target=HOST:PORT] [--json] COMMAND\n"
    "reads (--json on each; --flush=exact|threshold|none):\n"
    "  cat PATH FILE...      print cgroup files as the kernel would: "
    "memory.current,\n"
    "                        memory.max, memory.high, memory.min, memory.low,\n"
    "                        memory.peak, memory.oom.group, memory.stat,\n"
    "                        memory.events, memory.events.local\n"
    "  stat PATH             memory.stat (flush metadata: --json only)\n"
    "  events PATH [--local] [--watch [-n N]]   memory.events(.local); "
    "--watch\n"
    "                        prints every change until the group is deleted\n"
    "  ls PATH [-r]          child groups (-r: the whole subtree)\n"
    "  tree [PATH]           the subtree with memory.current/memory.max, like "
    "systemd-cgls\n"
    "  top [PATH] [-n N] [--delay=1s]   groups by memory.current, refreshing,\n"
    "                        like systemd-cgtop (q quits)\n"
    "  peak PATH [-n N] [--delay=1s]   writes memory.peak (a watermark of its\n"
    "                        own, in a session of its own), then reads it\n"
    "                        back every --delay: the peak since the write\n"
    "  info                  the engine's configuration\n"
    "  cluster               cluster mode: the nodes and each shard's owner\n"
    "                        (GetClusterMap, as the answering node sees it)\n"
    "  health [SERVICE]      grpc.health.v1 Check (\"\" the whole server, or\n"
    "                        cgacct.v1.Accounting): prints SERVING or\n"
    "                        NOT_SERVING; exit 0 only when SERVING\n"
    "writes (sizes as the kernel's memparse(): 4096, 0x1000, 0755, 50M, 1G, "
    "1P,\n"
    "        max for the limit files; 50MiB is refused as by the kernel):\n"
    "  create PATH [--max=SIZE]\n"
    "  delete PATH\n"
    "  set PATH FILE=VALUE ...  one or more of memory.max=SIZE, "
    "memory.high=SIZE,\n"
    "           memory.min=SIZE, memory.low=SIZE, memory.oom.group=0|1\n"
    "  reclaim PATH SIZE     memory.reclaim: exit 5 when not all was "
    "reclaimed (EAGAIN)\n"
    "  charge PATH NR_PAGES|SIZE anon|file [--cpu=K]  a bare number is pages\n"
    "                        (the engine's unit), a size with a unit (8M) is\n"
    "                        bytes, rounded up to whole pages; --cpu: admin\n"
    "                        only under access control\n"
    "  uncharge PATH NR_PAGES|SIZE anon|file [--cpu=K]\n"
    "exit status: 0 ok; 2 usage (nothing sent); 3 not found (NOT_FOUND);\n"
    "  4 refused (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED,\n"
    "  FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ALREADY_EXISTS, "
    "OUT_OF_RANGE);\n"
    "  5 unavailable (UNAVAILABLE, DEADLINE_EXCEEDED, cannot connect; "
    "reclaim:\n"
    "  not all reclaimed); 1 anything else; --help 0.\n"
    "target: --target, else $CGACCT_TARGET, else 127.0.0.1:50051 (as\n"
    "  ETCDCTL_ENDPOINTS); a refused connection fails at once, exit 5.";

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  cli::ShowOwnFlagsInHelp();
  if (cli::PrintHelpIfAsked(argc, argv)) return 0;
  if (std::optional<std::string> error = cli::FlagUsageError(argc, argv)) {
    return PrintUsageError(*error);
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> args(positional.begin() + 1, positional.end());
  // Usage errors are reported without touching the network.
  absl::StatusOr<Invocation> inv = ParseInvocation(args);
  if (!inv.ok()) return PrintUsageError(inv.status().message());
  std::shared_ptr<grpc::Channel> channel = cli::MakeChannel(inv->target);
  if (absl::Status s =
          cli::WaitForConnected(*channel, inv->target, inv->connect_timeout,
                                /*fail_fast=*/true);
      !s.ok()) {
    std::cerr << "cgacctctl: " << s.message() << "\n";
    return kExitUnavailable;
  }
  Ctl ctl(channel, inv->json, inv->timeout);
  return RunCommand(ctl, *inv);
}

}  // namespace
}  // namespace cgacct::ctl

int main(int argc, char** argv) { return cgacct::ctl::Main(argc, argv); }
