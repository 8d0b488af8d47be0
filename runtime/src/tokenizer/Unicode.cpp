#include "tokenizer/Unicode.h"

#include <algorithm>
#include <iterator>

namespace dsrt::unicode {
namespace {

struct CodePointRange {
  char32_t first, last;
};

#include "tokenizer/UnicodeTables.inc"

template <size_t N> bool inRanges(const CodePointRange (&table)[N], char32_t c) {
  auto it = std::upper_bound(std::begin(table), std::end(table), c,
                             [](char32_t value, const CodePointRange &r) { return value < r.first; });
  return it != std::begin(table) && c <= std::prev(it)->last;
}

// Length of the well-formed UTF-8 sequence at `bytes[i]`, following the Unicode table of
// well-formed byte sequences; 0 when none starts there. `*prefix` gets how many bytes form
// a maximal prefix of a valid sequence (what one U+FFFD replaces).
size_t sequenceAt(std::string_view bytes, size_t i, size_t *prefix) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  unsigned char lead = byte(i);
  if (lead < 0x80) {
    *prefix = 1;
    return 1;
  }
  size_t length;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0)
      low = 0xA0;
    else if (lead == 0xED)
      high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0)
      low = 0x90;
    else if (lead == 0xF4)
      high = 0x8F;
  } else {
    *prefix = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < length && i + k < bytes.size(); ++k) {
    unsigned char b = byte(i + k);
    if (b < (k == 1 ? low : 0x80) || b > (k == 1 ? high : 0xBF))
      break;
  }
  *prefix = k;
  return k == length ? length : 0;
}

} // namespace

bool decode(std::string_view text, std::vector<char32_t> &codePoints,
            std::vector<size_t> *byteOffsets) {
  codePoints.clear();
  if (byteOffsets)
    byteOffsets->clear();
  for (size_t i = 0; i < text.size();) {
    size_t prefix;
    size_t length = sequenceAt(text, i, &prefix);
    if (!length)
      return false;
    char32_t c = static_cast<unsigned char>(text[i]);
    if (length > 1) {
      c &= 0x7F >> length;
      for (size_t k = 1; k < length; ++k)
        c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    codePoints.push_back(c);
    if (byteOffsets)
      byteOffsets->push_back(i);
    i += length;
  }
  if (byteOffsets)
    byteOffsets->push_back(text.size());
  return true;
}

bool isValid(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t prefix;
    size_t length = sequenceAt(text, i, &prefix);
    if (!length)
      return false;
    i += length;
  }
  return true;
}

void append(char32_t c, std::string &out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

void appendLossy(std::string_view bytes, std::string &out) {
  for (size_t i = 0; i < bytes.size();) {
    size_t prefix;
    size_t length = sequenceAt(bytes, i, &prefix);
    if (length) {
      out.append(bytes.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      i += prefix;
    }
  }
}

bool isLetter(char32_t c) { return inRanges(kLetterRanges, c); }
bool isNumber(char32_t c) { return inRanges(kNumberRanges, c); }
bool isMark(char32_t c) { return inRanges(kMarkRanges, c); }
bool isWhiteSpace(char32_t c) { return inRanges(kWhiteSpaceRanges, c); }
bool isWordChar(char32_t c) {
  return c == '_' || c == 0x200C || c == 0x200D || isLetter(c) || isNumber(c) || isMark(c);
}

} // namespace dsrt::unicode
