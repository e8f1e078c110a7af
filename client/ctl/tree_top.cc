#include "client/ctl/tree_top.h"

#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cli/cli_util.h"
#include "client/ctl/exit_status.h"

namespace cgacct::ctl {
namespace {

// The terminal's settings before top changed them, for the signal handler
// (tcsetattr() is async-signal-safe): set once by QuitKey, read after.
termios g_saved_termios;
volatile sig_atomic_t g_termios_saved = 0;

void RestoreTerminalAndDie(int signal_number) {
  if (g_termios_saved) tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_termios);
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

// `q` typed at the terminal ends top, as in systemd-cgtop and top(1). While
// it lives and stdin is a terminal, the terminal reads keys one at a time
// without echo; its settings come back when it ends, and on SIGINT, SIGTERM
// or SIGHUP (which then end cgacctctl as before). With stdin not a terminal
// (a pipe, a script) nothing changes: top only sleeps between refreshes.
class QuitKey {
 public:
  QuitKey() {
    if (isatty(STDIN_FILENO) != 1 ||
        tcgetattr(STDIN_FILENO, &g_saved_termios) != 0)
      return;
    g_termios_saved = 1;
    for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, RestoreTerminalAndDie);
    termios keys = g_saved_termios;
    keys.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    keys.c_cc[VMIN] = 0;
    keys.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &keys) == 0;
  }
  ~QuitKey() {
    if (g_termios_saved) tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_termios);
  }
  QuitKey(const QuitKey&) = delete;
  QuitKey& operator=(const QuitKey&) = delete;

  // Waits `delay`, or less if q or Q is typed (then true). Other keys are
  // read and ignored.
  bool WaitForQuit(absl::Duration delay) {
    if (!active_) {
      absl::SleepFor(delay);
      return false;
    }
    const absl::Time end = absl::Now() + delay;
    for (absl::Duration left = delay; left > absl::ZeroDuration();
         left = end - absl::Now()) {
      pollfd in{STDIN_FILENO, POLLIN, 0};
      const int ms = static_cast<int>(
          absl::ToInt64Milliseconds(left + absl::Milliseconds(1) -
                                    absl::Nanoseconds(1)));
      if (poll(&in, 1, ms) <= 0) continue;
      char keys[64];
      const ssize_t n = read(STDIN_FILENO, keys, sizeof(keys));
      if (n <= 0) {
        // The terminal went away (EOF): keep refreshing, as without one.
        active_ = false;
        absl::SleepFor(end - absl::Now());
        return false;
      }
      for (ssize_t i = 0; i < n; ++i) {
        if (keys[i] == 'q' || keys[i] == 'Q') return true;
      }
    }
    return false;
  }

 private:
  bool active_ = false;
};

// The rows' indices by parent path, in the rows' order per parent.
using Children = std::map<std::string, std::vector<size_t>>;

Children ChildrenOf(const std::vector<GroupRow>& rows) {
  Children children;
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::string& p = rows[i].path;
    const size_t slash = p.rfind('/');
    children[slash == 0 ? "/" : p.substr(0, slash)].push_back(i);
  }
  return children;
}

std::string TreeValues(const v1::GroupStats& stats) {
  return absl::StrCat("current=", stats.memory_current_bytes(), " max=",
                      cli::FormatSizeBytes(stats.limits().max_bytes()));
}

std::string BaseName(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

void AppendTreeChildren(const std::vector<GroupRow>& rows,
                        const Children& children, const std::string& parent,
                        const std::string& prefix, std::string* out) {
  const auto it = children.find(parent);
  if (it == children.end()) return;
  const std::vector<size_t>& kids = it->second;
  for (size_t k = 0; k < kids.size(); ++k) {
    const bool last = k + 1 == kids.size();
    const GroupRow& row = rows[kids[k]];
    absl::StrAppend(out, prefix, last ? "\u2514\u2500" : "\u251c\u2500",
                    BaseName(row.path), "  ", TreeValues(row.stats), "\n");
    AppendTreeChildren(rows, children, row.path,
                       prefix + (last ? "  " : "\u2502 "), out);
  }
}

Json TreeNodeJson(const std::vector<GroupRow>& rows, const Children& children,
                  size_t index) {
  const GroupRow& row = rows[index];
  Json json = Json::object();
  json["path"] = row.path;
  json["memory.current"] = row.stats.memory_current_bytes();
  json["memory.max"] = LimitJson(row.stats.limits().max_bytes());
  Json kids = Json::array();
  if (const auto it = children.find(row.path); it != children.end()) {
    for (size_t k : it->second) kids.push_back(TreeNodeJson(rows, children, k));
  }
  json["children"] = std::move(kids);
  return json;
}

}  // namespace

std::string TreeText(const std::vector<GroupRow>& rows) {
  std::string out =
      absl::StrCat(rows[0].path, "  ", TreeValues(rows[0].stats), "\n");
  AppendTreeChildren(rows, ChildrenOf(rows), rows[0].path, "", &out);
  return out;
}

Json TreeJson(const std::vector<GroupRow>& rows) {
  return TreeNodeJson(rows, ChildrenOf(rows), 0);
}

void SortByCurrent(std::vector<GroupRow>* rows) {
  std::stable_sort(
      rows->begin(), rows->end(), [](const GroupRow& a, const GroupRow& b) {
        return a.stats.memory_current_bytes() > b.stats.memory_current_bytes();
      });
}

std::string TopFrame(const std::vector<GroupRow>& rows, bool tty, bool first) {
  std::string frame;
  if (tty) {
    frame += "\x1b[H\x1b[2J";
  } else if (!first) {
    frame += "\n";
  }
  // The path column is 40 wide, or as wide as the longest path: a longer
  // path pushed its row's numbers out of their columns.
  int width = 40;
  for (const GroupRow& row : rows)
    width = std::max(width, static_cast<int>(row.path.size()));
  absl::StrAppendFormat(&frame, "%-*s %10s %10s %10s %10s %8s %8s\n", width,
                        "Control Group", "Memory", "Max", "High", "Peak", "max",
                        "oom");
  for (const GroupRow& row : rows) {
    const v1::Limits& l = row.stats.limits();
    absl::StrAppendFormat(
        &frame, "%-*s %10s %10s %10s %10s %8d %8d\n", width, row.path,
        HumanBytes(row.stats.memory_current_bytes()), HumanBytes(l.max_bytes()),
        HumanBytes(l.high_bytes()), HumanBytes(row.stats.memory_peak_bytes()),
        row.stats.events().max(), row.stats.events().oom());
  }
  return frame;
}

Json TopJson(const std::vector<GroupRow>& rows) {
  Json groups = Json::array();
  for (const GroupRow& row : rows) {
    const v1::Limits& l = row.stats.limits();
    groups.push_back({{"path", row.path},
                      {"memory.current", row.stats.memory_current_bytes()},
                      {"memory.max", LimitJson(l.max_bytes())},
                      {"memory.high", LimitJson(l.high_bytes())},
                      {"memory.peak", row.stats.memory_peak_bytes()},
                      {"memory.events", EventsJson(row.stats.events())}});
  }
  return Json{{"groups", std::move(groups)}};
}

// systemd-cgls for groups: the tree below PATH, each with memory.current
// and memory.max.
int Tree(Ctl& ctl, const Invocation& inv) {
  std::vector<GroupRow> rows;
  const grpc::Status status = ctl.ReadSubtree(inv.path, inv.flush, &rows);
  if (!status.ok()) {
    return PrintRpcError(absl::StrCat("tree ", inv.path), status);
  }
  if (ctl.json()) {
    PrintJson(TreeJson(rows));
  } else {
    std::cout << TreeText(rows);
  }
  return kExitOk;
}

// systemd-cgtop for groups: every group below PATH (and PATH itself) by
// memory.current, largest first, refreshed every --delay. On a terminal
// each refresh clears the screen; otherwise refreshes follow each other,
// separated by a blank line (--json: one JSON object per line).
int Top(Ctl& ctl, const Invocation& inv) {
  const bool tty = isatty(STDOUT_FILENO) == 1 && !ctl.json();
  QuitKey quit;
  for (int i = 0; inv.iterations == 0 || i < inv.iterations; ++i) {
    if (i > 0 && quit.WaitForQuit(inv.delay)) break;
    std::vector<GroupRow> rows;
    const grpc::Status status = ctl.ReadSubtree(inv.path, inv.flush, &rows);
    if (!status.ok()) {
      return PrintRpcError(absl::StrCat("top ", inv.path), status);
    }
    SortByCurrent(&rows);
    if (ctl.json()) {
      PrintJson(TopJson(rows), /*pretty=*/false);
      std::cout.flush();
    } else {
      std::cout << TopFrame(rows, tty, /*first=*/i == 0) << std::flush;
    }
  }
  return kExitOk;
}

}  // namespace cgacct::ctl
