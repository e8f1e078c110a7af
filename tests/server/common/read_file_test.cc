// ReadFile() (server/common/read_file.h): the one reader of operator files.
#include "server/common/read_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace cgacct {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/cgacct_read_file_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    std::remove((dir_ + "/f").c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& contents) {
    const std::string path = dir_ + "/f";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(contents.data(), 1, contents.size(), f);
    std::fclose(f);
    return path;
  }
  std::string dir_;
};

TEST_F(ReadFileTest, ReadsBytesAsTheyAre) {
  const std::string contents("a\0b\r\nsecret-token\n", 19);
  absl::StatusOr<std::string> read = ReadFile(Write(contents));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
}

TEST_F(ReadFileTest, ReadsMoreThanOneBuffer) {
  const std::string contents(100000, 'x');
  absl::StatusOr<std::string> read = ReadFile(Write(contents));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), contents.size());
}

TEST_F(ReadFileTest, MissingFileAndDirectoryAreNotFoundNamingThePath) {
  const std::string missing = dir_ + "/nope";
  absl::StatusOr<std::string> read = ReadFile(missing);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("cannot read " + missing));
  read = ReadFile(dir_);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(dir_));
}

TEST_F(ReadFileTest, OversizedFileIsRefusedWithoutQuotingIt) {
  const std::string contents(kMaxConfigFileBytes + 1, 's');
  absl::StatusOr<std::string> read = ReadFile(Write(contents));
  ASSERT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(read.status().message()), Not(HasSubstr("sss")));
}

}  // namespace
}  // namespace cgacct
