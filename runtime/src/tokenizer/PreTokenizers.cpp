// The pre-tokenizers: ByteLevel, Split with a known pattern, WhitespaceSplit and Metaspace.
#include "tokenizer/TokenizerImpl.h"

#include "tokenizer/Unicode.h"

namespace dsrt {
namespace tok {

ByteMap::ByteMap() {
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    char32_t c = printable ? static_cast<char32_t>(b) : next++;
    unicode::append(c, byteToText[b]);
    charToByte[c] = static_cast<unsigned char>(b);
  }
}

const ByteMap &byteMap() {
  static const ByteMap map;
  return map;
}

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

} // namespace tok

using namespace tok;

Status Tokenizer::Impl::loadPreTokenizer(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence")
    return loadSequence(node, "pretokenizers", where,
                        [&](const Json &child) { return loadPreTokenizer(child, where); });
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
  } else if (type == "WhitespaceSplit") {
    step.kind = PreTokenizerStep::WhitespaceSplit;
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

namespace {

// The pieces `parts` (consecutive, covering `piece`) cut out of `piece`.
void cut(const Piece &piece, const std::vector<std::string> &parts, std::vector<Piece> &out) {
  size_t begin = 0;
  for (const std::string &part : parts) {
    out.push_back(piece.slice(begin, begin + part.size()));
    begin += part.size();
  }
}

} // namespace

void Tokenizer::Impl::preTokenize(const Piece &part, std::vector<Piece> &pieces) const {
  pieces.assign(1, part);
  std::vector<Piece> next;
  std::vector<std::string> parts;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const PreTokenizerStep &step : preTokenizer) {
    next.clear();
    for (Piece &piece : pieces) {
      switch (step.kind) {
      case PreTokenizerStep::ByteLevel: {
        if (step.addPrefixSpace && !startsWith(piece.text, " "))
          piece.prepend(" ");
        size_t first = next.size();
        parts.clear();
        if (step.useRegex)
          splitIsolated(SplitPattern::Gpt2, piece.text, parts);
        else
          parts.push_back(piece.text);
        cut(piece, parts, next);
        // Each byte becomes a character, aligned with the character the byte is from.
        for (size_t i = first; i < next.size(); ++i) {
          Piece mapped;
          mapped.start = next[i].start;
          for (size_t k = 0; k < next[i].text.size(); ++k) {
            mapped.text += byteMap().byteToText[static_cast<unsigned char>(next[i].text[k])];
            mapped.origin.resize(mapped.text.size(), next[i].origin[k]);
          }
          next[i] = std::move(mapped);
        }
        break;
      }
      case PreTokenizerStep::Split:
        parts.clear();
        splitIsolated(step.pattern, piece.text, parts);
        cut(piece, parts, next);
        break;
      case PreTokenizerStep::WhitespaceSplit: {
        std::vector<char32_t> codePoints;
        std::vector<size_t> offsets;
        unicode::decode(piece.text, codePoints, &offsets);
        for (size_t i = 0; i < codePoints.size();) {
          size_t end = i;
          while (end < codePoints.size() && !unicode::isWhiteSpace(codePoints[end]))
            ++end;
          if (end > i)
            next.push_back(piece.slice(offsets[i], offsets[end]));
          i = end + 1;
        }
        break;
      }
      case PreTokenizerStep::Metaspace: {
        matches.clear();
        for (size_t at = piece.text.find(' '); at != std::string::npos;
             at = piece.text.find(' ', at + 1))
          matches.emplace_back(at, at + 1);
        piece.replace(matches, step.replacement);
        // "first": only a piece that starts where the original text does.
        bool prepend = step.prependScheme == PrependScheme::Always ||
                       (step.prependScheme == PrependScheme::First && piece.start == 0);
        if (prepend && !startsWith(piece.text, step.replacement))
          piece.prepend(step.replacement);
        if (!step.split) {
          next.push_back(std::move(piece));
          break;
        }
        // Each replacement starts a new piece (behavior MergedWithNext).
        size_t start = 0;
        for (size_t at = piece.text.find(step.replacement, 1); at != std::string::npos;
             at = piece.text.find(step.replacement, at + 1)) {
          next.push_back(piece.slice(start, at));
          start = at;
        }
        next.push_back(piece.slice(start, piece.text.size()));
        break;
      }
      }
    }
    pieces.clear();
    for (Piece &piece : next)
      if (!piece.text.empty())
        pieces.push_back(std::move(piece));
  }
}

} // namespace dsrt
