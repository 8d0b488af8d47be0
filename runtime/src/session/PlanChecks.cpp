#include "session/PlanChecks.h"

#include <string>

namespace dsrt {
namespace {

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

const dsp::Attr *findAttr(const dsp::Step &step, std::string_view name) {
  if (step.attrs())
    for (const dsp::Attr *attr : *step.attrs())
      if (attr->name() && attr->name()->string_view() == name)
        return attr;
  return nullptr;
}

int64_t intAttr(const dsp::Step &step, std::string_view name, int64_t fallback) {
  const dsp::Attr *attr = findAttr(step, name);
  return attr && attr->kind() == dsp::AttrKind::int_ ? attr->i() : fallback;
}

// A step's cache_dtype (a type attribute; f32 when absent), as ops::kvCacheDType reads it.
Status cacheDType(const dsp::Step &step, DType &out) {
  const dsp::Attr *attr = findAttr(step, "cache_dtype");
  out = DType::F32;
  if (!attr)
    return Status::ok();
  out = attr->kind() == dsp::AttrKind::type ? planDType(attr->type()) : DType::Undefined;
  if (out != DType::F32 && out != DType::F16 && out != DType::BF16)
    return Status::error("cache_dtype must be a type: f32, f16 or bf16");
  return Status::ok();
}

} // namespace

Status checkProgramInput(const PlanFile &plan, const dsp::Program &program,
                         std::string_view programName, size_t index, const TensorRef &value,
                         int &tensorIndex) {
  size_t inputs = program.inputs() ? program.inputs()->size() : 0;
  if (index >= inputs)
    return Status::error("program '" + std::string(programName) + "' has " +
                         std::to_string(inputs) + " inputs; there is no input " +
                         std::to_string(index));
  tensorIndex = program.inputs()->Get(index);
  const dsp::Tensor &tensor = *plan.plan().tensors()->Get(tensorIndex);
  std::string name = "input '" + str(tensor.name()) + "'";
  DType dtype = planDType(tensor.dtype());
  if (value.dtype != dtype)
    return Status::error(name + " must be " + dtypeName(dtype) + ", not " +
                         dtypeName(value.dtype));
  size_t rank = tensor.shape() ? tensor.shape()->size() : 0;
  if (value.shape.size() != rank)
    return Status::error(name + " must have rank " + std::to_string(rank) + ", not " +
                         std::to_string(value.shape.size()) + " (shape " +
                         shapeString(value.shape) + ")");
  // An empty max_shape is none (the verifier's reading: it checks only one of the shape's
  // rank); a forged plan's empty one had been read past its end here.
  const bool hasMax = tensor.max_shape() && tensor.max_shape()->size() == rank;
  for (size_t d = 0; d < rank; ++d) {
    const dsp::Dim *dim = tensor.shape()->Get(d);
    int64_t size = value.shape[d];
    if (dim->size() >= 0 && size != dim->size())
      return Status::error(name + " dimension " + std::to_string(d) + " must be " +
                           std::to_string(dim->size()) + ", not " + std::to_string(size));
    int64_t max = hasMax ? tensor.max_shape()->Get(static_cast<uint32_t>(d)) : size;
    if (size < 0 || size > max)
      return Status::error(name + " dimension " + std::to_string(d) +
                           (dim->symbol() ? " (" + dim->symbol()->str() + ")" : "") + " is " +
                           std::to_string(size) + ", more than the plan's limit of " +
                           std::to_string(max) + "; compile with larger --max-batch or "
                                                 "--max-seq-len");
  }
  return Status::ok();
}

Status kvCacheLayout(const PlanFile &plan, int rank, std::vector<KvLayerShape> &layers) {
  layers.clear();
  const dsp::Plan &header = plan.plan();
  if (!header.programs())
    return Status::ok();
  int64_t batch = header.limits() ? header.limits()->max_batch() : 0;
  int64_t capacity = header.limits() ? header.limits()->max_seq_len() : 0;
  std::vector<bool> used;
  for (const dsp::Program *program : *header.programs()) {
    if (!program->steps())
      continue;
    for (size_t i = 0; i < program->steps()->size(); ++i) {
      const dsp::Step &step = *program->steps()->Get(i);
      bool hasPast = step.inputs() && step.inputs()->size() > 4 && step.inputs()->Get(4) >= 0;
      if (str(step.op()) != "tfm.attention" || hasPast)
        continue;
      int64_t layer = intAttr(step, "cache_layer", -1);
      if (layer < 0)
        continue;
      int64_t kvHeads = intAttr(step, "num_kv_heads", 0);
      int64_t headDim = intAttr(step, "head_dim", 0);
      // A tensor-parallel rank caches only its own KV heads.
      if (const dsp::Attr *rankKvHeads = findAttr(step, "rank_kv_heads")) {
        if (!rankKvHeads->ints() || rank < 0 ||
            static_cast<size_t>(rank) >= rankKvHeads->ints()->size())
          return Status::error(plan.path() + ": attention step " + std::to_string(i) +
                               " lists no KV heads for rank " + std::to_string(rank));
        kvHeads = rankKvHeads->ints()->Get(static_cast<uint32_t>(rank));
      }
      if (layer > 4096 || kvHeads <= 0 || headDim <= 0 || batch <= 0 || capacity <= 0)
        return Status::error(plan.path() + ": attention step " + std::to_string(i) +
                             " has an invalid KV cache layout");
      if (static_cast<size_t>(layer) >= layers.size()) {
        layers.resize(layer + 1);
        used.resize(layer + 1, false);
      }
      KvLayerShape shape{batch, kvHeads, capacity, headDim, DType::F32};
      if (Status status = cacheDType(step, shape.dtype); !status.isOk())
        return Status::error(plan.path() + ": attention step " + std::to_string(i) + ": " +
                             status.message());
      KvLayerShape &entry = layers[layer];
      if (used[layer]) {
        if (entry.kvHeads != kvHeads || entry.headDim != headDim || entry.dtype != shape.dtype)
          return Status::error(plan.path() + ": programs disagree on KV cache layer " +
                               std::to_string(layer));
        continue;
      }
      entry = shape;
      used[layer] = true;
    }
  }
  for (size_t layer = 0; layer < layers.size(); ++layer)
    if (!used[layer])
      return Status::error(plan.path() + ": KV cache layer " + std::to_string(layer) +
                           " is used by no attention step");
  return Status::ok();
}

Status checkKvRowSources(const std::vector<int64_t> &sources, int64_t batch) {
  if (static_cast<int64_t>(sources.size()) > batch)
    return Status::error("reordering " + std::to_string(sources.size()) +
                         " KV rows of a cache of " + std::to_string(batch));
  for (int64_t source : sources)
    if (source < 0 || source >= static_cast<int64_t>(sources.size()))
      return Status::error("KV row " + std::to_string(source) + " is not among the " +
                           std::to_string(sources.size()) + " rows reordered");
  return Status::ok();
}

} // namespace dsrt
