// Upper bounds of every tensor's shape in an onnx-dialect function, found by evaluating the
// graph's shapes with each input at its bound, using the runtime's own shape functions and
// kernels (integer shape arithmetic is computed, float data never is).
#ifndef DSC_COMPILER_LOWERING_SHAPEBOUNDS_H
#define DSC_COMPILER_LOWERING_SHAPEBOUNDS_H

#include "compiler/lowering/RuntimeTypes.h"
#include "ops/Ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Value.h"

#include "llvm/ADT/DenseMap.h"

#include <memory>
#include <string>

namespace dsc {

struct ShapeBounds {
  struct Entry {
    dsrt::DType dtype = dsrt::DType::Undefined;
    llvm::SmallVector<int64_t> shape;
    // The values of small integer tensors that shape arithmetic computes, else null.
    std::shared_ptr<dsrt::OwnedTensor> value;
    // False when the shape depends on the values of program inputs (a Reshape to a shape
    // the caller passes): such a tensor gets no arena slot and is allocated when it runs.
    bool bounded = true;
    // Where a Reshape's result is the first dynamic one: which dimension of its target made
    // it so, and why (a warning for the user); empty elsewhere.
    std::string dynamicWhy;
  };
  const Entry *lookup(mlir::Value value) const {
    auto it = entries.find(value);
    return it == entries.end() ? nullptr : &it->second;
  }
  llvm::DenseMap<mlir::Value, Entry> entries;
};

// `inputShapes` holds one bound shape per argument of `func`. Errors are emitted at the op
// whose shape cannot be bounded.
//
// With `dynamicFallback`, a Reshape whose target cannot be met at these shapes, where the
// target comes from the inputs' dimensions, gets a dynamic result (and a dynamicWhy naming
// the dimension) instead of an error: the limits size each input dimension by its role, and
// a relation between dimensions that the roles do not know (a dimension named like no role,
// a width read off another input) is the runtime's to meet. Without it (probing whether a
// graph runs at a length), that Reshape is an error.
mlir::FailureOr<ShapeBounds>
evaluateShapeBounds(mlir::func::FuncOp func,
                    llvm::ArrayRef<llvm::SmallVector<int64_t>> inputShapes,
                    bool dynamicFallback = false);

} // namespace dsc

#endif
