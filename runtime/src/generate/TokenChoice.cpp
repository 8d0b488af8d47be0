// Choosing each step's token: greedy, temperature / top-k / top-p draws, and the distributed
// argmax of a vocabulary-parallel LM head.
#include "generate/Generator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

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

// Two passes: the largest value by vector maxima, then its first index. _mm_max_ps(x, acc)
// is `acc < x ? x : acc` lane by lane (a NaN x leaves acc), std::max_element's own test, so
// the maxima start from values[0] and never take a NaN; the first value equal to the largest
// is then max_element's pick (it keeps the first of equal values, -0 and +0 alike). Greedy
// decoding reads a whole vocabulary row per token, which max_element's one compare a value
// made 4% of a decode-heavy GPT-2 serving run.
int64_t firstLargest(const float *values, int64_t count) {
  if (count <= 0 || std::isnan(values[0]))
    return 0;
  float largest = values[0];
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 acc[4];
  for (__m128 &lanes : acc)
    lanes = _mm_set1_ps(largest);
  for (; i + 16 <= count; i += 16)
    for (int u = 0; u < 4; ++u)
      acc[u] = _mm_max_ps(_mm_loadu_ps(values + i + 4 * u), acc[u]);
  alignas(16) float lanes[16];
  for (int u = 0; u < 4; ++u)
    _mm_store_ps(lanes + 4 * u, acc[u]);
  for (float lane : lanes)
    largest = largest < lane ? lane : largest;
#endif
  for (; i < count; ++i)
    largest = largest < values[i] ? values[i] : largest;
  for (int64_t j = 0; j < count; ++j)
    if (values[j] == largest)
      return j;
  return 0;
}

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

namespace {

// The order of std::stable_sort by descending logit: equal logits by the lower index. A NaN
// counts as -infinity, so that the order is a strict weak one.
struct Descending {
  const float *logits;
  float key(int64_t i) const { return std::isnan(logits[i]) ? -INFINITY : logits[i]; }
  bool operator()(int64_t a, int64_t b) const {
    const float x = key(a), y = key(b);
    return x != y ? x > y : a < b;
  }
};

// Top-p's prefix of sorted probabilities: the smallest whose mass reaches `limit` (at least
// one token, at most `count`); its mass in `mass`.
size_t topPPrefix(const double *probabilities, size_t count, double limit, double &mass) {
  mass = 0;
  size_t prefix = 0;
  while (prefix < count && (prefix == 0 || mass < limit))
    mass += probabilities[prefix++];
  return prefix;
}

// Min-p's: the tokens of the first `keep` whose probability is at least minP times the
// likeliest's (probabilities[0], exp(0) = 1, so the others are relative to it).
size_t minPPrefix(const double *probabilities, size_t keep, double minP, double &mass) {
  size_t prefix = 1;
  mass = probabilities[0];
  while (prefix < keep && probabilities[prefix] >= minP)
    mass += probabilities[prefix++];
  return prefix;
}

// The `count` largest tokens in stable_sort's order. A threshold from nth_element over the
// plain float keys, then one pass that takes the tokens above it and, of those equal to it,
// the lowest indices: much faster than selecting indices through the comparator.
void sortLargest(const std::vector<float> &keys, size_t count, const Descending &before,
                 std::vector<float> &scratch, std::vector<int64_t> &order) {
  order.clear();
  if (count < keys.size()) {
    scratch.assign(keys.begin(), keys.end());
    std::nth_element(scratch.begin(), scratch.begin() + static_cast<int64_t>(count) - 1,
                     scratch.end(), std::greater<float>());
    const float threshold = scratch[count - 1];
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] > threshold)
        order.push_back(static_cast<int64_t>(i));
    for (size_t i = 0; i < keys.size() && order.size() < count; ++i)
      if (keys[i] == threshold)
        order.push_back(static_cast<int64_t>(i));
  } else {
    order.resize(keys.size());
    std::iota(order.begin(), order.end(), 0);
  }
  std::sort(order.begin(), order.end(), before);
}

} // namespace

// The draw of sampleFromCandidates over the whole sorted row, without sorting the row: a
// 150k vocabulary's stable_sort cost ~15-30 ms a token, and the engine samples every
// request's token on its stepping thread. Only the prefix of the sorted row that the draw,
// top-p and min-p can reach is sorted, grown 8x until it suffices (usually a few hundred
// tokens; a flat distribution can need the whole row). With top-k the top k are selected
// and sampleFromCandidates runs on them, with the same arithmetic. Without it, the total
// mass is summed in index order rather than sorted order: the token is the full sort's except
// where the draw lands within that sum's last bit of a boundary.
int64_t sampleToken(const std::vector<float> &logits, const GenerateOptions &options,
                    uint64_t &rngState) {
  if (options.temperature == 0)
    return firstLargest(logits.data(), static_cast<int64_t>(logits.size()));
  const Descending before{logits.data()};
  // Reused by the calls on this thread: a row's worth each, which fresh vectors would take
  // from the OS (and fault in) at every token.
  thread_local std::vector<float> keys, scratch;
  thread_local std::vector<int64_t> order;
  thread_local std::vector<double> all;
  keys.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    keys[i] = before.key(static_cast<int64_t>(i));
  if (options.topK > 0 && static_cast<size_t>(options.topK) < logits.size()) {
    const size_t k = static_cast<size_t>(options.topK);
    sortLargest(keys, k, before, scratch, order);
    std::vector<float> sorted(k);
    for (size_t i = 0; i < k; ++i)
      sorted[i] = logits[order[i]];
    return sampleFromCandidates(sorted.data(), order.data(), k, options, rngState);
  }
  // sampleFromCandidates' arithmetic exactly: the logit over the temperature in float, the
  // rest in double.
  const float temperature = options.temperature;
  const double maximum = *std::max_element(keys.begin(), keys.end()) / temperature;
  // Every token's probability (unnormalised), once.
  all.resize(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    total += all[i] = std::exp(static_cast<double>(logits[i] / temperature) - maximum);
  const double draw = uniform(rngState);

  // Buckets of log-probability below the maximum, as wide as the row's spread (at most 40
  // nats) over kBuckets: a bucket is a range of logits, so the buckets in order are
  // consecutive runs of the sorted row, and each cut (top-p's, min-p's, the draw's) needs only
  // the masses of the buckets before it and the bucket it falls in sorted. A flat row (a
  // random-weight model's) used to need nearly all of its 150k tokens sorted.
  constexpr int kBuckets = 512;
  double lowest = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (keys[i] != -INFINITY)
      lowest = std::max(lowest, maximum - static_cast<double>(keys[i] / temperature));
  const double width = std::max(std::min(lowest, 40.0) / (kBuckets - 1), 1e-30);
  thread_local std::vector<int32_t> bucketOf, start;
  thread_local std::vector<int64_t> byBucket;
  bucketOf.resize(logits.size());
  start.assign(kBuckets + 1, 0);
  std::vector<double> mass(kBuckets, 0.0);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double below = maximum - static_cast<double>(keys[i] / temperature);
    const int bucket = below < (kBuckets - 1) * width ? static_cast<int>(below / width)
                                                       : kBuckets - 1;
    bucketOf[i] = bucket;
    mass[bucket] += all[i];
    ++start[bucket + 1];
  }
  for (int b = 0; b < kBuckets; ++b)
    start[b + 1] += start[b];
  byBucket.resize(logits.size());
  {
    std::vector<int32_t> next(start.begin(), start.end() - 1);
    for (size_t i = 0; i < logits.size(); ++i)
      byBucket[static_cast<size_t>(next[bucketOf[i]]++)] = static_cast<int64_t>(i);
  }
  int sortedBucket = -1;
  // Bucket b's tokens in the sorted row's order (sorted once, when a cut falls in it).
  auto sortBucket = [&](int b) {
    if (sortedBucket == b)
      return;
    std::sort(byBucket.begin() + start[b], byBucket.begin() + start[b + 1], before);
    sortedBucket = b;
  };
  // The sorted row's first `keep` tokens: sampleFromCandidates' prefix. Walks `limit` of
  // mass over them (the shortest prefix reaching it, at least one token): returns the
  // position after it, its mass in `reached`.
  auto walk = [&](size_t keep, double limit, double &reached) -> size_t {
    reached = 0;
    for (int b = 0; b < kBuckets; ++b) {
      const size_t first = static_cast<size_t>(start[b]), end = static_cast<size_t>(start[b + 1]);
      if (first >= keep)
        break;
      const bool whole = end <= keep;
      // A whole bucket whose every token the old loop would add (the first token always is).
      if (whole && first > 0 && reached + mass[b] < limit) {
        reached += mass[b];
        continue;
      }
      sortBucket(b);
      for (size_t at = first; at < std::min(end, keep); ++at) {
        if (at > 0 && !(reached < limit))
          return at;
        reached += all[static_cast<size_t>(byBucket[at])];
      }
    }
    return keep;
  };
  size_t keep = logits.size();
  double sum = total;
  if (options.topP < 1)
    keep = walk(keep, options.topP * total, sum);
  if (options.minP > 0) {
    // The tokens of at least min-p times the likeliest's probability (exp(0) = 1): a prefix.
    size_t passing = 0;
    for (size_t i = 0; i < logits.size(); ++i)
      passing += all[i] >= options.minP;
    if (std::max<size_t>(passing, 1) < keep) {
      keep = std::max<size_t>(passing, 1);
      (void)walk(keep, INFINITY, sum);
    }
  }
  // The draw: the first token at which the running mass passes draw * sum.
  const double target = draw * sum;
  double passed = 0;
  for (int b = 0; b < kBuckets; ++b) {
    const size_t first = static_cast<size_t>(start[b]), end = static_cast<size_t>(start[b + 1]);
    if (first >= keep)
      break;
    if (end <= keep && passed + mass[b] <= target) {
      passed += mass[b];
      continue;
    }
    sortBucket(b);
    double remaining = target - passed;
    for (size_t at = first; at < std::min(end, keep); ++at) {
      remaining -= all[static_cast<size_t>(byBucket[at])];
      if (remaining < 0)
        return byBucket[at];
    }
    passed = target - remaining;
  }
  // Past the end by rounding: the last kept token, as sampleFromCandidates.
  size_t last = keep - 1;
  int b = 0;
  while (static_cast<size_t>(start[b + 1]) <= last)
    ++b;
  sortBucket(b);
  return byBucket[last];
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
    double cumulative = 0;
    keep = topPPrefix(probabilities.data(), keep, options.topP * sum, cumulative);
    sum = cumulative;
  }
  if (options.minP > 0) {
    double kept = 0;
    keep = minPPrefix(probabilities.data(), keep, options.minP, kept);
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
