// Runs functions of the onnx dialect with the reference kernels of dsrt_ops: on values
// (constant folding, conformance tests, reference outputs), or on shapes only (the static
// memory plan's upper bounds), where small results computed from known values keep their
// values so that exporters' Shape -> Gather -> Concat -> Reshape chains resolve.
#ifndef DSC_COMPILER_EVALUATE_EVALUATOR_H
#define DSC_COMPILER_EVALUATE_EVALUATOR_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "ops/Ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributeInterfaces.h"
#include "mlir/IR/Operation.h"

#include "llvm/ADT/DenseMap.h"

#include <optional>
#include <vector>

namespace dsc::onnx_frontend {
class WeightStore;
struct WeightRecord;
} // namespace dsc::onnx_frontend

namespace dsc::evaluate {

// The runtime dtype of an MLIR element type (i1 -> Bool, ui8 -> U8, ...); Undefined when
// the runtime has none.
dsrt::DType toDType(mlir::Type elementType);

// The dtype of a weight record's bytes, for a weight declared `declared`: a half weight
// that dsc-widen-half-precision declared f32 keeps its f16/bf16 bytes, and its readers
// widen them.
dsrt::DType storedWeightDType(const onnx_frontend::WeightRecord &record, dsrt::DType declared);

// The op's inherent attributes as dsrt::ops attributes: integers, floats, strings, arrays
// of integers or of floats, dense elements (as tensors), types (as dtypes). Attributes of
// any other kind are an error naming them.
dsrt::Status convertAttributes(mlir::Operation *op, dsrt::ops::AttrMap &out);
// As convertAttributes, leaving out the attributes it cannot convert.
dsrt::ops::AttrMap toAttrMap(mlir::Operation *op);

// A dense elements attribute (splat or not, i1 included) as a tensor.
dsrt::Status toTensor(mlir::ElementsAttr attr, dsrt::OwnedTensor &out);

// "'node name'" for a NameLoc (the ONNX node), else the printed location.
std::string describeLocation(mlir::Location loc);

struct EvaluationOptions {
  // Tensors larger than this are refused with an error instead of allocated.
  uint64_t maxTensorBytes = uint64_t(1) << 36;
};

// Runs `func` (onnx dialect ops, onnx.If included) on `inputs`, given in argument order
// with the arguments' element types and shapes agreeing with any static dimension.
// onnx.Weight is read through `weights` (may be null when the function has none). Errors
// name the op and its location (the ONNX node name).
dsrt::Status evaluateFunction(mlir::func::FuncOp func,
                              const onnx_frontend::WeightStore *weights,
                              const std::vector<dsrt::OwnedTensor> &inputs,
                              std::vector<dsrt::OwnedTensor> &outputs,
                              const EvaluationOptions &options = {});

// What shape evaluation knows about a value.
struct ValueInfo {
  dsrt::DType dtype = dsrt::DType::Undefined;
  dsrt::Shape shape;
  bool isNone = false;                     // onnx.NoValue
  std::optional<dsrt::OwnedTensor> value;  // when the values are known
};
using ValueInfoMap = llvm::DenseMap<mlir::Value, ValueInfo>;

struct ShapeEvaluationOptions {
  // Results (and weights) of at most this many elements computed from known values keep
  // their values; larger ones carry only dtype and shape.
  int64_t maxKnownElements = 1024;
};

// Shape evaluation: `inputs` give each argument's dtype and (concrete, e.g. upper-bound)
// shape, and optionally its values (say, use_cache_branch). Fills `results` with every op
// result's dtype and shape, inside If branches too, and the arguments'. An If whose
// condition is unknown runs both branches; its results then have the larger of the two
// branches' dimensions (an upper bound) and values only where both branches agree. An op
// whose output shape depends on an unknown value is an error naming it.
dsrt::Status evaluateShapes(mlir::func::FuncOp func, const onnx_frontend::WeightStore *weights,
                            const std::vector<ValueInfo> &inputs, ValueInfoMap &results,
                            const ShapeEvaluationOptions &options = {});

} // namespace dsc::evaluate

#endif
