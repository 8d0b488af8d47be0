// The tokenizer functions of the C API: from a file, from a plan (one the plan tests'
// sample writer makes, its tokenizer_json replaced), encode/decode with malloc'd results,
// and errors through dsrt_last_error.
#include "dsrt/dsrt.h"

#include "PlanTestSupport.h"
#include "SamplePlan.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string fixturePath(const std::string &name) {
  return std::string(DSRT_SOURCE_DIR) + "/test/models/" + name + "/tokenizer.json";
}

std::vector<int64_t> encode(const dsrt_tokenizer *tokenizer, const std::string &text,
                            bool addSpecial) {
  int64_t *ids = nullptr;
  size_t count = 0;
  EXPECT_EQ(dsrt_tokenizer_encode(tokenizer, text.data(), text.size(), addSpecial, &ids, &count),
            DSRT_OK)
      << dsrt_last_error();
  std::vector<int64_t> out(ids, ids + count);
  dsrt_free(ids);
  return out;
}

std::string decode(const dsrt_tokenizer *tokenizer, const std::vector<int64_t> &ids,
                   bool skipSpecial) {
  char *text = nullptr;
  EXPECT_EQ(dsrt_tokenizer_decode(tokenizer, ids.data(), ids.size(), skipSpecial, &text), DSRT_OK)
      << dsrt_last_error();
  std::string out = text ? text : "<null>";
  dsrt_free(text);
  return out;
}

TEST(TokenizerCApi, FromFileRoundTrips) {
  dsrt_tokenizer *tokenizer = nullptr;
  ASSERT_EQ(dsrt_tokenizer_from_file(fixturePath("llama-op14").c_str(), &tokenizer), DSRT_OK)
      << dsrt_last_error();
  std::string text = "Hello world, héllo 日本 😀";
  std::vector<int64_t> plain = encode(tokenizer, text, false);
  std::vector<int64_t> withBos = encode(tokenizer, text, true);
  ASSERT_FALSE(plain.empty());
  ASSERT_EQ(withBos.size(), plain.size() + 1);
  EXPECT_EQ(withBos[0], 1);  // <s>
  EXPECT_EQ(std::vector<int64_t>(withBos.begin() + 1, withBos.end()), plain);
  EXPECT_EQ(decode(tokenizer, withBos, true), text);
  EXPECT_EQ(decode(tokenizer, withBos, false), "<s> " + text);
  EXPECT_TRUE(encode(tokenizer, "", false).empty());
  EXPECT_EQ(decode(tokenizer, {}, false), "");
  dsrt_tokenizer_free(tokenizer);
}

TEST(TokenizerCApi, Errors) {
  dsrt_tokenizer *tokenizer = nullptr;
  EXPECT_EQ(dsrt_tokenizer_from_file("/nonexistent.json", &tokenizer), DSRT_INVALID_ARGUMENT);
  EXPECT_STREQ(dsrt_last_error(), "/nonexistent.json: cannot open");
  EXPECT_EQ(dsrt_tokenizer_from_file(nullptr, &tokenizer), DSRT_INVALID_ARGUMENT);
  EXPECT_STREQ(dsrt_last_error(), "path is null");

  ASSERT_EQ(dsrt_tokenizer_from_file(fixturePath("gpt2-op14").c_str(), &tokenizer), DSRT_OK);
  int64_t bad[] = {1, 2, 999};
  char *text = nullptr;
  EXPECT_EQ(dsrt_tokenizer_decode(tokenizer, bad, 3, 0, &text), DSRT_INVALID_ARGUMENT);
  EXPECT_EQ(text, nullptr);
  EXPECT_NE(std::string(dsrt_last_error()).find("token id 999"), std::string::npos);
  int64_t *ids = nullptr;
  size_t count = 0;
  EXPECT_EQ(dsrt_tokenizer_encode(tokenizer, "\xFF", 1, 0, &ids, &count), DSRT_INVALID_ARGUMENT);
  EXPECT_EQ(dsrt_tokenizer_encode(tokenizer, nullptr, 3, 0, &ids, &count),
            DSRT_INVALID_ARGUMENT);
  EXPECT_STREQ(dsrt_last_error(), "text is null");
  EXPECT_EQ(dsrt_tokenizer_encode(tokenizer, nullptr, 0, 0, &ids, &count), DSRT_OK);
  EXPECT_EQ(count, 0u);
  dsrt_free(ids);
  dsrt_tokenizer_free(tokenizer);

  // A component outside the supported families is DSRT_UNSUPPORTED, not a bad argument.
  plantest::ScratchDir dir;
  std::string json = R"({"model": {"type": "WordPiece", "vocab": {}}})";
  plantest::writeFile(dir.file("tokenizer.json"), std::vector<uint8_t>(json.begin(), json.end()));
  tokenizer = nullptr;
  EXPECT_EQ(dsrt_tokenizer_from_file(dir.file("tokenizer.json").c_str(), &tokenizer),
            DSRT_UNSUPPORTED);
  EXPECT_EQ(tokenizer, nullptr);
  EXPECT_EQ(std::string(dsrt_last_error()),
            dir.file("tokenizer.json") + ": model type 'WordPiece' is not supported");
}

TEST(TokenizerCApi, FromPlan) {
  plantest::ScratchDir dir;
  ASSERT_TRUE(sample::write(dir.file("sample.dsp")).isOk());
  std::vector<uint8_t> sampleBytes = plantest::readFile(dir.file("sample.dsp"));

  // The sample plan's tokenizer_json is {"model":{}}: a plan whose tokenizer is broken.
  dsrt_plan *plan = nullptr;
  ASSERT_EQ(dsrt_plan_open(dir.file("sample.dsp").c_str(), &plan), DSRT_OK) << dsrt_last_error();
  dsrt_tokenizer *tokenizer = nullptr;
  EXPECT_EQ(dsrt_tokenizer_from_plan(plan, &tokenizer), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("model.type must be a string"),
            std::string::npos);
  dsrt_plan_close(plan);

  std::ifstream file(fixturePath("opt-op14"));
  std::stringstream json;
  json << file.rdbuf();
  std::string tokenizerJson = json.str();
  plantest::writeFile(dir.file("with.dsp"), plantest::rewriteHeader(sampleBytes, [&](dsp::PlanT &p) {
                        p.tokenizer_json.assign(tokenizerJson.begin(), tokenizerJson.end());
                      }));
  ASSERT_EQ(dsrt_plan_open(dir.file("with.dsp").c_str(), &plan), DSRT_OK) << dsrt_last_error();
  ASSERT_EQ(dsrt_tokenizer_from_plan(plan, &tokenizer), DSRT_OK) << dsrt_last_error();
  dsrt_plan_close(plan);  // the tokenizer does not need the plan any more
  std::vector<int64_t> ids = encode(tokenizer, "Hello world", true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 2);  // OPT puts </s> in front
  EXPECT_EQ(decode(tokenizer, ids, true), "Hello world");
  dsrt_tokenizer_free(tokenizer);

  plantest::writeFile(dir.file("without.dsp"),
                      plantest::rewriteHeader(sampleBytes,
                                              [](dsp::PlanT &p) { p.tokenizer_json.clear(); }));
  ASSERT_EQ(dsrt_plan_open(dir.file("without.dsp").c_str(), &plan), DSRT_OK);
  EXPECT_EQ(dsrt_tokenizer_from_plan(plan, &tokenizer), DSRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dsrt_last_error()).find("the plan has no tokenizer"), std::string::npos);
  dsrt_plan_close(plan);
}

// dsrun --prompt encodes with the plan's tokenizer and add_special = 1: for T5 that appends
// </s>, as transformers' tokenizer(text).input_ids does (what unigram-cases.json records as
// ids_with_special; make_unigram_tokenizers.py checks the two agree).
TEST(TokenizerCApi, T5PromptGetsEosFromThePlan) {
  std::ifstream casesFile(std::string(DSRT_SOURCE_DIR) + "/test/tokenizers/unigram-cases.json");
  std::stringstream casesText;
  casesText << casesFile.rdbuf();
  const nlohmann::json kind = nlohmann::json::parse(casesText.str())["t5-unigram"];
  std::ifstream file(std::string(DSRT_SOURCE_DIR) + "/test/tokenizers/t5-unigram.json");
  std::stringstream json;
  json << file.rdbuf();
  std::string tokenizerJson = json.str();

  plantest::ScratchDir dir;
  ASSERT_TRUE(sample::write(dir.file("sample.dsp")).isOk());
  plantest::writeFile(dir.file("t5.dsp"),
                      plantest::rewriteHeader(plantest::readFile(dir.file("sample.dsp")),
                                              [&](dsp::PlanT &p) {
                                                p.tokenizer_json.assign(tokenizerJson.begin(),
                                                                        tokenizerJson.end());
                                              }));
  dsrt_plan *plan = nullptr;
  ASSERT_EQ(dsrt_plan_open(dir.file("t5.dsp").c_str(), &plan), DSRT_OK) << dsrt_last_error();
  dsrt_tokenizer *tokenizer = nullptr;
  ASSERT_EQ(dsrt_tokenizer_from_plan(plan, &tokenizer), DSRT_OK) << dsrt_last_error();
  dsrt_plan_close(plan);
  size_t checked = 0;
  for (const nlohmann::json &test : kind["encode"]) {
    std::string text = test["text"].get<std::string>();
    SCOPED_TRACE(nlohmann::json(text).dump());
    std::vector<int64_t> withEos = encode(tokenizer, text, true);
    EXPECT_EQ(withEos, test["ids_with_special"].get<std::vector<int64_t>>());
    ASSERT_FALSE(withEos.empty());
    EXPECT_EQ(withEos.back(), 1);  // </s>
    EXPECT_EQ(encode(tokenizer, text, false), test["ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(decode(tokenizer, withEos, true), test["decoded_skip_special"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 60u);
  dsrt_tokenizer_free(tokenizer);
}

} // namespace
