// The normalizers: Prepend, Replace (a String pattern, or a regex that is one repeated
// character), Strip and Precompiled; and the alignment bookkeeping of tok::Piece.
#include "tokenizer/TokenizerImpl.h"

#include "tokenizer/Precompiled.h"
#include "tokenizer/Unicode.h"

namespace dsrt {
namespace tok {

Piece Piece::original(std::string_view text, size_t start) {
  Piece piece;
  piece.text = std::string(text);
  piece.start = start;
  piece.origin.resize(text.size());
  // Every byte of a character has the character's alignment.
  for (size_t i = 0, charStart = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80)
      charStart = i;
    piece.origin[i] = start + charStart;
  }
  return piece;
}

Piece Piece::slice(size_t begin, size_t end) const {
  Piece piece;
  piece.text = text.substr(begin, end - begin);
  piece.origin.assign(origin.begin() + begin, origin.begin() + end);
  piece.start = origin[begin];
  return piece;
}

void Piece::prepend(const std::string &prefix) {
  if (text.empty())
    return;
  text.insert(0, prefix);
  origin.insert(origin.begin(), prefix.size(), origin.front());
}

void Piece::replace(const std::vector<std::pair<size_t, size_t>> &matches,
                    const std::string &content) {
  if (matches.empty())
    return;
  Piece out;
  out.start = start;
  size_t from = 0;
  for (auto [begin, end] : matches) {
    out.text.append(text, from, begin - from);
    out.origin.insert(out.origin.end(), origin.begin() + from, origin.begin() + begin);
    out.text += content;
    out.origin.insert(out.origin.end(), content.size(), origin[end - 1]);
    from = end;
  }
  out.text.append(text, from, std::string::npos);
  out.origin.insert(out.origin.end(), origin.begin() + from, origin.end());
  *this = std::move(out);
}

} // namespace tok

using namespace tok;

namespace {

// Oniguruma's metacharacters: a regex without them is a literal.
bool isRegexMeta(char32_t c) {
  return std::u32string_view(U"\\^$.|?*+()[]{}").find(c) != std::u32string_view::npos;
}

// The Regex patterns Replace supports: a literal, or one literal character followed by `+`
// or `{m,}`.
bool readRegexPattern(const std::string &regex, std::string &literal, size_t &minRepeat) {
  std::vector<char32_t> codePoints;
  if (!unicode::decode(regex, codePoints) || codePoints.empty())
    return false;
  size_t metas = 0;
  for (char32_t c : codePoints)
    metas += isRegexMeta(c);
  if (metas == 0) {
    literal = regex;
    minRepeat = 0;
    return true;
  }
  if (isRegexMeta(codePoints[0]))
    return false;
  literal.clear();
  unicode::append(codePoints[0], literal);
  std::string quantifier = regex.substr(literal.size());
  if (quantifier == "+") {
    minRepeat = 1;
    return true;
  }
  if (quantifier.size() < 4 || quantifier.front() != '{' ||
      quantifier.compare(quantifier.size() - 2, 2, ",}") != 0)
    return false;
  std::string digits = quantifier.substr(1, quantifier.size() - 3);
  if (digits.empty() || digits.size() > 6 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  minRepeat = std::stoul(digits);
  return minRepeat > 0;
}

// Non-overlapping matches, left to right (str::match_indices, or Oniguruma's greedy runs).
void findMatches(const NormalizerStep &step, const std::string &text,
                 std::vector<std::pair<size_t, size_t>> &matches) {
  matches.clear();
  const std::string &pattern = step.pattern;
  if (step.minRepeat == 0) {
    for (size_t at = text.find(pattern); at != std::string::npos;
         at = text.find(pattern, at + pattern.size()))
      matches.emplace_back(at, at + pattern.size());
    return;
  }
  for (size_t at = text.find(pattern); at != std::string::npos;) {
    size_t end = at, count = 0;
    for (; text.compare(end, pattern.size(), pattern) == 0; end += pattern.size())
      ++count;
    if (count >= step.minRepeat)
      matches.emplace_back(at, end);
    at = text.find(pattern, end);
  }
}

// NormalizedString::lrstrip: white space is char::is_whitespace, i.e. White_Space.
void strip(Piece &piece, bool left, bool right) {
  std::vector<char32_t> codePoints;
  std::vector<size_t> offsets;
  unicode::decode(piece.text, codePoints, &offsets);
  size_t begin = 0, end = codePoints.size();
  while (left && begin < end && unicode::isWhiteSpace(codePoints[begin]))
    ++begin;
  while (right && end > begin && unicode::isWhiteSpace(codePoints[end - 1]))
    --end;
  if (begin == end) {
    piece.text.clear();
    piece.origin.clear();
  } else if (begin > 0 || end < codePoints.size()) {
    size_t start = piece.start;
    piece = piece.slice(offsets[begin], offsets[end]);
    piece.start = start;
  }
}

} // namespace

Status Tokenizer::Impl::loadNormalizer(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence")
    return loadSequence(node, "normalizers", where,
                        [&](const Json &child) { return loadNormalizer(child, where); });
  NormalizerStep step;
  if (type == "Prepend") {
    step.kind = NormalizerStep::Prepend;
    DSRT_RETURN_IF_ERROR(readString(node, "prepend", where, step.content));
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Replace;
    auto pattern = node.find("pattern");
    if (pattern == node.end() || !pattern->is_object())
      return invalid(where + ".pattern must be an object");
    auto string = pattern->find("String"), regex = pattern->find("Regex");
    if (string != pattern->end() && string->is_string()) {
      step.pattern = string->get<std::string>();
    } else if (regex == pattern->end() || !regex->is_string() ||
               !readRegexPattern(regex->get<std::string>(), step.pattern, step.minRepeat)) {
      return invalid(where + " Replace pattern " + pattern->dump() +
                     " is not supported (only String, and Regex that is a literal or one "
                     "character repeated, as \" {2,}\" or \" +\")");
    }
    DSRT_RETURN_IF_ERROR(readString(node, "content", where, step.content));
    if (step.pattern.empty())
      return invalid(where + " Replace has an empty pattern");
  } else if (type == "Strip") {
    step.kind = NormalizerStep::Strip;
    for (auto [key, value] : {std::pair{"strip_left", &step.stripLeft},
                              std::pair{"strip_right", &step.stripRight}}) {
      auto it = node.find(key);
      if (it == node.end() || !it->is_boolean())
        return invalid(where + " Strip." + key + " must be a boolean");
      *value = it->get<bool>();
    }
  } else if (type == "Precompiled") {
    step.kind = NormalizerStep::Precompiled;
    std::string base64;
    DSRT_RETURN_IF_ERROR(readString(node, "precompiled_charsmap", where, base64));
    std::shared_ptr<PrecompiledCharsMap> charsMap;
    DSRT_RETURN_IF_ERROR(PrecompiledCharsMap::fromBase64(base64, where, charsMap));
    step.charsMap = std::move(charsMap);
  } else {
    return unsupportedType(where, type);
  }
  normalizer.push_back(std::move(step));
  return Status::ok();
}

void Tokenizer::Impl::normalize(Piece &piece) const {
  std::vector<std::pair<size_t, size_t>> matches;
  for (const NormalizerStep &step : normalizer) {
    switch (step.kind) {
    case NormalizerStep::Prepend:
      piece.prepend(step.content);
      break;
    case NormalizerStep::Replace:
      findMatches(step, piece.text, matches);
      piece.replace(matches, step.content);
      break;
    case NormalizerStep::Strip:
      strip(piece, step.stripLeft, step.stripRight);
      break;
    case NormalizerStep::Precompiled:
      step.charsMap->normalize(piece);
      break;
    }
  }
}

} // namespace dsrt
