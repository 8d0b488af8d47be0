// A HuggingFace tokenizer.json, for the tokenizer families the compiler's models use:
// byte-level BPE (GPT-2, OPT, GPT-J, GPT-Neo, BLOOM, Llama-3, Roberta), SentencePiece-style
// BPE with byte fallback (Llama-2, Mistral) and SentencePiece Unigram with its precompiled
// normalization rules (T5, mT5). Encoding and decoding give the ids and text `tokenizers`
// gives. Any component or option outside that set is refused when loading, with a message
// naming it, rather than tokenized differently.
#ifndef DSRT_TOKENIZER_TOKENIZER_H
#define DSRT_TOKENIZER_TOKENIZER_H

#include "core/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt {

class Tokenizer {
public:
  static Status fromJson(std::string_view json, std::unique_ptr<Tokenizer> &out);
  static Status fromFile(const std::string &path, std::unique_ptr<Tokenizer> &out);
  ~Tokenizer();
  Tokenizer(const Tokenizer &) = delete;
  Tokenizer &operator=(const Tokenizer &) = delete;

  // `utf8` must be valid UTF-8. `addSpecial` runs the post-processor (BOS for Llama, OPT;
  // </s> after the text for T5). A Unigram model without unk_id fails on a character it
  // cannot spell, as `tokenizers` does.
  Status encode(std::string_view utf8, bool addSpecial, std::vector<int64_t> &ids) const;
  // Every id must be in the vocabulary; invalid UTF-8 that byte tokens spell becomes U+FFFD.
  Status decode(const int64_t *ids, size_t count, bool skipSpecial, std::string &text) const;
  Status decode(const std::vector<int64_t> &ids, bool skipSpecial, std::string &text) const {
    return decode(ids.data(), ids.size(), skipSpecial, text);
  }

  // One past the largest id (model vocabulary and added tokens).
  int64_t vocabSize() const;
  // The token as the vocabulary spells it ("Ġthe", "▁the", "<0x0A>"); "" for an unknown id.
  // Streaming callers decode a growing id sequence instead, since one token can be part of
  // a character.
  std::string tokenText(int64_t id) const;
  // The id of a vocabulary entry or added token spelt exactly `content`; -1 if none.
  int64_t tokenId(std::string_view content) const;
  bool isSpecial(int64_t id) const;
  // The beginning- and end-of-sequence tokens by their conventional spellings ("<s>",
  // "<|begin_of_text|>", "<|endoftext|>", ...; the post-processor's first token for BOS);
  // -1 when the tokenizer has none.
  int64_t bosId() const;
  int64_t eosId() const;

private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace dsrt

#endif
