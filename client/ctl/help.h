// cgacctctl's documentation, from one table: the --help text, the man page
// (`cgacctctl --man`, roff, built and installed as share/man/man1/
// cgacctctl.1) and the bash completion (`cgacctctl --completion=bash`,
// installed as share/bash-completion/completions/cgacctctl) are all made
// from kCommands, kExitStatuses and the flags' own registry, so that none
// of them can name a command or a flag the others do not.
//
// Thread safety: pure functions over constant tables; the flag registry is
// read (thread-safe after absl::ParseCommandLine()).
#ifndef CGACCT_CLIENT_CTL_HELP_H_
#define CGACCT_CLIENT_CTL_HELP_H_

#include <string>
#include <vector>

namespace cgacct::ctl {

// What a command's words after PATH complete to.
enum class Completes {
  kNothing,
  kCgroupFiles,  // cat PATH FILE...
  kLimitFiles,   // set PATH FILE=VALUE...
  kPageKinds,    // charge/uncharge PATH N anon|file (the fourth word)
};

struct CommandDoc {
  const char* name;
  const char* synopsis;  // the words after the name ("PATH FILE...")
  // "reads" or "writes" (the --help sections) or "other".
  const char* section;
  // One or more lines of description, each under 56 columns.
  std::vector<const char*> lines;
  Completes completes;
};

// Every command, in --help's order.
const std::vector<CommandDoc>& Commands();

struct ExitStatusDoc {
  int code;
  const char* meaning;
};
const std::vector<ExitStatusDoc>& ExitStatuses();

// The --help text (absl::SetProgramUsageMessage()).
std::string UsageText();

// The man page, roff (man(7) macros), with the flags cgacctctl defines
// (name, default, help) and the exit statuses; `version` goes in the
// header (.TH).
std::string ManPage(const std::string& version);

// A bash completion script: commands, flags (--name= for those that take a
// value), the cgroup file names after cat and set, anon|file after charge
// and uncharge; paths are not completed (they live on the server).
std::string BashCompletion();

}  // namespace cgacct::ctl

#endif  // CGACCT_CLIENT_CTL_HELP_H_
