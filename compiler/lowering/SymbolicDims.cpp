#include "compiler/lowering/SymbolicDims.h"
#include "frontends/onnx/ImportAttrs.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/StringMap.h"

#include <string>

using namespace mlir;

namespace dsc {

DimRole roleOfName(llvm::StringRef symbol) {
  std::string name = symbol.lower();
  if (name.find("batch") != std::string::npos)
    return DimRole::Batch;
  if (name.find("total") != std::string::npos || name.find("attention_mask") != std::string::npos)
    return DimRole::Total;
  if (name.find("past") != std::string::npos || name.find("cache") != std::string::npos)
    return DimRole::Past;
  return DimRole::New;
}

namespace {

InputKind inputKind(func::FuncOp func, unsigned index, llvm::StringRef name,
                    RankedTensorType type) {
  // The importer marks the encoder output it found in an encoder-decoder's decoder.
  if (func.getArgAttr(index, onnx_frontend::kCrossStatesAttr))
    return InputKind::CrossStates;
  bool isFloat = isa<FloatType>(type.getElementType());
  if (!isFloat && type.getRank() == 2) {
    if (name.contains("input_ids"))
      return InputKind::TokenIds;
    if (name.contains("position"))
      return InputKind::Positions;
    if (name.contains("token_type"))
      return InputKind::TokenTypes;
    if (name.contains("mask"))
      return InputKind::Mask;
  }
  if (isFloat && type.getRank() == 3 && name.contains("inputs_embeds"))
    return InputKind::TokenIds;
  // A cached key or value: [batch, heads, past, head_dim] (or [batch, past, heads, head_dim]
  // for exports that keep the cache unpermuted, whose dynamic dimension is then the second).
  // An additive mask or bias input is [batch, heads, new, total]: no cache.
  if (isFloat && type.getRank() == 4 && !name.contains("mask") && !name.contains("bias") &&
      (type.isDynamicDim(2) || type.isDynamicDim(1)))
    return InputKind::PastKV;
  return InputKind::Other;
}

// The role the input's kind gives its dimension `d`, if any.
std::optional<DimRole> structuralRole(InputKind kind, RankedTensorType type, unsigned d) {
  switch (kind) {
  case InputKind::TokenIds:
  case InputKind::Positions:
  case InputKind::TokenTypes:
    if (d == 0) return DimRole::Batch;
    if (d == 1) return DimRole::New;
    return std::nullopt;
  case InputKind::Mask:
    if (d == 0) return DimRole::Batch;
    if (d == 1) return DimRole::Total;
    return std::nullopt;
  case InputKind::PastKV:
    if (d == 0) return DimRole::Batch;
    if (d == 2 && type.isDynamicDim(2)) return DimRole::Past;
    if (d == 1 && !type.isDynamicDim(2)) return DimRole::Past;
    return std::nullopt;
  case InputKind::CrossStates:
    if (d == 0) return DimRole::Batch;
    if (d == 1) return DimRole::Source;
    return std::nullopt;
  case InputKind::Other:
    return std::nullopt;
  }
  return std::nullopt;
}

} // namespace

InputDims InputDims::of(func::FuncOp func) {
  InputDims result;
  struct Named {
    llvm::StringRef symbol;
    std::optional<DimRole> structural;
  };
  std::vector<std::vector<Named>> named(func.getNumArguments());
  // What each input is, and the roles its kind gives its dimensions' symbols. An encoder
  // output decides first (the encoder's mask and the cross-attention's cached keys share
  // its length), then token ids and cached keys, then the mask: a graph without a cache has
  // one symbol for the ids' and the mask's width, and that symbol is the new tokens.
  llvm::StringMap<DimRole> symbolRoles;
  for (int pass = 0; pass < 3; ++pass) {
    for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
      auto type = dyn_cast<RankedTensorType>(argument.getType());
      auto nameAttr = func.getArgAttrOfType<StringAttr>(index, "onnx.name");
      llvm::StringRef name = nameAttr ? nameAttr.getValue() : "";
      InputKind kind = type ? inputKind(func, index, name, type) : InputKind::Other;
      int passOfKind = kind == InputKind::CrossStates ? 0 : kind == InputKind::Mask ? 2 : 1;
      if (passOfKind != pass)
        continue;
      auto dims = func.getArgAttrOfType<ArrayAttr>(index, "onnx.dims");
      if (!type)
        continue;
      for (unsigned d = 0; d < type.getRank(); ++d) {
        llvm::StringRef symbol =
            dims && d < dims.size() ? cast<StringAttr>(dims[d]).getValue() : "";
        std::optional<DimRole> role =
            type.isDynamicDim(d) ? structuralRole(kind, type, d) : std::nullopt;
        named[index].push_back({symbol, role});
        if (role && !symbol.empty())
          symbolRoles.try_emplace(symbol, *role);
      }
    }
  }
  auto roleOfSymbol = [&](llvm::StringRef symbol) {
    auto it = symbolRoles.find(symbol);
    return it != symbolRoles.end() ? it->second : roleOfName(symbol);
  };
  for (auto [index, argument] : llvm::enumerate(func.getArguments())) {
    Input input;
    auto type = dyn_cast<RankedTensorType>(argument.getType());
    auto nameAttr = func.getArgAttrOfType<StringAttr>(index, "onnx.name");
    input.kind =
        type ? inputKind(func, index, nameAttr ? nameAttr.getValue() : "", type) : InputKind::Other;
    if (type) {
      for (unsigned d = 0; d < type.getRank(); ++d) {
        Dim dim{type.getDimSize(d), std::nullopt, {}, 0};
        if (type.isDynamicDim(d)) {
          const Named &n = named[index][d];
          auto known = symbolRoles.find(n.symbol);
          if (known != symbolRoles.end())
            dim.role = known->second;  // ids and mask share "sequence" without a cache
          else if (n.structural)
            dim.role = n.structural;
          else if (n.symbol.contains('+')) {
            llvm::SmallVector<llvm::StringRef> terms;
            n.symbol.split(terms, '+');
            for (llvm::StringRef term : terms) {
              term = term.trim();
              int64_t number;
              if (term.getAsInteger(10, number))
                dim.terms.push_back(roleOfSymbol(term));
              else
                dim.constant += number;
            }
          } else {
            dim.role = roleOfSymbol(n.symbol);
            dim.guessed = true;
          }
        }
        result.hasPast_ |= dim.role == DimRole::Past;
        input.dims.push_back(dim);
      }
    }
    result.inputs_.push_back(std::move(input));
  }
  return result;
}

std::string InputDims::describe(unsigned index, unsigned d) const {
  if (index >= inputs_.size() || d >= inputs_[index].dims.size())
    return "a dimension the inputs do not have";
  const Dim &dim = inputs_[index].dims[d];
  if (!ShapedType::isDynamic(dim.size))
    return "static";
  auto words = [](DimRole role) -> std::string {
    switch (role) {
    case DimRole::Batch: return "the batch";
    case DimRole::Past: return "the cached tokens";
    case DimRole::New: return "the new tokens";
    case DimRole::Total: return "the cached and new tokens";
    case DimRole::Source: return "the encoder's tokens";
    }
    return "the new tokens";
  };
  if (dim.role)
    return (dim.guessed ? "guessed from its name as " : "") + words(*dim.role);
  std::string sum;
  for (DimRole term : dim.terms)
    sum += (sum.empty() ? "" : " + ") + words(term);
  if (dim.constant)
    sum += (sum.empty() ? "" : " + ") + std::to_string(dim.constant);
  return "a sum, " + sum;
}

bool InputDims::readsSource(unsigned index) const {
  for (const Dim &dim : inputs_[index].dims)
    if (dim.role == DimRole::Source)
      return true;
  return false;
}

llvm::SmallVector<int64_t> InputDims::shapeAt(unsigned index, const TokenSplit &split) const {
  auto size = [&](DimRole role) -> int64_t {
    switch (role) {
    case DimRole::Batch: return split.batch;
    case DimRole::Past: return split.past;
    case DimRole::New: return split.fresh;
    case DimRole::Total: return split.past + split.fresh;
    case DimRole::Source: return split.source >= 0 ? split.source : split.past + split.fresh;
    }
    return split.fresh;
  };
  llvm::SmallVector<int64_t> shape;
  for (const Dim &dim : inputs_[index].dims) {
    if (!ShapedType::isDynamic(dim.size)) {
      shape.push_back(dim.size);
    } else if (dim.role) {
      shape.push_back(size(*dim.role));
    } else {
      int64_t sum = dim.constant;
      for (DimRole term : dim.terms)
        sum += size(term);
      shape.push_back(sum);
    }
  }
  return shape;
}

} // namespace dsc
