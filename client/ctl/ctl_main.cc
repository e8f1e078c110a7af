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

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cgacct_build_info.h"
#include "client/cli/cli_util.h"
#include "client/cli/grpc_util.h"
#include "client/ctl/ctl.h"
#include "client/ctl/exit_status.h"
#include "client/ctl/help.h"
#include "client/ctl/invocation.h"

ABSL_FLAG(bool, man, false,
          "print the manual page (roff) and exit; installed as "
          "share/man/man1/cgacctctl.1");
ABSL_FLAG(std::string, completion, "",
          "print a completion script for the shell (bash) and exit; "
          "installed as share/bash-completion/completions/cgacctctl");

namespace cgacct::ctl {
namespace {

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(UsageText());
  cli::ShowOwnFlagsInHelp();
  if (cli::PrintHelpIfAsked(argc, argv)) return 0;
  if (std::optional<std::string> error = cli::FlagUsageError(argc, argv)) {
    return PrintUsageError(*error);
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> args(positional.begin() + 1, positional.end());
  // The manual page and the completion script, made from the table --help
  // comes from (help.h); nothing is sent.
  if (absl::GetFlag(FLAGS_man)) {
    std::cout << ManPage(kCgacctVersion);
    return kExitOk;
  }
  if (const std::string shell = absl::GetFlag(FLAGS_completion);
      !shell.empty()) {
    if (shell != "bash") {
      return PrintUsageError(absl::StrCat(
          "--completion: only bash is supported, got \"", shell, "\""));
    }
    std::cout << BashCompletion();
    return kExitOk;
  }
  // Usage errors are reported without touching the network.
  absl::StatusOr<Invocation> inv = ParseInvocation(args);
  if (!inv.ok()) return PrintUsageError(inv.status().message());
  absl::StatusOr<std::shared_ptr<grpc::Channel>> made =
      cli::MakeChannel(inv->target);
  if (!made.ok()) return PrintUsageError(made.status().message());
  std::shared_ptr<grpc::Channel> channel = *std::move(made);
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
