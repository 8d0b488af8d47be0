// Rules of the indexed reads (Gather, GatherND, GatherElements) and of the ops
// mixture-of-experts routing uses (TopK, OneHot; NonZero and ScatterElements decline). Their
// launchers are in runtime/src/cuda/ops/GenericIndexing.cpp (Gather's in
// GenericMovement.cpp).
#include "codegen/kernels/GenericRuleHelpers.h"

namespace dsc::codegen::generic {
namespace {

// Gather's kin: data, an output of data's type and i64 or i32 indices; data of known, nonzero
// rank.
bool gatherOperands(const RuleInput &in, std::string &reason, const dsp::TensorT *&out,
                    DType &indexType, int64_t &rank) {
  const dsp::TensorT *data = required(in.input(0), "data", reason);
  const dsp::TensorT *indices = data ? required(in.input(1), "indices", reason) : nullptr;
  out = indices ? required(in.output(0), "output", reason) : nullptr;
  if (!out || !sameDeviceType(*data, *out, reason))
    return false;
  indexType = heldType(*indices);
  if (!isIndexType(indexType)) {
    reason = "indices are " + nameOf(indexType) + ", not i64 or i32";
    return false;
  }
  if (!knownRank(*data, "data", rank, reason))
    return false;
  if (rank == 0) {
    reason = "data is a scalar";
    return false;
  }
  return true;
}

bool gatherRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *out;
  DType indexType;
  int64_t rank;
  if (!gatherOperands(in, reason, out, indexType, rank))
    return false;
  kernels.push_back({"generic_gather", {{"ES", elementSizeOf(*out)}, {"IDX", code(indexType)}}});
  return true;
}

bool gatherNDRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *out;
  DType indexType;
  int64_t rank;
  if (!gatherOperands(in, reason, out, indexType, rank))
    return false;
  if (indexType != DType::I64) {
    reason = "indices are " + nameOf(indexType) + ", not i64";
    return false;
  }
  kernels.push_back({"generic_gather_nd", {{"ES", elementSizeOf(*out)}}});
  return true;
}

bool gatherElementsRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                        std::string &reason) {
  const dsp::TensorT *out;
  DType indexType;
  int64_t rank;
  if (!gatherOperands(in, reason, out, indexType, rank))
    return false;
  kernels.push_back({"generic_gather_elements",
                     {{"ES", elementSizeOf(*out)}, {"IDX", code(indexType)}, {"RANK", rank}}});
  return true;
}

// ---- routing -------------------------------------------------------------------------------

// TopK of a contiguous X viewed as [outer, length, inner]; K comes from the output's shape
// (the session infers it from K's value on the host, or runs the step on the fallback).
bool topKRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "X", reason);
  const dsp::TensorT *values = x ? required(in.output(0), "values", reason) : nullptr;
  const dsp::TensorT *indices = values ? required(in.output(1), "indices", reason) : nullptr;
  if (!indices)
    return false;
  DType dtype = heldType(*x);
  if (dtype != DType::F32 && dtype != DType::I64 && dtype != DType::I32) {
    reason = "no kernel for " + nameOf(dtype);
    return false;
  }
  if (dtypeOf(*values) != dtype || dtypeOf(*indices) != DType::I64) {
    reason = "the outputs are " + nameOf(dtypeOf(*values)) + " and " +
             nameOf(dtypeOf(*indices)) + ", expected " + nameOf(dtype) + " and i64";
    return false;
  }
  int64_t rank;
  if (!knownRank(*x, "X", rank, reason))
    return false;
  if (rank == 0) {
    reason = "X is a scalar";
    return false;
  }
  kernels.push_back(
      {"generic_topk", {{"DT", code(dtype)}, {"LARGEST", in.intAttr("largest", 1) != 0}}});
  return true;
}

// OneHot of integer indices; the depth comes from the output's shape.
bool oneHotRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *indices = required(in.input(0), "indices", reason);
  const dsp::TensorT *values = indices ? required(in.input(2), "values", reason) : nullptr;
  const dsp::TensorT *out = values ? required(in.output(0), "output", reason) : nullptr;
  if (!out || !sameDeviceType(*values, *out, reason))
    return false;
  DType indexType = heldType(*indices);
  if (!isIndexType(indexType)) {
    reason = "indices are " + nameOf(indexType) + ", not i64 or i32";
    return false;
  }
  int64_t rank;
  if (!knownRank(*out, "the output", rank, reason))
    return false;
  kernels.push_back(
      {"generic_onehot", {{"ES", elementSizeOf(*out)}, {"IDX", code(indexType)}}});
  return true;
}

// NonZero's output shape is a count of the data: a device kernel would need the host to wait
// for it before anything after it could be sized.
bool nonZeroRule(const RuleInput &, std::vector<KernelSpec> &, std::string &reason) {
  reason = "the output's shape is the count of non-zero elements, known only on the host";
  return false;
}

// ScatterElements must refuse an index out of range with an error, which a kernel cannot
// report without the host waiting for it; duplicate indices would also need atomics.
bool scatterElementsRule(const RuleInput &, std::vector<KernelSpec> &, std::string &reason) {
  reason = "an index out of range must be an error, which the host reference reports";
  return false;
}

} // namespace

void addGenericIndexingRules(std::vector<KernelRuleEntry> &rules) {
  rules.push_back({"Gather", gatherRule});
  rules.push_back({"GatherND", gatherNDRule});
  rules.push_back({"GatherElements", gatherElementsRule});
  rules.push_back({"TopK", topKRule});
  rules.push_back({"OneHot", oneHotRule});
  rules.push_back({"NonZero", nonZeroRule});
  rules.push_back({"ScatterElements", scatterElementsRule});
}

} // namespace dsc::codegen::generic
