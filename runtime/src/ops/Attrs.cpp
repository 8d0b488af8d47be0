// Attribute values and their typed access.
#include "ops/Kernel.h"

#include <cmath>

namespace dsrt::ops {

Attr Attr::ofInt(int64_t v) {
  Attr attr;
  attr.kind = Kind::Int;
  attr.i = v;
  return attr;
}

Attr Attr::ofFloat(float v) {
  Attr attr;
  attr.kind = Kind::Float;
  attr.f = v;
  return attr;
}

Attr Attr::ofString(std::string v) {
  Attr attr;
  attr.kind = Kind::String;
  attr.s = std::move(v);
  return attr;
}

Attr Attr::ofInts(std::vector<int64_t> v) {
  Attr attr;
  attr.kind = Kind::Ints;
  attr.ints = std::move(v);
  return attr;
}

Attr Attr::ofFloats(std::vector<float> v) {
  Attr attr;
  attr.kind = Kind::Floats;
  attr.floats = std::move(v);
  return attr;
}

Attr Attr::ofTensor(OwnedTensor v) {
  Attr attr;
  attr.kind = Kind::Tensor;
  attr.tensor = std::move(v);
  return attr;
}

Attr Attr::ofType(DType v) {
  Attr attr;
  attr.kind = Kind::Type;
  attr.type = v;
  return attr;
}

static const char *kindName(Attr::Kind kind) {
  switch (kind) {
  case Attr::Kind::Int: return "an integer";
  case Attr::Kind::Float: return "a float";
  case Attr::Kind::String: return "a string";
  case Attr::Kind::Ints: return "a list of integers";
  case Attr::Kind::Floats: return "a list of floats";
  case Attr::Kind::Tensor: return "a tensor";
  case Attr::Kind::Type: return "a type";
  }
  return "unknown";
}

// The attribute named `name` if present; an error if it has another kind.
static Status find(const AttrMap &attrs, std::string_view name, Attr::Kind kind,
                   const Attr *&found) {
  found = nullptr;
  auto it = attrs.find(name);
  if (it == attrs.end())
    return Status::ok();
  if (it->second.kind != kind)
    return Status::error(concat("attribute '", name, "' must be ", kindName(kind), ", not ",
                                kindName(it->second.kind)));
  found = &it->second;
  return Status::ok();
}

Status getInt(const AttrMap &attrs, std::string_view name, int64_t fallback, int64_t &out) {
  const Attr *attr;
  DSRT_RETURN_IF_ERROR(find(attrs, name, Attr::Kind::Int, attr));
  out = attr ? attr->i : fallback;
  return Status::ok();
}

Status getFloat(const AttrMap &attrs, std::string_view name, float fallback, float &out) {
  const Attr *attr;
  DSRT_RETURN_IF_ERROR(find(attrs, name, Attr::Kind::Float, attr));
  out = attr ? attr->f : fallback;
  return Status::ok();
}

Status rotaryInverseFrequencies(const AttrMap &attrs, std::vector<float> &out) {
  out.clear();
  int64_t dim = 0;
  float base = 10000.0f;
  DSRT_RETURN_IF_ERROR(getInt(attrs, "rotary_dim", 0, dim));
  DSRT_RETURN_IF_ERROR(getFloat(attrs, "rotary_base", 10000.0f, base));
  if (dim == 0)
    return Status::ok();
  if (dim < 0 || dim % 2 != 0)
    return Status::error(concat("rotary_dim must be even and positive, not ", dim));
  const Attr *table;
  DSRT_RETURN_IF_ERROR(find(attrs, "rotary_inv_freq", Attr::Kind::Floats, table));
  if (table) {
    if (int64_t(table->floats.size()) != dim / 2)
      return Status::error(concat("rotary_inv_freq has ", table->floats.size(),
                                  " frequencies, rotary_dim ", dim, " needs ", dim / 2));
    for (float frequency : table->floats)
      // Zero: a pair that does not turn (Gemma-4's proportional RoPE).
      if (!std::isfinite(frequency))
        return Status::error(concat("rotary_inv_freq holds ", frequency,
                                    ": frequencies must be finite"));
    out = table->floats;
    return Status::ok();
  }
  if (!(base > 1) || !std::isfinite(base))
    return Status::error(concat("rotary_base must be finite and greater than 1, not ", base));
  for (int64_t i = 0; i < dim / 2; ++i)
    out.push_back(static_cast<float>(1.0 / std::pow(double(base), double(2 * i) / double(dim))));
  return Status::ok();
}

Status rotaryAttentionFactor(const AttrMap &attrs, float &out) {
  DSRT_RETURN_IF_ERROR(getFloat(attrs, "rotary_attention_factor", 1.0f, out));
  if (!(out > 0) || !std::isfinite(out))
    return Status::error(
        concat("rotary_attention_factor must be finite and positive, not ", out));
  return Status::ok();
}

Status kvCacheDType(const AttrMap &attrs, DType &out) {
  const Attr *attr;
  DSRT_RETURN_IF_ERROR(find(attrs, "cache_dtype", Attr::Kind::Type, attr));
  out = attr ? attr->type : DType::F32;
  if (out != DType::F32 && out != DType::F16 && out != DType::BF16)
    return Status::error(concat("cache_dtype must be f32, f16 or bf16, not ", dtypeName(out)));
  return Status::ok();
}

Status readRankHeads(const AttrMap &attrs, int rank, int64_t globalHeads,
                     int64_t globalKvHeads, RankHeads &out) {
  out = {globalHeads, 0, globalKvHeads, 0};
  struct Entry {
    const char *name;
    int64_t *value;
  };
  for (Entry entry : {Entry{"rank_heads", &out.heads}, Entry{"rank_head_offsets", &out.headOffset},
                      Entry{"rank_kv_heads", &out.kvHeads},
                      Entry{"rank_kv_head_offsets", &out.kvHeadOffset}}) {
    std::vector<int64_t> values;
    bool present = false;
    DSRT_RETURN_IF_ERROR(getInts(attrs, entry.name, values, present));
    if (!present)
      continue;
    if (rank < 0 || static_cast<size_t>(rank) >= values.size())
      return Status::error(
          concat(entry.name, " has ", values.size(), " entries, none for rank ", rank));
    *entry.value = values[rank];
  }
  const int64_t group = globalHeads / globalKvHeads;
  const bool fits = out.heads > 0 && out.kvHeads > 0 && out.headOffset >= 0 &&
                    out.kvHeadOffset >= 0 && out.headOffset + out.heads <= globalHeads &&
                    out.kvHeadOffset + out.kvHeads <= globalKvHeads &&
                    out.headOffset / group >= out.kvHeadOffset &&
                    (out.headOffset + out.heads - 1) / group < out.kvHeadOffset + out.kvHeads;
  if (!fits)
    return Status::error(concat("query heads [", out.headOffset, ", +", out.heads,
                                ") and KV heads [", out.kvHeadOffset, ", +", out.kvHeads,
                                ") of ", globalHeads, " and ", globalKvHeads,
                                " do not form whole groups"));
  return Status::ok();
}

Status floatOutputDType(const AttrMap &attrs, DType fallback, DType &out) {
  const Attr *attr;
  DSRT_RETURN_IF_ERROR(find(attrs, "output_dtype", Attr::Kind::Type, attr));
  out = attr ? attr->type : fallback;
  if (out != DType::F32 && out != DType::F16 && out != DType::BF16 && out != DType::F64)
    return Status::error(concat("output_dtype must be a float type, not ", dtypeName(out)));
  return Status::ok();
}

Status getString(const AttrMap &attrs, std::string_view name, std::string fallback,
                 std::string &out) {
  const Attr *attr;
  DSRT_RETURN_IF_ERROR(find(attrs, name, Attr::Kind::String, attr));
  out = attr ? attr->s : std::move(fallback);
  return Status::ok();
}

Status getInts(const AttrMap &attrs, std::string_view name, std::vector<int64_t> &out,
               bool &present) {
  const Attr *attr;
  DSRT_RETURN_IF_ERROR(find(attrs, name, Attr::Kind::Ints, attr));
  present = attr != nullptr;
  out = attr ? attr->ints : std::vector<int64_t>();
  return Status::ok();
}

} // namespace dsrt::ops
