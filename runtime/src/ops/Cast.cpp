// Cast and CastLike: conversion between any two dtypes (see convertElement for the rules).
#include "ops/Kernel.h"
#include "ops/TypeDispatch.h"

#include <cstring>

namespace dsrt::ops {
namespace {

Status targetDType(const KernelContext &ctx, DType &out) {
  if (ctx.op == "CastLike") {
    out = ctx.input(1)->dtype;
    return Status::ok();
  }
  auto it = ctx.attrs.find("to");
  if (it == ctx.attrs.end())
    return ctx.error("attribute 'to' is required");
  if (it->second.kind != Attr::Kind::Type)
    return ctx.error("attribute 'to' must be a type");
  out = it->second.type;
  if (dtypeSize(out) == 0)
    return ctx.error("cannot cast to ", dtypeName(out));
  return Status::ok();
}

Status inferCast(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  DType to = DType::Undefined;
  DSRT_RETURN_IF_ERROR(targetDType(ctx, to));
  outputs.push_back({to, ctx.input(0)->shape});
  return Status::ok();
}

Status computeCast(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &in = *ctx.input(0);
  const TensorRef &out = *outputs[0];
  if (in.dtype == out.dtype) {
    // dsc-plan-memory gives an identity Cast its input's arena slot: nothing to copy.
    if (in.bytes() > 0 && out.data != in.data)
      std::memcpy(out.data, in.data, in.bytes());
    return Status::ok();
  }
  return visitDType(in.dtype, [&](auto fromTag) -> Status {
    using From = decltype(fromTag);
    return visitDType(out.dtype, [&](auto toTag) -> Status {
      using To = decltype(toTag);
      const From *src = in.as<From>();
      To *dst = out.as<To>();
      for (int64_t i = 0, n = in.elements(); i < n; ++i)
        dst[i] = convertElement<To>(src[i]);
      return Status::ok();
    });
  });
}

} // namespace

void addCastKernels(std::vector<KernelInfo> &kernels) {
  kernels.push_back({"Cast", 1, 1, 1, 1, 1, inferCast, computeCast});
  kernels.push_back({"CastLike", 2, 2, 2, 1, 1, inferCast, computeCast});
}

} // namespace dsrt::ops
