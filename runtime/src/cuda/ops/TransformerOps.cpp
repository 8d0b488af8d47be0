// Launchers of the transformer ops whose kernels codegen/kernels/TransformerRules.cpp
// generates: tfm.embedding, tfm.layer_norm, tfm.rms_norm (with their fused residual
// forms), tfm.activation, tfm.gated_act, tfm.residual_add. Each launches its step's kernel
// slot 0 with the parameters of its template (codegen/kernels/<kind>.cuh), in order. They
// read shapes and attributes only: nothing here reads device data on the host, so every
// launch may be captured into a graph.
#include "cuda/GpuOps.h"

#include <algorithm>
#include <cstring>
#include <cstdint>

namespace dsrt::cuda {
namespace {

// The grid's x extent is at most 2^31 - 1; the kernels loop over what does not fit.
constexpr int64_t kMaxGridX = 2147483647;
// Threads per block of the elementwise kernels.
constexpr unsigned kElementwiseBlock = 256;

bool isStoredFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

Status requireKernel(StepContext &context) {
  if (context.kernelCount() < 1)
    return context.error("the plan has no kernel for this step");
  return Status::ok();
}

Status requireF32(StepContext &context, const DeviceTensor *tensor, const char *what) {
  if (!tensor)
    return context.error("has no ", what);
  if (tensor->dtype != DType::F32)
    return context.error(what, " is ", dtypeName(tensor->dtype), "; the kernel takes f32");
  return Status::ok();
}

// The block size a kernel was specialised for (its BLOCK constant), checked against the
// launch limits.
Status blockOf(StepContext &context, unsigned &block) {
  int64_t value = context.kernelConstant(0, "BLOCK", -1);
  if (value < 32 || value > 1024 || value % 32 != 0)
    return context.error("the kernel's BLOCK constant is ", value,
                         ", not a multiple of 32 in [32, 1024]");
  block = static_cast<unsigned>(value);
  return Status::ok();
}

// The kernel's HIDDEN constant must be the size the step runs with: the code was shaped
// for it.
Status checkHidden(StepContext &context, int64_t hidden) {
  int64_t compiled = context.kernelConstant(0, "HIDDEN", -1);
  if (compiled != hidden)
    return context.error("the kernel was generated for hidden size ", compiled, ", not ",
                         hidden);
  return Status::ok();
}

Status runEmbedding(StepContext &context) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *ids = context.input(0), *table = context.input(1);
  if (!ids || !table)
    return context.error("needs ids and a table");
  if (ids->dtype != DType::I64 && ids->dtype != DType::I32)
    return context.error("ids are ", dtypeName(ids->dtype), ", not i64 or i32");
  if (!isStoredFloat(table->dtype) || table->shape.size() != 2)
    return context.error("the table must be a float [rows, hidden]");
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(requireF32(context, &out, "the output"));
  int64_t rows = table->shape[0], hidden = table->shape[1];
  DSRT_RETURN_IF_ERROR(checkHidden(context, hidden));
  if (context.kernelConstant(0, "TABLE_DT", -1) != static_cast<int64_t>(table->dtype) ||
      context.kernelConstant(0, "ID_DT", -1) != static_cast<int64_t>(ids->dtype))
    return context.error("the kernel was generated for other table or id dtypes");
  int64_t tokens = ids->elements();
  if (out.elements() != tokens * hidden)
    return context.error("the output has ", out.elements(), " elements, not ", tokens * hidden);
  int64_t offset = 0, vocab = 0;
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "vocab_offset", 0, offset));
  DSRT_RETURN_IF_ERROR(ops::getInt(context.attrs(), "vocab_size", 0, vocab));
  // The step's `scale` is compiled into the kernel (SCALE_BITS, absent for 1).
  float scale = 1.0f;
  DSRT_RETURN_IF_ERROR(ops::getFloat(context.attrs(), "scale", 1.0f, scale));
  uint32_t scaleBits = 0;
  std::memcpy(&scaleBits, &scale, sizeof scaleBits);
  if (context.kernelConstant(0, "SCALE_BITS", -1) !=
      (scale == 1.0f ? -1 : static_cast<int64_t>(scaleBits)))
    return context.error("the kernel was generated for another scale than ", scale);
  if (tokens == 0)
    return Status::ok();
  // As on the CPU: ids index [0, vocab_size) when it is set, the table's rows otherwise.
  long long limit = vocab > 0 ? vocab : rows;
  unsigned block;
  DSRT_RETURN_IF_ERROR(blockOf(context, block));
  DevicePtr idsData = ids->data, tableData = table->data, outData = out.data;
  long long tokenCount = tokens, rowCount = rows, vocabOffset = offset;
  void *args[] = {&idsData, &tableData, &outData, &tokenCount, &rowCount, &vocabOffset, &limit};
  Dim3 grid;
  grid.x = static_cast<unsigned>(std::min<int64_t>(tokens, kMaxGridX));
  Dim3 threads;
  threads.x = block;
  return context.launch(0, grid, threads, 0, args);
}

// layer_norm (input, scale, bias?, residual?) and rms_norm (input, scale, residual?,
// post_residual?).
Status runNorm(StepContext &context, bool rms) {
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *input = context.input(0), *scale = context.input(1);
  DSRT_RETURN_IF_ERROR(requireF32(context, input, "the input"));
  if (!scale || !isStoredFloat(scale->dtype))
    return context.error("needs a float scale");
  if (input->shape.empty())
    return context.error("the input must have rank 1 or more");
  int64_t hidden = input->shape.back();
  DSRT_RETURN_IF_ERROR(checkHidden(context, hidden));
  if (scale->elements() != hidden)
    return context.error("the scale has ", scale->elements(), " elements, not ", hidden);
  if (context.kernelConstant(0, "SCALE_DT", -1) != static_cast<int64_t>(scale->dtype))
    return context.error("the kernel was generated for another scale dtype");
  const DeviceTensor *bias = nullptr;
  size_t residualIndex = rms ? 2 : 3;
  if (!rms) {
    bias = context.inputCount() > 2 ? context.input(2) : nullptr;
    int64_t biasType = context.kernelConstant(0, "BIAS_DT", -1);
    if (biasType != (bias ? static_cast<int64_t>(bias->dtype) : 0))
      return context.error("the kernel was generated for another bias");
    if (bias && bias->elements() != hidden)
      return context.error("the bias has ", bias->elements(), " elements, not ", hidden);
  }
  const DeviceTensor *residual =
      context.inputCount() > residualIndex ? context.input(residualIndex) : nullptr;
  // A sandwich norm's post_residual (rms_norm's input 3): the kernel adds it to the result
  // (POST_RESIDUAL) through its residual parameter.
  const DeviceTensor *post = rms && context.inputCount() > 3 ? context.input(3) : nullptr;
  if (context.kernelConstant(0, "POST_RESIDUAL", -1) != (post ? 1 : -1))
    return context.error("the kernel was generated ", post ? "without" : "with",
                         " a post_residual");
  if (post) {
    if (residual)
      return context.error("takes a residual or a post_residual, not both");
    DSRT_RETURN_IF_ERROR(requireF32(context, post, "the post_residual"));
    if (post->elements() != input->elements())
      return context.error("the post_residual has ", post->elements(), " elements, not ",
                           input->elements());
  }
  if (context.kernelConstant(0, "RESIDUAL", -1) != (residual ? 1 : 0))
    return context.error("the kernel was generated ", residual ? "without" : "with",
                         " a residual");
  if (residual) {
    DSRT_RETURN_IF_ERROR(requireF32(context, residual, "the residual"));
    if (residual->elements() != input->elements())
      return context.error("the residual has ", residual->elements(), " elements, not ",
                           input->elements());
  }
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(requireF32(context, &out, "the output"));
  if (out.elements() != input->elements())
    return context.error("the output has ", out.elements(), " elements, not ",
                         input->elements());
  DevicePtr sumData = 0;
  if (residual && context.outputCount() > 1) {
    const DeviceTensor &sum = context.output(1);
    DSRT_RETURN_IF_ERROR(requireF32(context, &sum, "the residual sum"));
    if (sum.elements() != input->elements())
      return context.error("the residual sum has ", sum.elements(), " elements, not ",
                           input->elements());
    sumData = sum.data;
  }
  float epsilon = 0;
  DSRT_RETURN_IF_ERROR(
      ops::getFloat(context.attrs(), "epsilon", rms ? 1e-6f : 1e-5f, epsilon));
  long long rows = hidden == 0 ? 0 : input->elements() / hidden;
  if (rows == 0)
    return Status::ok();
  unsigned block;
  DSRT_RETURN_IF_ERROR(blockOf(context, block));
  DevicePtr inputData = input->data, scaleData = scale->data,
            biasData = bias ? bias->data : 0,
            residualData = residual ? residual->data : post ? post->data : 0,
            outData = out.data;
  Dim3 grid;
  grid.x = static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridX));
  Dim3 threads;
  threads.x = block;
  if (rms) {
    void *args[] = {&inputData, &scaleData, &residualData, &outData, &sumData, &rows, &epsilon};
    return context.launch(0, grid, threads, 0, args);
  }
  void *args[] = {&inputData, &scaleData, &biasData, &residualData,
                  &outData,   &sumData,   &rows,     &epsilon};
  return context.launch(0, grid, threads, 0, args);
}

Status runLayerNorm(StepContext &context) { return runNorm(context, /*rms=*/false); }
Status runRmsNorm(StepContext &context) { return runNorm(context, /*rms=*/true); }

// activation (a), gated_act (a, b), residual_add (a, b): f32, one output of a's shape;
// gated_act_packed (a = [..., 2n] gate then up): f32, [..., n].
// Which kernel an elementwise step launches: activation.cuh (gated or not), its packed
// form, or residual_add.cuh.
enum class Kernel { Activation, PackedActivation, Add };

Status runElementwise(StepContext &context, size_t inputs, Kernel kernel) {
  const bool packed = kernel == Kernel::PackedActivation;
  DSRT_RETURN_IF_ERROR(requireKernel(context));
  const DeviceTensor *a = context.input(0);
  DSRT_RETURN_IF_ERROR(requireF32(context, a, "the first input"));
  const DeviceTensor *b = nullptr;
  if (inputs > 1) {
    b = context.inputCount() > 1 ? context.input(1) : nullptr;
    DSRT_RETURN_IF_ERROR(requireF32(context, b, "the second input"));
    if (b->elements() != a->elements())
      return context.error("the inputs have ", a->elements(), " and ", b->elements(),
                           " elements");
  }
  const DeviceTensor &out = context.output(0);
  DSRT_RETURN_IF_ERROR(requireF32(context, &out, "the output"));
  long long half = 0;
  if (packed) {
    if (a->shape.empty() || a->shape.back() % 2 != 0 || out.shape.empty() ||
        out.shape.back() * 2 != a->shape.back() || out.elements() * 2 != a->elements())
      return context.error("the joined input ", shapeString(a->shape),
                           " is not gate and up halves of the output ", shapeString(out.shape));
    half = out.shape.back();
  } else if (out.elements() != a->elements()) {
    return context.error("the output has ", out.elements(), " elements, not ", a->elements());
  }
  long long count = out.elements();
  if (count == 0)
    return Status::ok();
  // Four values per thread on the vector path; a grid-stride loop covers the rest, so the
  // grid need not exceed what fills the GPU several times over.
  int64_t perBlock = int64_t(kElementwiseBlock) * 4;
  int64_t wanted = (count + perBlock - 1) / perBlock;
  int64_t enough = std::max(1, context.multiprocessorCount()) * int64_t(32);
  Dim3 grid;
  grid.x = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, enough)));
  Dim3 threads;
  threads.x = kElementwiseBlock;
  DevicePtr aData = a->data, bData = b ? b->data : 0, outData = out.data;
  // activation.cuh takes the half width after the count (0 unless packed); residual_add.cuh
  // ends at the count.
  if (kernel == Kernel::Add) {
    void *args[] = {&aData, &bData, &outData, &count};
    return context.launch(0, grid, threads, 0, args);
  }
  void *args[] = {&aData, &bData, &outData, &count, &half};
  return context.launch(0, grid, threads, 0, args);
}

Status runActivation(StepContext &context) {
  return runElementwise(context, 1, Kernel::Activation);
}
Status runGatedActivation(StepContext &context) {
  return runElementwise(context, 2, Kernel::Activation);
}
Status runPackedGatedActivation(StepContext &context) {
  return runElementwise(context, 1, Kernel::PackedActivation);
}
Status runResidualAdd(StepContext &context) { return runElementwise(context, 2, Kernel::Add); }

} // namespace

void addTransformerGpuOps(std::vector<GpuOpInfo> &ops) {
  ops.push_back({"tfm.embedding", runEmbedding});
  ops.push_back({"tfm.layer_norm", runLayerNorm});
  ops.push_back({"tfm.rms_norm", runRmsNorm});
  ops.push_back({"tfm.activation", runActivation});
  ops.push_back({"tfm.gated_act", runGatedActivation});
  ops.push_back({"tfm.gated_act_packed", runPackedGatedActivation});
  ops.push_back({"tfm.residual_add", runResidualAdd});
}

} // namespace dsrt::cuda
