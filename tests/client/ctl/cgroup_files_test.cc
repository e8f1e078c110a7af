// What cgacctctl prints for a group's cgroup v2 files
// (client/ctl/cgroup_files.h): the kernel's text, the JSON values, and
// systemd's byte counts.
#include "client/ctl/cgroup_files.h"

#include "gtest/gtest.h"

namespace cgacct::ctl {
namespace {

v1::GroupStats Stats() {
  v1::GroupStats s;
  s.set_memory_current_bytes(8192);
  s.set_memory_peak_bytes(16384);
  s.mutable_limits()->set_max_bytes(UINT64_MAX);
  s.mutable_limits()->set_high_bytes(1 << 20);
  s.mutable_limits()->set_min_bytes(0);
  s.mutable_limits()->set_low_bytes(4096);
  v1::StatEntry* anon = s.add_stat();
  anon->set_name("anon");
  anon->set_value(4096);
  v1::StatEntry* file = s.add_stat();
  file->set_name("file");
  file->set_value(4096);
  s.mutable_events()->set_high(3);
  s.mutable_events()->set_oom_kill(1);
  s.mutable_events_local()->set_max(2);
  return s;
}

TEST(CatTextTest, EachFileAsTheKernelPrintsIt) {
  const v1::GroupStats s = Stats();
  EXPECT_EQ(CatText(s, "memory.current"), "8192\n");
  EXPECT_EQ(CatText(s, "memory.peak"), "16384\n");
  EXPECT_EQ(CatText(s, "memory.max"), "max\n");
  EXPECT_EQ(CatText(s, "memory.high"), "1048576\n");
  EXPECT_EQ(CatText(s, "memory.min"), "0\n");
  EXPECT_EQ(CatText(s, "memory.low"), "4096\n");
  EXPECT_EQ(CatText(s, "memory.stat"), "anon 4096\nfile 4096\n");
  EXPECT_EQ(CatText(s, "memory.events"),
            "low 0\nhigh 3\nmax 0\noom 0\noom_kill 1\noom_group_kill 0\n"
            "sock_throttled 0\n");
  EXPECT_EQ(CatText(s, "memory.events.local"),
            "low 0\nhigh 0\nmax 2\noom 0\noom_kill 0\noom_group_kill 0\n"
            "sock_throttled 0\n");
}

TEST(CatJsonTest, NumbersMaxAndObjects) {
  const v1::GroupStats s = Stats();
  EXPECT_EQ(CatJson(s, "memory.current"), 8192);
  EXPECT_EQ(CatJson(s, "memory.max"), "max");
  EXPECT_EQ(CatJson(s, "memory.high"), 1 << 20);
  EXPECT_EQ(CatJson(s, "memory.stat").dump(), R"({"anon":4096,"file":4096})");
  EXPECT_EQ(CatJson(s, "memory.events").dump(),
            R"({"low":0,"high":3,"max":0,"oom":0,"oom_kill":1,)"
            R"("oom_group_kill":0,"sock_throttled":0})");
}

TEST(IsCatFileTest, OnlyTheListedFiles) {
  for (const char* f : kCatFiles) EXPECT_TRUE(IsCatFile(f)) << f;
  EXPECT_FALSE(IsCatFile("memory.swap.max"));
  EXPECT_FALSE(IsCatFile("memory"));
  EXPECT_EQ(kNrCatFiles, 10u);
}

TEST(HumanBytesTest, SystemdFormatBytes) {
  EXPECT_EQ(HumanBytes(0), "0B");
  EXPECT_EQ(HumanBytes(1023), "1023B");
  EXPECT_EQ(HumanBytes(1024), "1.0K");
  EXPECT_EQ(HumanBytes(1536 << 20), "1.5G");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "max");
  EXPECT_EQ(HumanBytes(UINT64_MAX - 1), "16.0E");
}

}  // namespace
}  // namespace cgacct::ctl
