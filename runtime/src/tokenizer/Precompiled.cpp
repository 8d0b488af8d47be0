// The Precompiled normalizer: `tokenizers`' normalizers/precompiled.rs over the
// spm_precompiled crate's reading of SentencePiece's charsmap.
#include "tokenizer/Precompiled.h"

#include "tokenizer/Unicode.h"

namespace dsrt::tok {
namespace {

// A Darts-clone unit: a label (with bit 31 set for value units), a has-leaf bit and the
// XOR offset to the children; a value unit holds a 31-bit value.
uint32_t labelOf(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
bool hasLeaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t valueOf(uint32_t unit) { return unit & ((1u << 31) - 1); }
size_t offsetOf(uint32_t unit) {
  return static_cast<size_t>(unit >> 10) << ((unit & (1u << 9)) >> 6);
}

// Standard base64 with canonical padding, as the base64 crate's STANDARD engine decodes it.
bool decodeBase64(std::string_view text, std::string &out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  if (text.size() % 4 != 0)
    return false;
  out.clear();
  for (size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    size_t padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    int v[4] = {0, 0, 0, 0};
    for (size_t k = 0; k < 4 - padding; ++k)
      if ((v[k] = value(text[i + k])) < 0)
        return false;
    uint32_t bits = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    // The bits the padding leaves over must be zero.
    if ((padding == 1 && (v[2] & 3)) || (padding == 2 && (v[1] & 15)))
      return false;
    out += static_cast<char>(bits >> 16);
    if (padding < 2)
      out += static_cast<char>((bits >> 8) & 0xFF);
    if (padding < 1)
      out += static_cast<char>(bits & 0xFF);
  }
  return true;
}

// One character of NormalizedString::transform's input: a character of the new text and
// what it does to the old one (0: replaces the next old character; n > 0: is inserted;
// -n: replaces the next old character and removes the n after it).
struct CharChange {
  char32_t c;
  long change;
};

// NormalizedString::transform over the whole text: a new character's alignment is the one
// of the old character its change points at (inserted characters: the one before, or the
// piece's own start at the very beginning). A character replaced by nothing at the very
// start is consumed by no change, so the alignments after it lag one character behind
// until the end, as they do in `tokenizers`.
void transform(Piece &piece, const std::vector<CharChange> &changes) {
  const std::string &old = piece.text;
  size_t next = 0;  // the first old byte not consumed
  auto consume = [&] {
    if (next < old.size())
      do
        ++next;
      while (next < old.size() && (static_cast<unsigned char>(old[next]) & 0xC0) == 0x80);
  };
  Piece out;
  out.start = piece.start;
  for (const CharChange &change : changes) {
    size_t origin;
    if (change.change > 0)
      origin = next == 0 ? piece.start : piece.origin[next - 1];
    else
      origin = piece.origin[std::min(next, old.size() - 1)];  // `next` never reaches the end
    if (change.change <= 0)
      consume();
    for (long k = 0; k < -change.change; ++k)
      consume();
    unicode::append(change.c, out.text);
    out.origin.resize(out.text.size(), origin);
  }
  piece = std::move(out);
}

} // namespace

Status PrecompiledCharsMap::fromBase64(std::string_view base64, const std::string &where,
                                        std::shared_ptr<PrecompiledCharsMap> &out) {
  std::string what = where + " Precompiled precompiled_charsmap ";
  std::string blob;
  if (!decodeBase64(base64, blob))
    return invalid(what + "is not valid base64");
  if (blob.size() < 4)
    return invalid(what + "has " + std::to_string(blob.size()) +
                   " bytes, fewer than its 4-byte header");
  uint32_t trieBytes = 0;
  for (int k = 3; k >= 0; --k)
    trieBytes = (trieBytes << 8) | static_cast<unsigned char>(blob[k]);
  size_t unitCount = trieBytes / 4;
  if (unitCount > (blob.size() - 4) / 4)
    return invalid(what + "says its trie has " + std::to_string(trieBytes) +
                   " bytes, but only " + std::to_string(blob.size() - 4) + " follow the header");
  auto map = std::make_shared<PrecompiledCharsMap>();
  map->units_.resize(unitCount);
  for (size_t i = 0; i < unitCount; ++i)
    for (int k = 3; k >= 0; --k)
      map->units_[i] = (map->units_[i] << 8) | static_cast<unsigned char>(blob[4 + 4 * i + k]);
  map->replacements_ = blob.substr(4 + 4 * unitCount);
  if (!unicode::isValid(map->replacements_))
    return invalid(what + "has replacement text that is not UTF-8");
  if (unitCount == 0)
    return invalid(what + "has an empty trie");

  // Every node any text can reach, and every leaf's replacement, must be in range.
  const std::vector<uint32_t> &units = map->units_;
  std::vector<char> seen(unitCount, 0);
  std::vector<size_t> bases{offsetOf(units[0])};
  while (!bases.empty()) {
    size_t base = bases.back();
    bases.pop_back();
    for (uint32_t byte = 1; byte < 256; ++byte) {
      size_t position = base ^ byte;
      if (position >= unitCount)
        return invalid(what + "has a trie node whose children lie outside its " +
                       std::to_string(unitCount) + " units");
      uint32_t unit = units[position];
      if (labelOf(unit) != byte || seen[position])
        continue;
      seen[position] = 1;
      size_t children = position ^ offsetOf(unit);
      if (hasLeaf(unit)) {
        if (children >= unitCount)
          return invalid(what + "has a trie leaf outside its " + std::to_string(unitCount) +
                         " units");
        size_t index = valueOf(units[children]);
        const std::string &text = map->replacements_;
        if (index > text.size() ||
            (index < text.size() && (static_cast<unsigned char>(text[index]) & 0xC0) == 0x80))
          return invalid(what + "has a replacement offset " + std::to_string(index) +
                         " that is not a character of its " + std::to_string(text.size()) +
                         " bytes of replacements");
      }
      bases.push_back(children);
    }
  }
  out = std::move(map);
  return Status::ok();
}

bool PrecompiledCharsMap::shortestMatch(std::string_view bytes,
                                        std::string_view &replacement) const {
  size_t node = offsetOf(units_[0]);
  for (unsigned char byte : bytes) {
    if (byte == 0)
      return false;
    node ^= byte;
    if (node >= units_.size() || labelOf(units_[node]) != byte)
      return false;
    bool leaf = hasLeaf(units_[node]);
    node ^= offsetOf(units_[node]);
    if (leaf && node < units_.size()) {
      size_t index = valueOf(units_[node]);
      size_t end = replacements_.find('\0', index);
      replacement = std::string_view(replacements_).substr(
          index, (end == std::string::npos ? replacements_.size() : end) - index);
      return true;
    }
  }
  return false;
}

void PrecompiledCharsMap::normalize(Piece &piece) const {
  std::vector<char32_t> codePoints, replacementCodePoints;
  std::vector<size_t> offsets;
  unicode::decode(piece.text, codePoints, &offsets);
  std::vector<CharChange> changes;
  bool modified = false;
  std::string_view text = piece.text, replacement;
  // precompiled.rs's replace(): the new characters replace the old ones one for one; extra
  // new ones are insertions, and missing ones are removed by the last character so far,
  // which for a replacement by nothing is the previous one's (and none at the very start).
  auto replace = [&](size_t replaced) {
    modified = true;
    unicode::decode(replacement, replacementCodePoints);
    for (char32_t c : replacementCodePoints)
      changes.push_back({c, 0});
    long extra = static_cast<long>(replacementCodePoints.size()) - static_cast<long>(replaced);
    for (long k = 0; k < extra; ++k)
      changes[changes.size() - 1 - k].change = 1;
    if (extra < 0 && !changes.empty())
      changes.back().change += extra;
  };
  for (size_t i = 0; i < codePoints.size();) {
    size_t end = unicode::graphemeEnd(codePoints, i);
    std::string_view cluster = text.substr(offsets[i], offsets[end] - offsets[i]);
    if (cluster.size() < 6 && shortestMatch(cluster, replacement)) {
      replace(end - i);
    } else {
      for (size_t k = i; k < end; ++k) {
        if (shortestMatch(text.substr(offsets[k], offsets[k + 1] - offsets[k]), replacement))
          replace(1);
        else
          changes.push_back({codePoints[k], 0});
      }
    }
    i = end;
  }
  if (modified)
    transform(piece, changes);
}

} // namespace dsrt::tok
