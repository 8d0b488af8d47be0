// How the fusion passes apply their patterns.
#ifndef DSC_COMPILER_FUSE_FUSIONREWRITE_H
#define DSC_COMPILER_FUSE_FUSIONREWRITE_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <optional>

namespace dsc {

// Only the fusions rewrite: no folding, no constant hoisting, no region clean-up, so that a
// fusion pass changes nothing but what it fuses. Fails, with an error naming `what`, when
// the rewrites do not converge.
inline mlir::LogicalResult applyFusionPatterns(mlir::ModuleOp module,
                                               mlir::RewritePatternSet &&patterns,
                                               llvm::StringRef what) {
  mlir::GreedyRewriteConfig config;
  config.setUseTopDownTraversal(true)
      .enableFolding(false)
      .enableConstantCSE(false)
      .setRegionSimplificationLevel(mlir::GreedySimplifyRegionLevel::Disabled);
  if (succeeded(mlir::applyPatternsGreedily(module, std::move(patterns), config)))
    return mlir::success();
  return module.emitError() << "fusing " << what << " did not converge";
}

// The finite, nonzero constant every element of `value` holds (a scalar, or a splat): a
// factor that a fusion can move into an op's attribute.
inline std::optional<double> finiteNonzeroSplat(mlir::Value value) {
  mlir::DenseFPElementsAttr attr;
  if (!mlir::matchPattern(value, mlir::m_Constant(&attr)) || !attr.isSplat())
    return std::nullopt;
  double c = attr.getSplatValue<llvm::APFloat>().convertToDouble();
  if (!std::isfinite(c) || c == 0)
    return std::nullopt;
  return c;
}

} // namespace dsc

#endif
