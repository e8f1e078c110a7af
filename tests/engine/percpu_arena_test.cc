#include "engine/percpu_arena.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace cgacct {
namespace {

TEST(PercpuArenaTest, BlocksAreAlignedDistinctAndReused) {
  PercpuArena arena(2, 150, /*blocks_per_chunk=*/4);
  EXPECT_EQ(arena.block_size(), 192u);  // rounded up to cache lines
  std::set<void*> seen;
  std::vector<void*> cpu0;
  for (int i = 0; i < 10; ++i) {
    void* block = arena.Alloc(0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % kCacheLineBytes, 0u);
    EXPECT_TRUE(seen.insert(block).second);
    cpu0.push_back(block);
  }
  EXPECT_EQ(arena.bytes_reserved(), 3 * 4 * 192u);  // 3 chunks of 4
  arena.Free(0, cpu0[3]);
  EXPECT_EQ(arena.Alloc(0), cpu0[3]);  // the free list first
  // Another CPU never gets a block from CPU 0's chunks.
  void* other = arena.Alloc(1);
  EXPECT_EQ(seen.count(other), 0u);
  EXPECT_EQ(arena.bytes_reserved(), 4 * 4 * 192u);
}

}  // namespace
}  // namespace cgacct
