// The dynamic dimensions of a graph's inputs and their sizes when a number of tokens sits in
// the cache and another number is new. Shape bounds and the recognisers' probes size graph
// inputs by them.
//
// A dimension's role is read from what the input is, never from the dimension's name: the
// token ids and positions are [batch, new], each cached key or value [batch, heads, past,
// head_dim], the padding mask [batch, past + new]. Exporters name these dimensions as they
// like ("batch"/"sequence", "b"/"s", dynamo's "s0", or nothing), so a name only decides a
// dimension that no input explains.
#ifndef DSC_COMPILER_LOWERING_SYMBOLICDIMS_H
#define DSC_COMPILER_LOWERING_SYMBOLICDIMS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsc {

struct TokenSplit {
  int64_t batch, past, fresh;
  // An encoder-decoder's decoder: the encoder's tokens, which its cross-attention reads;
  // negative: as many as past + fresh.
  int64_t source = -1;
};

enum class DimRole { Batch, Past, New, Total, Source };

// The role a dimension's name suggests: the fallback for a dimension no input explains.
DimRole roleOfName(llvm::StringRef symbol);

// What a graph input is to a transformer, from its name in the HuggingFace interface and
// its type.
// CrossStates: an encoder-decoder's encoder output, [batch, source, hidden], which its
// decoder reads; the dimensions it shares with other inputs (the encoder's padding mask, the
// cross-attention's cached keys and values) are the source's length.
enum class InputKind { TokenIds, Positions, TokenTypes, Mask, PastKV, CrossStates, Other };

class InputDims {
public:
  static InputDims of(mlir::func::FuncOp func);

  // Input `index`'s shape at `split`; static dimensions keep their size.
  llvm::SmallVector<int64_t> shapeAt(unsigned index, const TokenSplit &split) const;
  InputKind kindOf(unsigned index) const { return inputs_[index].kind; }
  // Whether some input holds cached tokens (a decoder exported with its KV cache).
  bool hasPast() const { return hasPast_; }
  // Whether input `index` has a dimension as long as an encoder's tokens (an
  // encoder-decoder's decoder: the encoder output, its padding mask, the cross-attention's
  // cached keys and values).
  bool readsSource(unsigned index) const;
  // What dimension `d` of input `index` is taken to be under the limits, in words ("the
  // cached and new tokens"), and whether only its name says so ("guessed from its name").
  std::string describe(unsigned index, unsigned d) const;

private:
  struct Dim {
    int64_t size;  // static size, or dynamic
    std::optional<DimRole> role;
    llvm::SmallVector<DimRole, 2> terms;  // a sum of dimensions ("p + s") of known roles
    int64_t constant = 0;                 // and a number ("past_sequence_length + 1")
    bool guessed = false;                 // the role comes from the name alone
  };
  struct Input {
    InputKind kind;
    std::vector<Dim> dims;
  };
  std::vector<Input> inputs_;
  bool hasPast_ = false;
};

} // namespace dsc

#endif
