#include "dialects/tfm/IR/TfmDialect.h"

#include "dialects/tfm/IR/TfmDialect.cpp.inc"

namespace dsc::tfm {
void TfmDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/tfm/IR/TfmOps.cpp.inc"
      >();
}
} // namespace dsc::tfm
