// Rules of the generic path's onnx ops (those the recognisers leave as they are): the
// elementwise ops, Cast, data movement, CumSum, Softmax, MatMul and the reductions; the
// indexed reads and the routing ops' are GenericIndexingRules.cpp. Their launchers are in
// runtime/src/cuda/ops/GenericOps.cpp (MatMul's in GenericMatMul.cpp);
// every step launches kernel slot 0 (Concat once per input). A rule declines what its kernel
// does not do exactly as the host reference (runtime/src/ops) does; the step then runs on
// the fallback.
#include "codegen/kernels/GenericRuleHelpers.h"

#include <algorithm>
#include <map>

namespace dsc::codegen {
namespace {

using namespace generic;

// The dtypes the arithmetic templates are written for.
bool isArithmeticType(DType dtype) {
  return dtype == DType::F32 || dtype == DType::I64 || dtype == DType::I32 ||
         dtype == DType::Bool;
}

bool isCastType(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 ||
         dtype == DType::I64 || dtype == DType::I32 || dtype == DType::U8 ||
         dtype == DType::Bool;
}

// Op codes shared with the templates' GENERIC_UNARY_* / GENERIC_BINARY_* / GENERIC_REDUCE_*.
const std::map<std::string, int64_t> kUnaryCodes = {
    {"Neg", 1},   {"Abs", 2},         {"Exp", 3},  {"Log", 4},      {"Sqrt", 5},
    {"Tanh", 7},  {"Reciprocal", 6},  {"Erf", 8},  {"Sigmoid", 9},  {"Relu", 10},
    {"Sin", 11},  {"Cos", 12},        {"Floor", 13}, {"Not", 14},   {"IsNaN", 15}};
constexpr int64_t kUnaryGeluErf = 16, kUnaryGeluTanh = 17;

const std::map<std::string, int64_t> kBinaryCodes = {
    {"Add", 1},   {"Sub", 2},         {"Mul", 3},  {"Div", 4},      {"Pow", 5},
    {"Mod", 6},   {"Max", 7},         {"Min", 8},  {"Equal", 9},    {"Less", 10},
    {"LessOrEqual", 11}, {"Greater", 12}, {"GreaterOrEqual", 13}, {"And", 14}, {"Or", 15}};

const std::map<std::string, int64_t> kReduceCodes = {
    {"ReduceSum", 1}, {"ReduceMean", 2}, {"ReduceMax", 3}};

KernelSpec copySpec(DType dtype, int64_t rank) {
  return {"generic_copy",
          {{"ES", static_cast<int64_t>(dsrt::dtypeSize(dtype))}, {"RANK", rank}}};
}

// ---- elementwise ---------------------------------------------------------------------------

bool unaryRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "input", reason);
  const dsp::TensorT *y = x ? required(in.output(0), "output", reason) : nullptr;
  if (!y)
    return false;
  const std::string &op = in.step().op;
  DType dtype = heldType(*x);
  int64_t opCode;
  if (op == "Gelu") {
    std::string approximate = in.stringAttr("approximate", "none");
    if (approximate != "none" && approximate != "tanh") {
      reason = "unknown approximate '" + approximate + "'";
      return false;
    }
    opCode = approximate == "tanh" ? kUnaryGeluTanh : kUnaryGeluErf;
  } else {
    opCode = kUnaryCodes.at(op);
  }
  bool supported;
  if (op == "Not")
    supported = dtype == DType::Bool;
  else if (op == "Neg" || op == "Abs" || op == "Relu")
    supported = dtype == DType::F32 || dtype == DType::I64 || dtype == DType::I32;
  else
    supported = dtype == DType::F32;
  if (!supported) {
    reason = "no kernel for " + op + " of " + nameOf(dtype);
    return false;
  }
  DType expected = op == "IsNaN" ? DType::Bool : dtype;
  if (dtypeOf(*y) != expected) {
    reason = "the output is " + nameOf(dtypeOf(*y)) + ", expected " + nameOf(expected);
    return false;
  }
  kernels.push_back({"generic_unary", {{"OP", opCode}, {"DT", code(dtype)}}});
  return true;
}

bool binaryRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const std::string &op = in.step().op;
  const dsp::TensorT *y = required(in.output(0), "output", reason);
  if (!y)
    return false;
  if ((op == "Max" || op == "Min") && in.inputCount() == 1) {
    // One operand: the result is a copy of it.
    const dsp::TensorT *x = required(in.input(0), "input", reason);
    if (!x || !sameDeviceType(*x, *y, reason))
      return false;
    kernels.push_back(copySpec(dtypeOf(*y), 1));
    return true;
  }
  if (in.inputCount() != 2) {
    reason = op + " of " + std::to_string(in.inputCount()) + " inputs (the kernel takes two)";
    return false;
  }
  const dsp::TensorT *a = required(in.input(0), "input A", reason);
  const dsp::TensorT *b = a ? required(in.input(1), "input B", reason) : nullptr;
  if (!b)
    return false;
  DType typeA = heldType(*a), typeB = heldType(*b);
  if (!isArithmeticType(typeA) || !isArithmeticType(typeB)) {
    reason = "no kernel for " + nameOf(typeA) + " and " + nameOf(typeB);
    return false;
  }
  bool isBool = typeA == DType::Bool;
  if (op == "Pow") {
    if (isBool || typeB == DType::Bool) {
      reason = "Pow has no bool kernel";
      return false;
    }
  } else if (typeA != typeB) {
    reason = "operands of different dtypes (" + nameOf(typeA) + ", " + nameOf(typeB) + ")";
    return false;
  } else if (op == "And" || op == "Or") {
    if (!isBool) {
      reason = op + " takes bool, not " + nameOf(typeA);
      return false;
    }
  } else if (isBool && op != "Equal") {
    reason = "no bool kernel for " + op;
    return false;
  } else if ((op == "Div" || op == "Mod") && typeA != DType::F32) {
    // The host reports a zero divisor as an error, which a kernel cannot.
    reason = "integer " + op + " must report division by zero; the host reference runs it";
    return false;
  }
  bool isPredicate = kBinaryCodes.at(op) >= kBinaryCodes.at("Equal");
  DType expected = isPredicate ? DType::Bool : typeA;
  if (dtypeOf(*y) != expected) {
    reason = "the output is " + nameOf(dtypeOf(*y)) + ", expected " + nameOf(expected);
    return false;
  }
  int64_t rank;
  if (!knownRank(*y, "the output", rank, reason))
    return false;
  KernelSpec spec{"generic_binary",
                  {{"OP", kBinaryCodes.at(op)},
                   {"DT", code(typeA)},
                   {"DT_B", code(typeB)},
                   {"RANK", rank}}};
  if (op == "Mod")
    spec.constants.push_back({"FMOD", in.intAttr("fmod", 0) != 0 ? 1 : 0});
  kernels.push_back(std::move(spec));
  return true;
}

bool whereRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *condition = required(in.input(0), "condition", reason);
  const dsp::TensorT *x = condition ? required(in.input(1), "X", reason) : nullptr;
  const dsp::TensorT *y = x ? required(in.input(2), "Y", reason) : nullptr;
  const dsp::TensorT *out = y ? required(in.output(0), "output", reason) : nullptr;
  if (!out)
    return false;
  if (heldType(*condition) != DType::Bool) {
    reason = "the condition is " + nameOf(heldType(*condition)) + ", not bool";
    return false;
  }
  if (!sameDeviceType(*x, *out, reason) || !sameDeviceType(*y, *out, reason))
    return false;
  int64_t rank;
  if (!knownRank(*out, "the output", rank, reason))
    return false;
  kernels.push_back({"generic_where",
                     {{"ES", static_cast<int64_t>(dsrt::dtypeSize(dtypeOf(*out)))},
                      {"RANK", rank}}});
  return true;
}

bool castRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "input", reason);
  const dsp::TensorT *y = x ? required(in.output(0), "output", reason) : nullptr;
  if (!y)
    return false;
  DType from = heldType(*x), to = dtypeOf(*y);
  if (from == to) {
    // The host copies the bytes (NaN payloads included), and so does generic_copy.
    if (dsrt::dtypeSize(to) == 0 || dsrt::dtypeSize(to) > 8) {
      reason = "no element size for " + nameOf(to);
      return false;
    }
    kernels.push_back(copySpec(to, 1));
    return true;
  }
  if (!isCastType(from) || !isCastType(to)) {
    reason = "no kernel casting " + nameOf(from) + " to " + nameOf(to);
    return false;
  }
  kernels.push_back({"generic_cast", {{"FROM", code(from)}, {"TO", code(to)}}});
  return true;
}

// ---- data movement --------------------------------------------------------------------------

// Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: the bytes unchanged.
bool contiguousCopyRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                        std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "input", reason);
  const dsp::TensorT *y = x ? required(in.output(0), "output", reason) : nullptr;
  if (!y)
    return false;
  if (in.step().op == "Dropout" && in.outputCount() > 1) {
    reason = "Dropout's mask output has no kernel";
    return false;
  }
  if (!sameDeviceType(*x, *y, reason))
    return false;
  kernels.push_back(copySpec(dtypeOf(*y), 1));
  return true;
}

// Transpose, Expand: one strided copy of the output's rank.
bool stridedCopyRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                     std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "input", reason);
  const dsp::TensorT *y = x ? required(in.output(0), "output", reason) : nullptr;
  if (!y || !sameDeviceType(*x, *y, reason))
    return false;
  int64_t inputRank, rank;
  if (!knownRank(*x, "the input", inputRank, reason) ||
      !knownRank(*y, "the output", rank, reason))
    return false;
  kernels.push_back(copySpec(dtypeOf(*y), rank));
  return true;
}

bool sliceRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  // starts (1) and ends (2) are required; axes (3) and steps (4) are optional.
  for (size_t index = 1; index < in.inputCount() && index < 5; ++index) {
    if (in.step().inputs[index] < 0)
      continue;
    if (!hostKnownInput(in, index)) {
      reason = "input " + std::to_string(index) +
               " (starts, ends, axes or steps) is not known on the host";
      return false;
    }
  }
  if (in.inputCount() < 3) {
    reason = "needs starts and ends";
    return false;
  }
  return stridedCopyRule(in, kernels, reason);
}

// Concat and Split: one launch per input (output) into (from) its slice of the other side.
bool concatSplitRule(const RuleInput &in, std::vector<KernelSpec> &kernels,
                     std::string &reason) {
  bool isConcat = in.step().op == "Concat";
  const dsp::TensorT *whole =
      required(isConcat ? in.output(0) : in.input(0), isConcat ? "output" : "input", reason);
  if (!whole)
    return false;
  int64_t rank;
  if (!knownRank(*whole, isConcat ? "the output" : "the input", rank, reason))
    return false;
  size_t parts = isConcat ? in.inputCount() : in.outputCount();
  for (size_t k = 0; k < parts; ++k) {
    const dsp::TensorT *part = required(isConcat ? in.input(k) : in.output(k), "part", reason);
    if (!part)
      return false;
    if (isConcat ? !sameDeviceType(*part, *whole, reason)
                 : !sameDeviceType(*whole, *part, reason))
      return false;
  }
  if (rank == 0) {
    reason = "a scalar has no axis";
    return false;
  }
  // Split writes every part in one launch (generic_split) up to its 8 outputs.
  if (!isConcat && parts >= 1 && parts <= 8)
    kernels.push_back({"generic_split", {{"ES", elementSizeOf(*whole)},
                                         {"PARTS", static_cast<int64_t>(parts)}}});
  else
    kernels.push_back(copySpec(dtypeOf(*whole), rank));
  return true;
}

// ---- scans, softmax, reductions -------------------------------------------------------------

bool cumSumRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "input", reason);
  const dsp::TensorT *y = x ? required(in.output(0), "output", reason) : nullptr;
  if (!y)
    return false;
  DType dtype = heldType(*x);
  if (dtype != DType::F32 && dtype != DType::I64 && dtype != DType::I32) {
    reason = "no kernel for " + nameOf(dtype);
    return false;
  }
  if (dtypeOf(*y) != dtype) {
    reason = "the output is " + nameOf(dtypeOf(*y)) + ", the input " + nameOf(dtype);
    return false;
  }
  if (!hostKnownInput(in, 1)) {
    reason = "the axis is not known on the host";
    return false;
  }
  kernels.push_back({"generic_cumsum",
                     {{"DT", code(dtype)},
                      {"EXCLUSIVE", in.intAttr("exclusive", 0) != 0 ? 1 : 0},
                      {"REVERSE", in.intAttr("reverse", 0) != 0 ? 1 : 0}}});
  return true;
}

bool softmaxRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "input", reason);
  const dsp::TensorT *y = x ? required(in.output(0), "output", reason) : nullptr;
  if (!y)
    return false;
  if (heldType(*x) != DType::F32 || dtypeOf(*y) != DType::F32) {
    reason = "the kernel takes f32, not " + nameOf(heldType(*x));
    return false;
  }
  int64_t rank;
  if (!knownRank(*x, "the input", rank, reason))
    return false;
  int64_t axis = in.intAttr("axis", -1);
  if (rank == 0 || (axis != -1 && axis != rank - 1)) {
    reason = "the kernel normalises over the last axis only (axis " + std::to_string(axis) +
             ", rank " + std::to_string(rank) + ")";
    return false;
  }
  kernels.push_back(
      {"generic_softmax", {{"LOG", in.step().op == "LogSoftmax" ? 1 : 0}, {"BLOCK", 256}}});
  return true;
}

bool matMulRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *a = required(in.input(0), "first input", reason);
  const dsp::TensorT *b = a ? required(in.input(1), "second input", reason) : nullptr;
  const dsp::TensorT *y = b ? required(in.output(0), "output", reason) : nullptr;
  if (!y)
    return false;
  for (const dsp::TensorT *t : {a, b, y})
    if (heldType(*t) != DType::F32) {
      reason = "the kernel takes f32, not " + nameOf(heldType(*t));
      return false;
    }
  int64_t rankA, rankB;
  if (!knownRank(*a, "the first input", rankA, reason) ||
      !knownRank(*b, "the second input", rankB, reason))
    return false;
  if (rankA == 0 || rankB == 0) {
    reason = "MatMul takes no scalars";
    return false;
  }
  // knownRank's limit of 6 leaves at most the template's 4 batch dimensions.
  int64_t batchRank = std::max<int64_t>(std::max(rankA, rankB), 2) - 2;
  kernels.push_back({"generic_matmul", {{"BATCH_RANK", batchRank}}});
  return true;
}

bool reduceRule(const RuleInput &in, std::vector<KernelSpec> &kernels, std::string &reason) {
  const dsp::TensorT *x = required(in.input(0), "input", reason);
  const dsp::TensorT *y = x ? required(in.output(0), "output", reason) : nullptr;
  if (!y)
    return false;
  DType dtype = heldType(*x);
  if (dtype != DType::F32 && dtype != DType::I64 && dtype != DType::I32) {
    reason = "no kernel for " + nameOf(dtype);
    return false;
  }
  if (dtypeOf(*y) != dtype) {
    reason = "the output is " + nameOf(dtypeOf(*y)) + ", the input " + nameOf(dtype);
    return false;
  }
  int64_t rank;
  if (!knownRank(*x, "the input", rank, reason))
    return false;
  bool hasAxes = in.inputCount() > 1 && in.step().inputs[1] >= 0;
  // With keepdims the launcher can read the reduced axes off the shapes (a reduced
  // dimension of size 1 changes nothing); without, it needs their values.
  if (hasAxes && in.intAttr("keepdims", 1) == 0 && !hostKnownInput(in, 1)) {
    reason = "the axes are not known on the host and keepdims is 0";
    return false;
  }
  kernels.push_back({"generic_reduce",
                     {{"OP", kReduceCodes.at(in.step().op)}, {"DT", code(dtype)}, {"RANK", rank}}});
  return true;
}

} // namespace

void addGenericKernelRules(std::vector<KernelRuleEntry> &rules) {
  for (const auto &[op, opCode] : kUnaryCodes) {
    (void)opCode;
    rules.push_back({op.c_str(), unaryRule});
  }
  rules.push_back({"Gelu", unaryRule});
  for (const auto &[op, opCode] : kBinaryCodes) {
    (void)opCode;
    rules.push_back({op.c_str(), binaryRule});
  }
  rules.push_back({"Where", whereRule});
  rules.push_back({"Cast", castRule});
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
    rules.push_back({op, contiguousCopyRule});
  rules.push_back({"Transpose", stridedCopyRule});
  rules.push_back({"Expand", stridedCopyRule});
  rules.push_back({"Slice", sliceRule});
  rules.push_back({"Concat", concatSplitRule});
  rules.push_back({"Split", concatSplitRule});
  generic::addGenericIndexingRules(rules);
  rules.push_back({"CumSum", cumSumRule});
  rules.push_back({"Softmax", softmaxRule});
  rules.push_back({"LogSoftmax", softmaxRule});
  rules.push_back({"MatMul", matMulRule});
  for (const auto &[op, opCode] : kReduceCodes) {
    (void)opCode;
    rules.push_back({op.c_str(), reduceRule});
  }
}

} // namespace dsc::codegen
