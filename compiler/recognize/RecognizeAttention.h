// dsc-recognize-attention with access to the model's weights. Recognition checks every
// candidate numerically on a small probe (docs/design.md §3.3): masks, rotary tables and the
// like may be weights (GPT-Neo's band buffer, GPT-J's sin/cos table), and only the
// importer's WeightStore has their bytes. Without a store (dsc-opt, lit tests) such
// candidates are declined.
#ifndef DSC_COMPILER_RECOGNIZE_RECOGNIZEATTENTION_H
#define DSC_COMPILER_RECOGNIZE_RECOGNIZEATTENTION_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "ops/Ops.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace dsc::onnx_frontend {
class WeightStore;
} // namespace dsc::onnx_frontend

namespace dsc {

// `longestSequence`: the plan's limit on cached plus new tokens (dsc --max-seq-len); a
// sliding window up to that long is measured on a probe of that length.
std::unique_ptr<mlir::Pass>
createRecognizeAttentionWithWeights(const onnx_frontend::WeightStore *weights,
                                    bool reportDeclines = false,
                                    int64_t longestSequence = 2048);

// Runs `func` (onnx ops and tfm.attention, as the plan's steps would: same kernels, same
// step attributes) on `inputs` in argument order. Session-mode attention reads and writes
// `cache`. For tests that check a recognised graph against the export's reference outputs
// before and independently of the lowering to a plan.
dsrt::Status runWithKernels(mlir::func::FuncOp func, const onnx_frontend::WeightStore *weights,
                            const std::vector<dsrt::OwnedTensor> &inputs,
                            std::vector<dsrt::OwnedTensor> &outputs,
                            dsrt::ops::KvCache *cache = nullptr);

} // namespace dsc

#endif
