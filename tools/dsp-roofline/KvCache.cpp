// The session's KV cache as the model reads it: session/PlanChecks.cpp's kvCacheLayout,
// which lives in the CPU session's library (RooflineModelTest.cpp compares the two).
#include "RooflineModel.h"

#include "PlanAccess.h"

namespace dsrt::roofline {

using namespace plan_access;

Status kvCacheLayers(const dsp::Plan &plan, int rank, std::vector<KvLayer> &layers) {
  layers.clear();
  std::vector<bool> used;
  for (uint32_t p = 0; p < length(plan.programs()); ++p) {
    const dsp::Program &program = *plan.programs()->Get(p);
    for (uint32_t s = 0; s < length(program.steps()); ++s) {
      const dsp::Step &step = *program.steps()->Get(s);
      if (str(step.op()) != "tfm.attention" || inputAt(step, 4) >= 0)
        continue;
      int64_t layer = intAttr(step, "cache_layer", -1);
      if (layer < 0)
        continue;
      KvLayer shape{intAttr(step, "num_kv_heads", 0), intAttr(step, "head_dim", 0)};
      if (const dsp::Attr *cacheType = findAttr(step, "cache_dtype")) {
        const bool half = cacheType->kind() == dsp::AttrKind::type &&
                          (cacheType->type() == dsp::DType::f16 ||
                           cacheType->type() == dsp::DType::bf16);
        if (!half && !(cacheType->kind() == dsp::AttrKind::type &&
                       cacheType->type() == dsp::DType::f32))
          return Status::error("attention step " + std::to_string(s) + " of program '" +
                               str(program.name()) + "' has a cache_dtype that is not f32, " +
                               "f16 or bf16");
        shape.elementBytes = half ? 2 : 4;
        shape.dtype = !half ? "f32" : cacheType->type() == dsp::DType::f16 ? "f16" : "bf16";
      }
      // A tensor-parallel rank caches only its own KV heads.
      if (const dsp::Attr *rankKvHeads = findAttr(step, "rank_kv_heads")) {
        if (rank < 0 || static_cast<uint32_t>(rank) >= length(rankKvHeads->ints()))
          return Status::error("attention step " + std::to_string(s) + " of program '" +
                               str(program.name()) + "' lists no KV heads for rank " +
                               std::to_string(rank));
        shape.kvHeads = rankKvHeads->ints()->Get(static_cast<uint32_t>(rank));
      }
      if (layer > 4096 || shape.kvHeads <= 0 || shape.headDim <= 0)
        return Status::error("attention step " + std::to_string(s) + " of program '" +
                             str(program.name()) + "' has an invalid KV cache layout");
      if (static_cast<size_t>(layer) >= layers.size()) {
        layers.resize(layer + 1);
        used.resize(layer + 1, false);
      }
      layers[layer] = shape;
      used[layer] = true;
    }
  }
  for (size_t layer = 0; layer < layers.size(); ++layer)
    if (!used[layer])
      return Status::error("KV cache layer " + std::to_string(layer) +
                           " is used by no attention step");
  return Status::ok();
}

uint64_t kvBytesPerPosition(const std::vector<KvLayer> &layers) {
  uint64_t bytes = 0;
  for (const KvLayer &layer : layers)
    bytes += 2 * static_cast<uint64_t>(layer.kvHeads * layer.headDim * layer.elementBytes);
  return bytes;
}

} // namespace dsrt::roofline
