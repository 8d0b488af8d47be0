// mlir-opt with every dsc dialect and pass registered; the lit tests drive it.
#include "compiler/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  dsc::registerAllDialects(registry);
  dsc::registerAllPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "dsc optimizer driver\n", registry));
}
