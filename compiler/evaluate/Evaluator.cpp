// The interpreter behind evaluateFunction and evaluateShapes: walks the blocks of a
// func.func in order, keeping one Slot per SSA value.
#include "compiler/evaluate/Evaluator.h"

#include "dialects/onnx/IR/OnnxDialect.h"
#include "frontends/onnx/WeightStore.h"
#include "ops/OpTraits.h"

#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <memory>
#include <new>

namespace dsc::evaluate {
namespace {

using dsrt::DType;
using dsrt::Shape;
using dsrt::Status;
using mlir::Operation;
using mlir::Value;

// A value during evaluation. `data` points into `owned`, into a weight store or into a
// caller's tensor; it is meaningful only when `known`.
struct Slot {
  DType dtype = DType::Undefined;
  Shape shape;
  bool isNone = false;
  bool known = false;
  const uint8_t *data = nullptr;
  std::shared_ptr<const std::vector<uint8_t>> owned;

  int64_t elements() const { return dsrt::elementCount(shape); }
  dsrt::TensorRef ref() const {
    return {dtype, shape, known ? const_cast<uint8_t *>(data) : nullptr};
  }
};

std::string typeString(mlir::Type type) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  stream << type;
  return text;
}

// Fails unless a tensor of `dtype` and `shape` may stand for a value of MLIR type `type`.
Status checkAgainstType(mlir::Type type, DType dtype, const Shape &shape, const char *what) {
  auto tensor = mlir::dyn_cast<mlir::TensorType>(type);
  if (!tensor)
    return Status::error(std::string(what) + " has the non-tensor type " + typeString(type));
  bool matches = toDType(tensor.getElementType()) == dtype;
  if (matches && tensor.hasRank()) {
    matches = tensor.getRank() == static_cast<int64_t>(shape.size());
    for (size_t d = 0; matches && d < shape.size(); ++d)
      matches = tensor.isDynamicDim(d) || tensor.getDimSize(d) == shape[d];
  }
  if (!matches)
    return Status::error(std::string(what) + " is " + dsrt::dtypeName(dtype) + " " +
                         dsrt::shapeString(shape) + ", which does not fit its type " +
                         typeString(type));
  return Status::ok();
}

class Interpreter {
public:
  Interpreter(const onnx_frontend::WeightStore *weights, bool shapeOnly,
              int64_t maxKnownElements, uint64_t maxTensorBytes, ValueInfoMap *record)
      : weights_(weights), shapeOnly_(shapeOnly), maxKnownElements_(maxKnownElements),
        maxTensorBytes_(maxTensorBytes), record_(record) {}

  void define(Value value, Slot slot) {
    if (record_) {
      ValueInfo info;
      info.dtype = slot.dtype;
      info.shape = slot.shape;
      info.isNone = slot.isNone;
      if (slot.known && !slot.isNone && slot.elements() <= maxKnownElements_) {
        dsrt::OwnedTensor tensor(slot.dtype, slot.shape);
        if (!tensor.storage.empty())
          std::memcpy(tensor.storage.data(), slot.data, tensor.storage.size());
        info.value = std::move(tensor);
      }
      (*record_)[value] = std::move(info);
    }
    values_[value] = std::move(slot);
  }

  // Runs the ops of `block` and returns the operands of its terminator.
  Status runBlock(mlir::Block &block, std::vector<Slot> &results) {
    // Full evaluation frees each value of this block after its last user.
    llvm::DenseMap<Operation *, llvm::SmallVector<Value>> dying;
    if (!shapeOnly_) {
      llvm::DenseMap<Value, Operation *> lastUser;
      for (Operation &op : block)
        op.walk([&](Operation *nested) {
          for (Value operand : nested->getOperands())
            if (operand.getParentBlock() == &block)
              lastUser[operand] = &op;
        });
      for (auto &[value, user] : lastUser)
        dying[user].push_back(value);
    }
    for (Operation &op : block) {
      if (op.hasTrait<mlir::OpTrait::IsTerminator>()) {
        results.clear();
        for (Value operand : op.getOperands()) {
          const Slot *slot = lookup(operand);
          if (!slot)
            return opError(&op, "an operand has no value");
          results.push_back(*slot);
        }
        return Status::ok();
      }
      DSRT_RETURN_IF_ERROR(runOp(&op));
      if (!shapeOnly_) {
        for (Value dead : dying.lookup(&op))
          values_.erase(dead);
        for (Value result : op.getResults())
          if (result.use_empty())
            values_.erase(result);
      }
    }
    return Status::error("a block has no terminator");
  }

private:
  const Slot *lookup(Value value) const {
    auto it = values_.find(value);
    return it == values_.end() ? nullptr : &it->second;
  }

  Status opError(Operation *op, const std::string &message) const {
    return Status::error(op->getName().getStringRef().str() + " at " +
                         describeLocation(op->getLoc()) + ": " + message);
  }

  Status runOp(Operation *op) {
    if (auto weight = mlir::dyn_cast<onnx::WeightOp>(op))
      return runWeight(weight);
    if (auto constant = mlir::dyn_cast<onnx::ConstantOp>(op)) {
      dsrt::OwnedTensor tensor;
      Status status = toTensor(constant.getValue(), tensor);
      if (!status.isOk())
        return opError(op, status.message());
      define(constant.getResult(), ownedSlot(std::move(tensor)));
      return Status::ok();
    }
    if (mlir::isa<onnx::NoValueOp>(op)) {
      Slot none;
      none.isNone = true;
      define(op->getResult(0), std::move(none));
      return Status::ok();
    }
    if (auto ifOp = mlir::dyn_cast<onnx::IfOp>(op))
      return runIf(ifOp);
    if (op->getDialect() && op->getDialect()->getNamespace() == "onnx")
      return runKernel(op);
    return opError(op, "the evaluator runs only ops of the onnx dialect");
  }

  static Slot ownedSlot(dsrt::OwnedTensor tensor) {
    Slot slot;
    slot.dtype = tensor.dtype;
    slot.shape = std::move(tensor.shape);
    slot.known = true;
    auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(tensor.storage));
    slot.data = bytes->data();
    slot.owned = std::move(bytes);
    return slot;
  }

  Status runWeight(onnx::WeightOp op) {
    if (!weights_)
      return opError(op, "no weight store was given for onnx.Weight");
    const onnx_frontend::WeightRecord *record = weights_->lookup(op.getName());
    if (!record)
      return opError(op, "weight '" + op.getName().str() + "' is not in the weight store");
    auto type = mlir::cast<mlir::RankedTensorType>(op.getType());
    Slot slot;
    slot.dtype = toDType(type.getElementType());
    slot.shape.assign(type.getShape().begin(), type.getShape().end());
    if (slot.dtype == DType::Undefined)
      return opError(op, "element type " + typeString(type.getElementType()) +
                             " has no runtime dtype");
    // A MatMulNBits weight's values are its codes, dequantized (only when they are read).
    auto decoded = std::make_shared<std::vector<uint8_t>>();
    llvm::ArrayRef<uint8_t> bytes = record->bytes;
    if (record->coding) {
      if (shapeOnly_ && slot.elements() > maxKnownElements_) {
        define(op.getResult(), std::move(slot));
        return Status::ok();
      }
      bytes = onnx_frontend::weightValues(*record, *decoded);
    }
    // A half weight that dsc-widen-half-precision declared f32: its values, widened.
    const DType stored = storedWeightDType(*record, slot.dtype);
    if (slot.dtype == DType::F32 && stored != DType::F32 && record->dims == slot.shape &&
        bytes.size() == static_cast<size_t>(slot.elements()) * dtypeSize(stored)) {
      if (!shapeOnly_ || slot.elements() <= maxKnownElements_) {
        auto wide = std::make_shared<std::vector<uint8_t>>(slot.elements() * sizeof(float));
        if (!dsrt::convertFloats(stored, bytes.data(), DType::F32, wide->data(),
                                 slot.elements()))
          return opError(op, "weight '" + op.getName().str() + "' cannot be widened");
        slot.known = true;
        slot.data = wide->data();
        slot.owned = std::move(wide);
      }
      define(op.getResult(), std::move(slot));
      return Status::ok();
    }
    if (record->dims != slot.shape ||
        bytes.size() != static_cast<size_t>(slot.elements()) * dtypeSize(slot.dtype))
      return opError(op, "weight '" + op.getName().str() + "' in the store does not match " +
                             typeString(type));
    if (!shapeOnly_ || slot.elements() <= maxKnownElements_) {
      slot.known = true;
      size_t alignment = dsrt::dtypeSize(slot.dtype);
      if (record->coding) {
        slot.data = decoded->data();
        slot.owned = std::move(decoded);
      } else if (reinterpret_cast<uintptr_t>(bytes.data()) % alignment == 0) {
        slot.data = bytes.data();  // borrowed: the store outlives the evaluation
      } else {
        // External data need not be aligned; kernels read typed elements.
        auto copy = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
        slot.data = copy->data();
        slot.owned = std::move(copy);
      }
    }
    define(op.getResult(), std::move(slot));
    return Status::ok();
  }

  Status runIf(onnx::IfOp op) {
    const Slot *cond = lookup(op.getCond());
    if (!cond || cond->isNone || cond->elements() != 1)
      return opError(op, "the condition must be a one-element bool tensor");
    std::vector<Slot> results;
    if (cond->known) {
      mlir::Region &branch = cond->data[0] ? op.getThenBranch() : op.getElseBranch();
      DSRT_RETURN_IF_ERROR(runBlock(branch.front(), results));
    } else if (!shapeOnly_) {
      return opError(op, "the condition has no value");
    } else {
      std::vector<Slot> otherResults;
      DSRT_RETURN_IF_ERROR(runBlock(op.getThenBranch().front(), results));
      DSRT_RETURN_IF_ERROR(runBlock(op.getElseBranch().front(), otherResults));
      if (otherResults.size() != results.size())
        return opError(op, "the branches yield different numbers of values");
      for (size_t i = 0; i < results.size(); ++i)
        DSRT_RETURN_IF_ERROR(mergeBranchResults(op, results[i], otherResults[i]));
    }
    if (results.size() != op.getNumResults())
      return opError(op, "the branch yields " + std::to_string(results.size()) +
                             " values for " + std::to_string(op.getNumResults()) + " results");
    for (size_t i = 0; i < results.size(); ++i) {
      Status status = checkAgainstType(op.getResult(i).getType(), results[i].dtype,
                                       results[i].shape, ("result " + std::to_string(i)).c_str());
      if (!status.isOk())
        return opError(op, status.message());
      define(op.getResult(i), std::move(results[i]));
    }
    return Status::ok();
  }

  // The upper bound of two branches' results, into `a`; values survive where they agree.
  Status mergeBranchResults(onnx::IfOp op, Slot &a, const Slot &b) {
    if (a.dtype != b.dtype || a.shape.size() != b.shape.size() || a.isNone != b.isNone)
      return opError(op, "the branches yield values of different dtypes or ranks");
    bool same = a.shape == b.shape && a.known && b.known &&
                std::memcmp(a.data, b.data, static_cast<size_t>(a.elements()) *
                                                dsrt::dtypeSize(a.dtype)) == 0;
    if (same)
      return Status::ok();
    for (size_t d = 0; d < a.shape.size(); ++d)
      a.shape[d] = std::max(a.shape[d], b.shape[d]);
    a.known = false;
    a.data = nullptr;
    a.owned.reset();
    return Status::ok();
  }

  Status runKernel(Operation *op) {
    std::string name = op->getName().stripDialect().str();
    if (!dsrt::ops::isSupported(name))
      return opError(op, "no kernel for " + name);
    std::vector<dsrt::TensorRef> refs(op->getNumOperands());
    dsrt::ops::Inputs inputs;
    bool allKnown = true;
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      const Slot *slot = lookup(op->getOperand(i));
      if (!slot)
        return opError(op, "operand " + std::to_string(i) + " has no value");
      if (slot->isNone) {
        inputs.push_back(nullptr);
        continue;
      }
      refs[i] = slot->ref();
      inputs.push_back(&refs[i]);
      allKnown &= slot->known;
    }
    dsrt::ops::AttrMap attrs;
    Status status = convertAttributes(op, attrs);
    if (!status.isOk())
      return opError(op, status.message());
    std::vector<dsrt::ops::OutputSpec> specs;
    status = dsrt::ops::inferShapes(name, attrs, inputs, op->getNumResults(), specs);
    if (!status.isOk())
      return opError(op, status.message());
    bool small = true;
    for (unsigned i = 0; i < specs.size(); ++i) {
      status = checkAgainstType(op->getResult(i).getType(), specs[i].dtype, specs[i].shape,
                                ("result " + std::to_string(i)).c_str());
      if (!status.isOk())
        return opError(op, status.message());
      small &= dsrt::elementCount(specs[i].shape) <= maxKnownElements_;
    }
    bool computeValues =
        !shapeOnly_ || (small && (allKnown || !dsrt::ops::readsInputValues(name)));
    if (!computeValues) {
      for (unsigned i = 0; i < specs.size(); ++i) {
        Slot slot;
        slot.dtype = specs[i].dtype;
        slot.shape = specs[i].shape;
        define(op->getResult(i), std::move(slot));
      }
      return Status::ok();
    }
    std::vector<std::shared_ptr<std::vector<uint8_t>>> storage;
    std::vector<dsrt::TensorRef> outputRefs(specs.size());
    dsrt::ops::Outputs outputs;
    for (unsigned i = 0; i < specs.size(); ++i) {
      uint64_t bytes = static_cast<uint64_t>(dsrt::elementCount(specs[i].shape)) *
                       dsrt::dtypeSize(specs[i].dtype);
      if (bytes > maxTensorBytes_)
        return opError(op, "result " + std::to_string(i) + " (" +
                               dsrt::shapeString(specs[i].shape) + ") needs " +
                               std::to_string(bytes) + " bytes, more than the limit of " +
                               std::to_string(maxTensorBytes_));
      try {
        storage.push_back(std::make_shared<std::vector<uint8_t>>(bytes));
      } catch (const std::bad_alloc &) {
        return opError(op, "out of memory for result " + std::to_string(i));
      }
      outputRefs[i] = {specs[i].dtype, specs[i].shape, storage.back()->data()};
      outputs.push_back(&outputRefs[i]);
    }
    status = dsrt::ops::compute(name, attrs, inputs, outputs);
    if (!status.isOk())
      return opError(op, status.message());
    for (unsigned i = 0; i < specs.size(); ++i) {
      Slot slot;
      slot.dtype = specs[i].dtype;
      slot.shape = specs[i].shape;
      slot.known = true;
      slot.data = storage[i]->data();
      slot.owned = std::move(storage[i]);
      define(op->getResult(i), std::move(slot));
    }
    return Status::ok();
  }

  const onnx_frontend::WeightStore *weights_;
  bool shapeOnly_;
  int64_t maxKnownElements_;
  uint64_t maxTensorBytes_;
  ValueInfoMap *record_;
  llvm::DenseMap<Value, Slot> values_;
};

Status entryBlock(mlir::func::FuncOp func, size_t inputs, mlir::Block *&entry) {
  if (func.isExternal())
    return Status::error("@" + func.getName().str() + " has no body");
  entry = &func.getBody().front();
  if (entry->getNumArguments() != inputs)
    return Status::error("@" + func.getName().str() + " takes " +
                         std::to_string(entry->getNumArguments()) + " arguments, but " +
                         std::to_string(inputs) + " inputs were given");
  return Status::ok();
}

Status argumentSlot(mlir::BlockArgument argument, DType dtype, const Shape &shape,
                    const dsrt::OwnedTensor *value, Slot &slot) {
  std::string what = "input " + std::to_string(argument.getArgNumber());
  DSRT_RETURN_IF_ERROR(checkAgainstType(argument.getType(), dtype, shape, what.c_str()));
  if (dsrt::elementCount(shape) < 0)
    return Status::error(what + " has an invalid shape " + dsrt::shapeString(shape));
  slot.dtype = dtype;
  slot.shape = shape;
  if (value) {
    if (value->dtype != dtype || value->shape != shape ||
        value->storage.size() != static_cast<size_t>(dsrt::elementCount(shape)) *
                                     dsrt::dtypeSize(dtype))
      return Status::error(what + ": its value does not match its dtype and shape");
    slot.known = true;
    slot.data = value->storage.data();  // borrowed: the caller's tensors outlive the run
  }
  return Status::ok();
}

} // namespace

Status evaluateFunction(mlir::func::FuncOp func, const onnx_frontend::WeightStore *weights,
                        const std::vector<dsrt::OwnedTensor> &inputs,
                        std::vector<dsrt::OwnedTensor> &outputs,
                        const EvaluationOptions &options) {
  mlir::Block *entry;
  DSRT_RETURN_IF_ERROR(entryBlock(func, inputs.size(), entry));
  Interpreter interpreter(weights, /*shapeOnly=*/false, 0, options.maxTensorBytes, nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Slot slot;
    DSRT_RETURN_IF_ERROR(argumentSlot(entry->getArgument(i), inputs[i].dtype, inputs[i].shape,
                                      &inputs[i], slot));
    interpreter.define(entry->getArgument(i), std::move(slot));
  }
  std::vector<Slot> results;
  DSRT_RETURN_IF_ERROR(interpreter.runBlock(*entry, results));
  outputs.clear();
  for (const Slot &slot : results) {
    if (slot.isNone)
      return Status::error("@" + func.getName().str() + " returns a none value");
    dsrt::OwnedTensor tensor(slot.dtype, slot.shape);
    if (!tensor.storage.empty())
      std::memcpy(tensor.storage.data(), slot.data, tensor.storage.size());
    outputs.push_back(std::move(tensor));
  }
  return Status::ok();
}

Status evaluateShapes(mlir::func::FuncOp func, const onnx_frontend::WeightStore *weights,
                      const std::vector<ValueInfo> &inputs, ValueInfoMap &results,
                      const ShapeEvaluationOptions &options) {
  mlir::Block *entry;
  DSRT_RETURN_IF_ERROR(entryBlock(func, inputs.size(), entry));
  results.clear();
  EvaluationOptions limits;
  Interpreter interpreter(weights, /*shapeOnly=*/true, options.maxKnownElements,
                          limits.maxTensorBytes, &results);
  for (size_t i = 0; i < inputs.size(); ++i) {
    Slot slot;
    const ValueInfo &input = inputs[i];
    DSRT_RETURN_IF_ERROR(argumentSlot(entry->getArgument(i), input.dtype, input.shape,
                                      input.value ? &*input.value : nullptr, slot));
    interpreter.define(entry->getArgument(i), std::move(slot));
  }
  std::vector<Slot> returned;
  return interpreter.runBlock(*entry, returned);
}

} // namespace dsc::evaluate
