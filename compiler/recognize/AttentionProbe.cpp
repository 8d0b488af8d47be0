// dsc-recognize-attention: the probe's numbers and inputs.
#include "compiler/recognize/AttentionMatch.h"

#include "compiler/evaluate/Evaluator.h"
#include "compiler/lowering/RuntimeTypes.h"
#include "compiler/lowering/SymbolicDims.h"
#include "ops/OpTraits.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dsc::attention {

//===----------------------------------------------------------------------===//
// Numbers.
//===----------------------------------------------------------------------===//

std::vector<float> floats(const dsrt::OwnedTensor &tensor) {
  std::vector<float> out(dsrt::elementCount(tensor.shape));
  // An empty tensor has no storage to copy from (memcpy from null is UB even for 0 bytes;
  // fuzz-onnx-compile found a model whose probe made one).
  if (tensor.dtype == dsrt::DType::F32 && !out.empty() &&
      tensor.storage.size() >= out.size() * sizeof(float))
    std::memcpy(out.data(), tensor.storage.data(), out.size() * sizeof(float));
  else
    out.clear();
  return out;
}

std::vector<int64_t> integers(const dsrt::OwnedTensor &tensor) {
  int64_t n = dsrt::elementCount(tensor.shape);
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (tensor.dtype) {
    case dsrt::DType::I64: out[i] = reinterpret_cast<const int64_t *>(tensor.storage.data())[i]; break;
    case dsrt::DType::I32: out[i] = reinterpret_cast<const int32_t *>(tensor.storage.data())[i]; break;
    case dsrt::DType::Bool:
    case dsrt::DType::U8: out[i] = tensor.storage[i]; break;
    default: return {};
    }
  }
  return out;
}

Value interfaceCastInput(Value output) {
  auto cast = output.getDefiningOp<onnx::CastOp>();
  if (!cast || !llvm::all_of(output.getUsers(), [](Operation *user) {
        return user->hasTrait<OpTrait::IsTerminator>();
      }))
    return Value();
  Type to = cast.getTo(), from = getElementTypeOrSelf(cast.getInput().getType());
  return (to.isF16() || to.isBF16()) && from.isF32() ? cast.getInput() : Value();
}

Value widenedInput(Value input) {
  Type from = getElementTypeOrSelf(input.getType());
  if (!isa<BlockArgument>(input) || !(from.isF16() || from.isBF16()))
    return input;
  onnx::CastOp widened;
  for (Operation *user : input.getUsers()) {
    if (isa<onnx::ShapeOp, onnx::SizeOp>(user))
      continue;  // shape reads stay on the input
    auto cast = dyn_cast<onnx::CastOp>(user);
    if (!cast || !cast.getTo().isF32() || widened)
      return input;
    widened = cast;
  }
  return widened ? Value(widened.getOutput()) : input;
}

std::shared_ptr<dsrt::OwnedTensor> randomTensor(dsrt::Shape shape, uint64_t seed) {
  auto tensor = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, shape);
  float *data = reinterpret_cast<float *>(tensor->storage.data());
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0, n = dsrt::elementCount(shape); i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = float((state >> 40) & 0xFFFFFF) / float(1 << 23) - 1.0f;  // [-1, 1)
  }
  return tensor;
}

std::shared_ptr<dsrt::OwnedTensor> filledTensor(dsrt::Shape shape, float value) {
  auto tensor = std::make_shared<dsrt::OwnedTensor>(dsrt::DType::F32, shape);
  float *data = reinterpret_cast<float *>(tensor->storage.data());
  std::fill(data, data + dsrt::elementCount(shape), value);
  return tensor;
}

bool close(double actual, double expected) {
  return std::abs(actual - expected) <= kTolerance + kTolerance * std::abs(expected);
}

// BLOOM's build_alibi_tensor slopes.
std::vector<double> alibiSlopes(int64_t heads) {
  int64_t power = int64_t(1) << int64_t(std::floor(std::log2(double(heads))));
  double base = std::pow(2.0, -std::pow(2.0, -(std::log2(double(power)) - 3)));
  std::vector<double> slopes;
  for (int64_t i = 1; i <= power; ++i)
    slopes.push_back(std::pow(base, double(i)));
  if (power != heads) {
    double extra = std::pow(2.0, -std::pow(2.0, -(std::log2(double(2 * power)) - 3)));
    int64_t remaining = std::min(power, heads - power);
    for (int64_t i = 0; i < remaining; ++i)
      slopes.push_back(std::pow(extra, double(1 + 2 * i)));
  }
  return slopes;
}




llvm::StringRef argName(func::FuncOp func, unsigned index) {
  auto name = func.getArgAttrOfType<StringAttr>(index, "onnx.name");
  return name ? name.getValue() : "";
}

// Fills the probe's graph inputs: shapes from the symbolic dimensions, values for the
// integer inputs (a left-padded attention mask, positions as transformers' generate
// computes them, token ids), none for float inputs (the past).
LogicalResult setUpProbe(func::FuncOp func, int64_t past, ProbeEvaluator &probe,
                         Value &attentionMask, Value &positionIds, std::string &why,
                         bool lengthen, Value *crossMask) {
  std::vector<int64_t> mask;
  int64_t maskWidth = 0;
  // The padding mask covers the cached and the new tokens whatever its dimension is called
  // (Optimum names it "past_sequence_length + 1").
  InputDims inputDims = InputDims::of(func);
  bool hasPast = inputDims.hasPast();
  // A long probe of a graph without a cache makes the new tokens many instead.
  int64_t fresh = kProbeNew;
  if (lengthen && !hasPast) {
    if (past > 256 - kProbeNew) {
      why = "too long for a graph without a cache";
      return failure();
    }
    fresh += past;
    past = 0;
  }
  for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
    auto type = dyn_cast<RankedTensorType>(argument.getType());
    if (!type) {
      why = "graph input " + std::to_string(index) + " has no rank";
      return failure();
    }
    Info info;
    info.dtype = evaluate::toDType(type.getElementType());
    // An encoder-decoder's encoder tokens are as many as no other length of the probe, so
    // that a cross-attention cannot pass for a self-attention.
    for (int64_t size : inputDims.shapeAt(index, {kProbeBatch, past, fresh, past + fresh + 2}))
      info.shape.push_back(size);
    // A static dimension sizes the probe's input as the model says; one too large to
    // allocate (fuzz-onnx-compile found a 2^32-element mask) is refused, not probed.
    constexpr int64_t kMaxProbeElements = int64_t(1) << 26;
    int64_t elements = 1;
    for (int64_t size : info.shape) {
      if (size < 0 || (size > 0 && elements > kMaxProbeElements / size)) {
        why = "graph input " + std::to_string(index) + " is too large to probe (a static "
              "dimension of " + std::to_string(size) + ")";
        return failure();
      }
      elements *= size;
    }
    llvm::StringRef name = argName(func, index);
    if (inputDims.readsSource(index))
      name = "";  // the encoder's padding mask, whatever it is called, is not the decoder's
    if (name == "attention_mask" && info.shape.size() == 2 && type.isDynamicDim(1))
      info.shape[1] = (hasPast ? past : 0) + fresh;
    if (name == "attention_mask" && info.shape.size() == 2 && !dsrt::isFloat(info.dtype)) {
      attentionMask = argument;
      maskWidth = info.shape[1];
      mask.assign(info.shape[0] * maskWidth, 1);
      for (int64_t b = 1; b < info.shape[0]; ++b)
        for (int64_t j = 0; j < std::min(kProbePadding, maskWidth - 1); ++j)
          mask[b * maskWidth + j] = 0;
    }
    probe.define(argument, info);
  }
  for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
    Info info = *probe.lookup(argument);
    if (!dsrt::isInteger(info.dtype) && info.dtype != dsrt::DType::Bool)
      continue;
    llvm::StringRef name = argName(func, index);
    if (inputDims.readsSource(index))
      name = "";
    if (info.dtype == dsrt::DType::Bool && name != "attention_mask")
      continue;  // use_cache_branch: both branches are probed
    int64_t count = dsrt::elementCount(info.shape);
    std::vector<int64_t> values(count, 1);
    if (argument == attentionMask) {
      values = mask;
    } else if (name == "position_ids" && info.shape.size() == 2) {
      positionIds = argument;
      int64_t rows = info.shape[0], cols = info.shape[1];
      // Positions follow the mask only where it has a row for each of theirs: a model whose
      // mask and positions disagree in batch (found by fuzz-onnx-compile) reads no row past
      // the mask's end, and its probe then fails on the shapes with a message.
      bool followMask = maskWidth > 0 && mask.size() == static_cast<size_t>(rows * maskWidth);
      for (int64_t b = 0; b < rows; ++b) {
        int64_t width = followMask ? maskWidth : cols;
        int64_t cumsum = 0;
        for (int64_t j = 0; j < width; ++j) {
          bool attend = followMask ? mask[b * width + j] != 0 : true;
          cumsum += attend;
          int64_t position = attend ? cumsum - 1 : 1;
          int64_t t = j - (width - cols);
          if (t >= 0)
            values[b * cols + t] = position;
        }
      }
    } else if (name.contains("token_type")) {
      values.assign(count, 0);
    } else if (inputDims.readsSource(index) && info.shape.size() == 2) {
      // The encoder's padding mask: right padding on every row but the first, so that a
      // cross-attention shows which mask it reads.
      int64_t rows = info.shape[0], cols = info.shape[1];
      values.assign(count, 1);
      for (int64_t b = 1; b < rows; ++b)
        for (int64_t j = std::max<int64_t>(1, cols - kProbePadding); j < cols; ++j)
          values[b * cols + j] = 0;
      if (crossMask)
        *crossMask = argument;
    } else if (inputDims.readsSource(index)) {
      values.assign(count, 1);
    } else {
      for (int64_t i = 0; i < count; ++i)
        values[i] = 1 + i % 5;
    }
    auto tensor = std::make_shared<dsrt::OwnedTensor>(info.dtype, info.shape);
    for (int64_t i = 0; i < count; ++i) {
      switch (info.dtype) {
      case dsrt::DType::I64: reinterpret_cast<int64_t *>(tensor->storage.data())[i] = values[i]; break;
      case dsrt::DType::I32: reinterpret_cast<int32_t *>(tensor->storage.data())[i] = int32_t(values[i]); break;
      case dsrt::DType::Bool:
      case dsrt::DType::U8: tensor->storage[i] = uint8_t(values[i] != 0); break;
      default: break;
      }
    }
    info.value = tensor;
    probe.define(argument, info);
  }
  return success();
}

// Activations: what the token ids and the float inputs flow into, through data (not
// through Shape/Size, which read only shapes). Masks and rotary tables are not tainted.
llvm::DenseSet<Value> activations(func::FuncOp func) {
  llvm::DenseSet<Value> tainted;
  SmallVector<Value> worklist;
  InputDims inputDims = InputDims::of(func);
  bool namedIds = false;
  for (unsigned index = 0; index < func.getNumArguments(); ++index)
    namedIds |= inputDims.kindOf(index) == InputKind::TokenIds;
  for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
    auto type = cast<TensorType>(argument.getType());
    llvm::StringRef name = argName(func, index);
    // A float input called a mask or bias is one (an additive mask), not an activation.
    bool maskLike = name.contains("mask") || name.contains("bias");
    // Token ids, whatever they are called (a decoder's decoder_input_ids; without an input
    // named as ids, the one an embedding table is looked up with).
    bool tokenIds = inputDims.kindOf(index) == InputKind::TokenIds ||
                    (!namedIds && inputDims.kindOf(index) == InputKind::Other &&
                     llvm::any_of(argument.getUses(), [](OpOperand &use) {
                       return isa<tfm::EmbeddingOp>(use.getOwner()) &&
                              use.getOperandNumber() == 0;
                     }));
    if ((isa<FloatType>(type.getElementType()) && !maskLike) || tokenIds)
      worklist.push_back(argument);
  }
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    if (!tainted.insert(value).second)
      continue;
    for (Operation *user : value.getUsers()) {
      if (isOp(user, "onnx.Shape") || isOp(user, "onnx.Size"))
        continue;
      if (isOp(user, "onnx.Yield")) {
        llvm::append_range(worklist, user->getParentOp()->getResults());
        continue;
      }
      llvm::append_range(worklist, user->getResults());
    }
  }
  return tainted;
}


} // namespace dsc::attention
