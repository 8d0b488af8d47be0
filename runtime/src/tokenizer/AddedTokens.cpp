// added_tokens: loading them, and cutting text where they occur.
#include "tokenizer/TokenizerImpl.h"

#include "tokenizer/Unicode.h"

#include <algorithm>

namespace dsrt {

using namespace tok;

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

namespace {
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
// beside a match into it.
void Tokenizer::Impl::splitAdded(std::string_view text,
                                 const std::vector<std::pair<std::string, size_t>> &matchers,
                                 std::vector<Segment> &out) const {
  out.clear();
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
      bool spaceBefore =
          start == 0 || !unicode::isWordChar(lastCodePoint(text.substr(0, start)));
      bool spaceAfter =
          stop == text.size() || !unicode::isWordChar(firstCodePoint(text.substr(stop)));
      if (!spaceBefore || !spaceAfter)
        continue;
    }
    if (token.lstrip)
      start = std::max(trailingSpaceStart(text, start), segmentStart);
    if (token.rstrip)
      stop = leadingSpaceEnd(text, stop);
    if (segmentStart < start)
      out.push_back({segmentStart, start, -1});
    out.push_back({start, stop, token.id});
    segmentStart = stop;
  }
  if (segmentStart < text.size())
    out.push_back({segmentStart, text.size(), -1});
}

} // namespace dsrt
