// dsc-recognize-layers: see Passes.td.
#include "compiler/recognize/Passes.h"

namespace dsc {
#define GEN_PASS_DEF_RECOGNIZELAYERS
#include "compiler/recognize/Passes.h.inc"
} // namespace dsc

namespace dsc {
namespace {
struct RecognizeLayersPass : impl::RecognizeLayersBase<RecognizeLayersPass> {
  void runOnOperation() override {}
};
} // namespace
} // namespace dsc
