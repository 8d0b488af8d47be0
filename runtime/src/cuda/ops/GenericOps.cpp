// Launchers of the generic path's onnx ops whose kernels codegen/kernels/GenericRules.cpp
// generates: elementwise ops with broadcasting, Where, Cast, the data movement ops (one
// strided copy template), Gather, CumSum, Softmax and the reductions (MatMul's launcher is
// GenericMatMul.cpp, GatherND's and GatherElements' GenericIndexing.cpp). Each launches its step's kernel slot 0 (Concat and Split once per
// part) with the parameters of its template (codegen/kernels/generic_<kind>.cuh), in order;
// the shape structs below mirror the templates' field for field.
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

// The templates' rank limit (their shape structs hold six dims).
constexpr int64_t kMaxRank = 6;

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
struct CopyShape {  // generic_copy.cuh GenericCopyShape
  long long dims[6];
  long long srcStrides[6];
  long long dstStrides[6];
  long long srcBase;
  long long dstBase;
};
struct ReduceShape {  // generic_reduce.cuh GenericReduceShape
  long long keptDims[6];
  long long reducedDims[6];
  long long strides[6];
};
struct SplitShape {  // generic_split.cuh GenericSplitShape
  unsigned long long outputs[8];
  long long ends[8];
  long long axis;
  long long inner;
};
static_assert(sizeof(SplitShape) == 18 * 8, "generic_split.cuh's layout");
static_assert(sizeof(BinaryShape) == 18 * 8 && sizeof(WhereShape) == 24 * 8 &&
                  sizeof(CopyShape) == 20 * 8 && sizeof(ReduceShape) == 18 * 8,
              "the structs must have the templates' layout: long longs, no padding");

// ---- helpers ---------------------------------------------------------------------------------

// The kernel's RANK, which must hold `rank` dimensions.
Status rankOf(StepContext &context, size_t rank, int64_t &compiled) {
  compiled = context.kernelConstant(0, "RANK", -1);
  if (compiled < 0 || compiled > kMaxRank || static_cast<int64_t>(rank) > compiled)
    return context.error("the kernel was generated for rank ", compiled, ", the step has ",
                         rank);
  return Status::ok();
}

Status checkElementSize(StepContext &context, DType dtype) {
  return checkConstant(context, "ES", static_cast<int64_t>(dtypeSize(dtype)));
}

std::vector<int64_t> contiguousStrides(const Shape &shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

// Writes `values` (one per dimension of a shape of rank values.size()) right-aligned into
// `slots[0, rank)`, with `fill` before them: a shape padded on the left to the kernel's rank.
void placeRightAligned(const std::vector<int64_t> &values, int64_t rank, long long fill,
                       long long *slots) {
  int64_t offset = rank - static_cast<int64_t>(values.size());
  for (int64_t d = 0; d < kMaxRank; ++d)
    slots[d] = fill;
  for (size_t d = 0; d < values.size(); ++d)
    slots[offset + static_cast<int64_t>(d)] = values[d];
}

// The strides of `in` read as the broadcast `out` (right-aligned, 0 along broadcast
// dimensions), or an error when `in` does not broadcast to `out`.
Status broadcastStrides(StepContext &context, const Shape &in, const Shape &out,
                        std::vector<int64_t> &strides) {
  if (in.size() > out.size())
    return context.error("an input of shape ", shapeString(in), " does not broadcast to ",
                         shapeString(out));
  strides.assign(out.size(), 0);
  std::vector<int64_t> own = contiguousStrides(in);
  size_t offset = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != 1 && in[d] != out[offset + d])
      return context.error("an input of shape ", shapeString(in), " does not broadcast to ",
                           shapeString(out));
    strides[offset + d] = in[d] == 1 ? 0 : own[d];
  }
  return Status::ok();
}

// A grid for `count` elements with a grid-stride loop: enough blocks to fill the GPU
// several times over, never more than the elements need.
Status hostIndexValues(StepContext &context, size_t index, const char *what,
                       std::vector<int64_t> &values) {
  const TensorRef *tensor = context.hostInput(index);
  if (!tensor)
    return context.error(what, " is not known on the host");
  int64_t count = tensor->elements();
  if (count < 0)
    return context.error(what, " has an invalid shape");
  if (count > 0 && !tensor->data)
    return context.error(what, " is not known on the host");
  values.resize(static_cast<size_t>(count));
  if (tensor->dtype == DType::I64) {
    for (int64_t i = 0; i < count; ++i)
      values[i] = tensor->as<int64_t>()[i];
  } else if (tensor->dtype == DType::I32) {
    for (int64_t i = 0; i < count; ++i)
      values[i] = tensor->as<int32_t>()[i];
  } else {
    return context.error(what, " is ", dtypeName(tensor->dtype), ", not i64 or i32");
  }
  return Status::ok();
}

Status normalizeAxis(StepContext &context, int64_t axis, size_t rank, const char *what,
                     int64_t &out) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    return context.error(what, " ", axis, " is out of range for rank ", rank);
  out = axis < 0 ? axis + r : axis;
  return Status::ok();
}

// ---- the strided copy ------------------------------------------------------------------------

// One launch of generic_copy over `dims` (rank <= the kernel's RANK), padded on the left.
Status launchCopy(StepContext &context, DevicePtr destination, DevicePtr source,
                  const Shape &dims, const std::vector<int64_t> &srcStrides,
                  const std::vector<int64_t> &dstStrides, int64_t srcBase, int64_t dstBase) {
  int64_t rank = 0;
  DSRT_RETURN_IF_ERROR(rankOf(context, dims.size(), rank));
  long long count = elementCount(dims);
  if (count < 0)
    return context.error("invalid copy shape ", shapeString(dims));
  if (count == 0)
    return Status::ok();
  CopyShape shape{};
  placeRightAligned(dims, rank, 1, shape.dims);
  placeRightAligned(srcStrides, rank, 0, shape.srcStrides);
  placeRightAligned(dstStrides, rank, 0, shape.dstStrides);
  shape.srcBase = srcBase;
  shape.dstBase = dstBase;
  void *args[] = {&destination, &source, &shape, &count};
  return launchElements(context, count, args);
}

// The output's bytes are the input's: Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// Dropout, a Cast to the same dtype, Max/Min of one input.
Status runContiguousCopy(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype || in->elements() != out.elements())
    return context.error("the output (", dtypeName(out.dtype), " ", shapeString(out.shape),
                         ") does not hold the input's bytes (", dtypeName(in->dtype), " ",
                         shapeString(in->shape), ")");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  // dsc-plan-memory gives a view (Reshape, Squeeze, an identity Cast...) its input's arena
  // slot: no launch at all.
  if (out.data == in->data)
    return Status::ok();
  Shape flat{in->elements()};
  return launchCopy(context, out.data, in->data, flat, {1}, {1}, 0, 0);
}

Status runTranspose(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype)
    return context.error("the output's dtype differs from the input's");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  size_t rank = in->shape.size();
  std::vector<int64_t> perm;
  bool present = false;
  DSRT_RETURN_IF_ERROR(ops::getInts(context.attrs(), "perm", perm, present));
  if (!present) {
    perm.resize(rank);
    for (size_t d = 0; d < rank; ++d)
      perm[d] = static_cast<int64_t>(rank - 1 - d);
  }
  if (perm.size() != rank || out.shape.size() != rank)
    return context.error("perm has ", perm.size(), " entries for rank ", rank);
  std::vector<int64_t> own = contiguousStrides(in->shape), strides(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t axis = 0;
    DSRT_RETURN_IF_ERROR(normalizeAxis(context, perm[d], rank, "perm entry", axis));
    if (out.shape[d] != in->shape[axis])
      return context.error("the output's shape ", shapeString(out.shape),
                           " is not the permuted input's");
    strides[d] = own[axis];
  }
  return launchCopy(context, out.data, in->data, out.shape, strides,
                    contiguousStrides(out.shape), 0, 0);
}

Status runExpand(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype)
    return context.error("the output's dtype differs from the input's");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  std::vector<int64_t> strides;
  DSRT_RETURN_IF_ERROR(broadcastStrides(context, in->shape, out.shape, strides));
  return launchCopy(context, out.data, in->data, out.shape, strides,
                    contiguousStrides(out.shape), 0, 0);
}

// Slice with the host's normalisation (runtime/src/ops/Movement.cpp planSlice): negative
// starts and ends count from the end, then clamp; the output's shape must be what the
// session inferred.
Status runSlice(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  const DeviceTensor &out = context.output(0);
  if (in->dtype != out.dtype)
    return context.error("the output's dtype differs from the input's");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  const Shape &shape = in->shape;
  size_t rank = shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  DSRT_RETURN_IF_ERROR(hostIndexValues(context, 1, "starts", starts));
  DSRT_RETURN_IF_ERROR(hostIndexValues(context, 2, "ends", ends));
  if (context.inputCount() > 3 && context.input(3)) {
    DSRT_RETURN_IF_ERROR(hostIndexValues(context, 3, "axes", axes));
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  }
  if (context.inputCount() > 4 && context.input(4))
    DSRT_RETURN_IF_ERROR(hostIndexValues(context, 4, "steps", steps));
  else
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return context.error("starts, ends, axes and steps must have the same length");
  std::vector<int64_t> first(rank, 0), stride(rank, 1);
  Shape sliced = shape;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = 0;
    DSRT_RETURN_IF_ERROR(normalizeAxis(context, axes[i], rank, "axis", axis));
    if (seen[axis])
      return context.error("axis ", axis, " is sliced twice");
    seen[axis] = true;
    int64_t dim = shape[axis], step = steps[i];
    if (step == 0)
      return context.error("step of axis ", axis, " is zero");
    int64_t start = 0, count = 0;
    ops::sliceAxis(dim, starts[i], ends[i], step, start, count);
    first[axis] = start;
    stride[axis] = step;
    sliced[axis] = static_cast<int64_t>(count);
  }
  if (sliced != out.shape)
    return context.error("the slice has shape ", shapeString(sliced), ", the output ",
                         shapeString(out.shape));
  std::vector<int64_t> own = contiguousStrides(shape), srcStrides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    base += first[d] * own[d];
    srcStrides[d] = stride[d] * own[d];
  }
  return launchCopy(context, out.data, in->data, out.shape, srcStrides,
                    contiguousStrides(out.shape), base, 0);
}

// One launch per input, each into its slice of the output along `axis`.
Status runConcat(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  if (out.shape.empty())
    return context.error("a scalar has no axis");
  if (!context.attrs().count("axis"))
    return context.error("attribute 'axis' is required");
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, out.shape.size(), "axis", axis));
  std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  int64_t offset = 0;
  for (size_t k = 0; k < context.inputCount(); ++k) {
    const DeviceTensor *in = context.input(k);
    if (!in)
      return context.error("input ", k, " is absent");
    if (in->dtype != out.dtype || in->shape.size() != out.shape.size())
      return context.error("input ", k, " (", dtypeName(in->dtype), " ",
                           shapeString(in->shape), ") does not match the output");
    for (size_t d = 0; d < out.shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && in->shape[d] != out.shape[d])
        return context.error("input ", k, " of shape ", shapeString(in->shape),
                             " does not match the output ", shapeString(out.shape));
    if (offset + in->shape[axis] > out.shape[axis])
      return context.error("the inputs exceed the output along axis ", axis);
    DSRT_RETURN_IF_ERROR(launchCopy(context, out.data, in->data, in->shape,
                                    contiguousStrides(in->shape), outStrides, 0,
                                    offset * outStrides[axis]));
    offset += in->shape[axis];
  }
  if (offset != out.shape[axis])
    return context.error("the inputs fill ", offset, " of the output's ", out.shape[axis],
                         " along axis ", axis);
  return Status::ok();
}

// One launch per output, each from its slice of the input along `axis`; the sizes are the
// outputs' (the session inferred them from the split input or the equal parts).
// Split's parts in one launch of generic_split (`parts`, its PARTS constant).
Status launchSplit(StepContext &context, const DeviceTensor &in, int64_t axis, int64_t parts) {
  if (parts != static_cast<int64_t>(context.outputCount()) || parts > 8)
    return context.error("the kernel was generated for ", parts, " parts, the step has ",
                         context.outputCount());
  SplitShape shape{};
  int64_t end = 0;
  for (int64_t k = 0; k < parts; ++k) {
    const DeviceTensor &out = context.output(k);
    if (out.dtype != in.dtype || out.shape.size() != in.shape.size())
      return context.error("output ", k, " (", dtypeName(out.dtype), " ",
                           shapeString(out.shape), ") does not match the input");
    for (size_t d = 0; d < in.shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && out.shape[d] != in.shape[d])
        return context.error("output ", k, " of shape ", shapeString(out.shape),
                             " does not match the input ", shapeString(in.shape));
    end += out.shape[axis];
    shape.outputs[k] = static_cast<unsigned long long>(out.data);
    shape.ends[k] = end;
  }
  if (end != in.shape[axis])
    return context.error("the outputs take ", end, " of the input's ", in.shape[axis],
                         " along axis ", axis);
  shape.axis = in.shape[axis];
  shape.inner = product(in.shape, axis + 1, in.shape.size());
  long long count = in.elements();
  if (count == 0)
    return Status::ok();
  DevicePtr input = in.data;
  void *args[] = {&input, &shape, &count};
  return launchElements(context, count, args);
}

Status runSplit(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *in = context.input(0);
  if (!in)
    return context.error("has no input");
  DSRT_RETURN_IF_ERROR(checkElementSize(context, in->dtype));
  if (in->shape.empty())
    return context.error("a scalar has no axis");
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, in->shape.size(), "axis", axis));
  std::vector<int64_t> inStrides = contiguousStrides(in->shape);
  const int64_t parts = context.kernelConstant(0, "PARTS", -1);
  if (parts > 0)
    return launchSplit(context, *in, axis, parts);
  int64_t offset = 0;
  for (size_t k = 0; k < context.outputCount(); ++k) {
    const DeviceTensor &out = context.output(k);
    if (out.dtype != in->dtype || out.shape.size() != in->shape.size())
      return context.error("output ", k, " (", dtypeName(out.dtype), " ",
                           shapeString(out.shape), ") does not match the input");
    for (size_t d = 0; d < in->shape.size(); ++d)
      if (static_cast<int64_t>(d) != axis && out.shape[d] != in->shape[d])
        return context.error("output ", k, " of shape ", shapeString(out.shape),
                             " does not match the input ", shapeString(in->shape));
    if (offset + out.shape[axis] > in->shape[axis])
      return context.error("the outputs exceed the input along axis ", axis);
    DSRT_RETURN_IF_ERROR(launchCopy(context, out.data, in->data, out.shape, inStrides,
                                    contiguousStrides(out.shape), offset * inStrides[axis],
                                    0));
    offset += out.shape[axis];
  }
  if (offset != in->shape[axis])
    return context.error("the outputs take ", offset, " of the input's ", in->shape[axis],
                         " along axis ", axis);
  return Status::ok();
}

Status runGather(StepContext &context) {
  const DeviceTensor *data = nullptr, *indices = nullptr;
  DSRT_RETURN_IF_ERROR(gatherOperands(context, data, indices));
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(checkElementSize(context, out.dtype));
  DSRT_RETURN_IF_ERROR(checkConstant(context, "IDX", static_cast<int64_t>(indices->dtype)));
  if (data->shape.empty())
    return context.error("data is a scalar");
  int64_t axis = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "axis", 0, axis));
  DSRT_RETURN_IF_ERROR(normalizeAxis(context, axis, data->shape.size(), "axis", axis));
  long long outer = product(data->shape, 0, axis);
  long long axisDim = data->shape[axis];
  long long count = indices->elements();
  long long inner = product(data->shape, axis + 1, data->shape.size());
  if (out.elements() != outer * count * inner)
    return context.error("the output has ", out.elements(), " elements, not ",
                         outer * count * inner);
  if (out.elements() == 0)
    return Status::ok();
  DevicePtr outData = out.data, dataData = data->data, indexData = indices->data;
  void *args[] = {&outData, &dataData, &indexData, &outer, &axisDim, &count, &inner};
  return launchElements(context, out.elements(), args);
}

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
  long long outer = product(in->shape, 0, axis);
  long long length = in->shape[axis];
  long long inner = product(in->shape, axis + 1, in->shape.size());
  long long lines = outer * inner;
  if (lines == 0 || length == 0)
    return Status::ok();
  DevicePtr inData = in->data, outData = out.data;
  void *args[] = {&inData, &outData, &outer, &length, &inner};
  return launchElements(context, lines, args);
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
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
    ops.push_back({op, runContiguousCopy});
  ops.push_back({"Transpose", runTranspose});
  ops.push_back({"Expand", runExpand});
  ops.push_back({"Slice", runSlice});
  ops.push_back({"Concat", runConcat});
  ops.push_back({"Split", runSplit});
  ops.push_back({"Gather", runGather});
  ops.push_back({"GatherND", runGenericGatherND});
  ops.push_back({"GatherElements", runGenericGatherElements});
  ops.push_back({"CumSum", runCumSum});
  ops.push_back({"Softmax", runSoftmax});
  ops.push_back({"LogSoftmax", runSoftmax});
  ops.push_back({"MatMul", runGenericMatMul});
  for (const OpCode &entry : kReduceCodes)
    ops.push_back({entry.op, runReduce});
}

} // namespace dsrt::cuda
