// The bookkeeping of a paged KV cache: which fixed-size blocks are free, who holds each one,
// and which full blocks can be shared by later requests with the same token prefix. The
// engine owns the memory (one tensor per layer, indexed by block id); the pool hands out
// only ids, so one id names the same slot in every layer.
//
// A block is in exactly one of three states:
//   free       ref count 0, no hash       on the free list, allocate() takes these first
//   cached     ref count 0, has a hash    on the LRU list: still reusable through lookup(),
//                                         evicted by allocate() when nothing is free
//   in use     ref count >= 1             held by that many block tables
// Every operation is O(1) (hash-map look-ups on average).
#ifndef DSRT_ENGINE_BLOCKPOOL_H
#define DSRT_ENGINE_BLOCKPOOL_H

#include "core/Status.h"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace dsrt::engine {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

class BlockPool {
public:
  // The parent hash of a sequence's first block. Any fixed value works as long as every
  // caller agrees; a non-zero one keeps "no parent" distinct from a hash that happens to be 0.
  static constexpr uint64_t kRootHash = 0x9e3779b97f4a7c15ull;

  // Invalid arguments (blockSize < 1, numBlocks < 1 or beyond int32 ids) give a pool of zero
  // blocks that never hands one out; validate() says why. No exceptions.
  BlockPool(int64_t blockSize, int64_t numBlocks, bool prefixCaching);

  // The verdict on the constructor's arguments, for the engine to report.
  Status validate() const { return configStatus_; }

  // A fresh block with ref count 1: a free one if any, else the least recently released
  // cached one (its hash is forgotten). kNoBlock when every block is in use.
  BlockId allocate();
  // One holder less. At ref count 0 a published block stays cached (most recently released
  // end of the LRU list); an unpublished one becomes free. An id out of range or a block
  // nobody holds is an error and changes nothing.
  Status release(BlockId block);
  // One holder more for a block already in use (e.g. forking a sequence). Cached or free
  // blocks are taken through lookup()/allocate() instead, so retaining them is an error.
  Status retain(BlockId block);

  // The hash of a full block given its parent's (kRootHash for the first block): XXH3-64
  // over the raw int64 tokens, seeded with the parent hash, so equal hashes mean equal
  // token prefixes up to a 64-bit collision, which the pool does not guard against.
  static uint64_t chainHash(uint64_t parent, const int64_t *tokens, size_t count);

  // The block published under `hash` with one more holder (a cached block leaves the LRU
  // list), or kNoBlock. Each call counts one hit or one miss. Always kNoBlock, uncounted,
  // without prefix caching.
  BlockId lookup(uint64_t hash);
  // What lookup() would return, without taking the block or counting anything: the
  // scheduler checks that a request fits before it commits to the hits.
  BlockId peek(uint64_t hash) const;
  // Counts misses without looking anything up: a caller that walks a hash chain stops at
  // its first miss, yet every block after it is a miss too. Ignored without prefix caching.
  void countMisses(uint64_t blocks);
  // Registers a full block (ref count >= 1, its KV computed) under `hash`. When another
  // block already holds that hash, the existing one is kept and `block` stays unpublished
  // (it becomes free, not cached, when released); `*registered` tells which block now
  // answers the hash (kNoBlock without prefix caching, where publish does nothing). The
  // pool does not move holders from the duplicate to the original: both hold the same KV.
  Status publish(BlockId block, uint64_t hash, BlockId *registered = nullptr);
  // Forgets every cached block's hash, making it free (the most recently released taken
  // first), as vLLM's reset_prefix_cache: later requests then hit nothing computed before.
  // An error, changing nothing, while any block is in use.
  Status forgetCached();

  bool prefixCaching() const { return prefixCaching_; }
  int64_t blockSize() const { return blockSize_; }
  int64_t totalBlocks() const { return static_cast<int64_t>(refCounts_.size()); }
  // What allocate() can still hand out: free plus cached blocks.
  int64_t freeBlocks() const { return static_cast<int64_t>(freeList_.size()) + cachedCount_; }
  int64_t cachedBlocks() const { return cachedCount_; }
  int64_t usedBlocks() const { return totalBlocks() - freeBlocks(); }
  // -1 for an id out of range.
  int32_t refCount(BlockId block) const;
  bool isPublished(BlockId block) const;

  uint64_t prefixHits() const { return hits_; }
  uint64_t prefixMisses() const { return misses_; }
  uint64_t evictions() const { return evictions_; }

private:
  bool inRange(BlockId block) const {
    return block >= 0 && static_cast<size_t>(block) < refCounts_.size();
  }
  void pushCached(BlockId block);    // onto the most recently released end
  void unlinkCached(BlockId block);

  Status configStatus_;
  int64_t blockSize_;
  bool prefixCaching_;
  std::vector<int32_t> refCounts_;
  std::vector<bool> published_;
  std::vector<uint64_t> hashes_;     // meaningful where published_
  std::vector<BlockId> freeList_;    // a stack: the lowest ids come out first initially
  // The cached blocks as an intrusive doubly linked list over block ids: head is the least
  // recently released, the one evicted first.
  std::vector<BlockId> lruPrev_, lruNext_;
  BlockId lruHead_ = kNoBlock, lruTail_ = kNoBlock;
  int64_t cachedCount_ = 0;
  std::unordered_map<uint64_t, BlockId> byHash_;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

} // namespace dsrt::engine

#endif
