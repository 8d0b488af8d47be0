#include "engine/BlockPool.h"

#include <limits>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dsrt::engine {
namespace {

Status checkArguments(int64_t blockSize, int64_t numBlocks) {
  if (blockSize < 1)
    return Status::error("KV block size must be at least 1 token, got " +
                         std::to_string(blockSize));
  if (numBlocks < 1)
    return Status::error("KV block pool needs at least 1 block, got " +
                         std::to_string(numBlocks));
  if (numBlocks > std::numeric_limits<BlockId>::max())
    return Status::error("KV block pool of " + std::to_string(numBlocks) +
                         " blocks exceeds the int32 block ids");
  return Status::ok();
}

} // namespace

BlockPool::BlockPool(int64_t blockSize, int64_t numBlocks, bool prefixCaching)
    : configStatus_(checkArguments(blockSize, numBlocks)), blockSize_(blockSize),
      prefixCaching_(prefixCaching) {
  if (!configStatus_.isOk())
    return;
  size_t count = static_cast<size_t>(numBlocks);
  refCounts_.assign(count, 0);
  published_.assign(count, false);
  hashes_.assign(count, 0);
  lruPrev_.assign(count, kNoBlock);
  lruNext_.assign(count, kNoBlock);
  // Reversed so that a fresh pool hands out 0, 1, 2...: easier to read in traces and tests.
  freeList_.reserve(count);
  for (int64_t block = numBlocks - 1; block >= 0; --block)
    freeList_.push_back(static_cast<BlockId>(block));
}

void BlockPool::pushCached(BlockId block) {
  lruPrev_[block] = lruTail_;
  lruNext_[block] = kNoBlock;
  if (lruTail_ != kNoBlock)
    lruNext_[lruTail_] = block;
  else
    lruHead_ = block;
  lruTail_ = block;
  ++cachedCount_;
}

void BlockPool::unlinkCached(BlockId block) {
  BlockId prev = lruPrev_[block], next = lruNext_[block];
  if (prev != kNoBlock)
    lruNext_[prev] = next;
  else
    lruHead_ = next;
  if (next != kNoBlock)
    lruPrev_[next] = prev;
  else
    lruTail_ = prev;
  lruPrev_[block] = lruNext_[block] = kNoBlock;
  --cachedCount_;
}

BlockId BlockPool::allocate() {
  BlockId block = kNoBlock;
  if (!freeList_.empty()) {
    block = freeList_.back();
    freeList_.pop_back();
  } else if (lruHead_ != kNoBlock) {
    block = lruHead_;
    unlinkCached(block);
    byHash_.erase(hashes_[block]);
    published_[block] = false;
    ++evictions_;
  } else {
    return kNoBlock;
  }
  refCounts_[block] = 1;
  return block;
}

Status BlockPool::release(BlockId block) {
  if (!inRange(block))
    return Status::error("cannot release KV block " + std::to_string(block) +
                         ": the pool has blocks 0.." + std::to_string(totalBlocks() - 1));
  if (refCounts_[block] == 0)
    return Status::error("cannot release KV block " + std::to_string(block) +
                         ": nobody holds it (released twice?)");
  if (--refCounts_[block] > 0)
    return Status::ok();
  if (published_[block])
    pushCached(block);
  else
    freeList_.push_back(block);
  return Status::ok();
}

Status BlockPool::forgetCached() {
  if (usedBlocks() > 0)
    return Status::error("cannot reset the prefix cache: " + std::to_string(usedBlocks()) +
                         " KV blocks are in use");
  // From the least recently released up: the stack's top, taken first, is the most recent.
  while (lruHead_ != kNoBlock) {
    const BlockId block = lruHead_;
    unlinkCached(block);
    published_[block] = false;
    freeList_.push_back(block);
  }
  byHash_.clear();
  return Status::ok();
}

Status BlockPool::retain(BlockId block) {
  if (!inRange(block) || refCounts_[block] == 0)
    return Status::error("cannot retain KV block " + std::to_string(block) +
                         ": it is not in use");
  ++refCounts_[block];
  return Status::ok();
}

uint64_t BlockPool::chainHash(uint64_t parent, const int64_t *tokens, size_t count) {
  return XXH3_64bits_withSeed(tokens, count * sizeof(int64_t), parent);
}

BlockId BlockPool::peek(uint64_t hash) const {
  if (!prefixCaching_)
    return kNoBlock;
  auto found = byHash_.find(hash);
  return found == byHash_.end() ? kNoBlock : found->second;
}

BlockId BlockPool::lookup(uint64_t hash) {
  if (!prefixCaching_)
    return kNoBlock;
  BlockId block = peek(hash);
  if (block == kNoBlock) {
    ++misses_;
    return kNoBlock;
  }
  ++hits_;
  if (refCounts_[block] == 0)
    unlinkCached(block);
  ++refCounts_[block];
  return block;
}

void BlockPool::countMisses(uint64_t blocks) {
  if (prefixCaching_)
    misses_ += blocks;
}

Status BlockPool::publish(BlockId block, uint64_t hash, BlockId *registered) {
  if (registered)
    *registered = kNoBlock;
  if (!inRange(block) || refCounts_[block] == 0)
    return Status::error("cannot publish KV block " + std::to_string(block) +
                         ": it is not in use");
  if (!prefixCaching_)
    return Status::ok();
  if (published_[block]) {
    if (hashes_[block] != hash)
      return Status::error("KV block " + std::to_string(block) +
                           " is already published under another hash");
    if (registered)
      *registered = block;
    return Status::ok();
  }
  auto inserted = byHash_.emplace(hash, block);
  if (inserted.second) {
    published_[block] = true;
    hashes_[block] = hash;
  }
  if (registered)
    *registered = inserted.first->second;
  return Status::ok();
}

int32_t BlockPool::refCount(BlockId block) const {
  return inRange(block) ? refCounts_[block] : -1;
}

bool BlockPool::isPublished(BlockId block) const {
  return inRange(block) && published_[block];
}

} // namespace dsrt::engine
