// The Unigram model: `tokenizers`' models/unigram (model.rs and serialization.rs).
#include "tokenizer/Unigram.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsrt::tok {

// K_UNK_PENALTY: an unknown character scores this much below the least likely piece.
constexpr double kUnknownPenalty = 10.0;

Status UnigramModel::load(const Json &model, std::unique_ptr<UnigramModel> &out,
                          std::unordered_map<std::string, int64_t> &tokenIds) {
  auto unigram = std::make_unique<UnigramModel>();
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_array())
    return invalid("model.vocab must be an array of [piece, score]");
  if (vocab->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return invalid("model.vocab has more than 2^31 pieces");
  double minScore = std::numeric_limits<double>::infinity();
  for (size_t id = 0; id < vocab->size(); ++id) {
    const Json &entry = (*vocab)[id];
    std::string where = "model.vocab[" + std::to_string(id) + "]";
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string())
      return invalid(where + " must be [piece, score]");
    if (!entry[1].is_number() || !std::isfinite(entry[1].get<double>()))
      return invalid(where + " has the score " + entry[1].dump() + ", not a finite number");
    unigram->pieces_.push_back(entry[0].get<std::string>());
    unigram->scores_.push_back(entry[1].get<double>());
    minScore = std::min(minScore, unigram->scores_.back());
    tokenIds[unigram->pieces_.back()] = static_cast<int64_t>(id);
  }
  unigram->unkScore_ = minScore - kUnknownPenalty;

  auto unk = model.find("unk_id");
  if (unk != model.end() && !unk->is_null()) {
    if (!unk->is_number_unsigned())
      return invalid("model.unk_id " + unk->dump() + " is not an id");
    if (unk->get<uint64_t>() >= unigram->pieces_.size())
      return invalid("model.unk_id " + unk->dump() + " is not an id of model.vocab (" +
                     std::to_string(unigram->pieces_.size()) + " pieces)");
    unigram->unkId_ = unk->get<int64_t>();
  }
  DSRT_RETURN_IF_ERROR(readBool(model, "byte_fallback", false, "model", unigram->byteFallback_));

  for (const auto &[piece, id] : tokenIds)
    if (!piece.empty())
      unigram->sorted_.push_back(static_cast<uint32_t>(id));
  const std::vector<std::string> &pieces = unigram->pieces_;
  std::sort(unigram->sorted_.begin(), unigram->sorted_.end(),
            [&](uint32_t a, uint32_t b) { return pieces[a] < pieces[b]; });
  static const char *const hex = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte) {
    std::string name = std::string("<0x") + hex[byte >> 4] + hex[byte & 15] + ">";
    auto it = tokenIds.find(name);
    unigram->byteIds_[byte] = it == tokenIds.end() ? -1 : it->second;
  }
  out = std::move(unigram);
  return Status::ok();
}

template <typename Found>
void UnigramModel::prefixes(std::string_view text, Found &&found) const {
  // [lo, hi) of sorted_: the pieces that start with text[0, depth).
  size_t lo = 0, hi = sorted_.size();
  for (size_t depth = 0; depth < text.size() && lo < hi; ++depth) {
    if (pieces_[sorted_[lo]].size() == depth)
      ++lo;  // text[0, depth) itself, found one byte ago; the others are longer
    auto byteAt = [&](uint32_t id) { return static_cast<unsigned char>(pieces_[id][depth]); };
    auto unit = static_cast<unsigned char>(text[depth]);
    auto first = std::lower_bound(sorted_.begin() + lo, sorted_.begin() + hi, unit,
                                  [&](uint32_t id, unsigned char b) { return byteAt(id) < b; });
    auto last = std::upper_bound(first, sorted_.begin() + hi, unit,
                                 [&](unsigned char b, uint32_t id) { return b < byteAt(id); });
    lo = first - sorted_.begin();
    hi = last - sorted_.begin();
    if (lo < hi && pieces_[sorted_[lo]].size() == depth + 1)
      found(depth + 1, sorted_[lo]);
  }
}

int64_t UnigramModel::idOf(std::string_view text) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), text,
                             [&](uint32_t id, std::string_view t) { return pieces_[id] < t; });
  return it != sorted_.end() && pieces_[*it] == text ? static_cast<int64_t>(*it) : -1;
}

Status UnigramModel::encode(std::string_view text, std::vector<int64_t> &ids) const {
  // best[i]: the best path over text[0, i), which ends with the token text[start, i).
  struct Node {
    double score = 0;
    int64_t id = -1;
    size_t start = 0;
    bool reached = false;
  };
  std::vector<Node> best(text.size() + 1);
  auto offer = [&](size_t end, double score, int64_t id, size_t start) {
    Node &node = best[end];
    if (!node.reached || score > node.score)
      node = {score, id, start, true};
  };
  for (size_t at = 0; at < text.size();) {
    size_t charLength = 1;
    while (at + charLength < text.size() &&
           (static_cast<unsigned char>(text[at + charLength]) & 0xC0) == 0x80)
      ++charLength;
    double base = best[at].score;
    bool single = false;
    prefixes(text.substr(at), [&](size_t length, uint32_t id) {
      offer(at + length, scores_[id] + base, id, at);
      single = single || length == charLength;
    });
    if (!single) {
      const Node &node = best[at + charLength];
      if (unkId_ < 0 && (!node.reached || unkScore_ + base > node.score))
        return Status::error("the text has a character that is not in the Unigram vocabulary, "
                             "and model.unk_id is null");
      offer(at + charLength, unkScore_ + base, unkId_, at);
    }
    at += charLength;
  }

  // Back from the end, consecutive unknown tokens fused into one.
  std::vector<std::pair<size_t, size_t>> tokens;  // [start, end)
  bool afterUnknown = false;
  for (size_t end = text.size(); end > 0; end = best[end].start) {
    bool isUnknown = unkId_ >= 0 && best[end].id == unkId_;
    if (isUnknown && afterUnknown)
      tokens.back().first = best[end].start;
    else
      tokens.emplace_back(best[end].start, end);
    afterUnknown = isUnknown;
  }
  for (size_t k = tokens.size(); k-- > 0;) {
    auto [start, end] = tokens[k];
    int64_t id = best[end].id;
    if (!(unkId_ >= 0 && id == unkId_)) {
      ids.push_back(id);
      continue;
    }
    std::string_view piece = text.substr(start, end - start);
    if ((id = idOf(piece)) >= 0) {
      ids.push_back(id);
      continue;
    }
    bool allBytes = byteFallback_;
    for (size_t i = 0; allBytes && i < piece.size(); ++i)
      allBytes = byteIds_[static_cast<unsigned char>(piece[i])] >= 0;
    if (!allBytes) {
      ids.push_back(unkId_);
      continue;
    }
    for (unsigned char byte : piece)
      ids.push_back(byteIds_[byte]);
  }
  return Status::ok();
}

} // namespace dsrt::tok
