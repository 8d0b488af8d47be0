// MatMul (numpy semantics: 1-D promotion, broadcast batch dimensions) and Gemm.
// Floats accumulate in fp32 (f64 in f64); integers wrap in their own width. Rows are
// spread over the thread pool when the product is large enough to pay for it.
#include "ops/Kernel.h"
#include "ops/Strided.h"
#include "ops/ThreadPool.h"
#include "ops/TypeDispatch.h"

#include <algorithm>

namespace dsrt::ops {
namespace {

constexpr DTypeMask kMatMulTypes = kFloatTypes | kWideIntTypes;
// Multiply-adds below which a range of rows is not worth a thread.
constexpr int64_t kParallelGrainWork = 1 << 16;

// The type products accumulate in.
template <typename T, bool = kIsFloat<T>> struct AccumulatorOf { using type = ComputeType<T>; };
template <typename T> struct AccumulatorOf<T, false> { using type = std::make_unsigned_t<T>; };
template <> struct AccumulatorOf<BoolByte, false> { using type = uint8_t; };
template <typename T> using Accumulator = typename AccumulatorOf<T>::type;

// c[r, :] = sum_k a[r, k] * b[k, :] for rows [begin, end) of one matrix pair.
template <typename Acc>
void multiplyRows(const Acc *a, const Acc *b, Acc *c, int64_t begin, int64_t end, int64_t K,
                  int64_t N) {
  for (int64_t r = begin; r < end; ++r) {
    Acc *row = c + r * N;
    std::fill(row, row + N, Acc(0));
    const Acc *aRow = a + r * K;
    for (int64_t k = 0; k < K; ++k) {
      Acc scale = aRow[k];
      const Acc *bRow = b + k * N;
      for (int64_t n = 0; n < N; ++n)
        row[n] += scale * bRow[n];
    }
  }
}

int64_t grainRows(int64_t K, int64_t N) {
  return std::max<int64_t>(1, kParallelGrainWork / std::max<int64_t>(1, K * N));
}

// The elements of `t` in the accumulator type: the tensor itself when they already are.
template <typename T, typename Acc>
const Acc *asAccumulator(const TensorRef &t, std::vector<Acc> &buffer) {
  if constexpr (std::is_same_v<T, Acc>) {
    return t.as<Acc>();
  } else {
    int64_t n = t.elements();
    buffer.resize(static_cast<size_t>(n));
    const T *src = t.as<T>();
    for (int64_t i = 0; i < n; ++i)
      buffer[i] = static_cast<Acc>(load(src[i]));
    return buffer.data();
  }
}

Status inferMatMul(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "A", kMatMulTypes));
  DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 1));
  Shape a = ctx.input(0)->shape, b = ctx.input(1)->shape;
  if (a.empty() || b.empty())
    return ctx.error("inputs must have rank 1 or more, not ", shapeString(a), " and ",
                     shapeString(b));
  bool vectorA = a.size() == 1, vectorB = b.size() == 1;
  if (vectorA)
    a.insert(a.begin(), 1);
  if (vectorB)
    b.push_back(1);
  if (a.back() != b[b.size() - 2])
    return ctx.error("inner dimensions differ: ", shapeString(ctx.input(0)->shape), " and ",
                     shapeString(ctx.input(1)->shape));
  Shape batch;
  if (!broadcastShapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2), batch))
    return ctx.error("batch dimensions do not broadcast: ", shapeString(ctx.input(0)->shape),
                     " and ", shapeString(ctx.input(1)->shape));
  if (!vectorA)
    batch.push_back(a[a.size() - 2]);
  if (!vectorB)
    batch.push_back(b.back());
  outputs.push_back({ctx.input(0)->dtype, batch});
  return Status::ok();
}

template <typename T> Status computeMatMulTyped(const KernelContext &ctx, const TensorRef &out) {
  using Acc = Accumulator<T>;
  const TensorRef &ta = *ctx.input(0), &tb = *ctx.input(1);
  Shape a = ta.shape, b = tb.shape;
  if (a.size() == 1)
    a.insert(a.begin(), 1);
  if (b.size() == 1)
    b.push_back(1);
  int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  Shape aBatch(a.begin(), a.end() - 2), bBatch(b.begin(), b.end() - 2), batch;
  broadcastShapes(aBatch, bBatch, batch);
  // Offsets (in matrices) of each batch entry's operands.
  std::vector<int64_t> aIndex, bIndex;
  int64_t batches = elementCount(batch);
  aIndex.reserve(batches);
  bIndex.reserve(batches);
  forEachBroadcast<2>(batch, {&aBatch, &bBatch}, [&](int64_t, const std::array<int64_t, 2> &at) {
    aIndex.push_back(at[0]);
    bIndex.push_back(at[1]);
  });

  std::vector<Acc> aBuffer, bBuffer, cBuffer;
  const Acc *pa = asAccumulator<T>(ta, aBuffer);
  const Acc *pb = asAccumulator<T>(tb, bBuffer);
  Acc *pc;
  if constexpr (std::is_same_v<T, Acc>) {
    pc = out.as<Acc>();
  } else {
    cBuffer.resize(static_cast<size_t>(out.elements()));
    pc = cBuffer.data();
  }
  parallelFor(batches * M, grainRows(K, N), [&](int64_t begin, int64_t end) {
    while (begin < end) {
      int64_t entry = begin / M, row = begin % M;
      int64_t last = std::min(end - entry * M, M);
      multiplyRows(pa + aIndex[entry] * M * K, pb + bIndex[entry] * K * N, pc + entry * M * N,
                   row, last, K, N);
      begin = entry * M + last;
    }
  });
  if constexpr (!std::is_same_v<T, Acc>) {
    T *dst = out.as<T>();
    for (size_t i = 0; i < cBuffer.size(); ++i)
      dst[i] = store<T>(static_cast<ComputeType<T>>(cBuffer[i]));
  }
  return Status::ok();
}

Status computeMatMul(const KernelContext &ctx, const Outputs &outputs) {
  return visitDType(ctx.input(0)->dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsBool<T>)
      return ctx.error("no kernel for bool");
    else
      return computeMatMulTyped<T>(ctx, *outputs[0]);
  });
}

struct GemmParams {
  int64_t transA = 0, transB = 0;
  float alpha = 1, beta = 1;
};

Status readGemmParams(const KernelContext &ctx, GemmParams &params) {
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "transA", 0, params.transA));
  DSRT_RETURN_IF_ERROR(intAttr(ctx, "transB", 0, params.transB));
  DSRT_RETURN_IF_ERROR(floatAttr(ctx, "alpha", 1.0f, params.alpha));
  return floatAttr(ctx, "beta", 1.0f, params.beta);
}

Status inferGemm(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "A", kMatMulTypes));
  DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 1));
  GemmParams params;
  DSRT_RETURN_IF_ERROR(readGemmParams(ctx, params));
  const Shape &a = ctx.input(0)->shape, &b = ctx.input(1)->shape;
  if (a.size() != 2 || b.size() != 2)
    return ctx.error("A and B must have rank 2, not ", shapeString(a), " and ", shapeString(b));
  int64_t M = params.transA ? a[1] : a[0], K = params.transA ? a[0] : a[1];
  int64_t KB = params.transB ? b[1] : b[0], N = params.transB ? b[0] : b[1];
  if (K != KB)
    return ctx.error("inner dimensions differ: ", shapeString(a), " and ", shapeString(b),
                     " (transA ", params.transA, ", transB ", params.transB, ")");
  if (const TensorRef *c = ctx.input(2)) {
    DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, 2));
    if (!broadcastsTo(c->shape, {M, N}))
      return ctx.error("C of shape ", shapeString(c->shape), " does not broadcast to ",
                       shapeString({M, N}));
  }
  outputs.push_back({ctx.input(0)->dtype, {M, N}});
  return Status::ok();
}

// The rows x cols matrix `t` (stored transposed when `transposed`) in row-major Acc.
template <typename T, typename Acc>
void loadMatrix(const TensorRef &t, bool transposed, std::vector<Acc> &out) {
  int64_t rows = transposed ? t.shape[1] : t.shape[0];
  int64_t cols = transposed ? t.shape[0] : t.shape[1];
  const T *src = t.as<T>();
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = static_cast<Acc>(load(transposed ? src[c * rows + r] : src[r * cols + c]));
}

template <typename T> Status computeGemmTyped(const KernelContext &ctx, const TensorRef &out) {
  using Acc = Accumulator<T>;
  GemmParams params;
  DSRT_RETURN_IF_ERROR(readGemmParams(ctx, params));
  const TensorRef &ta = *ctx.input(0), &tb = *ctx.input(1);
  int64_t M = out.shape[0], N = out.shape[1];
  int64_t K = params.transA ? ta.shape[0] : ta.shape[1];
  std::vector<Acc> a, b, product(static_cast<size_t>(M * N));
  loadMatrix<T>(ta, params.transA != 0, a);
  loadMatrix<T>(tb, params.transB != 0, b);
  parallelFor(M, grainRows(K, N), [&](int64_t begin, int64_t end) {
    multiplyRows(a.data(), b.data(), product.data(), begin, end, K, N);
  });

  const TensorRef *c = ctx.input(2);
  std::vector<int64_t> cStrides = c ? broadcastStrides(c->shape, out.shape)
                                    : std::vector<int64_t>{0, 0};
  const T *pc = c ? c->as<T>() : nullptr;
  T *dst = out.as<T>();
  // Integers take the exact path unless alpha or beta scale them.
  bool exactIntegers = !kIsFloat<T> && params.alpha == 1.0f && params.beta == 1.0f;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      Acc ab = product[m * N + n];
      if constexpr (kIsFloat<T>) {
        Acc value = Acc(params.alpha) * ab;
        if (pc)
          value += Acc(params.beta) * Acc(load(pc[m * cStrides[0] + n * cStrides[1]]));
        dst[m * N + n] = store<T>(value);
      } else if (exactIntegers) {
        Acc value = ab + (pc ? static_cast<Acc>(pc[m * cStrides[0] + n * cStrides[1]]) : Acc(0));
        dst[m * N + n] = static_cast<T>(value);
      } else {
        double value = double(params.alpha) * double(static_cast<T>(ab));
        if (pc)
          value += double(params.beta) * double(pc[m * cStrides[0] + n * cStrides[1]]);
        dst[m * N + n] = saturatingFloatToInt<T>(value);
      }
    }
  }
  return Status::ok();
}

Status computeGemm(const KernelContext &ctx, const Outputs &outputs) {
  return visitDType(ctx.input(0)->dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsBool<T>)
      return ctx.error("no kernel for bool");
    else
      return computeGemmTyped<T>(ctx, *outputs[0]);
  });
}

} // namespace

void addMatMulKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"MatMul", 2, 2, 2, 1, 1, inferMatMul, computeMatMul});
  kernels.push_back({"Gemm", 2, 3, 2, 1, 1, inferGemm, computeGemm});
}

} // namespace dsrt::ops
