// dsc-recognize-moe's experts whose gated activation is not a tfm.gated_act: GPT-OSS's
// clamped SwiGLU, (clamp(up, -l, l) + 1) * g * sigmoid(alpha * g) with g = min(gate, l).
// The region between the expert's gate and up linears and its down projection is found by
// structure (elementwise ops only); what it computes, which linear is the gate, and alpha
// and l (among the region's constants) are proven on the probe against the kernel's own
// function (ops/MoeRouting.h), so the spelling (Clip or Min/Max, a recognised gelu_quick or
// the Sigmoid written out, the order of the products) does not matter.
#ifndef DSC_COMPILER_RECOGNIZE_MOEACTIVATION_H
#define DSC_COMPILER_RECOGNIZE_MOEACTIVATION_H

#include "compiler/recognize/ProbeEvaluator.h"
#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Support/LogicalResult.h"

#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace dsc::moe {

// The ops from two linear layers of one input to an expert's down projection input.
struct GluRegion {
  tfm::LinearOp first, second;
  llvm::SmallPtrSet<mlir::Operation *, 16> ops;  // constants excluded
  // Scalar constants the region reads (limit candidates: those a Clip, Min or Max reads),
  // and the slopes alpha can have (a Mul's constants; 1.702 where the activation pass made
  // g * sigmoid(1.702 g) a gelu_quick, 1 where it made a silu).
  llvm::SmallVector<double> limits, alphas;
};

// The region below `product` (the down projection's input); a reason when it is none.
mlir::FailureOr<GluRegion> matchGluRegion(mlir::Value product, std::string &why);

struct ClampedSwiglu {
  float alpha = 0, limit = 0;
  bool gateIsFirst = true;  // which of the region's linears is the gate
};

// What the region computes, proven on random gate and up values reaching past every limit
// candidate: the clamped SwiGLU with one of the candidates' alpha and limit.
mlir::FailureOr<ClampedSwiglu> proveClampedSwiglu(const probe::ProbeEvaluator &probe,
                                                  const GluRegion &region,
                                                  mlir::Value product, std::string &why);

} // namespace dsc::moe

#endif
