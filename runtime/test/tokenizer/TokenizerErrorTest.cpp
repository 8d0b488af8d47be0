// What the tokenizer refuses: malformed files, components outside the supported families
// (named in the message), and ids or text it cannot take.
#include "tokenizer/Tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <sstream>

namespace {

using Json = nlohmann::json;

Json fixture(const std::string &name) {
  std::ifstream file(std::string(DSRT_SOURCE_DIR) + "/test/models/" + name + "/tokenizer.json");
  std::stringstream text;
  text << file.rdbuf();
  return Json::parse(text.str());
}

// The message of loading `json`, or "" if it loaded.
std::string loadError(const std::string &json) {
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  dsrt::Status status = dsrt::Tokenizer::fromJson(json, tokenizer);
  EXPECT_EQ(status.isOk(), tokenizer != nullptr);
  return status.isOk() ? "" : status.message();
}

std::string loadError(const std::string &name, const std::function<void(Json &)> &mutate) {
  Json json = fixture(name);
  mutate(json);
  return loadError(json.dump());
}

TEST(TokenizerErrors, FixturesLoadUnchanged) {
  for (const char *name : {"gpt2-op14", "opt-op14", "bloom-op14", "llama-op14", "llama-op18"})
    EXPECT_EQ(loadError(name, [](Json &) {}), "") << name;
}

TEST(TokenizerErrors, MalformedJson) {
  EXPECT_NE(loadError("{\"model\": ").find("tokenizer.json: not valid JSON"), std::string::npos);
  EXPECT_NE(loadError("[1, 2]").find("top level must be an object"), std::string::npos);
  EXPECT_NE(loadError("{}").find("there is no model"), std::string::npos);
  EXPECT_NE(loadError("{\"model\":{}}").find("model.type must be a string"), std::string::npos);
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["model"]["vocab"]["x"] = "seven"; })
                .find("model.vocab['x'] must be an id"),
            std::string::npos);
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["model"]["merges"].push_back("a b c"); })
                .find("'a b c' is not two tokens"),
            std::string::npos);
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["model"]["merges"].push_back("Ġ zzz"); })
                .find("uses a token that is not in model.vocab"),
            std::string::npos);
  EXPECT_NE(loadError("llama-op14", [](Json &j) { j["model"]["unk_token"] = "<nope>"; })
                .find("model.unk_token '<nope>' is not in model.vocab"),
            std::string::npos);
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["added_tokens"][0].erase("id"); })
                .find("has no valid id"),
            std::string::npos);
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  EXPECT_EQ(loadError("gpt2-op14", [](Json &j) { j["model"]["type"] = "WordPiece"; }),
            "tokenizer.json: model type 'WordPiece' is not supported");
  EXPECT_EQ(loadError("gpt2-op14",
                      [](Json &j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }),
            "tokenizer.json: pre_tokenizer type 'Whitespace' is not supported");
  EXPECT_EQ(loadError("llama-op14",
                      [](Json &j) { j["normalizer"]["normalizers"][0] = {{"type", "NFKC"}}; }),
            "tokenizer.json: normalizer type 'NFKC' is not supported");
  EXPECT_EQ(loadError("gpt2-op14", [](Json &j) { j["decoder"] = {{"type", "WordPiece"}}; }),
            "tokenizer.json: decoder type 'WordPiece' is not supported");
  EXPECT_EQ(loadError("gpt2-op14",
                      [](Json &j) { j["post_processor"] = {{"type", "BertProcessing"}}; }),
            "tokenizer.json: post_processor type 'BertProcessing' is not supported");
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["model"]["dropout"] = 0.1; })
                .find("model option dropout = 0.1 is not supported"),
            std::string::npos);
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["model"]["continuing_subword_prefix"] = "##"; })
                .find("continuing_subword_prefix"),
            std::string::npos);
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["truncation"] = {{"max_length", 8}}; })
                .find("truncation is not supported"),
            std::string::npos);
  EXPECT_NE(loadError("llama-op14",
                      [](Json &j) {
                        j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
                      })
                .find("is not supported (only String)"),
            std::string::npos);
}

TEST(TokenizerErrors, UnknownSplitPattern) {
  // One character off the Llama-3 pattern ({1,3} -> {1,4}).
  std::string message = loadError("llama-op18", [](Json &j) {
    std::string &regex = j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
                             .get_ref<std::string &>();
    regex.replace(regex.find("{1,3}"), 5, "{1,4}");
  });
  EXPECT_NE(message.find("pre_tokenizer Split pattern"), std::string::npos) << message;
  EXPECT_NE(message.find("is not supported"), std::string::npos) << message;
  EXPECT_NE(loadError("bloom-op14", [](Json &j) {
              j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
            }).find("behavior = \"Removed\" is not supported"),
            std::string::npos);
}

TEST(TokenizerErrors, DecodeRejectsIdsOutsideTheVocabulary) {
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  ASSERT_TRUE(dsrt::Tokenizer::fromJson(fixture("gpt2-op14").dump(), tokenizer).isOk());
  std::string text = "unchanged";
  dsrt::Status status = tokenizer->decode({5, 300}, false, text);
  EXPECT_EQ(status.message(), "token id 300 at position 1 is not in the vocabulary (300 ids)");
  EXPECT_EQ(text, "");
  EXPECT_FALSE(tokenizer->decode({-1}, false, text).isOk());
  EXPECT_TRUE(tokenizer->decode({299}, false, text).isOk());
}

TEST(TokenizerErrors, EncodeRejectsInvalidUtf8) {
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  ASSERT_TRUE(dsrt::Tokenizer::fromJson(fixture("llama-op14").dump(), tokenizer).isOk());
  std::vector<int64_t> ids{7};
  for (const char *bad : {"a\xC3", "\xFF", "\xED\xA0\x80" /* a surrogate */, "\xC0\xAF"}) {
    dsrt::Status status = tokenizer->encode(bad, true, ids);
    EXPECT_EQ(status.message(), "the text to encode is not valid UTF-8") << bad;
    EXPECT_TRUE(ids.empty());
  }
}

TEST(TokenizerErrors, MissingFileNamesThePath) {
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  dsrt::Status status = dsrt::Tokenizer::fromFile("/nonexistent/tokenizer.json", tokenizer);
  EXPECT_EQ(status.message(), "/nonexistent/tokenizer.json: cannot open");
}

} // namespace
