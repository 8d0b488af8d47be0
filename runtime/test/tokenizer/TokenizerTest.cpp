// Every tokenizer kind of test/tokenizers/cases.json and unigram-cases.json, loaded from each
// file that holds it (the decoder fixtures' tokenizer.json and the option-coverage files),
// must encode and decode exactly as HuggingFace `tokenizers` did when the cases were recorded.
#include "tokenizer/SplitPatterns.h"
#include "tokenizer/Tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace {

using Json = nlohmann::json;

std::string sourcePath(const std::string &relative) {
  return std::string(DSRT_SOURCE_DIR) + "/" + relative;
}

Json loadCases(const std::string &name) {
  std::ifstream file(sourcePath("test/tokenizers/" + name));
  std::stringstream text;
  text << file.rdbuf();
  return Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

// Written by tools/fixtures/train_tokenizers.py.
const Json &cases() {
  static const Json all = loadCases("cases.json");
  return all;
}

// Written by tools/fixtures/make_unigram_tokenizers.py.
const Json &unigramCases() {
  static const Json all = loadCases("unigram-cases.json");
  return all;
}

// Readable in failure messages whatever the bytes are.
std::string escaped(const std::string &text) { return Json(text).dump(-1, ' ', true,
                                                      Json::error_handler_t::replace); }

const char *const kKinds[] = {"gpt2",    "opt",
                              "bloom",   "llama2",
                              "llama3",  "roberta",
                              "gpt2-added-tokens", "sentencepiece-unk",
                              "sentencepiece-metaspace"};

const char *const kUnigramKinds[] = {"t5-unigram", "t5-unigram-whitespace",
                                     "t5-unigram-byte-fallback", "unigram-no-unk"};

TEST(TokenizerCases, CoverEveryKind) {
  ASSERT_TRUE(cases().is_object()) << "test/tokenizers/cases.json is missing or malformed";
  EXPECT_EQ(cases().size(), std::size(kKinds) + 1);  // and split_patterns
  for (const char *kind : kKinds)
    EXPECT_TRUE(cases().contains(kind)) << kind;
  ASSERT_TRUE(unigramCases().is_object()) << "test/tokenizers/unigram-cases.json is missing";
  EXPECT_EQ(unigramCases().size(), std::size(kUnigramKinds));
  for (const char *kind : kUnigramKinds)
    EXPECT_TRUE(unigramCases().contains(kind)) << kind;
}

// The hand-written matchers cut every test string where Oniguruma (in `tokenizers`) does.
TEST(TokenizerSplitPatterns, MatchOniguruma) {
  const Json &patterns = cases()["split_patterns"];
  ASSERT_EQ(patterns.size(), 3u);
  for (const auto &[name, entry] : patterns.items()) {
    SCOPED_TRACE(name);
    dsrt::SplitPattern pattern;
    ASSERT_TRUE(dsrt::recogniseSplitPattern(entry["pattern"].get<std::string>(), pattern));
    ASSERT_GE(entry["cases"].size(), 40u);
    for (const Json &test : entry["cases"]) {
      std::vector<std::string> pieces;
      dsrt::splitIsolated(pattern, test["text"].get<std::string>(), pieces);
      EXPECT_EQ(Json(pieces).dump(-1, ' ', true), test["pieces"].dump(-1, ' ', true))
          << "text " << escaped(test["text"].get<std::string>());
    }
  }
}

void expectMatchesTokenizers(const Json &kind) {
  ASSERT_FALSE(kind["tokenizers"].empty());
  for (const Json &path : kind["tokenizers"]) {
    SCOPED_TRACE(path.get<std::string>());
    std::unique_ptr<dsrt::Tokenizer> tokenizer;
    dsrt::Status status = dsrt::Tokenizer::fromFile(sourcePath(path.get<std::string>()), tokenizer);
    ASSERT_TRUE(status.isOk()) << status.message();
    EXPECT_EQ(tokenizer->vocabSize(), kind["vocab_size"].get<int64_t>());
    for (const Json &special : kind["specials"])
      EXPECT_TRUE(tokenizer->isSpecial(tokenizer->tokenId(special.get<std::string>())))
          << special;

    size_t encodeFailures = 0;
    for (const Json &test : kind["encode"]) {
      std::string text = test["text"].get<std::string>();
      SCOPED_TRACE("text " + escaped(text));
      std::vector<int64_t> ids, withSpecial;
      if (test.contains("error")) {  // `tokenizers` raised it
        EXPECT_FALSE(tokenizer->encode(text, false, ids).isOk()) << test["error"];
        EXPECT_FALSE(tokenizer->encode(text, true, withSpecial).isOk()) << test["error"];
        continue;
      }
      ASSERT_TRUE(tokenizer->encode(text, false, ids).isOk());
      ASSERT_TRUE(tokenizer->encode(text, true, withSpecial).isOk());
      EXPECT_EQ(ids, test["ids"].get<std::vector<int64_t>>());
      EXPECT_EQ(withSpecial, test["ids_with_special"].get<std::vector<int64_t>>());
      // Decoding the reference ids, so a decode check does not depend on encode.
      std::string decoded, decodedSkip;
      auto reference = test["ids_with_special"].get<std::vector<int64_t>>();
      ASSERT_TRUE(tokenizer->decode(reference, false, decoded).isOk());
      ASSERT_TRUE(tokenizer->decode(reference, true, decodedSkip).isOk());
      EXPECT_EQ(escaped(decoded), escaped(test["decoded"].get<std::string>()));
      EXPECT_EQ(escaped(decodedSkip), escaped(test["decoded_skip_special"].get<std::string>()));
      encodeFailures += ids != test["ids"].get<std::vector<int64_t>>();
    }
    EXPECT_EQ(encodeFailures, 0u) << "of " << kind["encode"].size() << " strings";

    for (const Json &test : kind["decode"]) {
      auto ids = test["ids"].get<std::vector<int64_t>>();
      SCOPED_TRACE("ids " + Json(ids).dump());
      std::string decoded, decodedSkip;
      ASSERT_TRUE(tokenizer->decode(ids, false, decoded).isOk());
      ASSERT_TRUE(tokenizer->decode(ids, true, decodedSkip).isOk());
      EXPECT_EQ(escaped(decoded), escaped(test["text"].get<std::string>()));
      EXPECT_EQ(escaped(decodedSkip), escaped(test["text_skip_special"].get<std::string>()));
    }
  }
}

std::string testName(const testing::TestParamInfo<const char *> &info) {
  std::string name = info.param;
  for (char &c : name)
    if (c == '-')
      c = '_';
  return name;
}

class TokenizerKind : public testing::TestWithParam<const char *> {};

TEST_P(TokenizerKind, MatchesTokenizers) {
  ASSERT_TRUE(cases().contains(GetParam()));
  expectMatchesTokenizers(cases()[GetParam()]);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerKind, testing::ValuesIn(kKinds), testName);

class UnigramKind : public testing::TestWithParam<const char *> {};

TEST_P(UnigramKind, MatchesTokenizers) {
  ASSERT_TRUE(unigramCases().contains(GetParam()));
  expectMatchesTokenizers(unigramCases()[GetParam()]);
}

INSTANTIATE_TEST_SUITE_P(All, UnigramKind, testing::ValuesIn(kUnigramKinds), testName);

// The fixtures' BOS/EOS, found by spelling, are the ids their model configs use.
TEST(TokenizerFixtures, SpecialIdsAgreeWithModelConfigs) {
  size_t checked = 0;
  for (const char *kind : kKinds) {
    for (const Json &path : cases()[kind]["tokenizers"]) {
      std::string file = path.get<std::string>();
      if (file.rfind("test/models/", 0) != 0)
        continue;
      SCOPED_TRACE(file);
      std::string folder = file.substr(0, file.rfind('/'));
      std::ifstream metaFile(sourcePath(folder + "/meta.json"));
      std::stringstream metaText;
      metaText << metaFile.rdbuf();
      Json config = Json::parse(metaText.str())["config"];
      std::unique_ptr<dsrt::Tokenizer> tokenizer;
      ASSERT_TRUE(dsrt::Tokenizer::fromFile(sourcePath(file), tokenizer).isOk());
      EXPECT_EQ(tokenizer->vocabSize(), config["vocab_size"].get<int64_t>());
      EXPECT_EQ(tokenizer->bosId(), config["bos_token_id"].get<int64_t>());
      EXPECT_EQ(tokenizer->eosId(), config["eos_token_id"].get<int64_t>());
      if (config.contains("pad_token_id") && !config["pad_token_id"].is_null()) {
        EXPECT_TRUE(tokenizer->isSpecial(config["pad_token_id"].get<int64_t>()));
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 15u);  // gpt2 x4, gptj x2, gptneo x2, opt x2, bloom x2, llama x3
}

TEST(TokenizerText, TokenTextAndIdRoundTrip) {
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  ASSERT_TRUE(dsrt::Tokenizer::fromFile(sourcePath("test/models/llama-op14/tokenizer.json"),
                                        tokenizer)
                  .isOk());
  for (int64_t id = 0; id < tokenizer->vocabSize(); ++id)
    EXPECT_EQ(tokenizer->tokenId(tokenizer->tokenText(id)), id) << id;
  EXPECT_EQ(tokenizer->tokenText(10), "<0x07>");  // <unk> <s> </s>, then the 256 bytes
  EXPECT_EQ(tokenizer->tokenText(-1), "");
  EXPECT_EQ(tokenizer->tokenText(tokenizer->vocabSize()), "");
  EXPECT_EQ(tokenizer->tokenId("no such token"), -1);
}

} // namespace
