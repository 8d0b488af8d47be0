// Attribute values and their typed access.
#include "ops/Kernel.h"

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
