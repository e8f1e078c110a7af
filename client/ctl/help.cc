#include "client/ctl/help.h"

#include <cstdio>
#include <iterator>

#include "absl/flags/commandlineflag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/cli/cli_util.h"
#include "client/ctl/cgroup_files.h"

namespace cgacct::ctl {
namespace {

constexpr char kLimitFileAssignments[] =
    "memory.max= memory.high= memory.min= memory.low= memory.oom.group=";

// "-r" for one-letter flags, "--name" otherwise (both are accepted).
std::string Dashed(const absl::CommandLineFlag& flag) {
  return absl::StrCat(flag.Name().size() == 1 ? "-" : "--", flag.Name());
}

// roff text: a leading '.' or '\'' guarded, backslashes and hyphens escaped.
std::string Roff(const std::string& text) {
  std::string out = absl::StrReplaceAll(text, {{"\\", "\\e"}, {"-", "\\-"}});
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

}  // namespace

const std::vector<CommandDoc>& Commands() {
  static const auto* const kCommands = new std::vector<CommandDoc>{
      {"cat", "PATH FILE...", "reads",
       {"print cgroup files as the kernel would: memory.current,",
        "memory.max, memory.high, memory.min, memory.low,",
        "memory.peak, memory.oom.group, memory.stat,",
        "memory.events, memory.events.local"},
       Completes::kCgroupFiles},
      {"stat", "PATH", "reads",
       {"memory.stat (flush metadata: --json only)"},
       Completes::kNothing},
      {"events", "PATH [--local] [--watch [-n N]]", "reads",
       {"memory.events(.local); --watch prints every change",
        "until the group is deleted"},
       Completes::kNothing},
      {"ls", "PATH [-r]", "reads",
       {"child groups (-r: the whole subtree)"},
       Completes::kNothing},
      {"tree", "[PATH]", "reads",
       {"the subtree with memory.current/memory.max, like",
        "systemd-cgls"},
       Completes::kNothing},
      {"top", "[PATH] [-n N] [--delay=1s]", "reads",
       {"groups by memory.current, refreshing, like",
        "systemd-cgtop (q quits)"},
       Completes::kNothing},
      {"peak", "PATH [-n N] [--delay=1s]", "reads",
       {"writes memory.peak (a watermark of its own, in a",
        "session of its own), then reads it back every",
        "--delay: the peak since the write"},
       Completes::kNothing},
      {"info", "", "reads", {"the engine's configuration"}, Completes::kNothing},
      {"cluster", "", "reads",
       {"cluster mode: the nodes and each shard's owner",
        "(GetClusterMap, as the answering node sees it)"},
       Completes::kNothing},
      {"health", "[SERVICE]", "reads",
       {"grpc.health.v1 Check (\"\" the whole server, or",
        "cgacct.v1.Accounting): prints SERVING or",
        "NOT_SERVING; exit 0 only when SERVING"},
       Completes::kNothing},
      {"create", "PATH [--max=SIZE]", "writes", {"a group"},
       Completes::kNothing},
      {"delete", "PATH", "writes",
       {"a group with no children (its pages go to its parent)"},
       Completes::kNothing},
      {"set", "PATH FILE=VALUE...", "writes",
       {"one or more of memory.max=SIZE, memory.high=SIZE,",
        "memory.min=SIZE, memory.low=SIZE, memory.oom.group=0|1"},
       Completes::kLimitFiles},
      {"reclaim", "PATH SIZE", "writes",
       {"memory.reclaim: exit 5 when not all was reclaimed",
        "(EAGAIN)"},
       Completes::kNothing},
      {"charge", "PATH NR_PAGES|SIZE anon|file [--cpu=K]", "writes",
       {"a bare number is pages (the engine's unit), a size",
        "with a unit (8M) is bytes, rounded up to whole",
        "pages; --cpu: admin only under access control"},
       Completes::kPageKinds},
      {"uncharge", "PATH NR_PAGES|SIZE anon|file [--cpu=K]", "writes",
       {"as charge, the other way"},
       Completes::kPageKinds},
  };
  return *kCommands;
}

const std::vector<ExitStatusDoc>& ExitStatuses() {
  static const auto* const kStatuses = new std::vector<ExitStatusDoc>{
      {0, "ok (and --help)"},
      {1, "anything else"},
      {2, "usage error: nothing was sent"},
      {3, "not found (NOT_FOUND)"},
      {4, "refused (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED, "
          "FAILED_PRECONDITION, RESOURCE_EXHAUSTED, ALREADY_EXISTS, "
          "OUT_OF_RANGE)"},
      {5, "unavailable (UNAVAILABLE, DEADLINE_EXCEEDED, cannot connect; "
          "reclaim: not all reclaimed; health: not SERVING)"},
  };
  return *kStatuses;
}

std::string UsageText() {
  std::string out =
      "operator CLI for cgacctd, as fluent as cgroupfs.\n"
      "cgacctctl [--target=HOST:PORT] [--json] COMMAND\n";
  const auto section = [&](const char* name, const char* heading) {
    absl::StrAppend(&out, heading);
    for (const CommandDoc& c : Commands()) {
      if (absl::string_view(c.section) != name) continue;
      std::string head = absl::StrCat("  ", c.name);
      if (*c.synopsis != '\0') absl::StrAppend(&head, " ", c.synopsis);
      // The description starts at column 24, on the synopsis' line when it
      // fits there, else on the next.
      if (head.size() < 23) {
        head.resize(24, ' ');
        absl::StrAppend(&out, head, c.lines[0], "\n");
      } else {
        absl::StrAppend(&out, head, "\n", std::string(24, ' '), c.lines[0],
                        "\n");
      }
      for (size_t i = 1; i < c.lines.size(); ++i) {
        absl::StrAppend(&out, std::string(24, ' '), c.lines[i], "\n");
      }
    }
  };
  section("reads", "reads (--json on each; --flush=exact|threshold|none):\n");
  section("writes",
          "writes (sizes as the kernel's memparse(): 4096, 0x1000, 0755, 50M, "
          "1G, 1P,\n"
          "        max for the limit files; 50MiB is refused as by the "
          "kernel):\n");
  absl::StrAppend(&out, "exit status:\n");
  for (const ExitStatusDoc& e : ExitStatuses()) {
    absl::StrAppend(&out, "  ", e.code, " ", e.meaning, "\n");
  }
  absl::StrAppend(
      &out,
      "target: --target, else $CGACCT_TARGET, else 127.0.0.1:50051 (as\n"
      "  ETCDCTL_ENDPOINTS); a refused connection fails at once, exit 5.\n"
      "cgacctctl --man prints the manual page, cgacctctl --completion=bash\n"
      "  a bash completion script (both installed by cmake --install).");
  return out;
}

std::string ManPage(const std::string& version) {
  std::string out = absl::StrCat(
      ".TH CGACCTCTL 1 \"\" \"cgacct ", Roff(version),
      "\" \"cgacct\"\n"
      ".SH NAME\n"
      "cgacctctl \\- operator CLI for cgacctd, as fluent as cgroupfs\n"
      ".SH SYNOPSIS\n"
      ".B cgacctctl\n"
      "[\\fB\\-\\-target\\fR=\\fIHOST:PORT\\fR] [\\fB\\-\\-json\\fR] "
      "\\fICOMMAND\\fR [\\fIARGS\\fR...]\n"
      ".SH DESCRIPTION\n"
      "Reads print what the cgroup v2 file would (\\fBcat PATH "
      "memory.current\\fR; \\fBstat\\fR is memory.stat); writes take the "
      "kernel's memparse() sizes (4096, 0x1000, 50M, 1G; \\fBmax\\fR for "
      "the limit files). \\fB\\-\\-json\\fR prints every read as JSON.\n"
      ".SH COMMANDS\n");
  for (const char* section : {"reads", "writes"}) {
    absl::StrAppend(&out, ".SS ",
                    absl::string_view(section) == "reads" ? "Reads" : "Writes",
                    "\n");
    for (const CommandDoc& c : Commands()) {
      if (absl::string_view(c.section) != section) continue;
      absl::StrAppend(&out, ".TP\n\\fB", c.name, "\\fR ", Roff(c.synopsis),
                      "\n", Roff(absl::StrJoin(c.lines, " ")), "\n");
    }
  }
  absl::StrAppend(&out, ".SH OPTIONS\n");
  for (const absl::CommandLineFlag* flag : cli::OwnFlags()) {
    const std::string def = flag->DefaultValue();
    absl::StrAppend(&out, ".TP\n\\fB", Roff(Dashed(*flag)), "\\fR",
                    def.empty() ? "" : absl::StrCat("=", Roff(def)), "\n",
                    Roff(flag->Help()), "\n");
  }
  absl::StrAppend(&out,
                  ".TP\n\\fB\\-\\-help\\fR\nthe commands and flags; exit 0\n"
                  ".TP\n\\fB\\-\\-version\\fR\nthe version and git "
                  "revision\n"
                  ".SH ENVIRONMENT\n"
                  ".TP\n\\fBCGACCT_TARGET\\fR\nHOST:PORT of cgacctd when "
                  "\\fB\\-\\-target\\fR is not given (else 127.0.0.1:50051)\n"
                  ".SH EXIT STATUS\n");
  for (const ExitStatusDoc& e : ExitStatuses()) {
    absl::StrAppend(&out, ".TP\n", e.code, "\n", Roff(e.meaning), "\n");
  }
  absl::StrAppend(&out,
                  ".SH SEE ALSO\n"
                  ".BR cgacctd (8),\n"
                  ".BR systemd-cgtop (1),\n"
                  ".BR systemd-cgls (1)\n");
  return out;
}

std::string BashCompletion() {
  std::vector<std::string> commands;
  std::vector<std::string> files_after, kinds_after, limits_after;
  for (const CommandDoc& c : Commands()) {
    commands.push_back(c.name);
    if (c.completes == Completes::kCgroupFiles) files_after.push_back(c.name);
    if (c.completes == Completes::kPageKinds) kinds_after.push_back(c.name);
    if (c.completes == Completes::kLimitFiles) limits_after.push_back(c.name);
  }
  std::vector<std::string> flags;
  for (const absl::CommandLineFlag* flag : cli::OwnFlags()) {
    flags.push_back(flag->IsOfType<bool>() ? Dashed(*flag)
                                           : absl::StrCat(Dashed(*flag), "="));
  }
  flags.push_back("--help");
  flags.push_back("--version");
  const auto alternatives = [](const std::vector<std::string>& names) {
    return names.empty() ? std::string("__none__") : absl::StrJoin(names, "|");
  };
  return absl::StrCat(
      "# bash completion for cgacctctl (generated by cgacctctl "
      "--completion=bash\n"
      "# from the table --help and the man page come from).\n"
      "_cgacctctl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]}\n"
      "  local commands=\"", absl::StrJoin(commands, " "), "\"\n",
      "  local flags=\"", absl::StrJoin(flags, " "), "\"\n",
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n"
      "    [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *= ]] && "
      "compopt -o nospace 2>/dev/null\n"
      "    return 0\n"
      "  fi\n"
      "  local i command= nargs=0\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    case ${COMP_WORDS[i]} in\n"
      "      -*) ;;\n"
      "      *) if [[ -z $command ]]; then command=${COMP_WORDS[i]}; else "
      "nargs=$((nargs + 1)); fi ;;\n"
      "    esac\n"
      "  done\n"
      "  if [[ -z $command ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$commands\" -- \"$cur\"))\n"
      "    return 0\n"
      "  fi\n"
      "  case $command in\n"
      "    ", alternatives(files_after), ")\n"
      "      [[ $nargs -ge 1 ]] && COMPREPLY=($(compgen -W \"",
      absl::StrJoin(std::begin(kCatFiles), std::end(kCatFiles), " "),
      "\" -- \"$cur\")) ;;\n"
      "    ", alternatives(limits_after), ")\n"
      "      if [[ $nargs -ge 1 ]]; then\n"
      "        COMPREPLY=($(compgen -W \"", kLimitFileAssignments,
      "\" -- \"$cur\"))\n"
      "        compopt -o nospace 2>/dev/null\n"
      "      fi ;;\n"
      "    ", alternatives(kinds_after), ")\n"
      "      [[ $nargs -eq 2 ]] && COMPREPLY=($(compgen -W \"anon file\" -- "
      "\"$cur\")) ;;\n"
      "  esac\n"
      "  return 0\n"
      "}\n"
      "complete -F _cgacctctl cgacctctl\n");
}

}  // namespace cgacct::ctl
