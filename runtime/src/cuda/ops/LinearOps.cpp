// Launchers of tfm.linear (with the fuse pass's epilogue) and tfm.lm_head: the kernels of
// codegen/kernels/LinearRules.cpp, whose slot order is
//   0 gemv, 1 linear_epilogue, 2 convert_activations (f16/bf16 weights only).
// Up to kGemvMaxRows rows (decode) one gemv launch computes act(x·Wᵀ + b) + residual;
// more rows go to cuBLASLt (StepContext::gemm) and then the epilogue kernel. The math is
// the CPU kernel's (runtime/src/ops/Transformer.cpp): the TP `parallel` attribute and
// lm_head's vocab_offset/vocab_size change nothing, the weight already holds this rank's
// rows. Only shapes and attributes are read on the host, so every launch may be captured.
#include "cuda/GpuOps.h"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace dsrt::cuda {
namespace {

// gemv.cuh's GEMV_MAX_ROWS: the rows one launch keeps in registers.
constexpr int64_t kGemvMaxRows = 8;
constexpr unsigned kGemvBlock = 256;  // 8 warps, one output feature each at a time
// Shared memory a block may take without opting in to more.
constexpr int64_t kGemvMaxStagedBytes = 48 * 1024;
constexpr unsigned kElementwiseBlock = 256;
// Input positions of the fused tfm.linear (docs/transformer-ops.md).
constexpr size_t kInput = 0, kWeight = 1, kBias = 2, kScales = 3, kResidual = 4;
constexpr size_t kGemvSlot = 0, kEpilogueSlot = 1, kConvertSlot = 2;

bool isStoredFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

const DeviceTensor *optionalInput(StepContext &context, size_t index) {
  return index < context.inputCount() ? context.input(index) : nullptr;
}

bool overlaps(const DeviceTensor &a, const DeviceTensor &b) {
  if (a.bytes() == 0 || b.bytes() == 0)
    return false;
  return a.data < b.data + b.bytes() && b.data < a.data + a.bytes();
}

// A grid for `work` items of `perBlock` each, at most `cap` blocks (kernels loop over the
// rest), at least one.
unsigned gridFor(int64_t work, int64_t perBlock, int64_t cap) {
  int64_t blocks = (work + perBlock - 1) / perBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, std::max<int64_t>(cap, 1)));
}

// What the step's kernels were generated for; checked against what it runs with, since
// the code's shape depends on every one of them.
struct Fused {
  int64_t activation = -1;
  bool bias = false, residual = false;
};

Status checkSpecialisation(StepContext &context, DType weightType,
                           const DeviceTensor *bias, const DeviceTensor *residual,
                           Fused &fused) {
  const size_t needed = weightType == DType::F32 ? 2 : 3;
  if (context.kernelCount() < needed)
    return context.error("the plan has ", context.kernelCount(), " kernels for this step, not ",
                         needed);
  // gemv is specialised for the plan's K but takes the run's: a rank of an uneven
  // tensor-parallel split has fewer in-features than rank 0, whose shapes the plan has.
  if (context.kernelConstant(kGemvSlot, "K", -1) <= 0)
    return context.error("the gemv kernel has no K constant");
  if (context.kernelConstant(kGemvSlot, "WT", -1) != static_cast<int64_t>(weightType))
    return context.error("the kernel was generated for another weight dtype than ",
                         dtypeName(weightType));
  fused.activation = context.kernelConstant(kGemvSlot, "ACT", -1);
  fused.bias = context.kernelConstant(kGemvSlot, "HAS_BIAS", 0) != 0;
  fused.residual = context.kernelConstant(kGemvSlot, "HAS_RESIDUAL", 0) != 0;
  if (fused.bias != (bias != nullptr) || fused.residual != (residual != nullptr))
    return context.error("the kernel's bias/residual epilogue does not match the step's inputs");
  if (bias && context.kernelConstant(kGemvSlot, "BIAS_DT", -1) != static_cast<int64_t>(bias->dtype))
    return context.error("the kernel was generated for another bias dtype than ",
                         dtypeName(bias->dtype));
  if (context.kernelConstant(kEpilogueSlot, "ACT", -2) != fused.activation ||
      (context.kernelConstant(kEpilogueSlot, "HAS_BIAS", 0) != 0) != fused.bias ||
      (context.kernelConstant(kEpilogueSlot, "HAS_RESIDUAL", 0) != 0) != fused.residual)
    return context.error("the epilogue kernel does not match the gemv kernel");
  if (weightType != DType::F32 &&
      context.kernelConstant(kConvertSlot, "WT", -1) != static_cast<int64_t>(weightType))
    return context.error("the conversion kernel was generated for another weight dtype");
  return Status::ok();
}

Status runLinear(StepContext &context) {
  const bool isLinear = context.op() == "tfm.linear";
  const DeviceTensor *x = context.input(kInput), *w = context.input(kWeight);
  if (!x || !w)
    return context.error("needs an input and a weight");
  const DeviceTensor *bias = isLinear ? optionalInput(context, kBias) : nullptr;
  const DeviceTensor *residual = isLinear ? optionalInput(context, kResidual) : nullptr;
  if (isLinear && optionalInput(context, kScales))
    return context.error("int8 weights with scales have no GPU kernel yet");
  if (context.outputCount() < 1)
    return context.error("has no output");
  const DeviceTensor &y = context.output(0);

  if (x->dtype != DType::F32 || y.dtype != DType::F32)
    return context.error("the input and output must be f32, not ", dtypeName(x->dtype), " and ",
                         dtypeName(y.dtype));
  if (!isStoredFloat(w->dtype) || w->shape.size() != 2)
    return context.error("the weight must be a float [out, in]");
  const int64_t n = w->shape[0], k = w->shape[1];
  if (x->shape.empty() || x->shape.back() != k)
    return context.error("the input's last dimension must be ", k);
  if (y.shape.empty() || y.shape.back() != n)
    return context.error("the output's last dimension must be ", n);
  const int64_t rows = n == 0 ? 0 : y.elements() / n;
  if (x->elements() != rows * k)
    return context.error("the input has ", x->elements(), " elements, not ", rows * k);
  if (bias && (!isStoredFloat(bias->dtype) || bias->elements() != n))
    return context.error("the bias must be float [", n, "]");
  if (residual && (residual->dtype != DType::F32 || residual->shape != y.shape))
    return context.error("the residual must be f32 of the output's shape");
  if (n > INT_MAX || k > (int64_t(1) << 27))
    return context.error("[", n, ", ", k, "] is more than the kernels index");

  Fused fused;
  DSRT_RETURN_IF_ERROR(checkSpecialisation(context, w->dtype, bias, residual, fused));
  if (rows == 0 || n == 0)
    return Status::ok();
  // Every output element is written while other inputs are still being read: an output
  // sharing memory with them would be the memory plan's error. The residual alone may be
  // the output itself (each element is read, then written, by the same thread).
  if (overlaps(y, *x) || overlaps(y, *w) || (bias && overlaps(y, *bias)))
    return context.error("the output overlaps an input");
  const bool residualInPlace = residual && residual->data == y.data;
  if (residual && !residualInPlace && overlaps(y, *residual))
    return context.error("the output partly overlaps the residual");

  DevicePtr xPtr = x->data, wPtr = w->data, biasPtr = bias ? bias->data : 0,
            residualPtr = residual ? residual->data : 0, yPtr = y.data;
  const int64_t sms = std::max(1, context.multiprocessorCount());

  if (rows <= kGemvMaxRows) {
    int rowCount = static_cast<int>(rows), outCount = static_cast<int>(n),
        inCount = static_cast<int>(k);
    const int64_t stagedBytes = rows * k * static_cast<int64_t>(sizeof(float));
    int staged = stagedBytes <= kGemvMaxStagedBytes ? 1 : 0;
    // Blocks stride over the features, so a few per multiprocessor keep the weight reads
    // in flight while each block stages x only once.
    const int64_t warpsPerBlock = kGemvBlock / 32;
    Dim3 grid{gridFor(n, warpsPerBlock, sms * 4)}, block{kGemvBlock};
    void *args[] = {&xPtr,      &wPtr,     &biasPtr, &residualPtr, &yPtr,
                    &rowCount, &outCount, &inCount, &staged};
    return context.launch(kGemvSlot, grid, block,
                          staged ? static_cast<uint32_t>(stagedBytes) : 0u, args);
  }

  // cuBLASLt multiplies equal types: f16/bf16 weights take the activations converted.
  GemmDesc gemm;
  gemm.m = rows;
  gemm.n = n;
  gemm.k = k;
  gemm.b = wPtr;
  gemm.bType = w->dtype;
  gemm.a = xPtr;
  gemm.aType = DType::F32;
  if (w->dtype != DType::F32) {
    long long count = rows * k;
    DevicePtr converted = 0;
    DSRT_RETURN_IF_ERROR(context.scratch(static_cast<size_t>(count) * 2, converted));
    Dim3 grid{gridFor(count, kElementwiseBlock, sms * 8)}, block{kElementwiseBlock};
    void *args[] = {&xPtr, &converted, &count};
    DSRT_RETURN_IF_ERROR(context.launch(kConvertSlot, grid, block, 0, args));
    gemm.a = converted;
    gemm.aType = w->dtype;
  }

  // Without an activation the residual can be the GEMM's C (C = residual; C += x·Wᵀ) when
  // it already is the output; otherwise the product goes to the output, or to scratch when
  // the output is the residual the epilogue still has to read.
  DevicePtr product = yPtr;
  DevicePtr epilogueResidual = residualPtr;
  if (residualInPlace) {
    if (fused.activation == -1) {
      gemm.accumulate = true;
      epilogueResidual = 0;  // already in C
    } else {
      DSRT_RETURN_IF_ERROR(context.scratch(y.bytes(), product));
    }
  }
  gemm.c = product;
  DSRT_RETURN_IF_ERROR(context.gemm(gemm));

  const bool epilogueNeeded =
      fused.bias || fused.activation != -1 || epilogueResidual != 0 || product != yPtr;
  if (!epilogueNeeded)
    return Status::ok();
  long long count = rows * n, features = n;
  Dim3 grid{gridFor(count, kElementwiseBlock, sms * 8)}, block{kElementwiseBlock};
  void *args[] = {&product, &biasPtr, &epilogueResidual, &yPtr, &count, &features};
  return context.launch(kEpilogueSlot, grid, block, 0, args);
}

} // namespace

void addLinearGpuOps(std::vector<GpuOpInfo> &ops) {
  ops.push_back({"tfm.linear", runLinear});
  ops.push_back({"tfm.lm_head", runLinear});
}

} // namespace dsrt::cuda
