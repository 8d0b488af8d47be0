// The tfm dialect: transformer building blocks, as recognised from onnx graphs.
#ifndef DSC_DIALECTS_TFM_IR_TFMDIALECT_H
#define DSC_DIALECTS_TFM_IR_TFMDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/tfm/IR/TfmDialect.h.inc"
#include "dialects/tfm/IR/TfmEnums.h.inc"

namespace dsc::tfm {
// Parser and printer of the double parameters of tfm attributes.
mlir::FailureOr<llvm::APFloat> parseF64Parameter(mlir::AsmParser &parser);
void printF64Parameter(mlir::AsmPrinter &printer, const llvm::APFloat &value);
} // namespace dsc::tfm

#define GET_ATTRDEF_CLASSES
#include "dialects/tfm/IR/TfmAttrs.h.inc"

namespace dsc::tfm {
// The type of a weight of type `source` after `transforms` (#tfm.transpose, #tfm.slice,
// #tfm.convert, #tfm.quantize_int8, #tfm.quant_scales, applied in order). Reports the first
// transform that does not apply through `emitError` (when given) and fails.
mlir::FailureOr<mlir::RankedTensorType>
inferWeightType(mlir::RankedTensorType source, llvm::ArrayRef<mlir::Attribute> transforms,
                llvm::function_ref<mlir::InFlightDiagnostic()> emitError);
} // namespace dsc::tfm

#define GET_OP_CLASSES
#include "dialects/tfm/IR/TfmOps.h.inc"

#endif
