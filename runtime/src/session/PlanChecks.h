// What every backend's session reads off a plan the same way: the checks of a program input
// the caller binds, and the KV cache the session keeps (docs/transformer-ops.md, "Session").
#ifndef DSRT_SESSION_PLANCHECKS_H
#define DSRT_SESSION_PLANCHECKS_H

#include "core/Status.h"
#include "core/Tensor.h"
#include "plan/PlanFile.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace dsrt {

// Checks `value` against input `index` of `program` (named `programName`): the dtype, the
// rank, static dimensions exactly and symbolic ones within the plan's limits. Gives the
// plan tensor the input is.
Status checkProgramInput(const PlanFile &plan, const dsp::Program &program,
                         std::string_view programName, size_t index, const TensorRef &value,
                         int &tensorIndex);

// One layer of the session's KV cache: keys and values of [batch, kvHeads, capacity,
// headDim] elements of `dtype` each (its steps' cache_dtype: f32, f16 or bf16).
struct KvLayerShape {
  int64_t batch = 0, kvHeads = 0, capacity = 0, headDim = 0;
  DType dtype = DType::F32;
  size_t bytes() const {
    return static_cast<size_t>(batch * kvHeads * capacity * headDim) * dtypeSize(dtype);
  }
};

// One layer per session-mode tfm.attention's `cache_layer` (no past inputs), sized for the
// plan's limits, with `rank`'s KV heads under tensor parallelism; programs that share a
// layer index share it, and must agree on its shape. Empty when no step uses the cache.
Status kvCacheLayout(const PlanFile &plan, int rank, std::vector<KvLayerShape> &layers);

// Session::reorderKvRows's sources for a cache of `batch` rows: at most that many, each one
// of the rows reordered.
Status checkKvRowSources(const std::vector<int64_t> &sources, int64_t batch);

} // namespace dsrt

#endif
