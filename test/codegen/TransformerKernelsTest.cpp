// The transformer kernel templates (embedding, layer_norm, rms_norm, activation,
// residual_add) built for the host and run through their launchers
// (runtime/src/cuda/ops/TransformerOps.cpp) with an emulated StepContext, against
// straightforward double-precision references written here. This checks the templates'
// arithmetic, bounds and the launchers' argument order without a GPU; the f16 conversions
// (inline PTX) are covered by NVRTC and ptxas instead (KernelGenTest, codegen-ptxas).
#include "codegen/kernels/KernelRules.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include "HostCuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <optional>

namespace dsc::codegen {
namespace {

#include "codegen/kernels/dsc_common.cuh"

using Ptr = unsigned long long;

// One host build per specialisation: a namespace, the template's entry renamed, and an
// adapter from cuLaunchKernel-style arguments (the template's parameter order).
// The embedding template's specialisations: bf16 rows of 8 with i64 ids, plain and scaled
// by 2.5 as they are gathered (SCALE_BITS 0x40200000: Gemma's embedding scale).
#define HIDDEN 8
#define TABLE_DT 3
#define ID_DT 5
#define BLOCK 32
#define EMBEDDING_RUN                                                                         \
  void run(void **a) {                                                                        \
    embedding(reinterpret_cast<const void *>(arg<Ptr>(a, 0)),                                 \
              reinterpret_cast<const void *>(arg<Ptr>(a, 1)),                                 \
              reinterpret_cast<float *>(arg<Ptr>(a, 2)), arg<long long>(a, 3),                \
              arg<long long>(a, 4), arg<long long>(a, 5), arg<long long>(a, 6));              \
  }
namespace embedding_bf16 {
#define embedding embedding_bf16_host
#include "codegen/kernels/embedding.cuh"
EMBEDDING_RUN
#undef embedding
#undef EMBEDDING_SCALED
} // namespace embedding_bf16
namespace embedding_scaled {
#define SCALE_BITS 1075838976
#define embedding embedding_scaled_host
#include "codegen/kernels/embedding.cuh"
EMBEDDING_RUN
#undef embedding
#undef SCALE_BITS
#undef EMBEDDING_SCALED
} // namespace embedding_scaled
#undef EMBEDDING_RUN
#undef HIDDEN
#undef TABLE_DT
#undef ID_DT
#undef BLOCK

namespace layer_norm_residual {
#define HIDDEN 100
#define SCALE_DT 3
#define BIAS_DT 1
#define RESIDUAL 1
#define BLOCK 32
#define layer_norm layer_norm_residual_host
#include "codegen/kernels/layer_norm.cuh"
void run(void **a) {
  layer_norm(reinterpret_cast<const float *>(arg<Ptr>(a, 0)),
             reinterpret_cast<const void *>(arg<Ptr>(a, 1)),
             reinterpret_cast<const void *>(arg<Ptr>(a, 2)),
             reinterpret_cast<const float *>(arg<Ptr>(a, 3)),
             reinterpret_cast<float *>(arg<Ptr>(a, 4)), reinterpret_cast<float *>(arg<Ptr>(a, 5)),
             arg<long long>(a, 6), arg<float>(a, 7));
}
#undef layer_norm
#undef HIDDEN
#undef SCALE_DT
#undef BIAS_DT
#undef RESIDUAL
#undef BLOCK
#undef OUT_DT
} // namespace layer_norm_residual

// rms_norm's parameters, in the template's order, from cuLaunchKernel-style arguments.
using RmsNormEntry = void (*)(const float *, const void *, const float *, void *, float *,
                              long long, float);
void runRmsNorm(RmsNormEntry entry, void **a) {
  entry(reinterpret_cast<const float *>(arg<Ptr>(a, 0)),
        reinterpret_cast<const void *>(arg<Ptr>(a, 1)),
        reinterpret_cast<const float *>(arg<Ptr>(a, 2)), reinterpret_cast<void *>(arg<Ptr>(a, 3)),
        reinterpret_cast<float *>(arg<Ptr>(a, 4)), arg<long long>(a, 5), arg<float>(a, 6));
}

namespace rms_norm_plain {
#define HIDDEN 70
#define SCALE_DT 1
#define RESIDUAL 0
#define BLOCK 64
#define rms_norm rms_norm_plain_host
#include "codegen/kernels/rms_norm.cuh"
void run(void **a) { runRmsNorm(&rms_norm, a); }
#undef rms_norm
#undef HIDDEN
#undef SCALE_DT
#undef RESIDUAL
#undef BLOCK
#undef OUT_DT
} // namespace rms_norm_plain

// A sandwich norm's kernel: post_residual + the norm.
namespace rms_norm_post {
#define HIDDEN 70
#define SCALE_DT 1
#define RESIDUAL 0
#define BLOCK 32
#define POST_RESIDUAL 1
#define rms_norm rms_norm_post_host
#include "codegen/kernels/rms_norm.cuh"
void run(void **a) { runRmsNorm(&rms_norm, a); }
#undef rms_norm
#undef HIDDEN
#undef SCALE_DT
#undef RESIDUAL
#undef BLOCK
#undef POST_RESIDUAL
#undef RMS_PER_THREAD
#undef OUT_DT
} // namespace rms_norm_post

namespace gated_gelu {
#define ACT 0
#define GATED 1
#define activation gated_gelu_host
#include "codegen/kernels/activation.cuh"
void run(void **a) {
  activation(reinterpret_cast<const float *>(arg<Ptr>(a, 0)),
             reinterpret_cast<const float *>(arg<Ptr>(a, 1)),
             reinterpret_cast<float *>(arg<Ptr>(a, 2)), arg<long long>(a, 3),
             arg<long long>(a, 4));
}
#undef activation
#undef ACT
#undef GATED
} // namespace gated_gelu

namespace residual {
#define residual_add residual_add_host
#include "codegen/kernels/residual_add.cuh"
void run(void **a) {
  residual_add(reinterpret_cast<const float *>(arg<Ptr>(a, 0)),
               reinterpret_cast<const float *>(arg<Ptr>(a, 1)),
               reinterpret_cast<float *>(arg<Ptr>(a, 2)), arg<long long>(a, 3));
}
#undef residual_add
} // namespace residual

// ---- a StepContext over host memory -----------------------------------------------------

using dsrt::DType;
using dsrt::Status;
namespace cuda = dsrt::cuda;

Ptr address(const void *data) { return reinterpret_cast<Ptr>(data); }

// Slot 0 of `context` runs `run`, the host build of `spec`; the kernels synchronise (the
// norms' block reductions), so a block's threads run together.
void use(HostStepContext &context, const KernelSpec &spec, void (*run)(void **)) {
  registerHostKernel(spec.name(), run, /*cooperative=*/true);
  context.specs = {spec};
}

} // namespace
} // namespace dsc::codegen

namespace dsrt::cuda {
void addTransformerGpuOps(std::vector<GpuOpInfo> &ops);
}

namespace dsc::codegen {
namespace {

cuda::GpuOpFn launcher(const std::string &op) {
  std::vector<cuda::GpuOpInfo> ops;
  dsrt::cuda::addTransformerGpuOps(ops);
  for (const auto &entry : ops)
    if (op == entry.op)
      return entry.run;
  return nullptr;
}

cuda::DeviceTensor tensor(DType dtype, dsrt::Shape shape, const void *data) {
  cuda::DeviceTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = address(data);
  return t;
}

// bf16 bits of `value` truncated (exactly representable values are used, so any rounding
// mode gives the same bits), and back.
uint16_t bf16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<uint16_t>(bits >> 16);
}
float bf16Value(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// Deterministic values in [-2, 2) that are exact in bf16 (8 significant bits).
float sample(int i, int salt) {
  int v = (i * 37 + salt * 101) % 256;
  return static_cast<float>(v - 128) / 64.0f;
}

TEST(TransformerKernels, EmbeddingGathersBf16RowsAndZeroesOtherRanksIds) {
  const int rows = 5, hidden = 8;
  std::vector<uint16_t> table(rows * hidden);
  for (int i = 0; i < rows * hidden; ++i)
    table[i] = bf16Bits(sample(i, 1));
  // This rank holds ids [10, 15) of a 20-token vocabulary; the rest are other ranks' or
  // outside the vocabulary.
  std::vector<int64_t> ids = {10, 14, 3, 12, 15, -1, 25};
  std::vector<float> out(ids.size() * hidden, 99.0f);
  HostStepContext context;
  context.opName = "tfm.embedding";
  context.attributes["vocab_offset"] = dsrt::ops::Attr::ofInt(10);
  context.attributes["vocab_size"] = dsrt::ops::Attr::ofInt(20);
  context.inputs = {tensor(DType::I64, {1, static_cast<int64_t>(ids.size())}, ids.data()),
                    tensor(DType::BF16, {rows, hidden}, table.data())};
  context.outputs = {tensor(DType::F32, {1, static_cast<int64_t>(ids.size()), hidden}, out.data())};
  use(context,
      {"embedding", {{"HIDDEN", 8}, {"TABLE_DT", 3}, {"ID_DT", 5}, {"BLOCK", 32}}},
      embedding_bf16::run);
  Status status = launcher("tfm.embedding")(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(context.launches, 1);
  for (size_t t = 0; t < ids.size(); ++t) {
    int64_t local = ids[t] - 10;
    bool mine = ids[t] >= 0 && ids[t] < 20 && local >= 0 && local < rows;
    for (int h = 0; h < hidden; ++h) {
      float expected = mine ? bf16Value(table[local * hidden + h]) : 0.0f;
      EXPECT_EQ(out[t * hidden + h], expected) << "token " << t << " feature " << h;
    }
  }
}

// A step's `scale` is the kernel's SCALE_BITS: each gathered row times 2.5, which a bf16
// value of [-2, 2) times 2.5 gives exactly in f32; a kernel generated without it (or with
// another) is refused.
TEST(TransformerKernels, EmbeddingScalesTheRowsItGathers) {
  const int rows = 5, hidden = 8;
  std::vector<uint16_t> table(rows * hidden);
  for (int i = 0; i < rows * hidden; ++i)
    table[i] = bf16Bits(sample(i, 3));
  std::vector<int64_t> ids = {4, 0, 2};
  std::vector<float> out(ids.size() * hidden, 99.0f);
  HostStepContext context;
  context.opName = "tfm.embedding";
  context.attributes["scale"] = dsrt::ops::Attr::ofFloat(2.5f);
  context.inputs = {tensor(DType::I64, {1, static_cast<int64_t>(ids.size())}, ids.data()),
                    tensor(DType::BF16, {rows, hidden}, table.data())};
  context.outputs = {tensor(DType::F32, {1, static_cast<int64_t>(ids.size()), hidden}, out.data())};
  use(context,
      {"embedding",
       {{"HIDDEN", 8}, {"TABLE_DT", 3}, {"ID_DT", 5}, {"BLOCK", 32}, {"SCALE_BITS", 1075838976}}},
      embedding_scaled::run);
  Status status = launcher("tfm.embedding")(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  for (size_t t = 0; t < ids.size(); ++t)
    for (int h = 0; h < hidden; ++h)
      EXPECT_EQ(out[t * hidden + h], 2.5f * bf16Value(table[ids[t] * hidden + h]))
          << "token " << t << " feature " << h;
  context.attributes["scale"] = dsrt::ops::Attr::ofFloat(3.0f);
  EXPECT_FALSE(launcher("tfm.embedding")(context).isOk());
}

// Tolerance of the norms: f32 accumulation over at most 100 values of magnitude <= 4,
// against a double reference; 1e-5 relative plus 1e-5 absolute.
void expectClose(float actual, double expected, const std::string &where) {
  EXPECT_NEAR(actual, expected, 1e-5 + 1e-5 * std::fabs(expected)) << where;
}

TEST(TransformerKernels, LayerNormWithResidualBf16ScaleAndF32Bias) {
  const int rows = 3, hidden = 100;
  std::vector<float> x(rows * hidden), r(rows * hidden), bias(hidden);
  std::vector<uint16_t> scale(hidden);
  for (int i = 0; i < rows * hidden; ++i) {
    x[i] = sample(i, 2) + (i / hidden) * 0.5f;  // rows with different means
    r[i] = sample(i, 3);
  }
  for (int i = 0; i < hidden; ++i) {
    scale[i] = bf16Bits(sample(i, 4));
    bias[i] = sample(i, 5) / 8.0f;
  }
  std::vector<float> y(rows * hidden, 99.0f), sum(rows * hidden, 99.0f);
  HostStepContext context;
  context.opName = "tfm.layer_norm";
  context.attributes["epsilon"] = dsrt::ops::Attr::ofFloat(1e-5f);
  context.inputs = {tensor(DType::F32, {rows, hidden}, x.data()),
                    tensor(DType::BF16, {hidden}, scale.data()),
                    tensor(DType::F32, {hidden}, bias.data()),
                    tensor(DType::F32, {rows, hidden}, r.data())};
  context.outputs = {tensor(DType::F32, {rows, hidden}, y.data()),
                     tensor(DType::F32, {rows, hidden}, sum.data())};
  use(context,
      {"layer_norm",
       {{"HIDDEN", 100}, {"SCALE_DT", 3}, {"BIAS_DT", 1}, {"RESIDUAL", 1}, {"BLOCK", 32}}},
      layer_norm_residual::run);
  Status status = launcher("tfm.layer_norm")(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  for (int row = 0; row < rows; ++row) {
    double mean = 0, variance = 0;
    for (int i = 0; i < hidden; ++i)
      mean += double(x[row * hidden + i]) + r[row * hidden + i];
    mean /= hidden;
    for (int i = 0; i < hidden; ++i) {
      double d = double(x[row * hidden + i]) + r[row * hidden + i] - mean;
      variance += d * d;
    }
    variance /= hidden;
    for (int i = 0; i < hidden; ++i) {
      int at = row * hidden + i;
      double v = double(x[at]) + r[at];
      EXPECT_EQ(sum[at], x[at] + r[at]) << "sum " << at;
      double expected = (v - mean) / std::sqrt(variance + 1e-5) * bf16Value(scale[i]) + bias[i];
      expectClose(y[at], expected, "row " + std::to_string(row) + " feature " + std::to_string(i));
    }
  }
}

TEST(TransformerKernels, RmsNormWithoutResidual) {
  const int rows = 4, hidden = 70;
  std::vector<float> x(rows * hidden), scale(hidden), y(rows * hidden, 99.0f);
  for (int i = 0; i < rows * hidden; ++i)
    x[i] = sample(i, 6) * (1 + i / hidden);
  for (int i = 0; i < hidden; ++i)
    scale[i] = 1.0f + sample(i, 7) / 4.0f;
  HostStepContext context;
  context.opName = "tfm.rms_norm";  // epsilon absent: the default 1e-6, as on the CPU
  context.inputs = {tensor(DType::F32, {2, 2, hidden}, x.data()),
                    tensor(DType::F32, {hidden}, scale.data())};
  context.outputs = {tensor(DType::F32, {2, 2, hidden}, y.data())};
  use(context,
      {"rms_norm", {{"HIDDEN", 70}, {"SCALE_DT", 1}, {"RESIDUAL", 0}, {"BLOCK", 64}}},
      rms_norm_plain::run);
  Status status = launcher("tfm.rms_norm")(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(context.launches, 1);
  for (int row = 0; row < rows; ++row) {
    double squares = 0;
    for (int i = 0; i < hidden; ++i)
      squares += double(x[row * hidden + i]) * x[row * hidden + i];
    double inverse = 1.0 / std::sqrt(squares / hidden + 1e-6);
    for (int i = 0; i < hidden; ++i)
      expectClose(y[row * hidden + i], x[row * hidden + i] * inverse * scale[i],
                  "row " + std::to_string(row) + " feature " + std::to_string(i));
  }
}

// Gemma's sandwich norm (post_residual, input 3): the residual stream plus the norm of the
// sublayer's output, with 3 features per thread. The norm is rounded to f32 before the add,
// as the unfused norm stores it; same tolerance as the plain norm's.
TEST(TransformerKernels, RmsNormAddsItsPostResidual) {
  const int rows = 3, hidden = 70;
  std::vector<float> x(rows * hidden), scale(hidden), stream(rows * hidden),
      y(rows * hidden, 99.0f);
  for (int i = 0; i < rows * hidden; ++i) {
    x[i] = sample(i, 6) * (1 + i / hidden);
    stream[i] = sample(i, 8) * 3;
  }
  for (int i = 0; i < hidden; ++i)
    scale[i] = 1.0f + sample(i, 7) / 4.0f;
  HostStepContext context;
  context.opName = "tfm.rms_norm";
  context.inputs = {tensor(DType::F32, {rows, hidden}, x.data()),
                    tensor(DType::F32, {hidden}, scale.data()), std::nullopt,
                    tensor(DType::F32, {rows, hidden}, stream.data())};
  context.outputs = {tensor(DType::F32, {rows, hidden}, y.data())};
  const KernelSpec spec{"rms_norm", {{"HIDDEN", 70}, {"SCALE_DT", 1}, {"RESIDUAL", 0},
                                     {"BLOCK", 32}, {"POST_RESIDUAL", 1}}};
  use(context, spec, rms_norm_post::run);
  Status status = launcher("tfm.rms_norm")(context);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(context.launches, 1);
  for (int row = 0; row < rows; ++row) {
    double squares = 0;
    for (int i = 0; i < hidden; ++i)
      squares += double(x[row * hidden + i]) * x[row * hidden + i];
    double inverse = 1.0 / std::sqrt(squares / hidden + 1e-6);
    for (int i = 0; i < hidden; ++i)
      expectClose(y[row * hidden + i],
                  stream[row * hidden + i] + x[row * hidden + i] * inverse * scale[i],
                  "row " + std::to_string(row) + " feature " + std::to_string(i));
  }
  // The kernel of a plain norm would drop the residual stream: refused, nothing launched.
  HostStepContext plain = context;
  plain.launches = 0;
  use(plain, {"rms_norm", {{"HIDDEN", 70}, {"SCALE_DT", 1}, {"RESIDUAL", 0}, {"BLOCK", 64}}},
      rms_norm_plain::run);
  status = launcher("tfm.rms_norm")(plain);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("post_residual"), std::string::npos) << status.message();
  EXPECT_EQ(plain.launches, 0);
}

TEST(TransformerKernels, LaunchersRefuseAKernelOfAnotherHiddenSize) {
  std::vector<float> x(2 * 64), scale(64), y(2 * 64);
  HostStepContext context;
  context.opName = "tfm.rms_norm";
  context.inputs = {tensor(DType::F32, {2, 64}, x.data()), tensor(DType::F32, {64}, scale.data())};
  context.outputs = {tensor(DType::F32, {2, 64}, y.data())};
  use(context,
      {"rms_norm", {{"HIDDEN", 70}, {"SCALE_DT", 1}, {"RESIDUAL", 0}, {"BLOCK", 64}}},
      rms_norm_plain::run);
  Status status = launcher("tfm.rms_norm")(context);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("hidden size 70, not 64"), std::string::npos)
      << status.message();
  EXPECT_EQ(context.launches, 0);
}

// Tolerance of the activations: f32 math against double, 1e-6 relative plus 1e-6 absolute.
double geluErf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(TransformerKernels, GatedGeluOnTheVectorAndScalarPaths) {
  // 16 values take the four-at-a-time path; 13 the scalar one.
  for (int count : {16, 13}) {
    std::vector<float> a(count), b(count), y(count, 99.0f);
    for (int i = 0; i < count; ++i) {
      a[i] = sample(i, 8) * 2;
      b[i] = sample(i, 9);
    }
    HostStepContext context;
    context.opName = "tfm.gated_act";
    context.attributes["kind"] = dsrt::ops::Attr::ofString("gelu_erf");
    context.inputs = {tensor(DType::F32, {count}, a.data()), tensor(DType::F32, {count}, b.data())};
    context.outputs = {tensor(DType::F32, {count}, y.data())};
    use(context, {"activation", {{"ACT", 0}, {"GATED", 1}}}, gated_gelu::run);
    Status status = launcher("tfm.gated_act")(context);
    ASSERT_TRUE(status.isOk()) << status.message();
    for (int i = 0; i < count; ++i) {
      double expected = geluErf(a[i]) * b[i];
      EXPECT_NEAR(y[i], expected, 1e-6 + 1e-6 * std::fabs(expected)) << count << ": " << i;
    }
  }
}

// The joined gate-up form: rows of [gate | up]. Halves of 8 take the vector path, of 6 the
// scalar one (a row of 6 is not a whole number of 16-byte groups); 3 rows each.
TEST(TransformerKernels, PackedGatedGeluReadsEachRowsHalves) {
  for (int half : {8, 6}) {
    const int rows = 3;
    std::vector<float> x(rows * 2 * half), y(rows * half, 99.0f);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = sample(static_cast<int>(i), 12) * 2;
    HostStepContext context;
    context.opName = "tfm.gated_act_packed";
    context.attributes["kind"] = dsrt::ops::Attr::ofString("gelu_erf");
    context.inputs = {tensor(DType::F32, {rows, 2 * half}, x.data())};
    context.outputs = {tensor(DType::F32, {rows, half}, y.data())};
    use(context, {"activation", {{"ACT", 0}, {"GATED", 1}}}, gated_gelu::run);
    Status status = launcher("tfm.gated_act_packed")(context);
    ASSERT_TRUE(status.isOk()) << status.message();
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < half; ++i) {
        double expected = geluErf(x[r * 2 * half + i]) * x[r * 2 * half + half + i];
        EXPECT_NEAR(y[r * half + i], expected, 1e-6 + 1e-6 * std::fabs(expected))
            << half << ": row " << r << ", " << i;
      }
  }
  // An odd joined width has no halves.
  std::vector<float> x(2 * 7), y(7);
  HostStepContext context;
  context.opName = "tfm.gated_act_packed";
  context.attributes["kind"] = dsrt::ops::Attr::ofString("gelu_erf");
  context.inputs = {tensor(DType::F32, {2, 7}, x.data())};
  context.outputs = {tensor(DType::F32, {2, 3}, y.data())};
  use(context, {"activation", {{"ACT", 0}, {"GATED", 1}}}, gated_gelu::run);
  EXPECT_FALSE(launcher("tfm.gated_act_packed")(context).isOk());
  EXPECT_EQ(context.launches, 0);
}

TEST(TransformerKernels, ResidualAddIsExact) {
  for (int count : {1024 + 4, 1027}) {  // more than one block's worth, both paths
    std::vector<float> a(count), b(count), y(count, 99.0f);
    for (int i = 0; i < count; ++i) {
      a[i] = sample(i, 10);
      b[i] = sample(i, 11) / 3.0f;
    }
    HostStepContext context;
    context.opName = "tfm.residual_add";
    context.inputs = {tensor(DType::F32, {count}, a.data()), tensor(DType::F32, {count}, b.data())};
    context.outputs = {tensor(DType::F32, {count}, y.data())};
    use(context, {"residual_add", {}}, residual::run);
    Status status = launcher("tfm.residual_add")(context);
    ASSERT_TRUE(status.isOk()) << status.message();
    for (int i = 0; i < count; ++i)
      ASSERT_EQ(y[i], a[i] + b[i]) << count << ": " << i;
  }
}

} // namespace
} // namespace dsc::codegen
