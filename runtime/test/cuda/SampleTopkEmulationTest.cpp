// The sampling kernel (codegen/kernels/sample_topk.cuh) on the host through the attention
// test's emulation of CUDA (CudaEmulation.h), against std::stable_sort of each row's
// last position: the order the generator's host sampling uses (value descending, equal
// values by lower index). Exact: the kernel only compares and copies, so values and ids
// must match bit for bit.
#include "CudaEmulation.h"

#include "dsc_common.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

// Each block size is a separate specialisation, as a plan would hold; C linkage needs one
// name per specialisation.
namespace block128 {
#define BLOCK 128
#define sample_topk block128_sample_topk
#include "sample_topk.cuh"
#undef sample_topk
#undef LOCAL  // the template's default, which the next specialisation sets itself
#undef BLOCK
} // namespace block128

// The smallest block, holding 2 keys a thread: threads take more winners than they hold
// and read their elements again.
namespace block32 {
#define BLOCK 32
#define LOCAL 2
#define sample_topk block32_sample_topk
#include "sample_topk.cuh"
#undef sample_topk
#undef LOCAL
#undef BLOCK
} // namespace block32

namespace block1024 {
#define BLOCK 1024
#define sample_topk block1024_sample_topk
#include "sample_topk.cuh"
#undef sample_topk
#undef BLOCK
} // namespace block1024

namespace {

using Kernel = void (*)(const float *, long long, long long, long long, int, float *,
                        long long *);

// Logits [rows, positions, vocab] with many ties (values on a coarse grid), negatives, and
// -0 beside +0.
std::vector<float> randomLogits(int64_t rows, int64_t positions, int64_t vocab,
                                unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> level(-40, 40);
  std::vector<float> logits(static_cast<size_t>(rows * positions * vocab));
  for (float &value : logits) {
    int step = level(random);
    value = step == 0 ? (random() % 2 ? -0.0f : 0.0f) : static_cast<float>(step) * 0.25f;
  }
  return logits;
}

void checkAgainstStableSort(Kernel kernel, unsigned block, int64_t rows, int64_t positions,
                            int64_t vocab, int count, unsigned seed) {
  std::vector<float> logits = randomLogits(rows, positions, vocab, seed);
  int64_t rowStride = positions * vocab, offset = (positions - 1) * vocab;
  std::vector<float> values(static_cast<size_t>(rows * count), -1.0f);
  std::vector<long long> ids(static_cast<size_t>(rows * count), -1);
  cuda_emulation::launch({static_cast<unsigned>(rows), 1, 1}, {block, 1, 1}, [&] {
    kernel(logits.data(), rowStride, offset, vocab, count, values.data(), ids.data());
  });
  for (int64_t r = 0; r < rows; ++r) {
    const float *last = logits.data() + r * rowStride + offset;
    std::vector<int64_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return last[a] > last[b]; });
    for (int i = 0; i < count; ++i) {
      size_t at = static_cast<size_t>(r * count + i);
      ASSERT_EQ(ids[at], order[i]) << "row " << r << " rank " << i << " vocab " << vocab
                                   << " count " << count;
      uint32_t got, want;
      std::memcpy(&got, &values[at], 4);
      std::memcpy(&want, &last[order[i]], 4);
      EXPECT_EQ(got, want) << "row " << r << " rank " << i;
    }
  }
}

TEST(SampleTopkEmulation, SmallVocabulary) {
  for (int count : {1, 5, 50})
    checkAgainstStableSort(&block128::block128_sample_topk, 128, 3, 2, 300, count,
                           100 + count);
}

TEST(SampleTopkEmulation, Gpt2Vocabulary) {
  for (int count : {1, 5, 50})
    checkAgainstStableSort(&block128::block128_sample_topk, 128, 2, 1, 50257, count,
                           200 + count);
}

// The block size plans use (codegen/AttachKernels.cpp).
TEST(SampleTopkEmulation, PlanBlockSize) {
  checkAgainstStableSort(&block1024::block1024_sample_topk, 1024, 2, 3, 300, 5, 300);
  checkAgainstStableSort(&block1024::block1024_sample_topk, 1024, 1, 1, 50257, 5, 301);
}

// Threads that hold fewer keys than they win (2 each, about 31 elements a thread) refill
// from their elements below the last taken, as often as they must.
TEST(SampleTopkEmulation, ThreadsReadTheirElementsAgainWhenTheirKeysRunOut) {
  for (int count : {1, 3, 64, 300})
    checkAgainstStableSort(&block32::block32_sample_topk, 32, 2, 1, 1000, count, 500 + count);
  checkAgainstStableSort(&block32::block32_sample_topk, 32, 1, 1, 1000, 1000, 600);
}

// Every element once: the whole row in order.
TEST(SampleTopkEmulation, CountIsVocabulary) {
  checkAgainstStableSort(&block128::block128_sample_topk, 128, 2, 1, 300, 300, 400);
}

} // namespace
