// dsc-recognize-attention: see Passes.td.
#include "compiler/recognize/Passes.h"

namespace dsc {
#define GEN_PASS_DEF_RECOGNIZEATTENTION
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

namespace dsc {
namespace {
struct RecognizeAttentionPass : impl::RecognizeAttentionBase<RecognizeAttentionPass> {
  void runOnOperation() override {}
};
} // namespace
} // namespace dsc
