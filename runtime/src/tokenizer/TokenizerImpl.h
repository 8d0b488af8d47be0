// Internal to dsrt_tokenizer: the parsed tokenizer.json shared by the files that implement
// one kind of component each (AddedTokens, Normalizers, Precompiled, PreTokenizers, Bpe,
// Unigram, PostProcessors, Decoders; Tokenizer.cpp ties them together). Nothing outside
// runtime/src/tokenizer includes this, so nlohmann-json stays out of Tokenizer.h.
#ifndef DSRT_TOKENIZER_TOKENIZERIMPL_H
#define DSRT_TOKENIZER_TOKENIZERIMPL_H

#include "tokenizer/SplitPatterns.h"
#include "tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dsrt {
namespace tok {

using Json = nlohmann::json;

extern const char *const kReplacementChar;

// Every loading error starts "tokenizer.json: "; fromFile swaps that for the path.
Status invalid(const std::string &message);
Status unsupportedType(const std::string &component, const std::string &type);
Status unsupportedOption(const std::string &component, const std::string &option,
                         const Json &value);

// Optional members: absent and null read as the default; a value of another type is an
// error, as in `tokenizers`.
Status readBool(const Json &object, const char *key, bool fallback, const std::string &where,
                bool &out);
Status readString(const Json &object, const char *key, const std::string &where,
                  std::string &out);
Status readType(const Json &object, const std::string &where, std::string &type);
// A Sequence component: each element of its array `key`, in order, through `load`.
Status loadSequence(const Json &node, const char *key, const std::string &where,
                    const std::function<Status(const Json &)> &load);
// A {"String": s} pattern: what the Replace decoder of SentencePiece-style tokenizers uses.
// Regex patterns are refused.
Status readStringPattern(const Json &object, const std::string &where, std::string &out);

bool startsWith(std::string_view text, std::string_view prefix);
void replaceAll(std::string &text, const std::string &pattern, const std::string &content);
char32_t firstCodePoint(std::string_view text);
char32_t lastCodePoint(std::string_view text);

// GPT-2's reversible byte -> code point map: printable Latin-1 bytes stand for themselves,
// the others for 256, 257, ... in byte order.
struct ByteMap {
  std::array<std::string, 256> byteToText;
  std::unordered_map<char32_t, unsigned char> charToByte;
  ByteMap();
};
const ByteMap &byteMap();

struct AddedToken {
  std::string content;
  int64_t id = -1;
  bool special = false, normalized = false, lstrip = false, rstrip = false, singleWord = false;
};

// Text on its way through the normalizer and the pre-tokenizer, with where in the original
// text it comes from: `tokenizers`' NormalizedString reduced to what it reads back, the
// start of its original range (offsets_original().0, which Metaspace's prepend_scheme
// "first" compares with 0) and, for each byte, the start of its alignment, from which the
// pieces cut out of it get theirs. Strip, Replace and Precompiled move these in ways that
// only following NormalizedString's own bookkeeping reproduces.
struct Piece {
  std::string text;
  std::vector<size_t> origin;  // one per byte of text
  size_t start = 0;

  // `text` as it is in the original, which it starts at offset `start` of.
  static Piece original(std::string_view text, size_t start);
  // text[begin, end), not empty.
  Piece slice(size_t begin, size_t end) const;
  // What NormalizedString::prepend and replace do to the alignments: prepended text takes
  // the first character's, a replacement the last replaced byte's.
  void prepend(const std::string &prefix);
  void replace(const std::vector<std::pair<size_t, size_t>> &matches, const std::string &content);
};

class PrecompiledCharsMap;

struct NormalizerStep {
  enum Kind { Prepend, Replace, Strip, Precompiled } kind;
  // Replace: a String pattern, or with minRepeat > 0, a run of at least minRepeat of the one
  // character in `pattern` (the regex " {2,}" of T5 and ALBERT).
  std::string pattern;
  size_t minRepeat = 0;
  std::string content;  // Prepend, Replace
  bool stripLeft = false, stripRight = false;  // Strip
  std::shared_ptr<const PrecompiledCharsMap> charsMap;  // Precompiled
};

enum class PrependScheme { Always, First, Never };

Status readPrependScheme(const Json &object, const std::string &where, PrependScheme &out);

struct PreTokenizerStep {
  enum Kind { ByteLevel, Split, Metaspace, WhitespaceSplit } kind;
  bool addPrefixSpace = false;  // ByteLevel
  bool useRegex = false;        // ByteLevel
  SplitPattern pattern = SplitPattern::Gpt2;  // Split
  std::string replacement;      // Metaspace
  PrependScheme prependScheme = PrependScheme::Always;
  bool split = false;           // Metaspace
};

// One piece of the post-processor's template: a run of special ids, or the encoded text.
struct TemplatePiece {
  bool isSequence = false;
  std::vector<int64_t> ids;
};

struct DecoderStep {
  enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
  std::string pattern, content;  // Replace; Strip's content; Metaspace's replacement
  size_t start = 0, stop = 0;    // Strip
  PrependScheme prependScheme = PrependScheme::Always;  // Metaspace
};

class UnigramModel;

// A run of text between added tokens (id -1), or one added token.
struct Segment {
  size_t begin = 0, end = 0;
  int64_t id = -1;
};

} // namespace tok

struct Tokenizer::Impl {
  using Json = tok::Json;

  Impl();
  ~Impl();

  // Every model's token -> id (for Unigram the last of equal pieces, as `tokenizers` has it).
  std::unordered_map<std::string, int64_t> vocab;
  std::unique_ptr<tok::UnigramModel> unigram;  // null for BPE

  // The BPE model.
  struct Merge {
    uint32_t rank;
    int64_t result;
  };
  std::unordered_map<uint64_t, Merge> merges;
  int64_t unkId = -1;
  bool fuseUnk = false, byteFallback = false, ignoreMerges = false;

  std::vector<tok::AddedToken> added;  // special ones first, as `tokenizers` orders its matcher
  std::unordered_map<std::string, size_t> addedByContent;
  std::unordered_map<int64_t, size_t> addedById;
  std::unordered_set<std::string> specialContents;
  // Added tokens matched on the raw text and on the normalized pieces, with the normalized
  // spelling for the latter.
  std::vector<std::pair<std::string, size_t>> rawMatchers, normalizedMatchers;

  std::vector<std::string> idToToken;  // "" where no token has the id
  std::vector<char> idKnown;

  std::vector<tok::NormalizerStep> normalizer;
  std::vector<tok::PreTokenizerStep> preTokenizer;
  bool hasTemplate = false;
  std::vector<tok::TemplatePiece> singleTemplate;
  bool hasDecoder = false;
  std::vector<tok::DecoderStep> decoder;
  int64_t bos = -1, eos = -1;

  Status loadModel(const Json &model);
  Status loadBpe(const Json &model);
  Status loadAddedTokens(const Json &tokens);
  Status loadNormalizer(const Json &node, const std::string &where);
  Status loadPreTokenizer(const Json &node, const std::string &where);
  Status loadPostProcessor(const Json &node, const std::string &where);
  Status loadDecoder(const Json &node, const std::string &where);
  Status finish();

  void normalize(tok::Piece &piece) const;
  void splitAdded(std::string_view text,
                  const std::vector<std::pair<std::string, size_t>> &matchers,
                  std::vector<tok::Segment> &out) const;
  void preTokenize(const tok::Piece &part, std::vector<tok::Piece> &pieces) const;
  // The model's ids for one piece of the pre-tokenizer.
  Status tokenize(const std::string &piece, std::vector<int64_t> &ids) const;
  void bpe(const std::string &piece, std::vector<int64_t> &ids) const;
  // The decoder's steps over the tokens of the ids being decoded.
  void decodeTokens(std::vector<std::string> &tokens) const;
};

} // namespace dsrt

#endif
