#include "engine/percpu_arena.h"

#include <cstdlib>
#include <new>

namespace cgacct {

PercpuArena::PercpuArena(int nr_cpus, size_t block_size,
                         size_t blocks_per_chunk)
    : nr_cpus_(nr_cpus),
      block_size_((block_size + kCacheLineBytes - 1) / kCacheLineBytes *
                  kCacheLineBytes),
      blocks_per_chunk_(blocks_per_chunk),
      pools_(new Pool[nr_cpus]) {}

PercpuArena::~PercpuArena() {
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
    MutexLock l(&pools_[cpu].mu);
    for (void* chunk : pools_[cpu].chunks) std::free(chunk);
  }
}

void* PercpuArena::Alloc(int cpu) {
  Pool& pool = pools_[cpu];
  MutexLock l(&pool.mu);
  if (pool.free_list != nullptr) {
    FreeBlock* block = pool.free_list;
    pool.free_list = block->next;
    return block;
  }
  if (pool.left == 0) {
    void* chunk =
        std::aligned_alloc(kCacheLineBytes, block_size_ * blocks_per_chunk_);
    if (chunk == nullptr) throw std::bad_alloc();
    pool.chunks.push_back(chunk);
    pool.next = static_cast<char*>(chunk);
    pool.left = blocks_per_chunk_;
  }
  void* block = pool.next;
  pool.next += block_size_;
  --pool.left;
  return block;
}

void PercpuArena::Free(int cpu, void* block) {
  Pool& pool = pools_[cpu];
  MutexLock l(&pool.mu);
  auto* free_block = static_cast<FreeBlock*>(block);
  free_block->next = pool.free_list;
  pool.free_list = free_block;
}

size_t PercpuArena::bytes_reserved() const {
  size_t total = 0;
  for (int cpu = 0; cpu < nr_cpus_; ++cpu) {
    MutexLock l(&pools_[cpu].mu);
    total += pools_[cpu].chunks.size() * block_size_ * blocks_per_chunk_;
  }
  return total;
}

}  // namespace cgacct
