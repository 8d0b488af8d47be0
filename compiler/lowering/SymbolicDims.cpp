#include "compiler/lowering/SymbolicDims.h"

#include "llvm/ADT/SmallVector.h"

#include <string>

namespace dsc {

DimRole roleOf(llvm::StringRef symbol) {
  std::string name = symbol.lower();
  if (name.find("batch") != std::string::npos)
    return DimRole::Batch;
  if (name.find("total") != std::string::npos || name.find("attention_mask") != std::string::npos)
    return DimRole::Total;
  if (name.find("past") != std::string::npos)
    return DimRole::Past;
  return DimRole::New;
}

int64_t dimensionAt(llvm::StringRef symbol, const TokenSplit &split) {
  if (symbol.contains('+')) {
    if (symbol.lower().find("past") != std::string::npos)
      return split.past + split.fresh;
    int64_t sum = 0;
    llvm::SmallVector<llvm::StringRef> terms;
    symbol.split(terms, '+');
    for (llvm::StringRef term : terms) {
      term = term.trim();
      int64_t number;
      sum += term.getAsInteger(10, number) ? dimensionAt(term, split) : number;
    }
    return sum;
  }
  switch (roleOf(symbol)) {
  case DimRole::Batch: return split.batch;
  case DimRole::Past: return split.past;
  case DimRole::New: return split.fresh;
  case DimRole::Total: return split.past + split.fresh;
  }
  return split.fresh;
}

} // namespace dsc
