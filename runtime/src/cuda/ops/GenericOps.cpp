// Launchers of the generic path's onnx ops whose kernels codegen/kernels/GenericRules.cpp
// generates: elementwise ops with broadcasting, Where, Cast, CumSum, Softmax and the
// reductions (the data movement's launchers are GenericMovement.cpp, MatMul's
// GenericMatMul.cpp, GatherND's, GatherElements', TopK's and OneHot's GenericIndexing.cpp;
// the rules of the last four are GenericIndexingRules.cpp). Each launches its
// step's kernel slot 0 with the parameters of its template
// (codegen/kernels/generic_<kind>.cuh), in order; the shape structs below mirror the
// templates' field for field.
//
// Everything a launcher needs comes from shapes, attributes and the values the session
// knows on the host (StepContext::hostInput: Slice's starts, CumSum's axis, a reduction's
// axes); nothing here reads device data, so every launch may be captured into a graph.
#include "cuda/GpuOps.h"
#include "cuda/ops/GenericLaunch.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace dsrt::cuda {
namespace {


// Op codes of generic_unary.cuh and generic_binary.cuh, for checking the kernel against
// the step.
struct OpCode {
  const char *op;
  int64_t code;
};
constexpr OpCode kUnaryCodes[] = {
    {"Neg", 1},   {"Abs", 2},      {"Exp", 3},   {"Log", 4},      {"Sqrt", 5},
    {"Reciprocal", 6}, {"Tanh", 7}, {"Erf", 8},  {"Sigmoid", 9},  {"Relu", 10},
    {"Sin", 11},  {"Cos", 12},     {"Floor", 13}, {"Not", 14},    {"IsNaN", 15}};
constexpr int64_t kUnaryGeluErf = 16, kUnaryGeluTanh = 17;
constexpr OpCode kBinaryCodes[] = {
    {"Add", 1},   {"Sub", 2},   {"Mul", 3},          {"Div", 4},      {"Pow", 5},
    {"Mod", 6},   {"Max", 7},   {"Min", 8},          {"Equal", 9},    {"Less", 10},
    {"LessOrEqual", 11}, {"Greater", 12}, {"GreaterOrEqual", 13}, {"And", 14}, {"Or", 15}};
constexpr OpCode kReduceCodes[] = {{"ReduceSum", 1}, {"ReduceMean", 2}, {"ReduceMax", 3}};

template <size_t N> int64_t codeOf(const OpCode (&codes)[N], std::string_view op) {
  for (const OpCode &entry : codes)
    if (op == entry.op)
      return entry.code;
  return -1;
}

// ---- the templates' parameter structs --------------------------------------------------------

struct BinaryShape {  // generic_binary.cuh GenericBinaryShape
  long long dims[6];
  long long stridesA[6];
  long long stridesB[6];
};
struct WhereShape {  // generic_where.cuh GenericWhereShape
  long long dims[6];
  long long stridesCondition[6];
  long long stridesX[6];
  long long stridesY[6];
};
struct ReduceShape {  // generic_reduce.cuh GenericReduceShape
  long long keptDims[6];
  long long reducedDims[6];
  long long strides[6];
};
static_assert(sizeof(BinaryShape) == 18 * 8 && sizeof(WhereShape) == 24 * 8 &&
                  sizeof(ReduceShape) == 18 * 8,
              "the structs must have the templates' layout: long longs, no padding");

// ---- elementwise -----------------------------------------------------------------------------

Status runUnary(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  int64_t opCode = codeOf(kUnaryCodes, context.op());
  if (context.op() == "Gelu") {
    std::string approximate;
    DSRT_RETURN_IF_ERROR(ops::getString(context.attrs(), "approximate", "none", approximate));
    opCode = approximate == "tanh" ? kUnaryGeluTanh : kUnaryGeluErf;
  }
  DSRT_RETURN_IF_ERROR(checkConstant(context, "OP", opCode));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "DT", static_cast<int64_t>(in->dtype)));
  DType expected = context.op() == "IsNaN" ? DType::Bool : in->dtype;
  if (out.dtype != expected || out.elements() != in->elements())
    return context.error("the output (", dtypeName(out.dtype), " ", shapeString(out.shape),
                         ") does not match the input (", dtypeName(in->dtype), " ",
                         shapeString(in->shape), ")");
  long long count = in->elements();
  if (count == 0)
    return Status::ok();
  DevicePtr inData = in->data, outData = out.data;
  void *args[] = {&inData, &outData, &count};
  return launchElements(context, count, args);
}

Status runBinary(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  if ((context.op() == "Max" || context.op() == "Min") && context.inputCount() == 1)
    return runContiguousCopy(context);
  if (context.inputCount() != 2)
    return context.error("the kernel takes two inputs, not ", context.inputCount());
  const DeviceTensor *a = context.input(0), *b = context.input(1);
  if (!a || !b)
    return context.error("needs two inputs");
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(checkConstant(context, "OP", codeOf(kBinaryCodes, context.op())));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "DT", static_cast<int64_t>(a->dtype)));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "DT_B", static_cast<int64_t>(b->dtype)));
  if (context.op() == "Mod") {
    int64_t fmod = 0;
    DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "fmod", 0, fmod));
    DSRT_RETURN_IF_ERROR(checkConstant(context, "FMOD", fmod != 0 ? 1 : 0));
  }
  int64_t rank = 0;
  DSRT_RETURN_IF_ERROR(rankOf(context, out.shape.size(), rank));
  std::vector<int64_t> stridesA, stridesB;
  DSRT_RETURN_IF_ERROR(broadcastStrides(context, a->shape, out.shape, stridesA));
  DSRT_RETURN_IF_ERROR(broadcastStrides(context, b->shape, out.shape, stridesB));
  long long count = out.elements();
  if (count == 0)
    return Status::ok();
  BinaryShape shape{};
  placeRightAligned(out.shape, rank, 1, shape.dims);
  placeRightAligned(stridesA, rank, 0, shape.stridesA);
  placeRightAligned(stridesB, rank, 0, shape.stridesB);
  DevicePtr aData = a->data, bData = b->data, outData = out.data;
  void *args[] = {&aData, &bData, &outData, &shape, &count};
  return launchElements(context, count, args);
}

Status runWhere(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *condition = context.input(0), *x = context.input(1),
                     *y = context.input(2);
  if (!condition || !x || !y)
    return context.error("needs a condition, X and Y");
  const DeviceTensor &out = context.output(0);
  if (condition->dtype != DType::Bool)
    return context.error("the condition is ", dtypeName(condition->dtype), ", not bool");
  if (x->dtype != out.dtype || y->dtype != out.dtype)
    return context.error("X, Y and the output must have one dtype");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  int64_t rank = 0;
  DSRT_RETURN_IF_ERROR(rankOf(context, out.shape.size(), rank));
  std::vector<int64_t> stridesCondition, stridesX, stridesY;
  DSRT_RETURN_IF_ERROR(broadcastStrides(context, condition->shape, out.shape, stridesCondition));
  DSRT_RETURN_IF_ERROR(broadcastStrides(context, x->shape, out.shape, stridesX));
  DSRT_RETURN_IF_ERROR(broadcastStrides(context, y->shape, out.shape, stridesY));
  long long count = out.elements();
  if (count == 0)
    return Status::ok();
  WhereShape shape{};
  placeRightAligned(out.shape, rank, 1, shape.dims);
  placeRightAligned(stridesCondition, rank, 0, shape.stridesCondition);
  placeRightAligned(stridesX, rank, 0, shape.stridesX);
  placeRightAligned(stridesY, rank, 0, shape.stridesY);
  DevicePtr conditionData = condition->data, xData = x->data, yData = y->data,
            outData = out.data;
  void *args[] = {&conditionData, &xData, &yData, &outData, &shape, &count};
  return launchElements(context, count, args);
}

Status runCast(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  // The rule gave a same-dtype Cast the copy kernel, as the host copies the bytes.
  if (in->dtype == out.dtype)
    return runContiguousCopy(context);
  DSRT_RETURN_IF_ERROR(checkConstant(context, "FROM", static_cast<int64_t>(in->dtype)));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "TO", static_cast<int64_t>(out.dtype)));
  if (out.elements() != in->elements())
    return context.error("the output has ", out.elements(), " elements, not ",
                         in->elements());
  long long count = in->elements();
  if (count == 0)
    return Status::ok();
  DevicePtr inData = in->data, outData = out.data;
  void *args[] = {&inData, &outData, &count};
  return launchElements(context, count, args);
}

// ---- scans, softmax, reductions --------------------------------------------------------------

Status runCumSum(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (out.dtype != in->dtype || out.shape != in->shape)
    return context.error("the output must have the input's dtype and shape");
  DSRT_RETURN_IF_ERROR(checkConstant(context, "DT", static_cast<int64_t>(in->dtype)));
  int64_t exclusive = 0, reverse = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "exclusive", 0, exclusive));
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "reverse", 0, reverse));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "EXCLUSIVE", exclusive != 0 ? 1 : 0));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "REVERSE", reverse != 0 ? 1 : 0));
  std::vector<int64_t> axisValues;
  DSRT_RETURN_IF_ERROR(hostIndexValues(context, 1, "axis", axisValues));
  if (axisValues.size() != 1 || context.hostInput(1)->shape.size() > 1)
    return context.error("axis must be a scalar");
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axisValues[0], in->shape.size(), "axis", axis));
  Lines lines = linesAlong(in->shape, axis);
  if (lines.count() == 0 || lines.length == 0)
    return Status::ok();
  DevicePtr inData = in->data, outData = out.data;
  void *args[] = {&inData, &outData, &lines.outer, &lines.length, &lines.inner};
  return launchElements(context, lines.count(), args);
}

Status runSoftmax(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != DType::F32 || out.dtype != DType::F32 || out.shape != in->shape)
    return context.error("the kernel takes f32 and writes the input's shape");
  DSRT_RETURN_IF_ERROR(checkConstant(context, "LOG", context.op() == "LogSoftmax" ? 1 : 0));
  if (in->shape.empty())
    return context.error("the kernel needs rank 1 or more");
  int64_t axis = -1;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", -1, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, in->shape.size(), "axis", axis));
  if (axis != static_cast<int64_t>(in->shape.size()) - 1)
    return context.error("the kernel normalises over the last axis only, not ", axis);
  int64_t block = context.kernelConstant(0, "BLOCK", -1);
  if (block < 32 || block > 1024 || block % 32 != 0)
    return context.error("the kernel's BLOCK constant is ", block,
                         ", not a multiple of 32 in [32, 1024]");
  long long cols = in->shape.back();
  long long rows = cols == 0 ? 0 : in->elements() / cols;
  if (rows == 0)
    return Status::ok();
  DevicePtr inData = in->data, outData = out.data;
  void *args[] = {&inData, &outData, &rows, &cols};
  Dim3 grid;
  grid.x = static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridX));
  Dim3 threads;
  threads.x = static_cast<unsigned>(block);
  return context.launch(0, grid, threads, 0, args);
}

// Which input dimensions a reduction folds: the axes' values when the host knows them,
// else (keepdims) the dimensions the output keeps at 1 (a reduced dimension of size 1
// changes nothing, so which of those count does not matter).
Status reducedDims(StepContext &context, const Shape &in, const Shape &out,
                   std::vector<bool> &reduced) {
  size_t rank = in.size();
  int64_t keepdims = 1, noop = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "keepdims", 1, keepdims));
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "noop_with_empty_axes", 0, noop));
  bool hasAxes = context.inputCount() > 1 && context.input(1);
  if (hasAxes && !context.hostInput(1)) {
    if (!keepdims)
      return context.error("the axes are not known on the host and keepdims is 0");
    if (out.size() != rank)
      return context.error("the output's rank differs from the input's with keepdims");
    reduced.assign(rank, false);
    for (size_t d = 0; d < rank; ++d) {
      if (out[d] != in[d] && out[d] != 1)
        return context.error("the output ", shapeString(out),
                             " is not a reduction of the input ", shapeString(in));
      reduced[d] = out[d] != in[d];
    }
    // Empty axes reduce everything, unless noop_with_empty_axes: the shapes tell which
    // only when a dimension changed; with none changed both readings give the same values.
    return Status::ok();
  }
  std::vector<int64_t> axes;
  if (hasAxes)
    DSRT_RETURN_IF_ERROR(hostIndexValues(context, 1, "axes", axes));
  bool identity = axes.empty() && noop != 0;
  reduced.assign(rank, axes.empty() && !identity);
  for (int64_t axis : axes) {
    int64_t normalized = 0;
    DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, rank, "axis", normalized));
    if (reduced[normalized])
      return context.error("axis ", axis, " is repeated");
    reduced[normalized] = true;
  }
  return Status::ok();
}

Status runReduce(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (out.dtype != in->dtype)
    return context.error("the output's dtype differs from the input's");
  DSRT_RETURN_IF_ERROR(checkConstant(context, "OP", codeOf(kReduceCodes, context.op())));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "DT", static_cast<int64_t>(in->dtype)));
  int64_t rank = 0;
  DSRT_RETURN_IF_ERROR(rankOf(context, in->shape.size(), rank));
  std::vector<bool> reduced;
  DSRT_RETURN_IF_ERROR(reducedDims(context, in->shape, out.shape, reduced));
  std::vector<int64_t> kept(in->shape.size()), folded(in->shape.size());
  long long outputCount = 1, reducedCount = 1;
  for (size_t d = 0; d < in->shape.size(); ++d) {
    kept[d] = reduced[d] ? 1 : in->shape[d];
    folded[d] = reduced[d] ? in->shape[d] : 1;
    outputCount *= kept[d];
    reducedCount *= folded[d];
  }
  if (outputCount != out.elements())
    return context.error("the output has ", out.elements(), " elements, the reduction ",
                         outputCount);
  if (outputCount == 0)
    return Status::ok();
  ReduceShape shape{};
  placeRightAligned(kept, rank, 1, shape.keptDims);
  placeRightAligned(folded, rank, 1, shape.reducedDims);
  placeRightAligned(contiguousStrides(in->shape), rank, 0, shape.strides);
  DevicePtr inData = in->data, outData = out.data;
  void *args[] = {&inData, &outData, &shape, &outputCount, &reducedCount};
  return launchElements(context, outputCount, args);
}

} // namespace

void addGenericGpuOps(std::vector<GpuOpInfo> &ops) {
  for (const OpCode &entry : kUnaryCodes)
    ops.push_back({entry.op, runUnary});
  ops.push_back({"Gelu", runUnary});
  for (const OpCode &entry : kBinaryCodes)
    ops.push_back({entry.op, runBinary});
  ops.push_back({"Where", runWhere});
  ops.push_back({"Cast", runCast});
  addGenericMovementGpuOps(ops);
  ops.push_back({"GatherND", runGenericGatherND});
  ops.push_back({"GatherElements", runGenericGatherElements});
  ops.push_back({"TopK", runGenericTopK});
  ops.push_back({"OneHot", runGenericOneHot});
  ops.push_back({"CumSum", runCumSum});
  ops.push_back({"Softmax", runSoftmax});
  ops.push_back({"LogSoftmax", runSoftmax});
  ops.push_back({"MatMul", runGenericMatMul});
  for (const OpCode &entry : kReduceCodes)
    ops.push_back({entry.op, runReduce});
}

} // namespace dsrt::cuda
