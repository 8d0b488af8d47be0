// The round trip of GenericKernelsTest.cpp (its only includer): the generic_* templates
// compiled for the host (GenericHostKernels.inc, the specialisations in
// GenericHostSpecs.inc), a one-step plan through its rule, the launcher with its own grid
// and arguments on a HostStepContext, and the result against the host reference.
#ifndef DSC_TEST_CODEGEN_GENERICROUNDTRIP_H
#define DSC_TEST_CODEGEN_GENERICROUNDTRIP_H

#include "codegen/AttachKernels.h"
#include "codegen/kernels/KernelRules.h"
#include "cuda/GpuOps.h"
#include "ops/Ops.h"

#include "HostCuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>

// ---- the host build of the templates --------------------------------------------------------

namespace dsc::codegen {
namespace {

#define HOST_KIND_COPY 1
#define HOST_KIND_BINARY 2
#define HOST_KIND_WHERE 3
#define HOST_KIND_GATHER 4
#define HOST_KIND_UNARY 5
#define HOST_KIND_CAST 6
#define HOST_KIND_CUMSUM 7
#define HOST_KIND_REDUCE 8
#define HOST_KIND_SOFTMAX 9
#define HOST_KIND_MATMUL 10
#define HOST_KIND_GATHER_ND 11
#define HOST_KIND_GATHER_ELEMENTS 12
#define HOST_KIND_SPLIT 13
#define HOST_KIND_TOPK 14
#define HOST_KIND_ONEHOT 15

// The specialisations the round trips below use (a missing one fails its test by name).
#include "GenericHostSpecs.inc"

#undef __global__
#undef __device__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__

// ---- a StepContext over host memory ----------------------------------------------------------

using dsrt::DType;
using dsrt::OwnedTensor;
using dsrt::Shape;
using dsrt::Status;
using dsrt::TensorRef;
namespace cuda = dsrt::cuda;

cuda::GpuOpFn genericLauncher(std::string_view op) {
  static const std::vector<cuda::GpuOpInfo> table = [] {
    std::vector<cuda::GpuOpInfo> ops;
    cuda::addGenericGpuOps(ops);
    return ops;
  }();
  for (const cuda::GpuOpInfo &info : table)
    if (op == info.op)
      return info.run;
  return nullptr;
}

// ---- test tensors and attributes --------------------------------------------------------------

template <typename T> OwnedTensor make(DType dtype, Shape shape, std::vector<T> values) {
  OwnedTensor tensor(dtype, std::move(shape));
  EXPECT_EQ(tensor.storage.size(), values.size() * sizeof(T));
  if (!values.empty())
    std::memcpy(tensor.storage.data(), values.data(), tensor.storage.size());
  return tensor;
}
OwnedTensor f32(Shape shape, std::vector<float> values) {
  return make(DType::F32, std::move(shape), std::move(values));
}
OwnedTensor i64(Shape shape, std::vector<int64_t> values) {
  return make(DType::I64, std::move(shape), std::move(values));
}
OwnedTensor i32(Shape shape, std::vector<int32_t> values) {
  return make(DType::I32, std::move(shape), std::move(values));
}
OwnedTensor boolean(Shape shape, std::vector<uint8_t> values) {
  return make(DType::Bool, std::move(shape), std::move(values));
}
// Deterministic values in [-range, range) with a fractional part.
OwnedTensor ramp(Shape shape, float range = 4.0f) {
  OwnedTensor tensor(DType::F32, std::move(shape));
  float *p = reinterpret_cast<float *>(tensor.storage.data());
  int64_t n = dsrt::elementCount(tensor.shape);
  for (int64_t i = 0; i < n; ++i)
    p[i] = -range + 2 * range * static_cast<float>((i * 37) % 101) / 101.0f + 0.125f;
  return tensor;
}

struct Attribute {
  std::string name;
  dsrt::ops::Attr value;
};
Attribute intAttr(const std::string &name, int64_t v) {
  return {name, dsrt::ops::Attr::ofInt(v)};
}
Attribute intsAttr(const std::string &name, std::vector<int64_t> v) {
  return {name, dsrt::ops::Attr::ofInts(std::move(v))};
}
Attribute stringAttr(const std::string &name, std::string v) {
  return {name, dsrt::ops::Attr::ofString(std::move(v))};
}
Attribute typeAttr(const std::string &name, DType v) {
  return {name, dsrt::ops::Attr::ofType(v)};
}

std::unique_ptr<dsp::AttrT> toPlanAttr(const Attribute &attribute) {
  auto a = std::make_unique<dsp::AttrT>();
  a->name = attribute.name;
  const dsrt::ops::Attr &v = attribute.value;
  switch (v.kind) {
  case dsrt::ops::Attr::Kind::Int: a->kind = dsp::AttrKind::int_; a->i = v.i; break;
  case dsrt::ops::Attr::Kind::Float: a->kind = dsp::AttrKind::float_; a->f = v.f; break;
  case dsrt::ops::Attr::Kind::String: a->kind = dsp::AttrKind::string_; a->s = v.s; break;
  case dsrt::ops::Attr::Kind::Ints: a->kind = dsp::AttrKind::ints; a->ints = v.ints; break;
  case dsrt::ops::Attr::Kind::Type:
    a->kind = dsp::AttrKind::type;
    a->type = static_cast<dsp::DType>(v.type);
    break;
  default: ADD_FAILURE() << "attribute kind not handled"; break;
  }
  return a;
}

// How an input reaches the step: computed on the device (a program input or an activation)
// or a constant the session knows on the host.
enum class Where { Device, Host };
struct Input {
  OwnedTensor tensor;
  Where where = Where::Device;
};
Input host(OwnedTensor tensor) { return {std::move(tensor), Where::Host}; }
Input device(OwnedTensor tensor) { return {std::move(tensor), Where::Device}; }

// Bitwise equality, or within `tolerance` (relative to max(1, |reference|)) for f32.
void expectMatches(const OwnedTensor &got, const OwnedTensor &want, double tolerance,
                   const std::string &what) {
  ASSERT_EQ(got.dtype, want.dtype) << what;
  ASSERT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.storage.size(), want.storage.size()) << what;
  if (tolerance > 0 && got.dtype == DType::F32) {
    const float *g = reinterpret_cast<const float *>(got.storage.data());
    const float *w = reinterpret_cast<const float *>(want.storage.data());
    for (size_t i = 0; i < got.storage.size() / 4; ++i) {
      if (std::isnan(w[i])) {
        EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
        continue;
      }
      EXPECT_LE(std::fabs(double(g[i]) - w[i]), tolerance * std::max(1.0, std::fabs(double(w[i]))))
          << what << " element " << i << ": " << g[i] << " vs " << w[i];
    }
    return;
  }
  size_t size = dsrt::dtypeSize(got.dtype);
  for (size_t i = 0; i < got.storage.size(); i += size)
    if (std::memcmp(got.storage.data() + i, want.storage.data() + i, size) != 0) {
      ADD_FAILURE() << what << ": element " << i / size << " differs from the reference";
      return;
    }
}

// The launches of the last round trip.
int lastLaunches = 0;

// The round trip: rule, launcher, host build of the kernel; the outputs against
// ops::compute. Returns the rule's specs.
std::vector<KernelSpec> roundTrip(const std::string &op, std::vector<Input> inputs,
                                  std::vector<Attribute> attributes, size_t numOutputs = 1,
                                  double tolerance = 0) {
  std::string what = op;
  dsrt::ops::AttrMap attrs;
  for (const Attribute &a : attributes)
    attrs[a.name] = a.value;
  std::vector<TensorRef> refs;
  for (Input &in : inputs)
    refs.push_back(in.tensor.ref());
  dsrt::ops::Inputs inputRefs;
  for (TensorRef &ref : refs)
    inputRefs.push_back(&ref);
  std::vector<dsrt::ops::OutputSpec> outputSpecs;
  Status inferred = dsrt::ops::inferShapes(op, attrs, inputRefs, numOutputs, outputSpecs);
  EXPECT_TRUE(inferred.isOk()) << what << ": " << inferred.message();
  if (!inferred.isOk())
    return {};
  std::vector<OwnedTensor> expected, actual;
  dsrt::ops::Outputs expectedRefs;
  std::vector<TensorRef> expectedViews;
  for (const auto &spec : outputSpecs) {
    expected.emplace_back(spec.dtype, spec.shape);
    // Garbage where the kernel must write, so that a skipped element cannot pass.
    OwnedTensor garbage(spec.dtype, spec.shape);
    std::fill(garbage.storage.begin(), garbage.storage.end(), uint8_t(0xA5));
    actual.push_back(std::move(garbage));
  }
  for (OwnedTensor &t : expected)
    expectedViews.push_back(t.ref());
  for (TensorRef &view : expectedViews)
    expectedRefs.push_back(&view);
  Status computed = dsrt::ops::compute(op, attrs, inputRefs, expectedRefs);
  EXPECT_TRUE(computed.isOk()) << what << ": " << computed.message();

  // The plan: inputs as program inputs or constants, outputs as activations.
  dsp::PlanT plan;
  plan.options = std::make_unique<dsp::CompileOptionsT>();
  plan.options->dtype = "fp32";
  plan.programs.push_back(std::make_unique<dsp::ProgramT>());
  auto addTensor = [&](const OwnedTensor &t, dsp::TensorKind kind) {
    auto tensor = std::make_unique<dsp::TensorT>();
    tensor->dtype = static_cast<dsp::DType>(t.dtype);
    tensor->kind = kind;
    for (int64_t d : t.shape) {
      auto dim = std::make_unique<dsp::DimT>();
      dim->size = d;
      tensor->shape.push_back(std::move(dim));
    }
    if (kind == dsp::TensorKind::constant)
      tensor->constant_data = t.storage;
    plan.tensors.push_back(std::move(tensor));
    return static_cast<int32_t>(plan.tensors.size() - 1);
  };
  auto step = std::make_unique<dsp::StepT>();
  step->op = op;
  for (const Input &in : inputs)
    step->inputs.push_back(addTensor(in.tensor, in.where == Where::Host
                                                    ? dsp::TensorKind::constant
                                                    : dsp::TensorKind::input));
  for (const OwnedTensor &out : expected)
    step->outputs.push_back(addTensor(out, dsp::TensorKind::activation));
  for (const Attribute &a : attributes)
    step->attrs.push_back(toPlanAttr(a));
  const dsp::StepT &planStep = *step;
  plan.programs[0]->steps.push_back(std::move(step));

  std::vector<KernelSpec> specs;
  std::string reason;
  KernelRule rule = findKernelRule(op);
  EXPECT_NE(rule, nullptr) << what;
  if (!rule)
    return {};
  bool accepted = rule(RuleInput(plan, planStep), specs, reason);
  EXPECT_TRUE(accepted) << what << " declined: " << reason;
  if (!accepted)
    return specs;

  HostStepContext context;
  context.opName = op;
  context.attributes = attrs;
  context.specs = specs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    context.inputs.push_back(cuda::DeviceTensor{
        refs[i].dtype, refs[i].shape, reinterpret_cast<cuda::DevicePtr>(refs[i].data)});
    context.hostInputs.push_back(inputs[i].where == Where::Host ? &refs[i] : nullptr);
  }
  for (OwnedTensor &out : actual)
    context.outputs.push_back(cuda::DeviceTensor{
        out.dtype, out.shape, reinterpret_cast<cuda::DevicePtr>(out.storage.data())});
  cuda::GpuOpFn launcher = genericLauncher(op);
  EXPECT_NE(launcher, nullptr) << what;
  if (!launcher)
    return specs;
  Status launched = launcher(context);
  lastLaunches = context.launches;
  EXPECT_TRUE(launched.isOk()) << what << ": " << launched.message();
  bool anyOutput = false;
  for (const OwnedTensor &out : actual)
    anyOutput = anyOutput || !out.storage.empty();
  if (anyOutput) {
    EXPECT_GT(context.launches, 0) << what << " launched nothing";
  }
  for (size_t k = 0; k < actual.size(); ++k)
    expectMatches(actual[k], expected[k], tolerance, what + " output " + std::to_string(k));
  return specs;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

} // namespace
} // namespace dsc::codegen

#endif
