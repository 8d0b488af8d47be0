#include "dialects/onnx/IR/OnnxDialect.h"

#include "dialects/onnx/IR/OnnxDialect.cpp.inc"

namespace dsc::onnx {
void OnnxDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/onnx/IR/OnnxOps.cpp.inc"
      >();
}
} // namespace dsc::onnx
