// Writes a plan file (.dsp, docs/design.md §4; layout in schemas/plan.fbs). The caller fills
// the header as FlatBuffers' object API (`dsp::PlanT`: plain structs and vectors) and
// registers the weights of every tensor-parallel rank with callbacks that produce their
// bytes; `write` lays out the file, checks the header exactly as the runtime's loader will
// (before any weight is produced), then streams the weights one at a time into a
// temporary file that is renamed into place only when everything succeeded.
//
//   dsc::PlanWriter writer(/*ranks=*/2);
//   dsp::PlanT &plan = writer.plan();            // everything except `sections`
//   plan.producer = "dsc 0.1.0";
//   int32_t index;
//   DSRT_RETURN_IF_ERROR(writer.addWeight("h.0.attn.c_attn.weight",
//       {{dsrt::DType::F16, {768, 1152}, fillRank0}, {dsrt::DType::F16, {768, 1152}, fillRank1}},
//       index));
//   auto t = std::make_unique<dsp::TensorT>();  // the tensor that refers to it
//   t->kind = dsp::TensorKind::weight;
//   t->weight_index = index;  ...
//   DSRT_RETURN_IF_ERROR(writer.write("model.dsp"));
//
// Memory: the header, plus one buffer as large as the largest weight (reused).
// Plain C++17 (no MLIR), so it can be tested and reused on its own.
#ifndef DSC_CODEGEN_PLANWRITER_H
#define DSC_CODEGEN_PLANWRITER_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "plan_generated.h"

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

namespace dsc {

// One rank's part of a weight.
struct WeightShard {
  dsrt::DType dtype = dsrt::DType::Undefined;
  dsrt::Shape shape;  // dense, row-major: elementCount(shape) * dtypeSize(dtype) bytes
  // Writes exactly those bytes to `destination` (64-byte aligned, zero-filled). Called
  // once, during write(), after the previous weight's bytes went to the file. An error
  // aborts the write; no file is left behind.
  std::function<dsrt::Status(uint8_t *destination)> fill;
};

class PlanWriter {
public:
  explicit PlanWriter(int ranks);

  int ranks() const { return ranks_; }

  // The header to write. write() sets `format_version` and replaces `sections`; if
  // `options` is set, its `tp` must equal ranks().
  dsp::PlanT &plan() { return plan_; }

  // Registers one weight, with one shard per rank (shards.size() == ranks(); the same dtype
  // on every rank, shapes may differ: uneven TP splits). `index` receives the weight_index
  // that the plan's tensors use to refer to it: sections list weights in the order they
  // were added. Names are unique.
  dsrt::Status addWeight(std::string name, std::vector<WeightShard> shards, int32_t &index);
  // The stored dtype of each weight added so far, by weight_index: what the kernels are
  // specialised for before the sections are laid out.
  std::vector<dsrt::DType> weightDTypes() const;

  // Writes the plan to `path` (via `path`.tmp.XXXXXX in the same folder, renamed on
  // success). Errors start with `path`.
  dsrt::Status write(const std::string &path);

private:
  struct Weight {
    std::string name;
    std::vector<WeightShard> shards;
    std::vector<uint64_t> bytes;    // per rank
    std::vector<uint64_t> offsets;  // per rank, inside the section
  };

  dsrt::Status buildHeader(const std::string &path, std::vector<uint8_t> &header,
                           uint64_t &fileSize);
  dsrt::Status streamSections(const std::string &path, int fd);

  int ranks_;
  dsp::PlanT plan_;
  std::vector<Weight> weights_;
  std::vector<uint64_t> sectionSizes_;  // per rank
  std::unordered_set<std::string> names_;
  uint64_t largestWeight_ = 0;
};

} // namespace dsc

#endif
