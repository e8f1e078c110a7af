// cgacctctl's command line (client/ctl/invocation.h): each command's
// arguments, the limit files and flags, and the flag checks made before
// Abseil's parser (whose errors would exit 1, not 2).
#include "client/ctl/invocation.h"

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "client/cli/cli_util.h"
#include "client/ctl/cgroup_files.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, max);
ABSL_DECLARE_FLAG(std::string, high);
ABSL_DECLARE_FLAG(std::string, flush);
ABSL_DECLARE_FLAG(int32_t, cpu);
ABSL_DECLARE_FLAG(int32_t, n);
ABSL_DECLARE_FLAG(int32_t, iterations);
ABSL_DECLARE_FLAG(bool, watch);
ABSL_DECLARE_FLAG(bool, r);

namespace cgacct::ctl {
namespace {

class InvocationTest : public ::testing::Test {
 protected:
  // The usage error of `args` ("" when accepted).
  static std::string Error(const std::vector<std::string>& args) {
    absl::StatusOr<Invocation> inv = ParseInvocation(args);
    return inv.ok() ? "" : std::string(inv.status().message());
  }

 private:
  absl::FlagSaver saver_;
};

TEST_F(InvocationTest, CommandsAndTheirArity) {
  EXPECT_EQ(Error({}), "missing command");
  EXPECT_EQ(Error({"frobnicate"}), "unknown command \"frobnicate\"");
  EXPECT_EQ(Error({"info", "/a"}), "info: wrong number of arguments (1)");
  EXPECT_EQ(Error({"create"}), "create: wrong number of arguments (0)");
  EXPECT_EQ(Error({"cat", "/a"}), "cat: wrong number of arguments (1)");
  EXPECT_EQ(Error({"charge", "/a", "1"}),
            "charge: wrong number of arguments (2)");
  EXPECT_EQ(Error({"tree"}), "");
  EXPECT_EQ(Error({"top", "/a"}), "");
}

TEST_F(InvocationTest, PathDefaultsToTheRoot) {
  absl::StatusOr<Invocation> inv = ParseInvocation({"tree"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->path, "/");
  EXPECT_EQ(inv->flush, v1::FLUSH_MODE_EXACT);
}

TEST_F(InvocationTest, SetTakesLimitFilesAndTheLegacyFlags) {
  absl::SetFlag(&FLAGS_high, "1G");
  absl::StatusOr<Invocation> inv =
      ParseInvocation({"set", "/a", "memory.max=50M", "memory.low=0x1000"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->limits.max_bytes(), 50u << 20);
  EXPECT_EQ(inv->limits.high_bytes(), 1u << 30);
  EXPECT_EQ(inv->limits.low_bytes(), 4096u);
  EXPECT_FALSE(inv->limits.has_min_bytes());
  EXPECT_EQ(Error({"set", "/a", "memory.high=2G"}),
            "memory.high is given more than once");
}

TEST_F(InvocationTest, SetRefusals) {
  EXPECT_EQ(Error({"set", "/a"}),
            "set needs at least one FILE=VALUE (memory.max=50M)");
  EXPECT_EQ(Error({"set", "/a", "memory.max"}),
            "set: expected FILE=VALUE (memory.max=50M), got \"memory.max\"");
  EXPECT_EQ(Error({"set", "/a", "memory.swap.max=1"}),
            "\"memory.swap.max\" is not a writable limit file (memory.max, "
            "memory.high, memory.min, memory.low, memory.oom.group)");
  EXPECT_EQ(Error({"set", "/a", "memory.max=50MiB"}).rfind("memory.max: ", 0),
            0u);
}

TEST_F(InvocationTest, LimitFlagsOnlyWhereTheyApply) {
  absl::SetFlag(&FLAGS_max, "1M");
  absl::StatusOr<Invocation> inv = ParseInvocation({"create", "/a"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->limits.max_bytes(), 1u << 20);
  EXPECT_EQ(Error({"stat", "/a"}), "--max is not for stat");
  absl::SetFlag(&FLAGS_max, "");
  absl::SetFlag(&FLAGS_high, "1M");
  EXPECT_EQ(Error({"create", "/a"}), "--high is not for create");
}

TEST_F(InvocationTest, CatKnowsItsFiles) {
  absl::StatusOr<Invocation> inv =
      ParseInvocation({"cat", "/a", "memory.current", "memory.events"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->files,
            (std::vector<std::string>{"memory.current", "memory.events"}));
  // Every file at once: PATH and the ten files (the count once stopped at
  // nine, PATH counted among them).
  std::vector<std::string> all = {"cat", "/a"};
  for (const char* file : kCatFiles) all.push_back(file);
  inv = ParseInvocation(all);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->files.size(), kNrCatFiles);
  EXPECT_EQ(
      Error({"cat", "/a", "memory.swap.current"})
          .rfind(
              "cat: no file \"memory.swap.current\" (known: memory.current, ",
              0),
      0u);
}

TEST_F(InvocationTest, ReclaimTakesAMemparseSizeAboveZero) {
  absl::StatusOr<Invocation> inv = ParseInvocation({"reclaim", "/a", "10M"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->nr_bytes, 10u << 20);
  EXPECT_EQ(Error({"reclaim", "/a", "max"}).rfind("reclaim: ", 0), 0u);
}

TEST_F(InvocationTest, ChargePagesKindAndCpu) {
  absl::SetFlag(&FLAGS_cpu, 3);
  absl::StatusOr<Invocation> inv =
      ParseInvocation({"uncharge", "/a", "12", "file"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->nr_pages, 12u);
  EXPECT_EQ(inv->kind, v1::PAGE_KIND_FILE);
  EXPECT_EQ(inv->cpu, 3u);
  absl::SetFlag(&FLAGS_cpu, -1);
  EXPECT_EQ(ParseInvocation({"charge", "/a", "1", "anon"})->cpu, std::nullopt);
  EXPECT_EQ(Error({"charge", "/a", "0", "anon"}),
            "NR_PAGES must be a positive number (or a size with a unit, 8M), "
            "got \"0\"");
  // A size with a unit is bytes, as set and reclaim take them (issue 26,
  // item 7); the pages come once the server's page size is known.
  absl::StatusOr<Invocation> sized =
      ParseInvocation({"charge", "/a", "8M", "anon"});
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(sized->nr_bytes, 8u << 20);
  EXPECT_EQ(sized->nr_pages, 0u);
  EXPECT_EQ(ParseInvocation({"uncharge", "/a", "10k", "file"})->nr_bytes,
            10u << 10);
  EXPECT_EQ(Error({"charge", "/a", "0M", "anon"}).rfind("SIZE must be", 0),
            0u);
  EXPECT_EQ(Error({"charge", "/a", "8MiB", "anon"}).rfind("SIZE must be", 0),
            0u);
  EXPECT_EQ(Error({"charge", "/a", "1", "shmem"}),
            "kind must be anon or file, got \"shmem\"");
  absl::SetFlag(&FLAGS_cpu, -2);
  EXPECT_EQ(Error({"charge", "/a", "1", "anon"}), "--cpu must be >= 0 (or -1)");
}

TEST_F(InvocationTest, SharedFlags) {
  absl::SetFlag(&FLAGS_flush, "sometimes");
  EXPECT_EQ(Error({"stat", "/a"}), "--flush must be exact, threshold or none");
  absl::SetFlag(&FLAGS_flush, "none");
  absl::SetFlag(&FLAGS_iterations, 5);
  absl::SetFlag(&FLAGS_n, 2);  // -n wins over --iterations
  absl::SetFlag(&FLAGS_r, true);
  absl::StatusOr<Invocation> inv = ParseInvocation({"ls", "/a"});
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->flush, v1::FLUSH_MODE_NONE);
  EXPECT_EQ(inv->iterations, 2);
  EXPECT_TRUE(inv->recursive);
  absl::SetFlag(&FLAGS_watch, true);
  EXPECT_EQ(Error({"stat", "/a"}), "--watch is for events");
  EXPECT_EQ(Error({"events", "/a"}), "");
}

// FlagUsageError over an argv of `words` (argv[0] added).
std::optional<std::string> FlagError(std::vector<std::string> words) {
  words.insert(words.begin(), "cgacctctl");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return cli::FlagUsageError(static_cast<int>(argv.size()), argv.data());
}

TEST_F(InvocationTest, FlagsCheckedBeforeAbseilsParser) {
  EXPECT_EQ(FlagError({"--json", "info"}), std::nullopt);
  EXPECT_EQ(FlagError({"--nojson", "info"}), std::nullopt);
  EXPECT_EQ(FlagError({"--help"}), std::nullopt);
  EXPECT_EQ(FlagError({"--timeout", "2s", "info"}), std::nullopt);
  EXPECT_EQ(FlagError({"--bogus", "info"}), "unknown flag --bogus");
  EXPECT_EQ(FlagError({"-5"}),
            "\"-5\" is not a flag, and counts and sizes cannot be negative");
  EXPECT_EQ(FlagError({"info", "--timeout"}), "flag --timeout needs a value");
  EXPECT_EQ(FlagError({"--cpu=x", "info"})->rfind("bad value for --cpu: ", 0),
            0u);
  // After "--" nothing is a flag.
  EXPECT_EQ(FlagError({"--", "--bogus"}), std::nullopt);
}

}  // namespace
}  // namespace cgacct::ctl
