// Extended grapheme clusters (UAX #29, rules GB3 to GB999) over code points.
#include "tokenizer/Unicode.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace dsrt::unicode {
namespace {

enum GraphemeBreak : uint8_t {
  Other, CR, LF, Control, Extend, ZWJ, RegionalIndicator, Prepend, SpacingMark, L, V, T, LV, LVT
};
enum ConjunctBreak : uint8_t { NoConjunct, Linker, Consonant, ConjunctExtend };

// props: bits 0-3 GraphemeBreak, bit 4 Extended_Pictographic, bits 5-6 ConjunctBreak.
struct GraphemeRange {
  char32_t first, last;
  uint8_t props;
};

#include "tokenizer/GraphemeTables.inc"

struct Props {
  GraphemeBreak gcb;
  bool pictographic;
  ConjunctBreak conjunct;
};

Props propsOf(char32_t c) {
  if (c >= 0xAC00 && c <= 0xD7A3)  // Hangul syllables: an LV every 28, LVT between
    return {(c - 0xAC00) % 28 == 0 ? LV : LVT, false, NoConjunct};
  auto it =
      std::upper_bound(std::begin(kGraphemeRanges), std::end(kGraphemeRanges), c,
                       [](char32_t value, const GraphemeRange &r) { return value < r.first; });
  uint8_t props = 0;
  if (it != std::begin(kGraphemeRanges) && c <= std::prev(it)->last)
    props = std::prev(it)->props;
  return {static_cast<GraphemeBreak>(props & 15), (props & 16) != 0,
          static_cast<ConjunctBreak>((props >> 5) & 3)};
}

// What the rules need to know about the code points before the candidate boundary.
struct History {
  bool pictographicRun = false;  // ExtPict Extend* ends here (GB11)
  bool pictographicZwj = false;  // ExtPict Extend* ZWJ ends here (GB11)
  int conjunct = 0;  // InCB Consonant [Extend Linker]* ends here: 1, with a Linker in it: 2
  size_t regionalIndicators = 0;  // how many RI end here (GB12, GB13)

  void add(const Props &p) {
    pictographicZwj = pictographicRun && p.gcb == ZWJ;
    pictographicRun = p.pictographic || (pictographicRun && p.gcb == Extend);
    if (p.conjunct == Consonant)
      conjunct = 1;
    else if (conjunct && p.conjunct == Linker)
      conjunct = 2;
    else if (!(conjunct && p.conjunct == ConjunctExtend))
      conjunct = 0;
    regionalIndicators = p.gcb == RegionalIndicator ? regionalIndicators + 1 : 0;
  }
};

bool isBreak(const Props &prev, const Props &next, const History &history) {
  auto controlLike = [](GraphemeBreak b) { return b == Control || b == CR || b == LF; };
  if (prev.gcb == CR && next.gcb == LF)
    return false;  // GB3
  if (controlLike(prev.gcb) || controlLike(next.gcb))
    return true;  // GB4, GB5
  if (prev.gcb == L && (next.gcb == L || next.gcb == V || next.gcb == LV || next.gcb == LVT))
    return false;  // GB6
  if ((prev.gcb == LV || prev.gcb == V) && (next.gcb == V || next.gcb == T))
    return false;  // GB7
  if ((prev.gcb == LVT || prev.gcb == T) && next.gcb == T)
    return false;  // GB8
  if (next.gcb == Extend || next.gcb == ZWJ || next.gcb == SpacingMark || prev.gcb == Prepend)
    return false;  // GB9, GB9a, GB9b
  if (history.conjunct == 2 && next.conjunct == Consonant)
    return false;  // GB9c
  if (history.pictographicZwj && next.pictographic)
    return false;  // GB11
  if (prev.gcb == RegionalIndicator && next.gcb == RegionalIndicator &&
      history.regionalIndicators % 2 == 1)
    return false;  // GB12, GB13
  return true;     // GB999
}

} // namespace

size_t graphemeEnd(const std::vector<char32_t> &codePoints, size_t start) {
  if (start >= codePoints.size())
    return codePoints.size();
  Props prev = propsOf(codePoints[start]);
  History history;
  history.add(prev);
  for (size_t i = start + 1; i < codePoints.size(); ++i) {
    Props next = propsOf(codePoints[i]);
    if (isBreak(prev, next, history))
      return i;
    history.add(next);
    prev = next;
  }
  return codePoints.size();
}

} // namespace dsrt::unicode
