// cgacctctl tree and top: a subtree at a glance, as systemd-cgls and
// systemd-cgtop show cgroups. The renderings are pure functions of the
// rows Ctl::ReadSubtree() read (rows[0] is the subtree's root, the others
// in ListGroups' sorted order).
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_CLIENT_CTL_TREE_TOP_H_
#define CGACCT_CLIENT_CTL_TREE_TOP_H_

#include <string>
#include <vector>

#include "client/ctl/cgroup_files.h"
#include "client/ctl/ctl.h"

namespace cgacct::ctl {

// The tree below rows[0], each group with memory.current and memory.max:
// "/a  current=N max=M" then "├─b  ..." lines, ending in '\n'.
std::string TreeText(const std::vector<GroupRow>& rows);

// The same as nested JSON objects {path, memory.current, memory.max,
// children}.
Json TreeJson(const std::vector<GroupRow>& rows);

// Sorts the rows by memory.current, largest first (stable).
void SortByCurrent(std::vector<GroupRow>* rows);

// One refresh of top as text: on a terminal (`tty`) it clears the screen
// first, otherwise refreshes after the first are separated by a blank line.
std::string TopFrame(const std::vector<GroupRow>& rows, bool tty, bool first);

// One refresh of top as JSON: {"groups": [...]}.
Json TopJson(const std::vector<GroupRow>& rows);

}  // namespace cgacct::ctl

#endif  // CGACCT_CLIENT_CTL_TREE_TOP_H_
