// The generation C API on a real plan (the GPT-2 fixture with past/present, compiled by the
// dsc built here, path in argv[1]): limits are checked before anything runs and leave the
// session usable, stop tokens and the callback end a sequence, sampling is reproducible.
// Token-for-token agreement with transformers is test/models/generate-greedy.test.
#include "dsrt/dsrt.h"

#include "generate/Generator.h"
#include "generate/Request.h"
#include "session/Session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::string planPath;

class GenerateTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(planPath.empty()) << "usage: dsrt-generate-tests plan.dsp";
    ASSERT_EQ(dsrt_plan_open(planPath.c_str(), &plan), DSRT_OK) << dsrt_last_error();
    ASSERT_EQ(dsrt_session_create(plan, 0, DSRT_DEVICE_CPU, &session), DSRT_OK)
        << dsrt_last_error();
    dsrt_generate_options_init(&options);
    options.max_new_tokens = 6;
    options.ignore_eos = 1;
  }
  void TearDown() override {
    dsrt_session_destroy(session);
    dsrt_plan_close(plan);
  }
  // Generates for the prompts; the status, and the tokens of each sequence on success.
  dsrt_status generate(const std::vector<std::vector<int64_t>> &prompts,
                       std::vector<std::vector<int64_t>> &tokens,
                       std::vector<dsrt_finish_reason> *reasons = nullptr) {
    std::vector<const int64_t *> pointers;
    std::vector<size_t> lengths;
    for (const auto &prompt : prompts) {
      pointers.push_back(prompt.data());
      lengths.push_back(prompt.size());
    }
    dsrt_generation *generation = nullptr;
    dsrt_status status = dsrt_generate(session, prompts.size(), pointers.data(),
                                       lengths.data(), &options, &generation);
    tokens.clear();
    if (status != DSRT_OK)
      return status;
    for (size_t i = 0; i < dsrt_generation_count(generation); ++i) {
      const int64_t *ids = nullptr;
      size_t count = 0;
      dsrt_finish_reason reason;
      EXPECT_EQ(dsrt_generation_tokens(generation, i, &ids, &count, &reason), DSRT_OK);
      tokens.emplace_back(ids, ids + count);
      if (reasons)
        reasons->push_back(reason);
    }
    dsrt_generation_free(generation);
    return status;
  }

  dsrt_plan *plan = nullptr;
  dsrt_session *session = nullptr;
  dsrt_generate_options options;
};

TEST_F(GenerateTest, LimitsAreCheckedBeforeRunningAndTheSessionStaysUsable) {
  std::vector<std::vector<int64_t>> tokens, reference;
  ASSERT_EQ(generate({{5, 6, 7}}, reference), DSRT_OK) << dsrt_last_error();
  ASSERT_EQ(reference.size(), 1u);
  EXPECT_EQ(reference[0].size(), 6u);

  options.max_new_tokens = 30;  // 3 + 30 > the plan's 24
  EXPECT_EQ(generate({{5, 6, 7}}, tokens), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("max_seq_len of 24"), std::string::npos)
      << dsrt_last_error();
  options.max_new_tokens = 6;
  EXPECT_EQ(generate({{1}, {2}, {3}}, tokens), DSRT_INVALID_ARGUMENT);  // max_batch 2
  EXPECT_NE(std::string(dsrt_last_error()).find("max_batch of 2"), std::string::npos);
  EXPECT_EQ(generate({{5, 300}}, tokens), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("outside the vocabulary [0, 300)"),
            std::string::npos);
  EXPECT_EQ(generate({{}}, tokens), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("empty"), std::string::npos);
  options.top_p = 0;
  EXPECT_EQ(generate({{5}}, tokens), DSRT_INVALID_ARGUMENT);
  options.top_p = 1;

  ASSERT_EQ(generate({{5, 6, 7}}, tokens), DSRT_OK) << dsrt_last_error();
  EXPECT_EQ(tokens, reference);
}

TEST_F(GenerateTest, BeamAndProcessorOptionsAreCheckedAndOneBeamIsGreedy) {
  // dsrt_generate_options_init: no beams, transformers' length_penalty and early_stopping.
  EXPECT_EQ(options.num_beams, 1);
  EXPECT_EQ(options.length_penalty, 1.0f);
  EXPECT_EQ(options.early_stopping, 0);
  std::vector<std::vector<int64_t>> greedy, tokens;
  ASSERT_EQ(generate({{5, 6, 7}}, greedy), DSRT_OK) << dsrt_last_error();
  options.num_beams = 2;
  ASSERT_EQ(generate({{5, 6, 7}}, tokens), DSRT_OK) << dsrt_last_error();
  EXPECT_EQ(tokens.size(), 1u);  // one sequence per prompt, whatever the beams
  EXPECT_EQ(generate({{5}, {6}}, tokens), DSRT_INVALID_ARGUMENT);  // 4 rows, max_batch 2
  EXPECT_NE(std::string(dsrt_last_error()).find("2 prompts of 2 beams is 4 sequences"),
            std::string::npos) << dsrt_last_error();
  options.early_stopping = 3;
  EXPECT_EQ(generate({{5}}, tokens), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("early_stopping"), std::string::npos);
  options.early_stopping = 0;
  options.num_beams = 257;
  EXPECT_EQ(generate({{5}}, tokens), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("num_beams must be in [1, 256]"),
            std::string::npos);
  options.num_beams = 1;
  ASSERT_EQ(generate({{5, 6, 7}}, tokens), DSRT_OK);
  EXPECT_EQ(tokens, greedy);
  // The logits processors: off by default, checked before anything runs.
  EXPECT_EQ(options.repetition_penalty, 1.0f);
  EXPECT_EQ(options.forced_bos_token_id, -1);
  EXPECT_EQ(options.forced_eos_token_id, -1);
  options.repetition_penalty = 0;
  EXPECT_EQ(generate({{5}}, tokens), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("repetition_penalty"), std::string::npos);
  options.repetition_penalty = 1;
  options.forced_eos_token_id = 300;
  EXPECT_EQ(generate({{5}}, tokens), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("outside the vocabulary"), std::string::npos);
  options.forced_eos_token_id = -1;
  options.no_repeat_ngram_size = -1;
  EXPECT_EQ(generate({{5}}, tokens), DSRT_INVALID_ARGUMENT);
}

TEST_F(GenerateTest, StopTokensAndTheCallbackEndASequence) {
  std::vector<std::vector<int64_t>> reference, tokens;
  ASSERT_EQ(generate({{5, 6, 7}, {9}}, reference), DSRT_OK) << dsrt_last_error();
  // Stop at sequence 0's third token: it ends there, the other runs on unless it meets it.
  int64_t stop = reference[0][2];
  options.stop_tokens = &stop;
  options.stop_token_count = 1;
  std::vector<dsrt_finish_reason> reasons;
  ASSERT_EQ(generate({{5, 6, 7}, {9}}, tokens, &reasons), DSRT_OK);
  size_t firstStop = 0;
  while (reference[0][firstStop] != stop)
    ++firstStop;
  EXPECT_EQ(tokens[0], std::vector<int64_t>(reference[0].begin(),
                                            reference[0].begin() + firstStop + 1));
  EXPECT_EQ(reasons[0], DSRT_FINISH_STOP);

  options.stop_token_count = 0;
  struct Seen {
    std::vector<std::pair<size_t, int64_t>> calls;
  } seen;
  options.user_data = &seen;
  options.on_token = [](void *user, size_t sequence, int64_t token) {
    auto *s = static_cast<Seen *>(user);
    s->calls.push_back({sequence, token});
    return sequence == 1 ? 1 : 0;  // stop sequence 1 after its first token
  };
  reasons.clear();
  ASSERT_EQ(generate({{5, 6, 7}, {9}}, tokens, &reasons), DSRT_OK);
  EXPECT_EQ(tokens[0], reference[0]);
  EXPECT_EQ(tokens[1], std::vector<int64_t>{reference[1][0]});
  EXPECT_EQ(reasons[1], DSRT_FINISH_CALLBACK);
  EXPECT_EQ(seen.calls.size(), reference[0].size() + 1);
}

TEST_F(GenerateTest, SamplingIsReproducibleFromTheSeed) {
  options.temperature = 1.5f;
  options.top_k = 50;
  options.top_p = 0.95f;
  options.seed = 1234;
  std::vector<std::vector<int64_t>> first, second, other, greedy;
  ASSERT_EQ(generate({{5, 6, 7}}, first), DSRT_OK);
  ASSERT_EQ(generate({{5, 6, 7}}, second), DSRT_OK);
  EXPECT_EQ(first, second);
  options.seed = 99;
  options.max_new_tokens = 12;
  ASSERT_EQ(generate({{5, 6, 7}}, other), DSRT_OK);
  options.temperature = 0;
  ASSERT_EQ(generate({{5, 6, 7}}, greedy), DSRT_OK);
  EXPECT_NE(other, greedy) << "12 tokens at temperature 1.5 all equal to greedy";
}

// Greedy decoding's vectorized argmax against std::max_element (the reference it replaced):
// rows of every length around the vector steps, with ties, -0 and +0, infinities, and NaNs
// first, inside and everywhere.
TEST(SampleTokenTest, FirstLargestIsMaxElementsPick) {
  uint64_t state = 3;
  auto draw = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>(state >> 33);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, 0.0f, -0.0f, inf, -inf, 1.0f};
  int checked = 0;
  for (int length : {1, 2, 3, 15, 16, 17, 31, 32, 33, 64, 100, 1000}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> row(static_cast<size_t>(length));
      // Few distinct values, so that ties are common.
      for (float &value : row)
        value = static_cast<float>(draw() % 7) - 3.0f;
      const int specialCount = trial % 5;
      for (int k = 0; k < specialCount; ++k)
        row[static_cast<size_t>(draw() % length)] = specials[draw() % 6];
      if (trial % 17 == 0)
        std::fill(row.begin(), row.end(), nan);
      if (trial % 23 == 0)
        std::fill(row.begin(), row.end(), -inf);
      const int64_t expected = std::max_element(row.begin(), row.end()) - row.begin();
      ASSERT_EQ(dsrt::firstLargest(row.data(), length), expected)
          << "length " << length << ", trial " << trial;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12 * 200);
}

TEST(SampleTokenTest, FollowsTheFilteredDistribution) {
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  dsrt::GenerateOptions options;
  uint64_t state = 7;
  EXPECT_EQ(dsrt::sampleToken(logits, options, state), 3);  // greedy
  options.temperature = 1;
  options.topK = 1;
  EXPECT_EQ(dsrt::sampleToken(logits, options, state), 3);
  // Each token's share of 20000 draws under the options as they are.
  const int draws = 20000;
  auto shares = [&] {
    std::vector<double> share(4, 0.0);
    for (int i = 0; i < draws; ++i)
      share[dsrt::sampleToken(logits, options, state)] += 1.0 / draws;
    return share;
  };
  // top-k 2 keeps ids 3 and 2 with probabilities 4/7 and 3/7.
  options.topK = 2;
  std::vector<double> share = shares();
  EXPECT_EQ(share[0] + share[1], 0);
  EXPECT_NEAR(share[3], 4.0 / 7.0, 0.02);
  // top-p 0.5 keeps the smallest prefix reaching half the mass: {3} (0.4) then {3, 2} (0.7).
  options.topK = 0;
  options.topP = 0.5f;
  share = shares();
  EXPECT_EQ(share[0] + share[1], 0);
  EXPECT_NEAR(share[3], 4.0 / 7.0, 0.02);
  // min-p 0.45 keeps the tokens of at least 0.45 of the likeliest's probability: ids 3, 2
  // and 1 (4/4, 3/4 and 2/4), not id 0 (1/4); they are drawn as 4 : 3 : 2.
  options.topP = 1;
  options.minP = 0.45f;
  share = shares();
  EXPECT_EQ(share[0], 0);
  EXPECT_NEAR(share[3], 4.0 / 9.0, 0.02);
  EXPECT_NEAR(share[1], 2.0 / 9.0, 0.02);
  // 0.6 drops id 1 as well: 4/7 and 3/7 again.
  options.minP = 0.6f;
  share = shares();
  EXPECT_EQ(share[0] + share[1], 0);
  EXPECT_NEAR(share[3], 4.0 / 7.0, 0.02);
}

// sampleToken sorts only the buckets of the row where its cuts fall; the full stable sort of
// the row and sampleFromCandidates over all of it (what sampleToken did before) must pick the
// same token from the same generator state. Rows of 5000 logits, peaked to flat temperatures
// and rows (a flat one reaches deep into the sorted row), ties (logits in steps of 0.25),
// NaN-free; top-k, top-p and min-p alone and together. Sums in another order can differ in
// the last bit, which decides a draw about once in 1e15: none here.
TEST(SampleTokenTest, PrefixSortingDrawsTheFullSortsToken) {
  const size_t vocab = 5000;
  uint64_t fill = 12345;
  std::vector<float> logits(vocab);
  int64_t draws = 0;
  for (int row = 0; row < 6; ++row) {
    for (size_t i = 0; i < vocab; ++i) {
      fill = fill * 6364136223846793005ull + 1442695040888963407ull;
      const double unit = static_cast<double>(fill >> 11) * 0x1.0p-53;
      // Spread out, ties in steps of 0.25, and flat (a random-weight model's: every token
      // within 0.05 of the others, so each bucket of the sampler holds hundreds).
      logits[i] = row % 3 == 0   ? static_cast<float>(unit * 12 - 6)
                  : row % 3 == 1 ? std::floor(unit * 40) * 0.25f
                                 : static_cast<float>(unit * 0.05);
    }
    std::vector<int64_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    std::vector<float> sorted(vocab);
    for (size_t i = 0; i < vocab; ++i)
      sorted[i] = logits[order[i]];
    for (float temperature : {0.3f, 1.0f, 8.0f})
      for (int64_t topK : {0, 40})
        for (float topP : {1.0f, 0.95f, 0.5f})
          for (float minP : {0.0f, 0.01f, 0.3f}) {
            dsrt::GenerateOptions options;
            options.temperature = temperature;
            options.topK = topK;
            options.topP = topP;
            options.minP = minP;
            for (uint64_t seed = 0; seed < 8; ++seed) {
              uint64_t fast = seed * 7919 + 1, full = fast;
              const int64_t got = dsrt::sampleToken(logits, options, fast);
              const int64_t want =
                  dsrt::sampleFromCandidates(sorted.data(), order.data(), vocab, options, full);
              ASSERT_EQ(got, want) << "row " << row << ", temperature " << temperature
                                   << ", top-k " << topK << ", top-p " << topP << ", min-p "
                                   << minP << ", seed " << seed;
              ASSERT_EQ(fast, full) << "one draw each";
              ++draws;
            }
          }
  }
  EXPECT_EQ(draws, 6 * 3 * 2 * 3 * 3 * 8);
}

// hostTopLogits's candidates are the prefix of std::stable_sort by descending logit (ties by
// the lower index), for counts below, at and above its block of 16, over a vocabulary that
// is no multiple of it and rows full of ties; two rows of a batch are selected apart.
TEST(SampleTokenTest, TopLogitsAreTheStableSortsPrefix) {
  const int64_t vocab = 1003;
  std::vector<float> logits(2 * vocab);
  uint64_t fill = 99;
  for (float &value : logits) {
    fill = fill * 6364136223846793005ull + 1442695040888963407ull;
    value = static_cast<float>(static_cast<int>((fill >> 33) % 41) - 20) * 0.25f;  // ties
  }
  dsrt::TensorRef ref{dsrt::DType::F32, {2, 1, vocab}, logits.data()};
  for (int64_t count : {int64_t(1), int64_t(2), int64_t(16), int64_t(17), int64_t(50), vocab}) {
    std::vector<std::vector<float>> values;
    std::vector<std::vector<int64_t>> ids;
    ASSERT_TRUE(dsrt::hostTopLogits(ref, count, values, ids).isOk());
    ASSERT_EQ(ids.size(), 2u);
    for (int64_t b = 0; b < 2; ++b) {
      const float *row = logits.data() + b * vocab;
      std::vector<int64_t> order(static_cast<size_t>(vocab));
      for (int64_t i = 0; i < vocab; ++i)
        order[static_cast<size_t>(i)] = i;
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t x, int64_t y) { return row[x] > row[y]; });
      order.resize(static_cast<size_t>(count));
      EXPECT_EQ(ids[static_cast<size_t>(b)], order) << "count " << count << ", row " << b;
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(values[static_cast<size_t>(b)][static_cast<size_t>(i)], row[order[i]]);
    }
  }
}

// Greedy and top-k draw from Session::topLogits's candidates (hostTopLogits here) instead of
// the whole row: the token and the generator's state must be exactly sampleToken's.
TEST(SampleTokenTest, CandidatesDrawWhatTheWholeRowDraws) {
  const int64_t positions = 2, vocab = 300;
  std::vector<float> logits(positions * vocab);
  uint64_t fill = 12345;
  for (float &value : logits) {
    fill = fill * 6364136223846793005ull + 1442695040888963407ull;
    value = static_cast<float>(static_cast<int>((fill >> 33) % 61) - 30) * 0.125f;  // ties
  }
  std::vector<float> last(logits.end() - vocab, logits.end());
  dsrt::TensorRef ref{dsrt::DType::F32, {1, positions, vocab}, logits.data()};
  struct Case {
    float temperature;
    int64_t topK;
    float topP;
  };
  for (Case c : {Case{0, 0, 1}, Case{1, 1, 1}, Case{0.7f, 5, 1}, Case{1.3f, 50, 0.9f},
                 Case{1, vocab, 0.5f}}) {
    dsrt::GenerateOptions options;
    options.temperature = c.temperature;
    options.topK = c.topK;
    options.topP = c.topP;
    std::vector<std::vector<float>> values;
    std::vector<std::vector<int64_t>> ids;
    int64_t count = c.topK > 0 ? c.topK : 1;
    ASSERT_TRUE(dsrt::hostTopLogits(ref, count, values, ids).isOk());
    ASSERT_EQ(ids.size(), 1u);
    ASSERT_EQ(ids[0].size(), static_cast<size_t>(count));
    uint64_t whole = 99, candidates = 99;
    for (int draw = 0; draw < 500; ++draw) {
      int64_t expected = dsrt::sampleToken(last, options, whole);
      int64_t got = dsrt::sampleFromCandidates(values[0].data(), ids[0].data(),
                                               values[0].size(), options, candidates);
      ASSERT_EQ(got, expected) << "temperature " << c.temperature << " top-k " << c.topK
                               << " draw " << draw;
      ASSERT_EQ(candidates, whole);
    }
  }
}

// The record rank 0 sends to the ranks that follow it (dsrt_generate_lead).
TEST(GenerationRequestTest, RoundTripsWhatDecidesTheTokens) {
  dsrt::GenerationRequest request;
  request.prompts = {{1, 2, 3}, {40000000000ll}, {7}};
  request.options.maxNewTokens = 9;
  request.options.temperature = 0.75f;
  request.options.topK = 12;
  request.options.topP = 0.5f;
  request.options.seed = 0xFFFFFFFFFFFFFFF0ull;
  request.options.stopTokens = {5, 6};
  request.options.ignoreEos = true;
  request.options.numBeams = 3;
  request.options.lengthPenalty = -0.5f;
  request.options.earlyStopping = dsrt::GenerateOptions::EarlyStopping::Never;
  request.options.repetitionPenalty = 1.25f;
  request.options.noRepeatNgramSize = 3;
  request.options.minNewTokens = 4;
  request.options.forcedBosToken = 0;
  request.options.forcedEosToken = 2;
  dsrt::GenerationRequest decoded;
  ASSERT_TRUE(dsrt::decodeRequest(dsrt::encodeRequest(request), decoded).isOk());
  EXPECT_EQ(decoded.kind, dsrt::GenerationRequest::Kind::Generate);
  EXPECT_EQ(decoded.prompts, request.prompts);
  EXPECT_EQ(decoded.options.maxNewTokens, 9);
  EXPECT_EQ(decoded.options.temperature, 0.75f);
  EXPECT_EQ(decoded.options.topK, 12);
  EXPECT_EQ(decoded.options.topP, 0.5f);
  EXPECT_EQ(decoded.options.seed, request.options.seed);
  EXPECT_EQ(decoded.options.stopTokens, request.options.stopTokens);
  EXPECT_TRUE(decoded.options.ignoreEos);
  EXPECT_EQ(decoded.options.numBeams, 3);
  EXPECT_EQ(decoded.options.lengthPenalty, -0.5f);
  EXPECT_EQ(decoded.options.earlyStopping, dsrt::GenerateOptions::EarlyStopping::Never);
  EXPECT_EQ(decoded.options.repetitionPenalty, 1.25f);
  EXPECT_EQ(decoded.options.noRepeatNgramSize, 3);
  EXPECT_EQ(decoded.options.minNewTokens, 4);
  EXPECT_EQ(decoded.options.forcedBosToken, 0);
  EXPECT_EQ(decoded.options.forcedEosToken, 2);

  dsrt::GenerationRequest failed;
  failed.kind = dsrt::GenerationRequest::Kind::Failed;
  failed.errorCode = DSRT_INVALID_ARGUMENT;
  failed.errorMessage = "a prompt is null";
  ASSERT_TRUE(dsrt::decodeRequest(dsrt::encodeRequest(failed), decoded).isOk());
  EXPECT_EQ(decoded.kind, dsrt::GenerationRequest::Kind::Failed);
  EXPECT_EQ(decoded.errorCode, DSRT_INVALID_ARGUMENT);
  EXPECT_EQ(decoded.errorMessage, "a prompt is null");

  dsrt::GenerationRequest finish;
  finish.kind = dsrt::GenerationRequest::Kind::Finish;
  ASSERT_TRUE(dsrt::decodeRequest(dsrt::encodeRequest(finish), decoded).isOk());
  EXPECT_EQ(decoded.kind, dsrt::GenerationRequest::Kind::Finish);
}

TEST(GenerationRequestTest, MalformedRecordsAreErrorsThatSayWhy) {
  dsrt::GenerationRequest request;
  request.prompts = {{1, 2, 3}, {4}};
  std::vector<uint8_t> bytes = dsrt::encodeRequest(request);
  dsrt::GenerationRequest decoded;
  ASSERT_TRUE(dsrt::decodeRequest(bytes, decoded).isOk());
  // Every truncation, not only the last byte's.
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + size);
    dsrt::Status status = dsrt::decodeRequest(cut, decoded);
    ASSERT_FALSE(status.isOk()) << size << " bytes";
    EXPECT_NE(status.message().find("the request ends inside"), std::string::npos)
        << status.message();
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_NE(dsrt::decodeRequest(longer, decoded).message().find("1 bytes past its end"),
            std::string::npos);
  std::vector<uint8_t> otherVersion = bytes;
  otherVersion[4] = 9;
  EXPECT_NE(dsrt::decodeRequest(otherVersion, decoded).message().find("format 9"),
            std::string::npos);
  std::vector<uint8_t> otherKind = bytes;
  otherKind[8] = 7;
  EXPECT_NE(dsrt::decodeRequest(otherKind, decoded).message().find("of kind 7"),
            std::string::npos);
  // A count past the bytes left is refused before anything is allocated for it.
  dsrt::GenerationRequest one;
  one.prompts = {{1}};
  std::vector<uint8_t> huge = dsrt::encodeRequest(one);
  size_t promptCount = huge.size() - 3 * sizeof(uint64_t);
  std::memset(huge.data() + promptCount, 0xFF, sizeof(uint64_t));
  EXPECT_NE(dsrt::decodeRequest(huge, decoded)
                .message()
                .find("ends inside its prompts (18446744073709551615 of them"),
            std::string::npos);
  // Nothing is half-decoded into the caller's request.
  EXPECT_EQ(decoded.prompts, request.prompts);
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1)
    planPath = argv[1];
  return RUN_ALL_TESTS();
}
