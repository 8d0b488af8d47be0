// The header checks of the plan file: FlatBuffers' verifier for the structure, then every
// index, offset and size the runtime will use, so that nothing downstream re-checks them
// (the list is in PlanFile.h). Each failure names the table entry and what is wrong.
#include "plan/PlanFile.h"

#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

namespace dsrt {
namespace {

template <typename... Args> std::string cat(const Args &...args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

const char *str(const flatbuffers::String *s) { return s ? s->c_str() : ""; }

template <typename T> uint64_t length(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

bool validDType(dsp::DType dtype) { return planDType(dtype) != DType::Undefined; }

unsigned dtypeNumber(dsp::DType dtype) { return static_cast<unsigned>(dtype); }

// Bytes of a dense tensor of `dims` (all >= 0) and a valid dtype. The element count must
// fit int64 even when a zero dim would make the product small, so that every later
// elementCount() of the same shape agrees.
bool denseBytes(const std::vector<int64_t> &dims, dsp::DType dtype, uint64_t &bytes) {
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t nonZero = 1;
  bool zero = false;
  for (int64_t dim : dims) {
    if (dim < 0)
      return false;
    if (dim == 0) {
      zero = true;
      continue;
    }
    if (nonZero > limit / static_cast<uint64_t>(dim))
      return false;
    nonZero *= static_cast<uint64_t>(dim);
  }
  uint64_t size = dtypeSize(planDType(dtype));
  if (nonZero > limit / size)
    return false;
  bytes = zero ? 0 : nonZero * size;
  return true;
}

// FlatBuffers 2.0.8's verifier checks a vector's length field for 4-byte alignment only;
// its 8-byte elements must be 8-byte aligned too before anything reads them (UBSan, and
// strict-alignment machines).
bool aligned(const flatbuffers::Vector<int64_t> *v) {
  return !v || reinterpret_cast<uintptr_t>(v->data()) % alignof(int64_t) == 0;
}

std::vector<int64_t> toDims(const flatbuffers::Vector<int64_t> *v) {
  return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>();
}

std::string dimsString(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// `offset + bytes <= limit` without overflow.
bool fits(uint64_t offset, uint64_t bytes, uint64_t limit) {
  return bytes <= limit && offset <= limit - bytes;
}

class HeaderChecker {
public:
  HeaderChecker(const std::string &name, const dsp::Plan &plan, uint64_t headerSize,
                uint64_t fileSize)
      : name_(name), plan_(plan), headerEnd_(dsp::format::kHeaderOffset + headerSize),
        fileSize_(fileSize) {}

  Status run() {
    if (plan_.format_version() != dsp::format::kFormatVersion)
      return fail(cat("the header's format_version is ", plan_.format_version(),
                      ", the prelude's is ", dsp::format::kFormatVersion));
    DSRT_RETURN_IF_ERROR(checkGlobals());
    DSRT_RETURN_IF_ERROR(checkSections());
    auto *tensors = plan_.tensors();
    for (uint64_t i = 0; i < length(tensors); ++i)
      DSRT_RETURN_IF_ERROR(checkTensor(i, *tensors->Get(i)));
    DSRT_RETURN_IF_ERROR(checkPrograms());
    return checkBranchCycles();
  }

private:
  static constexpr uint64_t kMaxArenaBytes = uint64_t(1) << 48;

  Status fail(const std::string &message) const { return Status::error(name_ + ": " + message); }

  Status checkGlobals() {
    uint32_t alignment = plan_.arena_alignment();
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
      return fail(cat("arena_alignment ", alignment, " is not a power of two"));
    // Far above any real plan, and far enough below 2^64 that a session's padded arena
    // allocation cannot wrap around to a few bytes the tensor slots would then overrun.
    if (plan_.arena_bytes() > kMaxArenaBytes)
      return fail(cat("the arena of ", plan_.arena_bytes(), " bytes exceeds the ", kMaxArenaBytes,
                      " bytes (256 TiB) any plan may ask for"));
    if (auto *limits = plan_.limits()) {
      if (limits->max_batch() < 0 || limits->max_seq_len() < 0 ||
          limits->max_tokens_per_step() < 0)
        return fail(cat("limits are negative (max_batch ", limits->max_batch(),
                        ", max_seq_len ", limits->max_seq_len(), ", max_tokens_per_step ",
                        limits->max_tokens_per_step(), ")"));
    }
    auto *symbols = plan_.symbols();
    for (uint64_t i = 0; i < length(symbols); ++i) {
      const dsp::SymbolBound *symbol = symbols->Get(i);
      if (!symbol->symbol() || symbol->symbol()->size() == 0)
        return fail(cat("symbol ", i, " has no name"));
      if (symbol->max() < 0)
        return fail(cat("symbol ", i, " ('", str(symbol->symbol()), "'): max ",
                        symbol->max(), " is negative"));
    }
    if (const dsp::ModelInfo *model = plan_.model()) {
      int32_t sampling = model->sampling_kernel();
      if (sampling < -1 || (sampling >= 0 && static_cast<uint64_t>(sampling) >=
                                                 length(plan_.kernels())))
        return fail(cat("model.sampling_kernel is ", sampling, ", out of range (the plan has ",
                        length(plan_.kernels()), " kernels)"));
    }
    return Status::ok();
  }

  Status checkSections() {
    auto *sections = plan_.sections();
    uint64_t count = length(sections);
    if (count == 0)
      return fail("the plan has no weight sections (one per tensor-parallel rank)");
    if (auto *options = plan_.options()) {
      if (static_cast<int64_t>(options->tp()) != static_cast<int64_t>(count))
        return fail(cat("options.tp is ", options->tp(), " but the plan has ", count,
                        " weight sections"));
    }
    const dsp::WeightSection *first = sections->Get(0);
    uint64_t previousEnd = headerEnd_;
    for (uint64_t i = 0; i < count; ++i) {
      const dsp::WeightSection *section = sections->Get(i);
      std::string where = cat("section ", i);
      if (section->rank() < 0 || static_cast<uint64_t>(section->rank()) != i)
        return fail(cat(where, " is for rank ", section->rank(),
                        ": sections must be stored in rank order"));
      uint64_t offset = section->file_offset(), size = section->size();
      if (offset % dsp::format::kSectionAlignment != 0)
        return fail(cat(where, ": file offset ", offset, " is not ",
                        dsp::format::kSectionAlignment, "-byte aligned"));
      if (offset < previousEnd)
        return fail(cat(where, ": file offset ", offset, " overlaps ",
                        i == 0 ? std::string("the header") : cat("section ", i - 1),
                        " (which ends at ", previousEnd, ")"));
      if (!fits(offset, size, fileSize_))
        return fail(cat(where, " (offset ", offset, ", ", size,
                        " bytes) ends past the end of the file (", fileSize_, " bytes)"));
      previousEnd = offset + size;
      DSRT_RETURN_IF_ERROR(checkWeights(i, *section, *first));
    }
    return Status::ok();
  }

  Status checkWeights(uint64_t index, const dsp::WeightSection &section,
                      const dsp::WeightSection &first) {
    auto *weights = section.weights();
    uint64_t count = length(weights);
    if (count != length(first.weights()))
      return fail(cat("section ", index, " has ", count, " weights, section 0 has ",
                      length(first.weights()), ": every rank has the same weights"));
    uint64_t previousEnd = 0;
    for (uint64_t j = 0; j < count; ++j) {
      const dsp::WeightEntry *weight = weights->Get(j);
      std::string where = cat("section ", index, ", weight ", j, " ('", str(weight->name()), "')");
      if (index > 0) {
        const dsp::WeightEntry *same = first.weights()->Get(j);
        if (std::string(str(weight->name())) != str(same->name()) ||
            weight->dtype() != same->dtype())
          return fail(cat(where, " differs in name or dtype from section 0's weight ", j,
                          " ('", str(same->name()), "')"));
      }
      if (!validDType(weight->dtype()))
        return fail(cat(where, ": invalid dtype ", dtypeNumber(weight->dtype())));
      if (!aligned(weight->shape()))
        return fail(cat(where, ": the shape is misaligned: the file is corrupt"));
      std::vector<int64_t> dims = toDims(weight->shape());
      uint64_t bytes = 0;
      if (!denseBytes(dims, weight->dtype(), bytes))
        return fail(cat(where, ": invalid shape ", dimsString(dims)));
      if (weight->bytes() != bytes)
        return fail(cat(where, ": ", weight->bytes(), " bytes, but ",
                        dtypeName(planDType(weight->dtype())), dimsString(dims), " needs ",
                        bytes));
      if (weight->offset() % dsp::format::kTensorAlignment != 0)
        return fail(cat(where, ": offset ", weight->offset(), " is not ",
                        dsp::format::kTensorAlignment, "-byte aligned"));
      if (weight->offset() < previousEnd)
        return fail(cat(where, ": offset ", weight->offset(),
                        " overlaps the previous weight (which ends at ", previousEnd, ")"));
      if (!fits(weight->offset(), bytes, section.size()))
        return fail(cat(where, " (offset ", weight->offset(), ", ", bytes,
                        " bytes) ends past the end of its section (", section.size(),
                        " bytes)"));
      previousEnd = weight->offset() + bytes;
    }
    return Status::ok();
  }

  Status checkTensor(uint64_t index, const dsp::Tensor &tensor) {
    std::string where = cat("tensor ", index, " ('", str(tensor.name()), "')");
    if (!validDType(tensor.dtype()))
      return fail(cat(where, ": invalid dtype ", dtypeNumber(tensor.dtype())));
    if (static_cast<unsigned>(tensor.kind()) > static_cast<unsigned>(dsp::TensorKind::MAX))
      return fail(cat(where, ": invalid kind ", static_cast<unsigned>(tensor.kind())));

    // The static sizes, -1 for dynamic dims.
    std::vector<int64_t> dims;
    bool dynamic = false;
    if (auto *shape = tensor.shape()) {
      for (uint64_t j = 0; j < shape->size(); ++j) {
        int64_t size = shape->Get(j)->size();
        if (size < -1)
          return fail(cat(where, ": dim ", j, " is ", size));
        dynamic |= size == -1;
        dims.push_back(size);
      }
    }
    if (!aligned(tensor.max_shape()))
      return fail(cat(where, ": max_shape is misaligned: the file is corrupt"));
    std::vector<int64_t> maxDims = toDims(tensor.max_shape());
    bool hasMax = !maxDims.empty();
    if (hasMax) {
      if (maxDims.size() != dims.size())
        return fail(cat(where, ": max_shape has rank ", maxDims.size(), ", the shape has rank ",
                        dims.size()));
      for (size_t j = 0; j < dims.size(); ++j) {
        if (maxDims[j] < 0 || (dims[j] >= 0 && maxDims[j] != dims[j]))
          return fail(cat(where, ": max_shape ", dimsString(maxDims),
                          " does not bound the shape ", dimsString(dims)));
      }
    }

    switch (tensor.kind()) {
    case dsp::TensorKind::activation: {
      if (dynamic && !hasMax)
        return fail(cat(where, ": an activation with dynamic dims needs a max_shape"));
      uint64_t needed = 0;
      if (!denseBytes(hasMax ? maxDims : dims, tensor.dtype(), needed))
        return fail(cat(where, ": the size of shape ", dimsString(hasMax ? maxDims : dims),
                        " overflows"));
      uint64_t offset = tensor.arena_offset(), bytes = tensor.arena_bytes();
      if (offset % plan_.arena_alignment() != 0)
        return fail(cat(where, ": arena_offset ", offset, " is not ",
                        plan_.arena_alignment(), "-byte aligned"));
      if (!fits(offset, bytes, plan_.arena_bytes()))
        return fail(cat(where, ": arena slot [", offset, ", +", bytes,
                        ") is outside the arena (", plan_.arena_bytes(), " bytes)"));
      if (bytes < needed)
        return fail(cat(where, ": arena slot of ", bytes, " bytes is smaller than the ",
                        needed, " bytes its max shape needs"));
      return Status::ok();
    }
    case dsp::TensorKind::weight: {
      const dsp::WeightSection *first = plan_.sections()->Get(0);
      uint64_t count = length(first->weights());
      int32_t weightIndex = tensor.weight_index();
      if (weightIndex < 0 || static_cast<uint64_t>(weightIndex) >= count)
        return fail(cat(where, ": weight_index ", weightIndex, " is out of range (section 0 has ",
                        count, " weights)"));
      // Weights may be stored narrower (--dtype fp16) than the tensor computes in; the
      // runtime converts floating-point weights when it loads them, nothing else.
      DType stored = planDType(first->weights()->Get(weightIndex)->dtype());
      DType wanted = planDType(tensor.dtype());
      if (stored != wanted && !(isFloat(stored) && isFloat(wanted)))
        return fail(cat(where, ": dtype ", dtypeName(wanted), " cannot be made from its weight's ",
                        dtypeName(stored), " (only floating-point weights convert)"));
      return Status::ok();
    }
    case dsp::TensorKind::constant: {
      uint64_t needed = 0;
      if (dynamic || !denseBytes(dims, tensor.dtype(), needed))
        return fail(cat(where, ": a constant needs a static shape, not ", dimsString(dims)));
      if (length(tensor.constant_data()) != needed)
        return fail(cat(where, ": constant_data holds ", length(tensor.constant_data()),
                        " bytes, ", dtypeName(planDType(tensor.dtype())), dimsString(dims),
                        " needs ", needed));
      return Status::ok();
    }
    case dsp::TensorKind::input:
      return Status::ok();
    case dsp::TensorKind::dynamic:
      if (hasMax || tensor.arena_bytes() != 0)
        return fail(cat(where, ": a dynamic tensor has no max_shape and no arena slot"));
      return Status::ok();
    }
    return Status::ok();
  }

  Status checkIndices(const std::string &where, const char *what,
                      const flatbuffers::Vector<int32_t> *indices, bool allowAbsent) {
    uint64_t tensors = length(plan_.tensors());
    for (uint64_t j = 0; j < length(indices); ++j) {
      int32_t t = indices->Get(j);
      if (allowAbsent && t == -1)
        continue;
      if (t < 0 || static_cast<uint64_t>(t) >= tensors)
        return fail(cat(where, ": ", what, " ", j, " is tensor ", t,
                        ", out of range (the plan has ", tensors, " tensors)"));
    }
    return Status::ok();
  }

  Status checkAttr(const std::string &where, const dsp::Attr &attr) {
    if (!attr.name() || attr.name()->size() == 0)
      return fail(cat(where, ": an attribute has no name"));
    std::string at = cat(where, ", attribute '", str(attr.name()), "'");
    if (static_cast<unsigned>(attr.kind()) > static_cast<unsigned>(dsp::AttrKind::MAX))
      return fail(cat(at, ": invalid kind ", static_cast<unsigned>(attr.kind())));
    if (!aligned(attr.ints()) || !aligned(attr.tensor_shape()))
      return fail(cat(at, ": a vector is misaligned: the file is corrupt"));
    if (attr.kind() == dsp::AttrKind::type && !validDType(attr.type()))
      return fail(cat(at, ": invalid dtype ", dtypeNumber(attr.type())));
    if (attr.kind() == dsp::AttrKind::tensor) {
      if (!validDType(attr.tensor_dtype()))
        return fail(cat(at, ": invalid tensor dtype ", dtypeNumber(attr.tensor_dtype())));
      std::vector<int64_t> dims = toDims(attr.tensor_shape());
      uint64_t needed = 0;
      if (!denseBytes(dims, attr.tensor_dtype(), needed))
        return fail(cat(at, ": invalid tensor shape ", dimsString(dims)));
      if (length(attr.tensor_data()) != needed)
        return fail(cat(at, ": tensor_data holds ", length(attr.tensor_data()), " bytes, ",
                        dtypeName(planDType(attr.tensor_dtype())), dimsString(dims),
                        " needs ", needed));
    }
    return Status::ok();
  }

  Status checkPrograms() {
    auto *programs = plan_.programs();
    uint64_t count = length(programs);
    for (uint64_t p = 0; p < count; ++p) {
      const dsp::Program *program = programs->Get(p);
      std::string where = cat("program ", p, " ('", str(program->name()), "')");
      DSRT_RETURN_IF_ERROR(checkIndices(where, "input", program->inputs(), false));
      DSRT_RETURN_IF_ERROR(checkIndices(where, "output", program->outputs(), false));
      DSRT_RETURN_IF_ERROR(
          checkIndices(where, "branch output", program->branch_outputs(), false));
      auto *steps = program->steps();
      for (uint64_t s = 0; s < length(steps); ++s) {
        const dsp::Step *step = steps->Get(s);
        std::string at = cat(where, ", step ", s, " (", str(step->op()), ")");
        if (!step->op() || step->op()->size() == 0)
          return fail(cat(at, ": no op name"));
        DSRT_RETURN_IF_ERROR(checkIndices(at, "input", step->inputs(), true));
        DSRT_RETURN_IF_ERROR(checkIndices(at, "output", step->outputs(), false));
        auto *attrs = step->attrs();
        for (uint64_t a = 0; a < length(attrs); ++a)
          DSRT_RETURN_IF_ERROR(checkAttr(at, *attrs->Get(a)));
        auto *branches = step->branches();
        for (uint64_t b = 0; b < length(branches); ++b) {
          int32_t target = branches->Get(b);
          if (target < 0 || static_cast<uint64_t>(target) >= count)
            return fail(cat(at, ": branch ", b, " is program ", target,
                            ", out of range (the plan has ", count, " programs)"));
        }
        auto *kernels = step->kernels();
        uint64_t kernelCount = length(plan_.kernels());
        for (uint64_t k = 0; k < length(kernels); ++k) {
          int32_t kernel = kernels->Get(k);
          if (kernel < 0 || static_cast<uint64_t>(kernel) >= kernelCount)
            return fail(cat(at, ": kernel ", k, " is ", kernel, ", out of range (the plan has ",
                            kernelCount, " kernels)"));
        }
        if (step->op()->str() == "If")
          DSRT_RETURN_IF_ERROR(checkIf(at, *step));
      }
    }
    return Status::ok();
  }

  // The schema's If: a condition, then programs[branches[0]] or programs[branches[1]],
  // each yielding one value per output of the If.
  Status checkIf(const std::string &at, const dsp::Step &step) {
    if (length(step.inputs()) == 0 || step.inputs()->Get(0) < 0)
      return fail(cat(at, ": an If needs its condition as input 0"));
    if (length(step.branches()) != 2)
      return fail(cat(at, ": an If has 2 branches, not ", length(step.branches())));
    for (int32_t target : *step.branches()) {
      const dsp::Program *branch = plan_.programs()->Get(static_cast<uint32_t>(target));
      if (length(branch->branch_outputs()) != length(step.outputs()))
        return fail(cat(at, ": branch program ", target, " yields ",
                        length(branch->branch_outputs()), " values for ",
                        length(step.outputs()), " outputs"));
    }
    return Status::ok();
  }

  // Branches are followed by the executor recursively; a cycle would recurse forever.
  // Iterative, because a crafted file can chain many programs.
  Status checkBranchCycles() {
    auto *programs = plan_.programs();
    uint64_t count = length(programs);
    std::vector<std::vector<int32_t>> edges(count);
    for (uint64_t p = 0; p < count; ++p) {
      auto *steps = programs->Get(p)->steps();
      for (uint64_t s = 0; s < length(steps); ++s) {
        auto *branches = steps->Get(s)->branches();
        for (uint64_t b = 0; b < length(branches); ++b)
          edges[p].push_back(branches->Get(b));
      }
    }
    enum : uint8_t { unvisited, active, done };
    std::vector<uint8_t> state(count, unvisited);
    std::vector<std::pair<int32_t, size_t>> stack;  // program, next edge
    for (uint64_t root = 0; root < count; ++root) {
      if (state[root] != unvisited)
        continue;
      stack.push_back({static_cast<int32_t>(root), 0});
      state[root] = active;
      while (!stack.empty()) {
        auto &[program, next] = stack.back();
        if (next == edges[program].size()) {
          state[program] = done;
          stack.pop_back();
          continue;
        }
        int32_t target = edges[program][next++];
        if (state[target] == active)
          return fail(cat("program ", target, " ('", str(programs->Get(target)->name()),
                          "') reaches itself through If branches"));
        if (state[target] == unvisited) {
          state[target] = active;
          stack.push_back({target, 0});
        }
      }
    }
    return Status::ok();
  }

  const std::string &name_;
  const dsp::Plan &plan_;
  uint64_t headerEnd_;
  uint64_t fileSize_;
};

} // namespace

DType planDType(dsp::DType dtype) {
  auto value = static_cast<uint8_t>(dtype);
  if (value < static_cast<uint8_t>(dsp::DType::f32) ||
      value > static_cast<uint8_t>(dsp::DType::MAX))
    return DType::Undefined;
  return static_cast<DType>(value);
}

Status verifyPlanHeader(const std::string &name, const uint8_t *header, uint64_t headerSize,
                        uint64_t fileSize) {
  using namespace dsp::format;
  // The smallest FlatBuffer: the root offset and the file identifier.
  if (headerSize < 8)
    return Status::error(cat(name, ": the header is ", headerSize, " bytes, too small"));
  if (headerSize >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return Status::error(cat(name, ": the header is ", headerSize,
                             " bytes, more than a FlatBuffer can address"));
  if (!fits(kHeaderOffset, headerSize, fileSize))
    return Status::error(cat(name, ": the header (", headerSize,
                             " bytes) ends past the end of the file (", fileSize, " bytes)"));
  if (reinterpret_cast<uintptr_t>(header) % 8 != 0)
    return Status::error(cat(name, ": internal error: the header is not 8-byte aligned in memory"));
  if (!flatbuffers::BufferHasIdentifier(header, kFileIdentifier))
    return Status::error(cat(name, ": the header is not a plan (its file identifier is not ",
                             kFileIdentifier, ")"));
  flatbuffers::Verifier::Options options;
  options.max_depth = 64;
  // Tables count once per visit; shared subtables can make a small buffer expensive, so
  // the bound grows with the buffer but not with what it references.
  options.max_tables = static_cast<flatbuffers::uoffset_t>(1000000 + headerSize / 4);
  options.check_alignment = true;
  flatbuffers::Verifier verifier(header, static_cast<size_t>(headerSize), options);
  if (!dsp::VerifyPlanBuffer(verifier))
    return Status::error(cat(name, ": the header fails FlatBuffers verification: the file is corrupt"));
  const dsp::Plan &plan = *dsp::GetPlan(header);
  DSRT_RETURN_IF_ERROR(HeaderChecker(name, plan, headerSize, fileSize).run());
  return verifyRoleInputs(name, plan);
}

} // namespace dsrt
