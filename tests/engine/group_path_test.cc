// engine/group_path.h: the path grammar's helpers that are not reached
// through the Engine (the containment tests every layer shares).
#include "engine/group_path.h"

#include <gtest/gtest.h>

namespace cgacct {
namespace {

TEST(PathAtOrBelowTest, SubtreesEndAtSegmentBoundaries) {
  EXPECT_TRUE(PathAtOrBelow("/a", "/a"));
  EXPECT_TRUE(PathAtOrBelow("/a/b", "/a"));
  EXPECT_TRUE(PathAtOrBelow("/a/b/c", "/a/b"));
  EXPECT_FALSE(PathAtOrBelow("/ab", "/a"));
  EXPECT_FALSE(PathAtOrBelow("/a", "/a/b"));
  EXPECT_FALSE(PathAtOrBelow("/", "/a"));
  EXPECT_TRUE(PathAtOrBelow("/anything", "/"));
  EXPECT_TRUE(PathAtOrBelow("/", "/"));
}

TEST(PathStrictlyBelowTest, ExcludesTheSubtreeItself) {
  EXPECT_FALSE(PathStrictlyBelow("/a", "/a"));
  EXPECT_TRUE(PathStrictlyBelow("/a/b", "/a"));
  EXPECT_FALSE(PathStrictlyBelow("/ab", "/a"));
  EXPECT_FALSE(PathStrictlyBelow("/", "/"));
  EXPECT_TRUE(PathStrictlyBelow("/a", "/"));
}

TEST(ParentPathTest, ParentAndLeaf) {
  EXPECT_EQ(ParentPath("/a/b"), "/a");
  EXPECT_EQ(ParentPath("/a"), "/");
  EXPECT_EQ(LeafName("/a/b"), "b");
}

}  // namespace
}  // namespace cgacct
