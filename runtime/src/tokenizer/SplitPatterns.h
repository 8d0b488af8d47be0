// The pre-tokenizer regexes of the supported tokenizer families, matched by hand over code
// points. std::regex has neither \p{..} nor look-ahead, and a general engine would be far
// more than these few fixed patterns need; a pattern string not listed here is refused.
#ifndef DSRT_TOKENIZER_SPLITPATTERNS_H
#define DSRT_TOKENIZER_SPLITPATTERNS_H

#include <string>
#include <string_view>
#include <vector>

namespace dsrt {

enum class SplitPattern {
  Gpt2,    // GPT-2 / OPT / GPT-J / GPT-Neo (ByteLevel use_regex), Roberta
  Llama3,  // Llama-3
  Bloom,   // BLOOM
};

// The pattern whose regex source is exactly `regex`; false for any other.
bool recogniseSplitPattern(std::string_view regex, SplitPattern &out);

// Splits `text` (valid UTF-8) into the pattern's matches and the stretches between them, in
// order, none empty: `tokenizers`' Split with behavior Isolated (find_iter semantics:
// leftmost-first alternation, matches do not overlap).
void splitIsolated(SplitPattern pattern, std::string_view text, std::vector<std::string> &out);

} // namespace dsrt

#endif
