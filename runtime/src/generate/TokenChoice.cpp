// Choosing each step's token: greedy, temperature / top-k / top-p draws, and the distributed
// argmax of a vocabulary-parallel LM head.
#include "generate/Generator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dsrt {
namespace {

// splitmix64: a portable generator, so that a seed gives the same tokens everywhere.
uint64_t nextRandom(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double uniform(uint64_t &state) { return (nextRandom(state) >> 11) * 0x1.0p-53; }


} // namespace

uint64_t packArgmaxKey(float logit, int64_t globalIndex) {
  uint32_t bits = 0;
  if (std::isnan(logit)) {
    bits = 0xFFFFFFFFu;
  } else {
    if (logit == 0.0f)
      logit = 0.0f;  // -0 as +0: they compare equal
    std::memcpy(&bits, &logit, sizeof bits);
    // Negative floats order backwards as integers: flip all their bits; set the sign bit of
    // the others so that they come above every negative one.
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    // Keep 0xFFFFFFFF for NaN (+inf maps to 0xFF800000, so nothing else reaches it).
  }
  uint32_t index = 0xFFFFFFFFu - static_cast<uint32_t>(globalIndex);
  return (static_cast<uint64_t>(bits) << 32) | index;
}

int64_t argmaxKeyIndex(uint64_t key) {
  return static_cast<int64_t>(0xFFFFFFFFu - static_cast<uint32_t>(key & 0xFFFFFFFFu));
}

uint64_t localArgmaxKey(const float *logits, int64_t count, int64_t offset) {
  // Keys of equal logits differ only in the index part, lower index higher: the maximum key
  // is the first maximum.
  uint64_t best = 0;
  for (int64_t i = 0; i < count; ++i)
    best = std::max(best, packArgmaxKey(logits[i], offset + i));
  return best;
}

Status distributedArgmax(ops::Collectives &group, const std::vector<std::vector<float>> &rows,
                         int64_t offset, std::vector<int64_t> &tokens) {
  std::vector<uint64_t> keys(rows.size());
  for (size_t b = 0; b < rows.size(); ++b)
    keys[b] = localArgmaxKey(rows[b].data(), static_cast<int64_t>(rows[b].size()), offset);
  DSRT_RETURN_IF_ERROR(group.allReduceMax(keys.data(), static_cast<int64_t>(keys.size())));
  tokens.resize(rows.size());
  for (size_t b = 0; b < rows.size(); ++b)
    tokens[b] = argmaxKeyIndex(keys[b]);
  return Status::ok();
}

int64_t sampleToken(const std::vector<float> &logits, const GenerateOptions &options,
                    uint64_t &rngState) {
  if (options.temperature == 0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  std::vector<float> sorted(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    sorted[i] = logits[order[i]];
  return sampleFromCandidates(sorted.data(), order.data(), order.size(), options, rngState);
}

int64_t sampleFromCandidates(const float *values, const int64_t *ids, size_t count,
                             const GenerateOptions &options, uint64_t &rngState) {
  if (options.temperature == 0)
    return ids[0];
  // transformers' order: temperature, then top-k, then top-p, then a draw.
  size_t keep = count;
  if (options.topK > 0)
    keep = std::min<size_t>(keep, static_cast<size_t>(options.topK));
  std::vector<double> probabilities(keep);
  double maximum = values[0] / options.temperature, sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    probabilities[i] = std::exp(values[i] / options.temperature - maximum);
    sum += probabilities[i];
  }
  if (options.topP < 1) {
    // The smallest prefix whose probability reaches top_p (at least one token).
    double cumulative = 0;
    size_t prefix = 0;
    while (prefix < keep && (prefix == 0 || cumulative < options.topP * sum))
      cumulative += probabilities[prefix++];
    keep = prefix;
    sum = cumulative;
  }
  if (options.minP > 0) {
    // probabilities[0], the likeliest, is exp(0) = 1: the rest are relative to it.
    size_t prefix = 1;
    double kept = probabilities[0];
    while (prefix < keep && probabilities[prefix] >= options.minP)
      kept += probabilities[prefix++];
    keep = prefix;
    sum = kept;
  }
  double draw = uniform(rngState) * sum;
  for (size_t i = 0; i < keep; ++i) {
    draw -= probabilities[i];
    if (draw < 0)
      return ids[i];
  }
  return ids[keep - 1];
}

} // namespace dsrt
