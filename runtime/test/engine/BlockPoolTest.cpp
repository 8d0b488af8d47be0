// The KV block pool: allocation, reference counts, prefix-cache hits and LRU eviction.
#include "engine/BlockPool.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace dsrt::engine {
namespace {

// A distinct hash per number, for tests that do not care which tokens it stands for.
uint64_t hashOf(int64_t n) { return BlockPool::chainHash(BlockPool::kRootHash, &n, 1); }

TEST(BlockPool, InvalidArgumentsAreErrorsAndHandOutNothing) {
  BlockPool noBlocks(16, 0, true);
  EXPECT_FALSE(noBlocks.validate().isOk());
  EXPECT_NE(noBlocks.validate().message().find("at least 1 block"), std::string::npos);
  EXPECT_EQ(noBlocks.allocate(), kNoBlock);
  EXPECT_EQ(noBlocks.totalBlocks(), 0);

  BlockPool noTokens(0, 8, true);
  EXPECT_FALSE(noTokens.validate().isOk());
  EXPECT_NE(noTokens.validate().message().find("block size"), std::string::npos);
  EXPECT_EQ(noTokens.allocate(), kNoBlock);

  EXPECT_FALSE(BlockPool(16, int64_t(1) << 40, false).validate().isOk());
  EXPECT_TRUE(BlockPool(1, 1, false).validate().isOk());
}

TEST(BlockPool, AllocatesEveryBlockOnceThenFails) {
  BlockPool pool(4, 5, false);
  std::set<BlockId> seen;
  for (int i = 0; i < 5; ++i) {
    BlockId block = pool.allocate();
    ASSERT_NE(block, kNoBlock);
    EXPECT_TRUE(seen.insert(block).second) << "block " << block << " handed out twice";
    EXPECT_EQ(pool.refCount(block), 1);
    EXPECT_EQ(pool.usedBlocks(), i + 1);
    EXPECT_EQ(pool.freeBlocks(), 4 - i);
  }
  EXPECT_EQ(pool.allocate(), kNoBlock);
  EXPECT_EQ(pool.allocate(), kNoBlock);
  EXPECT_EQ(pool.usedBlocks(), 5);
}

TEST(BlockPool, ReleasedBlockIsReused) {
  BlockPool pool(4, 2, false);
  BlockId a = pool.allocate();
  BlockId b = pool.allocate();
  ASSERT_EQ(pool.allocate(), kNoBlock);
  ASSERT_TRUE(pool.release(a).isOk());
  EXPECT_EQ(pool.refCount(a), 0);
  EXPECT_EQ(pool.freeBlocks(), 1);
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_EQ(pool.refCount(b), 1);
}

TEST(BlockPool, DoubleReleaseAndBadIdsAreErrors) {
  BlockPool pool(4, 2, true);
  BlockId a = pool.allocate();
  ASSERT_TRUE(pool.release(a).isOk());
  Status twice = pool.release(a);
  EXPECT_FALSE(twice.isOk());
  EXPECT_NE(twice.message().find("released twice"), std::string::npos);
  EXPECT_FALSE(pool.release(-1).isOk());
  EXPECT_FALSE(pool.release(2).isOk());
  EXPECT_FALSE(pool.retain(a).isOk());  // free: retain is for blocks in use
  EXPECT_FALSE(pool.publish(a, hashOf(1)).isOk());
  EXPECT_EQ(pool.refCount(7), -1);
  // Nothing above changed the books.
  EXPECT_EQ(pool.freeBlocks(), 2);
  EXPECT_EQ(pool.usedBlocks(), 0);
}

TEST(BlockPool, SharedBlockFreedByLastHolder) {
  BlockPool pool(4, 2, false);
  BlockId a = pool.allocate();
  ASSERT_TRUE(pool.retain(a).isOk());
  ASSERT_TRUE(pool.retain(a).isOk());
  EXPECT_EQ(pool.refCount(a), 3);
  ASSERT_TRUE(pool.release(a).isOk());
  ASSERT_TRUE(pool.release(a).isOk());
  EXPECT_EQ(pool.usedBlocks(), 1);
  ASSERT_TRUE(pool.release(a).isOk());
  EXPECT_EQ(pool.usedBlocks(), 0);
  EXPECT_FALSE(pool.release(a).isOk());
}

// forgetCached: refused while a block is in use, then every cached block free (the most
// recently released handed out first) and no hash answers.
TEST(BlockPool, ForgetCachedFreesEveryCachedBlockOnlyWhenNoneIsInUse) {
  BlockPool pool(4, 4, true);
  BlockId a = pool.allocate(), b = pool.allocate();
  ASSERT_TRUE(pool.publish(a, hashOf(1)).isOk());
  ASSERT_TRUE(pool.publish(b, hashOf(2)).isOk());
  ASSERT_TRUE(pool.release(a).isOk());
  EXPECT_FALSE(pool.forgetCached().isOk());  // b is in use
  EXPECT_EQ(pool.peek(hashOf(1)), a);
  ASSERT_TRUE(pool.release(b).isOk());
  EXPECT_EQ(pool.cachedBlocks(), 2);
  ASSERT_TRUE(pool.forgetCached().isOk());
  EXPECT_EQ(pool.cachedBlocks(), 0);
  EXPECT_EQ(pool.freeBlocks(), 4);
  EXPECT_FALSE(pool.isPublished(a));
  EXPECT_EQ(pool.peek(hashOf(1)), kNoBlock);
  EXPECT_EQ(pool.peek(hashOf(2)), kNoBlock);
  EXPECT_EQ(pool.allocate(), b);  // released last
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_EQ(pool.evictions(), 0u);
}

TEST(BlockPool, ChainHashDependsOnParentAndTokens) {
  std::vector<int64_t> tokens = {1, 2, 3, 4};
  std::vector<int64_t> other = {1, 2, 3, 5};
  uint64_t h = BlockPool::chainHash(BlockPool::kRootHash, tokens.data(), tokens.size());
  EXPECT_EQ(h, BlockPool::chainHash(BlockPool::kRootHash, tokens.data(), tokens.size()));
  EXPECT_NE(h, BlockPool::chainHash(BlockPool::kRootHash, other.data(), other.size()));
  EXPECT_NE(h, BlockPool::chainHash(h, tokens.data(), tokens.size()));
  EXPECT_NE(h, BlockPool::chainHash(BlockPool::kRootHash, tokens.data(), 3));
  // Same second block after different first blocks: different chains.
  uint64_t h2 = BlockPool::chainHash(BlockPool::kRootHash, other.data(), other.size());
  EXPECT_NE(BlockPool::chainHash(h, tokens.data(), 4), BlockPool::chainHash(h2, tokens.data(), 4));
}

TEST(BlockPool, HitOnCachedBlockTakesItBack) {
  BlockPool pool(4, 3, true);
  BlockId a = pool.allocate();
  ASSERT_TRUE(pool.publish(a, hashOf(1)).isOk());
  EXPECT_TRUE(pool.isPublished(a));
  ASSERT_TRUE(pool.release(a).isOk());
  EXPECT_EQ(pool.cachedBlocks(), 1);
  EXPECT_EQ(pool.freeBlocks(), 3);  // cached blocks can still be handed out

  EXPECT_EQ(pool.peek(hashOf(1)), a);
  EXPECT_EQ(pool.prefixHits(), 0u);  // peek counts nothing
  EXPECT_EQ(pool.lookup(hashOf(1)), a);
  EXPECT_EQ(pool.refCount(a), 1);
  EXPECT_EQ(pool.cachedBlocks(), 0);
  EXPECT_EQ(pool.lookup(hashOf(1)), a);  // a second holder
  EXPECT_EQ(pool.refCount(a), 2);
  EXPECT_EQ(pool.lookup(hashOf(2)), kNoBlock);
  EXPECT_EQ(pool.prefixHits(), 2u);
  EXPECT_EQ(pool.prefixMisses(), 1u);
}

TEST(BlockPool, ReferencedHitIsNeverEvicted) {
  BlockPool pool(4, 3, true);
  BlockId a = pool.allocate();
  ASSERT_TRUE(pool.publish(a, hashOf(1)).isOk());
  ASSERT_TRUE(pool.release(a).isOk());
  ASSERT_EQ(pool.lookup(hashOf(1)), a);
  // Exhaust the pool: the two others come out, `a` does not.
  BlockId b = pool.allocate();
  BlockId c = pool.allocate();
  EXPECT_NE(b, a);
  EXPECT_NE(c, a);
  EXPECT_EQ(pool.allocate(), kNoBlock);
  EXPECT_EQ(pool.peek(hashOf(1)), a);
  EXPECT_EQ(pool.evictions(), 0u);
}

TEST(BlockPool, EvictsLeastRecentlyReleasedCachedBlockAfterFreeOnes) {
  BlockPool pool(4, 4, true);
  std::vector<BlockId> blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.push_back(pool.allocate());
    ASSERT_TRUE(pool.publish(blocks[i], hashOf(i)).isOk());
  }
  BlockId unpublished = pool.allocate();
  // Release order 1, 0, 2: the LRU order of the cached blocks.
  ASSERT_TRUE(pool.release(blocks[1]).isOk());
  ASSERT_TRUE(pool.release(blocks[0]).isOk());
  ASSERT_TRUE(pool.release(blocks[2]).isOk());
  ASSERT_TRUE(pool.release(unpublished).isOk());
  EXPECT_EQ(pool.cachedBlocks(), 3);

  EXPECT_EQ(pool.allocate(), unpublished);  // truly free first
  EXPECT_EQ(pool.evictions(), 0u);
  EXPECT_EQ(pool.allocate(), blocks[1]);
  EXPECT_EQ(pool.peek(hashOf(1)), kNoBlock);  // its hash went with it
  EXPECT_FALSE(pool.isPublished(blocks[1]));
  EXPECT_EQ(pool.peek(hashOf(0)), blocks[0]);

  // A hit refreshes nothing by itself, but releasing again moves it to the recent end.
  ASSERT_EQ(pool.lookup(hashOf(0)), blocks[0]);
  ASSERT_TRUE(pool.release(blocks[0]).isOk());
  EXPECT_EQ(pool.allocate(), blocks[2]);
  EXPECT_EQ(pool.allocate(), blocks[0]);
  EXPECT_EQ(pool.allocate(), kNoBlock);
  EXPECT_EQ(pool.evictions(), 3u);
  EXPECT_EQ(pool.cachedBlocks(), 0);
}

TEST(BlockPool, DuplicatePublishKeepsTheFirstBlock) {
  BlockPool pool(4, 3, true);
  BlockId first = pool.allocate();
  BlockId second = pool.allocate();
  BlockId registered = kNoBlock;
  ASSERT_TRUE(pool.publish(first, hashOf(5), &registered).isOk());
  EXPECT_EQ(registered, first);
  ASSERT_TRUE(pool.publish(second, hashOf(5), &registered).isOk());
  EXPECT_EQ(registered, first);
  EXPECT_FALSE(pool.isPublished(second));
  // Publishing again under the same hash is harmless; under another it is an error.
  EXPECT_TRUE(pool.publish(first, hashOf(5)).isOk());
  EXPECT_FALSE(pool.publish(first, hashOf(6)).isOk());
  // The duplicate goes back to the free list, not the cache.
  ASSERT_TRUE(pool.release(second).isOk());
  EXPECT_EQ(pool.cachedBlocks(), 0);
  ASSERT_TRUE(pool.release(first).isOk());
  EXPECT_EQ(pool.cachedBlocks(), 1);
}

TEST(BlockPool, WithoutPrefixCachingNothingIsCachedOrCounted) {
  BlockPool pool(4, 2, false);
  BlockId a = pool.allocate();
  BlockId registered = 0;
  ASSERT_TRUE(pool.publish(a, hashOf(1), &registered).isOk());
  EXPECT_EQ(registered, kNoBlock);
  EXPECT_FALSE(pool.isPublished(a));
  ASSERT_TRUE(pool.release(a).isOk());
  EXPECT_EQ(pool.cachedBlocks(), 0);
  EXPECT_EQ(pool.lookup(hashOf(1)), kNoBlock);
  pool.countMisses(3);
  EXPECT_EQ(pool.prefixHits(), 0u);
  EXPECT_EQ(pool.prefixMisses(), 0u);
}

} // namespace
} // namespace dsrt::engine
