// The Unigram model (SentencePiece's, as T5, mT5 and ALBERT use it): the segmentation of a
// piece whose pieces' scores (log probabilities) sum highest, as `tokenizers`' Unigram
// finds it.
#ifndef DSRT_TOKENIZER_UNIGRAM_H
#define DSRT_TOKENIZER_UNIGRAM_H

#include "tokenizer/TokenizerImpl.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dsrt::tok {

class UnigramModel {
public:
  // model.vocab ([[piece, score], ...], the id is the index), model.unk_id (null: none),
  // model.byte_fallback. `tokenIds` gets each piece's id, the last of equal pieces winning.
  static Status load(const Json &model, std::unique_ptr<UnigramModel> &out,
                     std::unordered_map<std::string, int64_t> &tokenIds);

  const std::vector<std::string> &pieces() const { return pieces_; }

  // Unigram::encode_optimized and tokenize: a Viterbi pass over the piece's characters,
  // the best path ending at each position kept (ties to the path found first, i.e. the
  // longest last piece), characters without a piece of their own taking the unk_id at the
  // lowest score minus 10; consecutive unknown characters become one token, which is then
  // spelt with byte tokens if byte_fallback has all of them, or is unk_id. An error only if
  // an unknown character is on the best path and there is no unk_id.
  Status encode(std::string_view text, std::vector<int64_t> &ids) const;

private:
  // Calls `found(length, id)` for every piece that `text` starts with, shortest first.
  template <typename Found> void prefixes(std::string_view text, Found &&found) const;
  // The id of the piece spelt `text`; -1 if none.
  int64_t idOf(std::string_view text) const;

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  // The id of each non-empty spelling (the last of equal pieces), sorted by spelling: the
  // prefix search walks down it one byte at a time, as down a trie.
  std::vector<uint32_t> sorted_;
  double unkScore_ = 0;
  int64_t unkId_ = -1;
  bool byteFallback_ = false;
  std::array<int64_t, 256> byteIds_{};  // <0xNN> pieces, -1 where absent
};

} // namespace dsrt::tok

#endif
