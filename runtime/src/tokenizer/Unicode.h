// UTF-8 and the few Unicode properties the tokenizer needs, without a Unicode library.
#ifndef DSRT_TOKENIZER_UNICODE_H
#define DSRT_TOKENIZER_UNICODE_H

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dsrt::unicode {

// Decodes `text`, recording where each code point starts (plus text.size() at the end);
// false when the text is not valid UTF-8.
bool decode(std::string_view text, std::vector<char32_t> &codePoints,
            std::vector<size_t> *byteOffsets = nullptr);
void append(char32_t codePoint, std::string &out);
// Appends `bytes` as UTF-8, each maximal invalid subsequence replaced by U+FFFD, as Rust's
// String::from_utf8_lossy (and so `tokenizers`) does.
void appendLossy(std::string_view bytes, std::string &out);
bool isValid(std::string_view text);

bool isLetter(char32_t c);      // \p{L}
bool isNumber(char32_t c);      // \p{N}
bool isMark(char32_t c);        // \p{M}
bool isWhiteSpace(char32_t c);  // White_Space, what \s matches
// \w of Rust's regex crate, as far as the categories above tell it.
bool isWordChar(char32_t c);

// Where the extended grapheme cluster (UAX #29) that starts at codePoints[start] ends: what
// the unicode-segmentation crate's graphemes(true) cuts, which `tokenizers`' Precompiled
// normalizer works on. Unicode 17.0 (GraphemeTables.inc).
size_t graphemeEnd(const std::vector<char32_t> &codePoints, size_t start);

} // namespace dsrt::unicode

#endif
