#include "tokenizer/Tokenizer.h"

#include "tokenizer/SplitPatterns.h"
#include "tokenizer/Unicode.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace dsrt {
namespace {

using Json = nlohmann::json;

const char *const kReplacementChar = "\xEF\xBF\xBD";

Status invalid(const std::string &message) {
  return Status::error("tokenizer.json: " + message);
}
Status unsupportedType(const std::string &component, const std::string &type) {
  return invalid(component + " type '" + type + "' is not supported");
}
Status unsupportedOption(const std::string &component, const std::string &option,
                         const Json &value) {
  return invalid(component + " option " + option + " = " + value.dump() + " is not supported");
}

// Optional members: absent and null read as the default; a value of another type is an
// error, as in `tokenizers`.
Status readBool(const Json &object, const char *key, bool fallback, const std::string &where,
                bool &out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    out = fallback;
    return Status::ok();
  }
  if (!it->is_boolean())
    return invalid(where + "." + key + " must be a boolean");
  out = it->get<bool>();
  return Status::ok();
}

Status readString(const Json &object, const char *key, const std::string &where,
                  std::string &out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string())
    return invalid(where + "." + key + " must be a string");
  out = it->get<std::string>();
  return Status::ok();
}

Status readType(const Json &object, const std::string &where, std::string &type) {
  if (!object.is_object())
    return invalid(where + " must be an object or null");
  return readString(object, "type", where, type);
}

// A {"String": s} pattern: what the Replace normalizer and decoder of SentencePiece-style
// tokenizers use. Regex patterns are refused.
Status readStringPattern(const Json &object, const std::string &where, std::string &out) {
  auto it = object.find("pattern");
  if (it == object.end() || !it->is_object())
    return invalid(where + ".pattern must be an object");
  auto string = it->find("String");
  if (string == it->end() || !string->is_string())
    return invalid(where + ".pattern " + it->dump() + " is not supported (only String)");
  out = string->get<std::string>();
  return Status::ok();
}

bool startsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

void replaceAll(std::string &text, const std::string &pattern, const std::string &content) {
  if (pattern.empty())
    return;
  std::string out;
  size_t from = 0;
  for (size_t at; (at = text.find(pattern, from)) != std::string::npos; from = at + pattern.size())
    out.append(text, from, at - from).append(content);
  out.append(text, from, std::string::npos);
  text = std::move(out);
}

// GPT-2's reversible byte -> code point map: printable Latin-1 bytes stand for themselves,
// the others for 256, 257, ... in byte order.
struct ByteMap {
  std::array<std::string, 256> byteToText;
  std::unordered_map<char32_t, unsigned char> charToByte;
  ByteMap() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char32_t c = printable ? static_cast<char32_t>(b) : next++;
      unicode::append(c, byteToText[b]);
      charToByte[c] = static_cast<unsigned char>(b);
    }
  }
};

const ByteMap &byteMap() {
  static const ByteMap map;
  return map;
}

struct AddedToken {
  std::string content;
  int64_t id = -1;
  bool special = false, normalized = false, lstrip = false, rstrip = false, singleWord = false;
};

struct NormalizerStep {
  enum Kind { Prepend, Replace } kind;
  std::string pattern;  // Replace
  std::string content;  // Prepend, Replace
};

enum class PrependScheme { Always, First, Never };

Status readPrependScheme(const Json &object, const std::string &where, PrependScheme &out) {
  auto it = object.find("prepend_scheme");
  if (it == object.end() || it->is_null()) {
    // Files older than tokenizers 0.14 spell it add_prefix_space.
    bool addPrefixSpace;
    DSRT_RETURN_IF_ERROR(readBool(object, "add_prefix_space", true, where, addPrefixSpace));
    out = addPrefixSpace ? PrependScheme::Always : PrependScheme::Never;
    return Status::ok();
  }
  std::string scheme = it->is_string() ? it->get<std::string>() : "";
  if (scheme == "always")
    out = PrependScheme::Always;
  else if (scheme == "first")
    out = PrependScheme::First;
  else if (scheme == "never")
    out = PrependScheme::Never;
  else
    return unsupportedOption(where, "prepend_scheme", *it);
  return Status::ok();
}

struct PreTokenizerStep {
  enum Kind { ByteLevel, Split, Metaspace } kind;
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

uint64_t pairKey(int64_t left, int64_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
}

} // namespace

struct Tokenizer::Impl {
  // The BPE model.
  std::unordered_map<std::string, int64_t> vocab;
  struct Merge {
    uint32_t rank;
    int64_t result;
  };
  std::unordered_map<uint64_t, Merge> merges;
  int64_t unkId = -1;
  bool fuseUnk = false, byteFallback = false, ignoreMerges = false;

  std::vector<AddedToken> added;  // special ones first, as `tokenizers` orders its matcher
  std::unordered_map<std::string, size_t> addedByContent;
  std::unordered_map<int64_t, size_t> addedById;
  std::unordered_set<std::string> specialContents;
  // Added tokens matched on the raw text and on the normalized pieces, with the normalized
  // spelling for the latter.
  std::vector<std::pair<std::string, size_t>> rawMatchers, normalizedMatchers;

  std::vector<std::string> idToToken;  // "" where no token has the id
  std::vector<char> idKnown;

  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> preTokenizer;
  bool hasTemplate = false;
  std::vector<TemplatePiece> singleTemplate;
  bool hasDecoder = false;
  std::vector<DecoderStep> decoder;
  int64_t bos = -1, eos = -1;

  Status loadModel(const Json &model);
  Status loadAddedTokens(const Json &tokens);
  Status loadNormalizer(const Json &node, const std::string &where);
  Status loadPreTokenizer(const Json &node, const std::string &where);
  Status loadPostProcessor(const Json &node, const std::string &where);
  Status loadDecoder(const Json &node, const std::string &where);
  Status finish();

  std::string normalize(std::string text) const;
  void splitAdded(const std::string &text,
                  const std::vector<std::pair<std::string, size_t>> &matchers,
                  std::vector<std::pair<std::string, int64_t>> &out) const;
  void preTokenize(const std::string &segment, bool atTextStart,
                   std::vector<std::string> &pieces) const;
  void bpe(const std::string &piece, std::vector<int64_t> &ids) const;
};

// ---- Loading -------------------------------------------------------------------------------

Status Tokenizer::Impl::loadModel(const Json &model) {
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(model, "model", type));
  if (type != "BPE")
    return unsupportedType("model", type);
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null())
    return unsupportedOption("model", "dropout", *it);
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      return unsupportedOption("model", key, *it);
  }
  DSRT_RETURN_IF_ERROR(readBool(model, "fuse_unk", false, "model", fuseUnk));
  DSRT_RETURN_IF_ERROR(readBool(model, "byte_fallback", false, "model", byteFallback));
  DSRT_RETURN_IF_ERROR(readBool(model, "ignore_merges", false, "model", ignoreMerges));

  auto vocabIt = model.find("vocab");
  if (vocabIt == model.end() || !vocabIt->is_object())
    return invalid("model.vocab must be an object");
  for (auto it = vocabIt->begin(); it != vocabIt->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX)
      return invalid("model.vocab['" + it.key() + "'] must be an id in [0, 2^31)");
    vocab[it.key()] = it.value().get<int64_t>();
  }

  auto mergesIt = model.find("merges");
  if (mergesIt == model.end() || !mergesIt->is_array())
    return invalid("model.merges must be an array");
  uint32_t rank = 0;
  for (const Json &merge : *mergesIt) {
    std::string left, right;
    if (merge.is_string()) {
      // "a b": exactly one space, as `tokenizers` splits it.
      const std::string &text = merge.get_ref<const std::string &>();
      size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        return invalid("model.merges entry '" + text + "' is not two tokens");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return invalid("model.merges entry " + merge.dump() + " is not two tokens");
    }
    auto leftId = vocab.find(left), rightId = vocab.find(right), result = vocab.find(left + right);
    if (leftId == vocab.end() || rightId == vocab.end() || result == vocab.end())
      return invalid("model.merges entry '" + left + " " + right + "' uses a token that is not in model.vocab");
    merges.emplace(pairKey(leftId->second, rightId->second), Merge{rank++, result->second});
  }

  auto unk = model.find("unk_token");
  if (unk != model.end() && !unk->is_null()) {
    if (!unk->is_string())
      return invalid("model.unk_token must be a string or null");
    auto it = vocab.find(unk->get<std::string>());
    if (it == vocab.end())
      return invalid("model.unk_token '" + unk->get<std::string>() + "' is not in model.vocab");
    unkId = it->second;
  }
  return Status::ok();
}

Status Tokenizer::Impl::loadAddedTokens(const Json &tokens) {
  if (tokens.is_null())
    return Status::ok();
  if (!tokens.is_array())
    return invalid("added_tokens must be an array");
  for (const Json &entry : tokens) {
    if (!entry.is_object())
      return invalid("added_tokens entries must be objects");
    AddedToken token;
    DSRT_RETURN_IF_ERROR(readString(entry, "content", "added_tokens", token.content));
    auto id = entry.find("id");
    if (id == entry.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > INT32_MAX)
      return invalid("added token '" + token.content + "' has no valid id");
    token.id = id->get<int64_t>();
    std::string where = "added token '" + token.content + "'";
    DSRT_RETURN_IF_ERROR(readBool(entry, "special", false, where, token.special));
    DSRT_RETURN_IF_ERROR(readBool(entry, "normalized", !token.special, where, token.normalized));
    DSRT_RETURN_IF_ERROR(readBool(entry, "lstrip", false, where, token.lstrip));
    DSRT_RETURN_IF_ERROR(readBool(entry, "rstrip", false, where, token.rstrip));
    DSRT_RETURN_IF_ERROR(readBool(entry, "single_word", false, where, token.singleWord));
    if (token.content.empty() || !unicode::isValid(token.content))
      return invalid(where + " is empty or not UTF-8");
    added.push_back(std::move(token));
  }
  std::stable_partition(added.begin(), added.end(), [](const AddedToken &t) { return t.special; });
  for (size_t i = 0; i < added.size(); ++i) {
    addedByContent.emplace(added[i].content, i);
    addedById[added[i].id] = i;
    if (added[i].special)
      specialContents.insert(added[i].content);
  }
  return Status::ok();
}

Status Tokenizer::Impl::loadNormalizer(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence") {
    auto it = node.find("normalizers");
    if (it == node.end() || !it->is_array())
      return invalid(where + ".normalizers must be an array");
    for (const Json &child : *it)
      DSRT_RETURN_IF_ERROR(loadNormalizer(child, where));
    return Status::ok();
  }
  if (type == "Prepend") {
    NormalizerStep step{NormalizerStep::Prepend, "", ""};
    DSRT_RETURN_IF_ERROR(readString(node, "prepend", where, step.content));
    normalizer.push_back(std::move(step));
    return Status::ok();
  }
  if (type == "Replace") {
    NormalizerStep step{NormalizerStep::Replace, "", ""};
    DSRT_RETURN_IF_ERROR(readStringPattern(node, where, step.pattern));
    DSRT_RETURN_IF_ERROR(readString(node, "content", where, step.content));
    if (step.pattern.empty())
      return invalid(where + " Replace has an empty pattern");
    normalizer.push_back(std::move(step));
    return Status::ok();
  }
  return unsupportedType(where, type);
}

Status Tokenizer::Impl::loadPreTokenizer(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence") {
    auto it = node.find("pretokenizers");
    if (it == node.end() || !it->is_array())
      return invalid(where + ".pretokenizers must be an array");
    for (const Json &child : *it)
      DSRT_RETURN_IF_ERROR(loadPreTokenizer(child, where));
    return Status::ok();
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::ByteLevel;
    DSRT_RETURN_IF_ERROR(readBool(node, "add_prefix_space", true, where, step.addPrefixSpace));
    DSRT_RETURN_IF_ERROR(readBool(node, "use_regex", true, where, step.useRegex));
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Split;
    auto pattern = node.find("pattern");
    if (pattern == node.end() || !pattern->is_object())
      return invalid(where + " Split has no pattern");
    auto regex = pattern->find("Regex");
    if (regex == pattern->end() || !regex->is_string())
      return invalid(where + " Split pattern " + pattern->dump() + " is not supported");
    if (!recogniseSplitPattern(regex->get<std::string>(), step.pattern))
      return invalid(where + " Split pattern " + regex->dump() +
                     " is not supported (only the GPT-2, Llama-3 and BLOOM patterns are)");
    std::string behavior;
    DSRT_RETURN_IF_ERROR(readString(node, "behavior", where, behavior));
    if (behavior != "Isolated")
      return unsupportedOption(where + " Split", "behavior", behavior);
    bool invert;
    DSRT_RETURN_IF_ERROR(readBool(node, "invert", false, where, invert));
    if (invert)
      return unsupportedOption(where + " Split", "invert", true);
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Metaspace;
    DSRT_RETURN_IF_ERROR(readString(node, "replacement", where, step.replacement));
    std::vector<char32_t> codePoints;
    if (!unicode::decode(step.replacement, codePoints) || codePoints.size() != 1)
      return invalid(where + " Metaspace replacement must be one character");
    DSRT_RETURN_IF_ERROR(readPrependScheme(node, where, step.prependScheme));
    DSRT_RETURN_IF_ERROR(readBool(node, "split", true, where, step.split));
  } else {
    return unsupportedType(where, type);
  }
  preTokenizer.push_back(std::move(step));
  return Status::ok();
}

Status Tokenizer::Impl::loadPostProcessor(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence") {
    auto it = node.find("processors");
    if (it == node.end() || !it->is_array())
      return invalid(where + ".processors must be an array");
    for (const Json &child : *it)
      DSRT_RETURN_IF_ERROR(loadPostProcessor(child, where));
    return Status::ok();
  }
  if (type == "ByteLevel")
    return Status::ok();  // it only adjusts offsets
  if (hasTemplate)
    return invalid(where + " has more than one template");
  hasTemplate = true;
  if (type == "RobertaProcessing") {
    int64_t ids[2];
    const char *keys[2] = {"cls", "sep"};
    for (int i = 0; i < 2; ++i) {
      auto it = node.find(keys[i]);
      if (it == node.end() || !it->is_array() || it->size() != 2 ||
          !(*it)[1].is_number_integer())
        return invalid(where + "." + keys[i] + " must be [token, id]");
      ids[i] = (*it)[1].get<int64_t>();
    }
    singleTemplate = {{false, {ids[0]}}, {true, {}}, {false, {ids[1]}}};
    return Status::ok();
  }
  if (type != "TemplateProcessing")
    return unsupportedType(where, type);
  auto single = node.find("single");
  auto specials = node.find("special_tokens");
  if (single == node.end() || !single->is_array() || specials == node.end() ||
      !specials->is_object())
    return invalid(where + " TemplateProcessing needs single and special_tokens");
  for (const Json &piece : *single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      const Json &sequence = piece["Sequence"];
      if (!sequence.is_object() || sequence.value("id", "") != "A")
        return invalid(where + " template piece " + piece.dump() + " is not supported");
      singleTemplate.push_back({true, {}});
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const Json &special = piece["SpecialToken"];
      std::string name = special.is_object() ? special.value("id", "") : "";
      auto it = specials->find(name);
      if (it == specials->end() || !it->is_object() || !it->contains("ids") ||
          !(*it)["ids"].is_array())
        return invalid(where + " template token '" + name + "' is not in special_tokens");
      TemplatePiece out;
      for (const Json &id : (*it)["ids"]) {
        if (!id.is_number_integer())
          return invalid(where + " special token '" + name + "' has a non-integer id");
        out.ids.push_back(id.get<int64_t>());
      }
      singleTemplate.push_back(std::move(out));
    } else {
      return invalid(where + " template piece " + piece.dump() + " is not supported");
    }
  }
  return Status::ok();
}

Status Tokenizer::Impl::loadDecoder(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  hasDecoder = true;
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence") {
    auto it = node.find("decoders");
    if (it == node.end() || !it->is_array())
      return invalid(where + ".decoders must be an array");
    for (const Json &child : *it)
      DSRT_RETURN_IF_ERROR(loadDecoder(child, where));
    return Status::ok();
  }
  DecoderStep step;
  if (type == "ByteLevel") {
    step.kind = DecoderStep::ByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Fuse;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Replace;
    DSRT_RETURN_IF_ERROR(readStringPattern(node, where, step.pattern));
    DSRT_RETURN_IF_ERROR(readString(node, "content", where, step.content));
  } else if (type == "Strip") {
    step.kind = DecoderStep::Strip;
    DSRT_RETURN_IF_ERROR(readString(node, "content", where, step.content));
    std::vector<char32_t> codePoints;
    if (!unicode::decode(step.content, codePoints) || codePoints.size() != 1)
      return invalid(where + " Strip content must be one character");
    for (auto [key, value] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      auto it = node.find(key);
      if (it == node.end() || !it->is_number_unsigned())
        return invalid(where + " Strip." + key + " must be a count");
      *value = it->get<size_t>();
    }
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Metaspace;
    DSRT_RETURN_IF_ERROR(readString(node, "replacement", where, step.content));
    DSRT_RETURN_IF_ERROR(readPrependScheme(node, where, step.prependScheme));
  } else {
    return unsupportedType(where, type);
  }
  decoder.push_back(std::move(step));
  return Status::ok();
}

Status Tokenizer::Impl::finish() {
  int64_t size = 0;
  for (const auto &[token, id] : vocab)
    size = std::max(size, id + 1);
  for (const AddedToken &token : added)
    size = std::max(size, token.id + 1);
  idToToken.assign(size, std::string());
  idKnown.assign(size, 0);
  for (const auto &[token, id] : vocab) {
    idToToken[id] = token;
    idKnown[id] = 1;
  }
  for (const AddedToken &token : added) {
    idToToken[token.id] = token.content;
    idKnown[token.id] = 1;
  }
  for (const TemplatePiece &piece : singleTemplate)
    for (int64_t id : piece.ids)
      if (id < 0 || id >= size || !idKnown[id])
        return invalid("post_processor adds id " + std::to_string(id) +
                       ", which is not in the vocabulary");
  for (size_t i = 0; i < added.size(); ++i) {
    if (added[i].normalized)
      normalizedMatchers.emplace_back(normalize(added[i].content), i);
    else
      rawMatchers.emplace_back(added[i].content, i);
  }

  if (!singleTemplate.empty() && !singleTemplate.front().isSequence &&
      !singleTemplate.front().ids.empty())
    bos = singleTemplate.front().ids.front();
  auto idOf = [&](const std::string &content) -> int64_t {
    if (auto it = addedByContent.find(content); it != addedByContent.end())
      return added[it->second].id;
    auto it = vocab.find(content);
    return it == vocab.end() ? -1 : it->second;
  };
  for (const char *name : {"<s>", "<|begin_of_text|>", "<|endoftext|>"})
    if (bos < 0)
      bos = idOf(name);
  for (const char *name : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
    if (eos < 0)
      eos = idOf(name);
  return Status::ok();
}

// ---- Encoding ------------------------------------------------------------------------------

std::string Tokenizer::Impl::normalize(std::string text) const {
  for (const NormalizerStep &step : normalizer) {
    if (step.kind == NormalizerStep::Prepend) {
      if (!text.empty())
        text.insert(0, step.content);
    } else {
      replaceAll(text, step.pattern, step.content);
    }
  }
  return text;
}

namespace {
char32_t firstCodePoint(std::string_view text) {
  std::vector<char32_t> codePoints;
  size_t length = 1;
  while (length < text.size() && (static_cast<unsigned char>(text[length]) & 0xC0) == 0x80)
    ++length;
  unicode::decode(text.substr(0, length), codePoints);
  return codePoints.empty() ? 0 : codePoints.front();
}
char32_t lastCodePoint(std::string_view text) {
  size_t start = text.size();
  while (start > 0 && (static_cast<unsigned char>(text[--start]) & 0xC0) == 0x80) {
  }
  return firstCodePoint(text.substr(start));
}
// Where the white space at the end of text[0, end) begins.
size_t trailingSpaceStart(std::string_view text, size_t end) {
  while (end > 0 && unicode::isWhiteSpace(lastCodePoint(text.substr(0, end)))) {
    do
      --end;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80);
  }
  return end;
}
size_t leadingSpaceEnd(std::string_view text, size_t begin) {
  while (begin < text.size() && unicode::isWhiteSpace(firstCodePoint(text.substr(begin)))) {
    do
      ++begin;
    while (begin < text.size() && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80);
  }
  return begin;
}
} // namespace

// AddedVocabulary::find_matches of `tokenizers`: leftmost-longest matches, single_word
// matches dropped when a word character touches them, lstrip/rstrip taking the white space
// beside a match into it. Segments with id -1 are text.
void Tokenizer::Impl::splitAdded(const std::string &text,
                                 const std::vector<std::pair<std::string, size_t>> &matchers,
                                 std::vector<std::pair<std::string, int64_t>> &out) const {
  size_t segmentStart = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t best = matchers.size(), bestLength = 0;
    for (size_t m = 0; m < matchers.size(); ++m) {
      const std::string &pattern = matchers[m].first;
      if (pattern.size() > bestLength && text.compare(pos, pattern.size(), pattern) == 0) {
        best = m;
        bestLength = pattern.size();
      }
    }
    if (best == matchers.size()) {
      ++pos;
      continue;
    }
    const AddedToken &token = added[matchers[best].second];
    size_t start = pos, stop = pos + bestLength;
    pos = stop;
    if (token.singleWord) {
      bool spaceBefore = start == 0 || !unicode::isWordChar(lastCodePoint(
                                           std::string_view(text).substr(0, start)));
      bool spaceAfter = stop == text.size() ||
                        !unicode::isWordChar(firstCodePoint(std::string_view(text).substr(stop)));
      if (!spaceBefore || !spaceAfter)
        continue;
    }
    if (token.lstrip)
      start = std::max(trailingSpaceStart(text, start), segmentStart);
    if (token.rstrip)
      stop = leadingSpaceEnd(text, stop);
    if (segmentStart < start)
      out.emplace_back(text.substr(segmentStart, start - segmentStart), -1);
    out.emplace_back(std::string(), token.id);
    segmentStart = stop;
  }
  if (segmentStart < text.size())
    out.emplace_back(text.substr(segmentStart), -1);
}

void Tokenizer::Impl::preTokenize(const std::string &segment, bool atTextStart,
                                  std::vector<std::string> &pieces) const {
  pieces.assign(1, segment);
  std::vector<std::string> next;
  for (const PreTokenizerStep &step : preTokenizer) {
    next.clear();
    for (std::string &piece : pieces) {
      switch (step.kind) {
      case PreTokenizerStep::ByteLevel: {
        if (step.addPrefixSpace && !startsWith(piece, " "))
          piece.insert(0, " ");
        size_t first = next.size();
        if (step.useRegex)
          splitIsolated(SplitPattern::Gpt2, piece, next);
        else
          next.push_back(piece);
        for (size_t i = first; i < next.size(); ++i) {
          std::string mapped;
          for (unsigned char byte : next[i])
            mapped += byteMap().byteToText[byte];
          next[i] = std::move(mapped);
        }
        break;
      }
      case PreTokenizerStep::Split:
        splitIsolated(step.pattern, piece, next);
        break;
      case PreTokenizerStep::Metaspace: {
        replaceAll(piece, " ", step.replacement);
        bool prepend = step.prependScheme == PrependScheme::Always ||
                       (step.prependScheme == PrependScheme::First && atTextStart);
        if (prepend && !startsWith(piece, step.replacement))
          piece.insert(0, step.replacement);
        if (!step.split) {
          next.push_back(piece);
          break;
        }
        // Each replacement starts a new piece (behavior MergedWithNext).
        size_t start = 0;
        for (size_t at = piece.find(step.replacement, 1); at != std::string::npos;
             at = piece.find(step.replacement, at + 1)) {
          next.push_back(piece.substr(start, at - start));
          start = at;
        }
        next.push_back(piece.substr(start));
        break;
      }
      }
    }
    pieces.clear();
    for (std::string &piece : next)
      if (!piece.empty())
        pieces.push_back(std::move(piece));
  }
}

// BPE::merge_word and Word::merge_all of `tokenizers`: symbols from characters (byte tokens
// or unk for characters outside the vocabulary), then merges by rank, leftmost first.
void Tokenizer::Impl::bpe(const std::string &piece, std::vector<int64_t> &ids) const {
  if (ignoreMerges) {
    auto it = vocab.find(piece);
    if (it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int64_t id;
    long prev, next;
    size_t length;
  };
  std::vector<Symbol> symbols;
  auto add = [&](int64_t id, size_t length) {
    long index = static_cast<long>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, length});
  };
  bool pendingUnk = false;
  size_t unkLength = 0;
  for (size_t i = 0; i < piece.size();) {
    size_t end = i + 1;
    while (end < piece.size() && (static_cast<unsigned char>(piece[end]) & 0xC0) == 0x80)
      ++end;
    std::string character = piece.substr(i, end - i);
    size_t length = end - i;
    i = end;
    auto it = vocab.find(character);
    if (it != vocab.end()) {
      if (pendingUnk) {
        add(unkId, unkLength);
        pendingUnk = false;
      }
      add(it->second, length);
      continue;
    }
    if (byteFallback) {
      std::vector<int64_t> bytes;
      for (unsigned char byte : character) {
        static const char *const hex = "0123456789ABCDEF";
        std::string name = std::string("<0x") + hex[byte >> 4] + hex[byte & 15] + ">";
        auto found = vocab.find(name);
        if (found == vocab.end())
          break;
        bytes.push_back(found->second);
      }
      if (bytes.size() == character.size()) {
        // `tokenizers` leaves a pending unk behind the byte tokens; so does this.
        for (int64_t id : bytes)
          add(id, 1);
        continue;
      }
    }
    if (unkId >= 0) {
      if (pendingUnk && fuseUnk) {
        unkLength += length;
      } else {
        if (pendingUnk)
          add(unkId, unkLength);
        pendingUnk = true;
        unkLength = length;
      }
    }
  }
  if (pendingUnk)
    add(unkId, unkLength);
  if (!symbols.empty())
    symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    long pos;
    int64_t result;
    bool operator>(const Candidate &other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](long left) {
    long right = symbols[left].next;
    if (right < 0)
      return;
    auto it = merges.find(pairKey(symbols[left].id, symbols[right].id));
    if (it != merges.end())
      queue.push({it->second.rank, left, it->second.result});
  };
  for (long i = 0; i + 1 < static_cast<long>(symbols.size()); ++i)
    consider(i);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol &left = symbols[top.pos];
    if (left.length == 0 || left.next < 0)
      continue;
    Symbol &right = symbols[left.next];
    auto it = merges.find(pairKey(left.id, right.id));
    if (it == merges.end() || it->second.result != top.result)
      continue;
    left.id = top.result;
    left.length += right.length;
    left.next = right.next;
    right.length = 0;
    if (left.next >= 0)
      symbols[left.next].prev = top.pos;
    if (left.prev >= 0)
      consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol &symbol : symbols)
    if (symbol.length)
      ids.push_back(symbol.id);
}

// ---- Tokenizer -----------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Status Tokenizer::fromJson(std::string_view text, std::unique_ptr<Tokenizer> &out) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception &error) {
    return invalid(std::string("not valid JSON: ") + error.what());
  }
  if (!root.is_object())
    return invalid("the top level must be an object");
  auto impl = std::make_unique<Impl>();
  try {
    for (const char *key : {"truncation", "padding"}) {
      auto it = root.find(key);
      if (it != root.end() && !it->is_null())
        return invalid(std::string(key) + " is not supported (it must be null)");
    }
    auto model = root.find("model");
    if (model == root.end())
      return invalid("there is no model");
    DSRT_RETURN_IF_ERROR(impl->loadModel(*model));
    static const Json null;
    auto member = [&](const char *key) -> const Json & {
      auto it = root.find(key);
      return it == root.end() ? null : *it;
    };
    DSRT_RETURN_IF_ERROR(impl->loadAddedTokens(member("added_tokens")));
    DSRT_RETURN_IF_ERROR(impl->loadNormalizer(member("normalizer"), "normalizer"));
    DSRT_RETURN_IF_ERROR(impl->loadPreTokenizer(member("pre_tokenizer"), "pre_tokenizer"));
    DSRT_RETURN_IF_ERROR(impl->loadPostProcessor(member("post_processor"), "post_processor"));
    DSRT_RETURN_IF_ERROR(impl->loadDecoder(member("decoder"), "decoder"));
    DSRT_RETURN_IF_ERROR(impl->finish());
  } catch (const Json::exception &error) {
    return invalid(error.what());
  }
  out.reset(new Tokenizer(std::move(impl)));
  return Status::ok();
}

Status Tokenizer::fromFile(const std::string &path, std::unique_ptr<Tokenizer> &out) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return Status::error(path + ": cannot open");
  std::ostringstream contents;
  contents << file.rdbuf();
  if (!file && !file.eof())
    return Status::error(path + ": cannot read");
  Status status = fromJson(contents.str(), out);
  if (status.isOk())
    return status;
  // The path says which file; the messages' own "tokenizer.json: " would repeat it.
  std::string message = status.message();
  const std::string generic = "tokenizer.json: ";
  if (startsWith(message, generic))
    message.erase(0, generic.size());
  return Status::error(path + ": " + message);
}

Status Tokenizer::encode(std::string_view utf8, bool addSpecial,
                         std::vector<int64_t> &ids) const {
  ids.clear();
  if (!unicode::isValid(utf8))
    return Status::error("the text to encode is not valid UTF-8");
  const Impl &impl = *impl_;
  std::vector<int64_t> encoded;
  std::vector<std::pair<std::string, int64_t>> raw, normalized;
  std::vector<std::string> pieces;
  impl.splitAdded(std::string(utf8), impl.rawMatchers, raw);
  bool atTextStart = true;
  for (auto &[segment, id] : raw) {
    if (id >= 0) {
      encoded.push_back(id);
      atTextStart = false;
      continue;
    }
    normalized.clear();
    impl.splitAdded(impl.normalize(segment), impl.normalizedMatchers, normalized);
    for (auto &[part, partId] : normalized) {
      if (partId >= 0) {
        encoded.push_back(partId);
      } else {
        impl.preTokenize(part, atTextStart, pieces);
        for (const std::string &piece : pieces)
          impl.bpe(piece, encoded);
      }
      atTextStart = false;
    }
  }
  if (!addSpecial || !impl.hasTemplate) {
    ids = std::move(encoded);
    return Status::ok();
  }
  for (const TemplatePiece &piece : impl.singleTemplate) {
    const std::vector<int64_t> &source = piece.isSequence ? encoded : piece.ids;
    ids.insert(ids.end(), source.begin(), source.end());
  }
  return Status::ok();
}

Status Tokenizer::decode(const int64_t *ids, size_t count, bool skipSpecial,
                         std::string &text) const {
  text.clear();
  const Impl &impl = *impl_;
  std::vector<std::string> tokens;
  for (size_t i = 0; i < count; ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= vocabSize() || !impl.idKnown[id])
      return Status::error("token id " + std::to_string(id) + " at position " +
                           std::to_string(i) + " is not in the vocabulary (" +
                           std::to_string(vocabSize()) + " ids)");
    const std::string &token = impl.idToToken[id];
    if (skipSpecial && impl.specialContents.count(token))
      continue;
    tokens.push_back(token);
  }
  if (!impl.hasDecoder) {
    for (size_t i = 0; i < tokens.size(); ++i)
      text += (i ? " " : "") + tokens[i];
    return Status::ok();
  }
  for (const DecoderStep &step : impl.decoder) {
    switch (step.kind) {
    case DecoderStep::ByteLevel: {
      std::string bytes;
      for (const std::string &token : tokens) {
        std::vector<char32_t> codePoints;
        unicode::decode(token, codePoints);
        std::string mapped;
        bool allMapped = true;
        for (char32_t c : codePoints) {
          auto it = byteMap().charToByte.find(c);
          if (it == byteMap().charToByte.end()) {
            allMapped = false;
            break;
          }
          mapped += static_cast<char>(it->second);
        }
        bytes += allMapped ? mapped : token;
      }
      std::string decoded;
      unicode::appendLossy(bytes, decoded);
      tokens.assign(1, std::move(decoded));
      break;
    }
    case DecoderStep::Replace:
      for (std::string &token : tokens)
        replaceAll(token, step.pattern, step.content);
      break;
    case DecoderStep::ByteFallback: {
      // Runs of <0xXX> tokens become their UTF-8 text, or one U+FFFD per byte if invalid.
      std::vector<std::string> out;
      std::string bytes;
      size_t byteCount = 0;
      auto flush = [&] {
        if (!byteCount)
          return;
        if (unicode::isValid(bytes)) {
          out.push_back(bytes);
        } else {
          for (size_t k = 0; k < byteCount; ++k)
            out.push_back(kReplacementChar);
        }
        bytes.clear();
        byteCount = 0;
      };
      for (std::string &token : tokens) {
        auto hexValue = [](char c) {
          return c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : -1;
        };
        if (token.size() == 6 && startsWith(token, "<0x") && token[5] == '>' &&
            hexValue(token[3]) >= 0 && hexValue(token[4]) >= 0) {
          bytes += static_cast<char>(hexValue(token[3]) * 16 + hexValue(token[4]));
          ++byteCount;
          continue;
        }
        flush();
        out.push_back(std::move(token));
      }
      flush();
      tokens = std::move(out);
      break;
    }
    case DecoderStep::Fuse: {
      std::string fused;
      for (const std::string &token : tokens)
        fused += token;
      tokens.assign(1, std::move(fused));
      break;
    }
    case DecoderStep::Strip: {
      char32_t content = firstCodePoint(step.content);
      for (std::string &token : tokens) {
        std::vector<char32_t> codePoints;
        unicode::decode(token, codePoints);
        size_t begin = 0, end = codePoints.size();
        while (begin < step.start && begin < codePoints.size() && codePoints[begin] == content)
          ++begin;
        for (size_t k = 0; k < step.stop && end > 0 && codePoints[end - 1] == content; ++k)
          --end;
        std::string stripped;
        for (size_t k = begin; k < std::max(begin, end); ++k)
          unicode::append(codePoints[k], stripped);
        token = std::move(stripped);
      }
      break;
    }
    case DecoderStep::Metaspace: {
      // Every replacement becomes a space, except in the first token, where `tokenizers`
      // drops them all when it prepends one while encoding.
      for (size_t i = 0; i < tokens.size(); ++i) {
        bool drop = i == 0 && step.prependScheme != PrependScheme::Never;
        replaceAll(tokens[i], step.content, drop ? "" : " ");
      }
      break;
    }
    }
  }
  for (const std::string &token : tokens)
    text += token;
  return Status::ok();
}

int64_t Tokenizer::vocabSize() const { return static_cast<int64_t>(impl_->idToToken.size()); }

std::string Tokenizer::tokenText(int64_t id) const {
  return id >= 0 && id < vocabSize() ? impl_->idToToken[id] : std::string();
}

int64_t Tokenizer::tokenId(std::string_view content) const {
  std::string key(content);
  if (auto it = impl_->addedByContent.find(key); it != impl_->addedByContent.end())
    return impl_->added[it->second].id;
  if (auto it = impl_->vocab.find(key); it != impl_->vocab.end())
    return it->second;
  return -1;
}

bool Tokenizer::isSpecial(int64_t id) const {
  return id >= 0 && id < vocabSize() && impl_->idKnown[id] &&
         impl_->specialContents.count(impl_->idToToken[id]);
}

int64_t Tokenizer::bosId() const { return impl_->bos; }
int64_t Tokenizer::eosId() const { return impl_->eos; }

} // namespace dsrt
