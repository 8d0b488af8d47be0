// The distributed argmax of greedy decoding with a vocabulary-parallel LM head: each rank's
// packed (logit, index) key and one all-reduce MAX must give torch.argmax's token (the first
// maximum) of the whole row, whatever the split, ties across shards and negative logits
// included. The reference is std::max_element over the unsplit row (it returns the first
// maximum), independent of the key packing.
#include "comm/InProcessGroup.h"
#include "generate/Generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

namespace dsrt::test {
namespace {

// The tp-shard pass's split: the remainder to the lowest ranks.
std::vector<int64_t> shardSizes(int64_t vocab, int ranks) {
  std::vector<int64_t> sizes;
  for (int r = 0; r < ranks; ++r)
    sizes.push_back(vocab / ranks + (r < vocab % ranks ? 1 : 0));
  return sizes;
}

int64_t firstMaximum(const std::vector<float> &row) {
  return std::max_element(row.begin(), row.end()) - row.begin();
}

// Every rank's argmax of every row, computed by threads of one group; all ranks must agree.
std::vector<std::vector<int64_t>> combine(const std::vector<std::vector<float>> &rows,
                                          int ranks) {
  int64_t vocab = static_cast<int64_t>(rows[0].size());
  std::vector<int64_t> sizes = shardSizes(vocab, ranks);
  InProcessGroup group(ranks);
  std::vector<std::vector<int64_t>> tokens(ranks);
  std::vector<Status> results(ranks, Status::ok());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      int64_t offset = 0;
      for (int r = 0; r < rank; ++r)
        offset += sizes[r];
      std::vector<std::vector<float>> shard;
      for (const auto &row : rows)
        shard.emplace_back(row.begin() + offset, row.begin() + offset + sizes[rank]);
      results[rank] = distributedArgmax(group.member(rank), shard, offset, tokens[rank]);
    });
  for (std::thread &thread : threads)
    thread.join();
  for (const Status &status : results)
    EXPECT_TRUE(status.isOk()) << status.message();
  return tokens;
}

TEST(DistributedArgmaxTest, KeysOrderByLogitThenLowerIndex) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> ascending = {-inf, -3e38f, -2.5f, -1.0f, -1e-30f, 0.0f,
                                  1e-30f, 1.0f,   2.5f,  3e38f, inf};
  for (size_t a = 0; a < ascending.size(); ++a)
    for (size_t b = 0; b < ascending.size(); ++b) {
      uint64_t ka = packArgmaxKey(ascending[a], 7), kb = packArgmaxKey(ascending[b], 7);
      EXPECT_EQ(ka < kb, a < b) << ascending[a] << " vs " << ascending[b];
    }
  // Equal logits: the lower index has the larger key.
  EXPECT_GT(packArgmaxKey(-4.0f, 3), packArgmaxKey(-4.0f, 4));
  EXPECT_GT(packArgmaxKey(0.5f, 0), packArgmaxKey(0.5f, 299));
  // -0 and +0 are equal logits, so the index decides.
  EXPECT_GT(packArgmaxKey(-0.0f, 1), packArgmaxKey(0.0f, 2));
  // torch.argmax takes NaN for the maximum.
  EXPECT_GT(packArgmaxKey(std::nanf(""), 5), packArgmaxKey(inf, 0));
  for (int64_t index : {0ll, 1ll, 299ll, 151935ll, 0xFFFFFFFEll})
    EXPECT_EQ(argmaxKeyIndex(packArgmaxKey(1.5f, index)), index);
}

TEST(DistributedArgmaxTest, LocalKeyIsTheFirstMaximum) {
  std::vector<float> logits = {-5.0f, -2.0f, -7.0f, -2.0f, -3.0f};
  EXPECT_EQ(argmaxKeyIndex(localArgmaxKey(logits.data(), 5, 100)), 101);
  EXPECT_EQ(localArgmaxKey(logits.data(), 5, 100), packArgmaxKey(-2.0f, 101));
}

TEST(DistributedArgmaxTest, MatchesTheUnsplitArgmax) {
  std::mt19937 random(1234);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t vocab = 300;
  std::vector<std::vector<float>> rows;
  // Random rows, all-negative rows, and ties: the maximum repeated across shard boundaries
  // (index 0, the last index of a shard, the first of the next) and within one shard.
  for (int i = 0; i < 4; ++i) {
    std::vector<float> row(vocab);
    for (float &value : row)
      value = normal(random);
    rows.push_back(row);
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<float> row(vocab);
    for (float &value : row)
      value = -100.0f - std::fabs(normal(random));
    rows.push_back(row);
  }
  for (std::vector<int64_t> ties : {std::vector<int64_t>{0, 150, 299},
                                    std::vector<int64_t>{99, 100, 200},
                                    std::vector<int64_t>{74, 75, 76},
                                    std::vector<int64_t>{180, 299}}) {
    std::vector<float> row(vocab);
    for (float &value : row)
      value = -1.0f - std::fabs(normal(random));
    for (int64_t index : ties)
      row[index] = -0.25f;  // negative, tied, above everything else
    rows.push_back(row);
  }
  std::vector<float> flat(vocab, -2.0f);  // one value everywhere: index 0
  rows.push_back(flat);
  for (int ranks : {1, 2, 3, 4, 7}) {
    std::vector<std::vector<int64_t>> tokens = combine(rows, ranks);
    for (int rank = 0; rank < ranks; ++rank) {
      ASSERT_EQ(tokens[rank].size(), rows.size());
      for (size_t b = 0; b < rows.size(); ++b)
        EXPECT_EQ(tokens[rank][b], firstMaximum(rows[b]))
            << ranks << " ranks, rank " << rank << ", row " << b;
    }
  }
}

// A communicator with only a sum and a gather: ops::Collectives' default max, built on the
// gather, must give the same maxima.
class GatherOnly : public ops::Collectives {
public:
  explicit GatherOnly(ops::Collectives &inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status allReduceSum(float *data, int64_t count) override {
    return inner_.allReduceSum(data, count);
  }
  Status allGather(const void *mine, const std::vector<int64_t> &bytes, void *out) override {
    return inner_.allGather(mine, bytes, out);
  }

private:
  ops::Collectives &inner_;
};

TEST(DistributedArgmaxTest, DefaultMaxThroughTheGather) {
  const int ranks = 3;
  InProcessGroup group(ranks);
  std::vector<std::vector<uint64_t>> values(ranks);
  std::vector<Status> results(ranks, Status::ok());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      GatherOnly gatherOnly(group.member(rank));
      // Element i's maximum is on rank (i + 1) % ranks, with the top bit set.
      for (int i = 0; i < 10; ++i)
        values[rank].push_back((i + 1) % ranks == rank ? 0x8000000000000000ull | uint64_t(i)
                                                       : uint64_t(rank * 100 + i));
      results[rank] = gatherOnly.allReduceMax(values[rank].data(), 10);
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int rank = 0; rank < ranks; ++rank) {
    ASSERT_TRUE(results[rank].isOk()) << results[rank].message();
    for (int i = 0; i < 10; ++i)
      EXPECT_EQ(values[rank][i], 0x8000000000000000ull | uint64_t(i));
  }
}

} // namespace
} // namespace dsrt::test
