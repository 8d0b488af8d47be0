#include "tokenizer/SplitPatterns.h"

#include "tokenizer/Unicode.h"

namespace dsrt {
namespace {

using unicode::isLetter;
using unicode::isNumber;
using unicode::isWhiteSpace;

const char *const kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char *const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Oniguruma reads the inner "[" as a nested class: the class excludes "(", ")", "|",
// white space and the listed punctuation.
const char *const kBloomRegex = " ?[^(\\s|[.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81"
                                "\xE0\xA5\xA4\xDB\x94\xD8\x8C])]+";

using Text = std::vector<char32_t>;

bool isOther(char32_t c) { return !isWhiteSpace(c) && !isLetter(c) && !isNumber(c); }
bool isLineBreak(char32_t c) { return c == '\r' || c == '\n'; }

size_t runLength(const Text &s, size_t i, bool (*inClass)(char32_t)) {
  size_t j = i;
  while (j < s.size() && inClass(s[j]))
    ++j;
  return j - i;
}

// 's 't 're 've 'm 'll 'd; `fold` maps a code point to the ASCII letter it matches.
size_t matchContraction(const Text &s, size_t i, char32_t (*fold)(char32_t)) {
  if (s[i] != '\'' || i + 1 >= s.size())
    return 0;
  char32_t a = fold(s[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd')
    return 2;
  if (i + 2 >= s.size())
    return 0;
  char32_t b = fold(s[i + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
    return 3;
  return 0;
}

char32_t identity(char32_t c) { return c; }
// (?i:...) in Oniguruma folds Unicode case: besides ASCII, U+017F (long s) matches "s".
char32_t foldCase(char32_t c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A' + 'a';
  if (c == 0x17F)
    return 's';
  return c;
}

// \s+(?!\S) then \s+: a white-space run leaves its last character to the next match
// unless the run ends the text or is one character long.
size_t matchSpaceRun(const Text &s, size_t i) {
  size_t run = runLength(s, i, isWhiteSpace);
  if (run == 0)
    return 0;
  return (i + run == s.size() || run == 1) ? run : run - 1;
}

size_t matchGpt2(const Text &s, size_t i) {
  if (size_t n = matchContraction(s, i, identity))
    return n;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": a space cannot start any of the runs
  // itself, so trying with the space first is all the backtracking there is.
  size_t j = i + (s[i] == ' ' ? 1 : 0);
  if (j < s.size()) {
    for (bool (*inClass)(char32_t) : {isLetter, isNumber, isOther})
      if (inClass(s[j]))
        return j - i + runLength(s, j, inClass);
  }
  return matchSpaceRun(s, i);
}

size_t matchLlama3(const Text &s, size_t i) {
  if (size_t n = matchContraction(s, i, foldCase))
    return n;
  char32_t c = s[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!isLineBreak(c) && !isLetter(c) && !isNumber(c) && i + 1 < s.size() &&
      isLetter(s[i + 1]))
    return 1 + runLength(s, i + 1, isLetter);
  if (isLetter(c))
    return runLength(s, i, isLetter);
  // \p{N}{1,3}
  if (isNumber(c)) {
    size_t run = runLength(s, i, isNumber);
    return run < 3 ? run : 3;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t j = i + (c == ' ' ? 1 : 0);
  if (j < s.size() && isOther(s[j])) {
    j += runLength(s, j, isOther);
    return j - i + runLength(s, j, isLineBreak);
  }
  // \s*[\r\n]+: the greedy \s* gives back down to the run's last line break, which is
  // then all [\r\n]+ gets (anything after it in the run is not a line break).
  size_t run = runLength(s, i, isWhiteSpace);
  for (size_t k = run; k-- > 0;)
    if (isLineBreak(s[i + k]))
      return k + 1;
  return matchSpaceRun(s, i);
}

bool isBloomExcluded(char32_t c) {
  switch (c) {
  case '(': case ')': case '|': case '.': case ',': case '!': case '?':
  case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964: case 0x06D4: case 0x060C:
    return true;
  default:
    return isWhiteSpace(c);
  }
}
bool isBloomIncluded(char32_t c) { return !isBloomExcluded(c); }

size_t matchBloom(const Text &s, size_t i) {
  size_t j = i + (s[i] == ' ' ? 1 : 0);
  if (j < s.size() && isBloomIncluded(s[j]))
    return j - i + runLength(s, j, isBloomIncluded);
  return 0;
}

} // namespace

bool recogniseSplitPattern(std::string_view regex, SplitPattern &out) {
  if (regex == kGpt2Regex)
    out = SplitPattern::Gpt2;
  else if (regex == kLlama3Regex)
    out = SplitPattern::Llama3;
  else if (regex == kBloomRegex)
    out = SplitPattern::Bloom;
  else
    return false;
  return true;
}

void splitIsolated(SplitPattern pattern, std::string_view text, std::vector<std::string> &out) {
  Text s;
  std::vector<size_t> offsets;
  unicode::decode(text, s, &offsets);
  size_t (*match)(const Text &, size_t) = pattern == SplitPattern::Gpt2     ? matchGpt2
                                          : pattern == SplitPattern::Llama3 ? matchLlama3
                                                                            : matchBloom;
  auto emit = [&](size_t from, size_t to) {
    if (from < to)
      out.emplace_back(text.substr(offsets[from], offsets[to] - offsets[from]));
  };
  size_t gapStart = 0;
  for (size_t i = 0; i < s.size();) {
    size_t length = match(s, i);
    if (length == 0) {
      ++i;
      continue;
    }
    emit(gapStart, i);
    emit(i, i + length);
    i += length;
    gapStart = i;
  }
  emit(gapStart, s.size());
}

} // namespace dsrt
