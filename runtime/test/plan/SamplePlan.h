// A small two-rank plan that exercises every table of the schema: tensors of every kind
// (dynamic dims with symbols, max shapes, a constant), a program with attributes of every
// kind and an If whose branches are programs, a kernel, and weights that are replicated,
// split unevenly between the ranks, empty, and of odd sizes (so padding appears).
// Shared by the plan tests and by the dsp-dump test's plan generator.
#ifndef DSRT_TEST_PLAN_SAMPLEPLAN_H
#define DSRT_TEST_PLAN_SAMPLEPLAN_H

#include "codegen/PlanWriter.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sample {

constexpr int kRanks = 2;

struct WeightSpec {
  std::string name;
  dsrt::DType dtype;
  dsrt::Shape shape[kRanks];
};

// The weights, in weight_index order.
const std::vector<WeightSpec> &weights();

// The bytes of weight `index` on `rank`: a pattern unique to both.
std::vector<uint8_t> weightBytes(int rank, size_t index);

// Fills `writer` (kRanks ranks) with the sample header and weights whose callbacks produce
// weightBytes(); `onFill(rank, index)`, if set, runs at the start of every callback.
dsrt::Status fill(dsc::PlanWriter &writer,
                  const std::function<dsrt::Status(int, size_t)> &onFill = nullptr);

// fill() and write().
dsrt::Status write(const std::string &path);

} // namespace sample

#endif
