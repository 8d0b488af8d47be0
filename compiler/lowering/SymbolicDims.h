// The symbolic dimensions exporters name (batch, sequence, past_sequence,
// "past_sequence + sequence", Optimum's attention_mask_sequence_length and
// "past_sequence_length + 1"), and their sizes when a number of tokens sits in the cache and
// another number is new. Shape bounds and the recognisers' probes size graph inputs by them.
#ifndef DSC_COMPILER_LOWERING_SYMBOLICDIMS_H
#define DSC_COMPILER_LOWERING_SYMBOLICDIMS_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace dsc {

struct TokenSplit {
  int64_t batch, past, fresh;
};

enum class DimRole { Batch, Past, New, Total };

DimRole roleOf(llvm::StringRef symbol);

// A sum is evaluated term by term, except that a sum naming the past is the cached plus the
// new tokens: Optimum names the mask's width "past_sequence_length + 1" after the one new
// token of its trace, whatever the number of new tokens.
int64_t dimensionAt(llvm::StringRef symbol, const TokenSplit &split);

} // namespace dsc

#endif
