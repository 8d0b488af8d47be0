// dsc-kv-cache-dtype: the element type of the session's KV cache, on each attention that
// uses it (`cache_dtype`). The runtime sizes each layer from it and both backends round
// into it where the keys and values are written (docs/transformer-ops.md).
#include "compiler/quantize/HalfDtype.h"
#include "compiler/quantize/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace dsc {
#define GEN_PASS_DEF_KVCACHEDTYPE
#include "compiler/quantize/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

struct KvCacheDtypePass : impl::KvCacheDtypeBase<KvCacheDtypePass> {
  using KvCacheDtypeBase::KvCacheDtypeBase;

  void runOnOperation() override {
    Type type;
    if (failed(parseHalfDtype(getOperation(), dtype, "the KV cache's dtype", type)))
      return signalPassFailure();
    getOperation().walk([&](tfm::AttentionOp attention) {
      // The export's interface (past operands, present results) keeps its f32 tensors.
      if (!attention.getCacheLayer() || !attention.getPast().empty())
        return;
      if (type)
        attention.setCacheDtypeAttr(TypeAttr::get(type));
      else
        attention.removeCacheDtypeAttr();
    });
  }
};

} // namespace
} // namespace dsc
