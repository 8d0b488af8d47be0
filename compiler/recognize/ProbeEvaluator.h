// The probe of dsc-recognize-attention: a function run with the runtime's kernels on a
// small batch (shapes everywhere, values where they are computable, weights read from the
// importer's store), and the seeded evaluation of a subgraph between given values and a
// target. Recognition proves what a candidate computes with it (docs/design.md §3.3); tests run
// recognised graphs with it (runWithKernels).
#ifndef DSC_COMPILER_RECOGNIZE_PROBEEVALUATOR_H
#define DSC_COMPILER_RECOGNIZE_PROBEEVALUATOR_H

#include "compiler/evaluate/Evaluator.h"
#include "core/Status.h"
#include "core/Tensor.h"
#include "ops/Ops.h"

#include "mlir/IR/Block.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <string>
#include <utility>

namespace dsc::onnx_frontend {
class WeightStore;
} // namespace dsc::onnx_frontend

namespace dsc::probe {

using mlir::Block;
using mlir::Operation;
using mlir::Value;

// Values of at most this many elements are computed during the probe (weights included).
constexpr int64_t kMaxKnownElements = int64_t(1) << 20;

// What the probe knows of a value: dtype and shape, and its elements when computed.
struct Info {
  dsrt::DType dtype = dsrt::DType::Undefined;
  dsrt::Shape shape;
  bool isNone = false;
  std::shared_ptr<dsrt::OwnedTensor> value;
};

inline bool isTfm(Operation *op) {
  return op->getDialect() && op->getDialect()->getNamespace() == "tfm";
}
inline bool isOnnx(Operation *op) {
  return op->getDialect() && op->getDialect()->getNamespace() == "onnx";
}

inline bool isOp(Operation *op, llvm::StringRef name) {
  return op && op->getName().getStringRef() == name;
}

class ProbeEvaluator {
public:
  explicit ProbeEvaluator(const onnx_frontend::WeightStore *weights,
                          int64_t maxElements = kMaxKnownElements,
                          dsrt::ops::KvCache *cache = nullptr)
      : weights_(weights), maxElements_(maxElements), cache_(cache) {}

  void define(Value value, Info info) { infos_[value] = std::move(info); }
  const Info *lookup(Value value) const {
    auto it = infos_.find(value);
    return it == infos_.end() ? nullptr : &it->second;
  }
  // A weight's elements as f32 whatever its size (a half weight widened), or null.
  std::shared_ptr<dsrt::OwnedTensor> weightAsF32(llvm::StringRef name) const;
  void runBlock(Block &block) {
    for (Operation &op : block)
      runOp(&op);
  }

  // The first op the probe could not run, and why: named when a softmax has no shape.
  std::string firstFailure;

private:
  void runOp(Operation *op);
  void failed(Operation *op, const std::string &message) {
    if (firstFailure.empty())
      firstFailure = "'" + evaluate::describeLocation(op->getLoc()) + "' (" +
                     op->getName().getStringRef().str() + "): " + message;
  }
  const onnx_frontend::WeightStore *weights_;
  int64_t maxElements_;
  dsrt::ops::KvCache *cache_;
  llvm::DenseMap<Value, Info> infos_;
};


//===----------------------------------------------------------------------===//
// Seeded evaluation of a subgraph: the ops between some values (given random data) and a
// target, with every other operand taken from the probe.
//===----------------------------------------------------------------------===//

using Seeds = llvm::SmallVector<std::pair<Value, std::shared_ptr<dsrt::OwnedTensor>>>;
std::shared_ptr<dsrt::OwnedTensor> evaluateSeeded(const ProbeEvaluator &probe,
                                                  const Seeds &seeds, Value target,
                                                  llvm::SetVector<Operation *> &region,
                                                  std::string &why);

} // namespace dsc::probe

#endif
