// Broadcasting ops with two or more inputs: arithmetic, Pow, Mod, Max/Min, comparisons,
// logic, Where.
#include "ops/Kernel.h"
#include "ops/Strided.h"
#include "ops/TypeDispatch.h"

#include <cmath>

namespace dsrt::ops {
namespace {

bool isOneOf(std::string_view op, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names)
    if (op == name)
      return true;
  return false;
}

bool isComparison(std::string_view op) {
  return isOneOf(op, {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"});
}

Status broadcastInputs(const KernelContext &ctx, Shape &out) {
  out.clear();
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!broadcastShapes(out, ctx.input(i)->shape, out))
      return ctx.error("input shapes do not broadcast: ", shapeString(ctx.input(0)->shape),
                       " and ", shapeString(ctx.input(i)->shape));
  }
  return Status::ok();
}

Status inferBinary(const KernelContext &ctx, std::vector<OutputSpec> &outputs) {
  std::string_view op = ctx.op;
  DType result = ctx.input(0)->dtype;
  if (op == "And" || op == "Or") {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "A", maskOf({DType::Bool})));
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "B", maskOf({DType::Bool})));
  } else if (op == "Where") {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "condition", maskOf({DType::Bool})));
    DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 1, 2));
    result = ctx.input(1)->dtype;
  } else if (op == "Pow") {
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 0, "X", kNumericTypes));
    DSRT_RETURN_IF_ERROR(checkDType(ctx, 1, "Y", kNumericTypes));
  } else {
    DSRT_RETURN_IF_ERROR(
        checkDType(ctx, 0, "A", op == "Equal" ? kAllTypes : kNumericTypes));
    for (size_t i = 1; i < ctx.inputs.size(); ++i)
      DSRT_RETURN_IF_ERROR(checkSameDType(ctx, 0, i));
  }
  if (isComparison(op))
    result = DType::Bool;
  Shape shape;
  DSRT_RETURN_IF_ERROR(broadcastInputs(ctx, shape));
  outputs.push_back({result, shape});
  return Status::ok();
}

// out[i] = fn(a[ia], b[ib]) over the broadcast shape, with fast paths for the common
// same-shape and scalar cases.
template <typename A, typename B, typename Out, typename Fn>
void binaryMap(const TensorRef &a, const TensorRef &b, const TensorRef &out, Fn fn) {
  const A *pa = a.as<A>();
  const B *pb = b.as<B>();
  Out *po = out.as<Out>();
  int64_t n = out.elements();
  if (a.shape == out.shape && b.shape == out.shape) {
    for (int64_t i = 0; i < n; ++i)
      po[i] = fn(pa[i], pb[i]);
  } else if (a.shape == out.shape && b.elements() == 1) {
    for (int64_t i = 0; i < n; ++i)
      po[i] = fn(pa[i], pb[0]);
  } else {
    forEachBroadcast<2>(out.shape, {&a.shape, &b.shape},
                        [&](int64_t i, const std::array<int64_t, 2> &at) {
                          po[i] = fn(pa[at[0]], pb[at[1]]);
                        });
  }
}

template <typename T> bool anyZero(const TensorRef &t) {
  const T *p = t.as<T>();
  for (int64_t i = 0, n = t.elements(); i < n; ++i)
    if (p[i] == T(0))
      return true;
  return false;
}

template <typename C> C integerDivide(C a, C b) {
  if constexpr (std::is_signed_v<C>)
    if (b == C(-1))
      return wrapSub(C(0), a);  // min / -1 overflows
  return a / b;
}

// Python's % (sign of the divisor) or C's fmod (sign of the dividend).
template <typename C> C remainder(C a, C b, bool cStyle) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    if (!cStyle) {
      if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
      else if (r == 0)
        r = std::copysign(C(0), b);
    }
    return r;
  } else {
    if constexpr (std::is_signed_v<C>)
      if (b == C(-1))
        return 0;  // min % -1 overflows
    C r = a % b;
    if constexpr (std::is_signed_v<C>)
      if (!cStyle && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
  }
}

// Max and Min over any number of inputs: numpy's maximum/minimum, where NaN wins.
template <typename T> Status computeExtreme(const KernelContext &ctx, const TensorRef &out) {
  using C = ComputeType<T>;
  bool isMax = ctx.op == "Max";
  auto pick = [isMax](C x, C y) {
    if (x != x)
      return x;
    if (y != y)
      return y;
    return (isMax ? x < y : y < x) ? y : x;
  };
  T *po = out.as<T>();
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const TensorRef &next = *ctx.input(k);
    const T *pn = next.as<T>();
    forEachBroadcast<1>(out.shape, {&next.shape},
                        [&](int64_t i, const std::array<int64_t, 1> &at) {
                          po[i] = k == 0 ? pn[at[0]]
                                         : store<T>(pick(load(po[i]), load(pn[at[0]])));
                        });
  }
  return Status::ok();
}

template <typename T> Status computeArithmetic(const KernelContext &ctx, const TensorRef &out) {
  using C = ComputeType<T>;
  const TensorRef &a = *ctx.input(0), &b = *ctx.input(1);
  std::string_view op = ctx.op;
  auto run = [&](auto fn) {
    binaryMap<T, T, T>(a, b, out, [&](T x, T y) { return store<T>(fn(load(x), load(y))); });
    return Status::ok();
  };
  if (op == "Add") return run([](C x, C y) { return wrapAdd(x, y); });
  if (op == "Sub") return run([](C x, C y) { return wrapSub(x, y); });
  if (op == "Mul") return run([](C x, C y) { return wrapMul(x, y); });
  if constexpr (kIsInt<T>)
    if ((op == "Div" || op == "Mod") && anyZero<T>(b))
      return ctx.error("integer division by zero");
  if (op == "Div") {
    if constexpr (kIsInt<T>)
      return run([](C x, C y) { return integerDivide(x, y); });
    else
      return run([](C x, C y) { return x / y; });
  }
  if (op == "Mod") {
    int64_t fmod;
    DSRT_RETURN_IF_ERROR(intAttr(ctx, "fmod", 0, fmod));
    return run([&](C x, C y) { return remainder(x, y, fmod != 0); });
  }
  if (isComparison(op)) {
    auto compare = [&](auto predicate) {
      binaryMap<T, T, BoolByte>(a, b, out, [&](T x, T y) {
        return BoolByte{static_cast<uint8_t>(predicate(load(x), load(y)) ? 1 : 0)};
      });
      return Status::ok();
    };
    if (op == "Equal") return compare([](C x, C y) { return x == y; });
    if (op == "Less") return compare([](C x, C y) { return x < y; });
    if (op == "Greater") return compare([](C x, C y) { return x > y; });
    if (op == "LessOrEqual") return compare([](C x, C y) { return x <= y; });
    return compare([](C x, C y) { return x >= y; });
  }
  return ctx.error("no kernel for dtype ", dtypeName(a.dtype));
}

// Integer powers by repeated squaring, wrapping like the other integer ops.
template <typename C> C integerPower(C base, int64_t exponent) {
  if (exponent < 0) {
    // Only 1 and -1 have integral reciprocal powers; the rest truncate to 0.
    if (base == C(1))
      return 1;
    if constexpr (std::is_signed_v<C>)
      if (base == C(-1))
        return (exponent & 1) ? C(-1) : C(1);
    return 0;
  }
  C result = 1;
  for (; exponent; exponent >>= 1) {
    if (exponent & 1)
      result = wrapMul(result, base);
    base = wrapMul(base, base);
  }
  return result;
}

Status computePow(const KernelContext &ctx, const Outputs &outputs) {
  const TensorRef &x = *ctx.input(0), &y = *ctx.input(1);
  return visitDType(x.dtype, [&](auto xTag) -> Status {
    using X = decltype(xTag);
    return visitDType(y.dtype, [&](auto yTag) -> Status {
      using Y = decltype(yTag);
      if constexpr (kIsBool<X> || kIsBool<Y>) {
        return ctx.error("no kernel for bool");
      } else {
        binaryMap<X, Y, X>(x, y, *outputs[0], [](X base, Y exponent) {
          auto b = load(base);
          auto e = load(exponent);
          if constexpr (kIsInt<X> && kIsInt<Y>)
            return integerPower(b, static_cast<int64_t>(e));
          else if constexpr (kIsInt<X>)
            return saturatingFloatToInt<X>(std::pow(double(b), double(e)));
          else
            return store<X>(static_cast<ComputeType<X>>(std::pow(double(b), double(e))));
        });
        return Status::ok();
      }
    });
  });
}

Status computeBinary(const KernelContext &ctx, const Outputs &outputs) {
  std::string_view op = ctx.op;
  const TensorRef &out = *outputs[0];
  if (op == "Pow")
    return computePow(ctx, outputs);
  if (op == "And" || op == "Or" || op == "Where") {
    const TensorRef &a = *ctx.input(0), &b = *ctx.input(1);
    if (op == "And" || op == "Or") {
      bool isAnd = op == "And";
      binaryMap<BoolByte, BoolByte, BoolByte>(a, b, out, [isAnd](BoolByte x, BoolByte y) {
        bool result = isAnd ? (x.byte && y.byte) : (x.byte || y.byte);
        return BoolByte{static_cast<uint8_t>(result ? 1 : 0)};
      });
      return Status::ok();
    }
    const TensorRef &c = *ctx.input(2);
    visitElementSize(dtypeSize(out.dtype), [&](auto tag) {
      using E = decltype(tag);
      const uint8_t *cond = a.as<uint8_t>();
      const E *px = b.as<E>(), *py = c.as<E>();
      E *po = out.as<E>();
      forEachBroadcast<3>(out.shape, {&a.shape, &b.shape, &c.shape},
                          [&](int64_t i, const std::array<int64_t, 3> &at) {
                            po[i] = cond[at[0]] ? px[at[1]] : py[at[2]];
                          });
    });
    return Status::ok();
  }
  return visitDType(ctx.input(0)->dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (kIsBool<T>) {
      if (op == "Equal") {
        binaryMap<T, T, BoolByte>(*ctx.input(0), *ctx.input(1), out, [](T x, T y) {
          return BoolByte{static_cast<uint8_t>(load(x) == load(y) ? 1 : 0)};
        });
        return Status::ok();
      }
      return ctx.error("no kernel for bool");
    } else if (op == "Max" || op == "Min") {
      return computeExtreme<T>(ctx, out);
    } else {
      return computeArithmetic<T>(ctx, out);
    }
  });
}

} // namespace

void addBinaryKernels(std::vector<KernelInfo> &kernels) {
  for (const char *name : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater",
                           "LessOrEqual", "GreaterOrEqual", "And", "Or"})
    kernels.push_back({name, 2, 2, 2, 1, 1, inferBinary, computeBinary});
  for (const char *name : {"Max", "Min"})
    kernels.push_back({name, 1, kAnyCount, kAnyCount, 1, 1, inferBinary, computeBinary});
  kernels.push_back({"Where", 3, 3, 3, 1, 1, inferBinary, computeBinary});
}

} // namespace dsrt::ops
