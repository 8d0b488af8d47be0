#include "cuda/GpuOps.h"

namespace dsrt::cuda {
namespace {

std::vector<GpuOpInfo> buildTable() {
  std::vector<GpuOpInfo> ops;
  addCollectiveGpuOps(ops);
  addAttentionGpuOps(ops);
  addLinearGpuOps(ops);
  addTransformerGpuOps(ops);
  addGenericGpuOps(ops);
  addMoeGpuOps(ops);
  // Each kernel family adds its one line here once its launcher file (ops/*.cpp) exists:
  //   addTransformerGpuOps(ops);  addGenericGpuOps(ops);
  //   addLinearGpuOps(ops);       addAttentionGpuOps(ops);
  return ops;
}

} // namespace

GpuOpFn findGpuOp(std::string_view op) {
  static const std::vector<GpuOpInfo> table = buildTable();
  for (const GpuOpInfo &entry : table)
    if (op == entry.op)
      return entry.run;
  return nullptr;
}

} // namespace dsrt::cuda
