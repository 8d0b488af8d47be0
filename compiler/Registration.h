// Every dialect and pass of dsc, for the driver and for dsc-opt.
#ifndef DSC_COMPILER_REGISTRATION_H
#define DSC_COMPILER_REGISTRATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace dsc {
void registerAllDialects(mlir::DialectRegistry &registry);
void registerAllPasses();
} // namespace dsc

#endif
