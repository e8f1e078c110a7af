// cgacctctl tree and top's renderings (client/ctl/tree_top.h), from rows as
// Ctl::ReadSubtree() reads them.
#include "client/ctl/tree_top.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace cgacct::ctl {
namespace {

GroupRow Row(const std::string& path, uint64_t current, uint64_t max) {
  GroupRow row;
  row.path = path;
  row.stats.set_memory_current_bytes(current);
  row.stats.set_memory_peak_bytes(current);
  row.stats.mutable_limits()->set_max_bytes(max);
  row.stats.mutable_limits()->set_high_bytes(UINT64_MAX);
  return row;
}

// /a with children b (with d) and c: ListGroups' sorted order.
std::vector<GroupRow> Subtree() {
  return {Row("/a", 3 << 20, 50 << 20), Row("/a/b", 1 << 20, UINT64_MAX),
          Row("/a/b/d", 0, UINT64_MAX), Row("/a/c", 2 << 20, UINT64_MAX)};
}

TEST(TreeTextTest, SystemdCglsShape) {
  EXPECT_EQ(TreeText(Subtree()),
            "/a  current=3145728 max=52428800\n"
            "\u251c\u2500b  current=1048576 max=max\n"
            "\u2502 \u2514\u2500d  current=0 max=max\n"
            "\u2514\u2500c  current=2097152 max=max\n");
}

TEST(TreeTextTest, TheRootsChildrenAreFoundUnderSlash) {
  EXPECT_EQ(TreeText({Row("/", 0, UINT64_MAX), Row("/x", 0, UINT64_MAX)}),
            "/  current=0 max=max\n"
            "\u2514\u2500x  current=0 max=max\n");
}

TEST(TreeJsonTest, NestedChildren) {
  const Json j = TreeJson(Subtree());
  EXPECT_EQ(j["path"], "/a");
  EXPECT_EQ(j["memory.max"], 50 << 20);
  ASSERT_EQ(j["children"].size(), 2u);
  EXPECT_EQ(j["children"][0]["path"], "/a/b");
  EXPECT_EQ(j["children"][0]["memory.max"], "max");
  EXPECT_EQ(j["children"][0]["children"][0]["path"], "/a/b/d");
  EXPECT_TRUE(j["children"][1]["children"].empty());
}

TEST(TopTest, LargestFirstStable) {
  std::vector<GroupRow> rows = Subtree();
  rows.push_back(Row("/a/e", 1 << 20, UINT64_MAX));
  SortByCurrent(&rows);
  std::vector<std::string> paths;
  for (const GroupRow& r : rows) paths.push_back(r.path);
  EXPECT_EQ(paths,
            (std::vector<std::string>{"/a", "/a/c", "/a/b", "/a/e", "/a/b/d"}));
}

TEST(TopTest, FrameHeaderRowsAndSeparators) {
  const std::vector<GroupRow> rows = {Row("/a", 3 << 20, 50 << 20)};
  const std::string first = TopFrame(rows, /*tty=*/false, /*first=*/true);
  EXPECT_EQ(first,
            "Control Group                                Memory        Max"
            "       High       Peak      max      oom\n"
            "/a                                             3.0M      50.0M"
            "        max       3.0M        0        0\n");
  EXPECT_EQ(TopFrame(rows, false, /*first=*/false), "\n" + first);
  EXPECT_EQ(TopFrame(rows, /*tty=*/true, false), "\x1b[H\x1b[2J" + first);
}

// A path longer than the 40-column default widens the column for every
// row, so the numbers stay under their headers.
TEST(TopTest, LongPathsKeepTheColumnsAligned) {
  const std::string long_path = "/tenants/" + std::string(50, 'x');
  const std::string frame =
      TopFrame({Row("/a", 3 << 20, 50 << 20), Row(long_path, 1 << 20, 0)},
               /*tty=*/false, /*first=*/true);
  const std::vector<std::string> lines = absl::StrSplit(frame, '\n');
  ASSERT_EQ(lines.size(), 4u) << frame;  // header, 2 rows, ""
  EXPECT_EQ(lines[0].size(), lines[1].size()) << frame;
  EXPECT_EQ(lines[1].size(), lines[2].size()) << frame;
  const size_t memory_end = lines[0].find("Memory") + 6;
  EXPECT_EQ(lines[1].substr(memory_end - 4, 4), "3.0M") << frame;
  EXPECT_EQ(lines[2].substr(memory_end - 4, 4), "1.0M") << frame;
}

TEST(TopTest, Json) {
  const Json j = TopJson({Row("/a", 4096, UINT64_MAX)});
  EXPECT_EQ(j.dump(),
            R"({"groups":[{"path":"/a","memory.current":4096,)"
            R"("memory.max":"max","memory.high":"max","memory.peak":4096,)"
            R"("memory.events":{"low":0,"high":0,"max":0,"oom":0,)"
            R"("oom_kill":0,"oom_group_kill":0,"sock_throttled":0}}]})");
}

}  // namespace
}  // namespace cgacct::ctl
