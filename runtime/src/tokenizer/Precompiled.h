// SentencePiece's precompiled_charsmap (nmt_nfkc and the other normalization rules a
// SentencePiece model carries), applied as `tokenizers`' Precompiled normalizer does.
#ifndef DSRT_TOKENIZER_PRECOMPILED_H
#define DSRT_TOKENIZER_PRECOMPILED_H

#include "tokenizer/TokenizerImpl.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt::tok {

class PrecompiledCharsMap {
public:
  // The charsmap as tokenizer.json holds it: base64 of a little-endian uint32 byte size of
  // the trie, the trie (a Darts-clone double array of uint32 units whose leaves are offsets
  // into what follows), then the replacements, NUL-terminated UTF-8. Anything that could
  // make a lookup leave the array or a replacement is refused here, where `tokenizers` would
  // panic on the first text that reaches it.
  static Status fromBase64(std::string_view base64, const std::string &where,
                           std::shared_ptr<PrecompiledCharsMap> &out);

  // Each extended grapheme cluster shorter than 6 bytes is replaced by the replacement of
  // the shortest key it starts with, if any (so a cluster whose first character has a rule
  // loses its other characters, as in `tokenizers`); the characters of any other cluster
  // are replaced one by one. The alignments change as NormalizedString::transform changes
  // them.
  void normalize(Piece &piece) const;

private:
  // The replacement of the shortest key that `bytes` starts with (the trie walk stops at a
  // NUL byte); false if none.
  bool shortestMatch(std::string_view bytes, std::string_view &replacement) const;

  std::vector<uint32_t> units_;
  std::string replacements_;
};

} // namespace dsrt::tok

#endif
