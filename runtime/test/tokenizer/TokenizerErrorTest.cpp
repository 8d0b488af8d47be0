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

Json readJson(const std::string &relative) {
  std::ifstream file(std::string(DSRT_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << file.rdbuf();
  return Json::parse(text.str());
}

// A decoder fixture's tokenizer.json, or one of test/tokenizers/ (names ending in .json).
Json fixture(const std::string &name) {
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
    return readJson("test/tokenizers/" + name);
  return readJson("test/models/" + name + "/tokenizer.json");
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
  for (const char *name : {"gpt2-op14", "opt-op14", "bloom-op14", "llama-op14", "llama-op18",
                           "t5-unigram.json", "t5-unigram-whitespace.json",
                           "t5-unigram-byte-fallback.json"})
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
                        j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "\\s+"}};
                      })
                .find("Replace pattern {\"Regex\":\"\\\\s+\"} is not supported"),
            std::string::npos);
  EXPECT_NE(loadError("gpt2-op14", [](Json &j) { j["decoder"] = {{"type", "Replace"},
                                                                {"pattern", {{"Regex", " +"}}},
                                                                {"content", " "}}; })
                .find("is not supported (only String)"),
            std::string::npos);
  // What ALBERT-style Unigram files have besides T5's components.
  for (const char *type : {"NFKD", "Lowercase", "StripAccents"})
    EXPECT_EQ(loadError("t5-unigram.json",
                        [&](Json &j) { j["normalizer"]["normalizers"][1] = {{"type", type}}; }),
              std::string("tokenizer.json: normalizer type '") + type + "' is not supported");
}

TEST(TokenizerErrors, MalformedUnigram) {
  const char *t5 = "t5-unigram.json";
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"].erase("vocab"); }),
            "tokenizer.json: model.vocab must be an array of [piece, score]");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["vocab"] = {{"a", -1.0}}; }),
            "tokenizer.json: model.vocab must be an array of [piece, score]");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["vocab"][5] = "x"; }),
            "tokenizer.json: model.vocab[5] must be [piece, score]");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["vocab"][5][1] = "high"; }),
            "tokenizer.json: model.vocab[5] has the score \"high\", not a finite number");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["vocab"][5][1] = nullptr; }),
            "tokenizer.json: model.vocab[5] has the score null, not a finite number");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["unk_id"] = 320; }),
            "tokenizer.json: model.unk_id 320 is not an id of model.vocab (320 pieces)");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["unk_id"] = -1; }),
            "tokenizer.json: model.unk_id -1 is not an id");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["unk_id"] = 2.5; }),
            "tokenizer.json: model.unk_id 2.5 is not an id");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["model"]["byte_fallback"] = "yes"; }),
            "tokenizer.json: model.byte_fallback must be a boolean");
  EXPECT_EQ(loadError(R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": []}})"),
            "tokenizer.json: model.unk_id 0 is not an id of model.vocab (0 pieces)");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["normalizer"]["normalizers"][0].erase(
                                            "precompiled_charsmap"); }),
            "tokenizer.json: normalizer.precompiled_charsmap must be a string");
  EXPECT_EQ(loadError(t5, [](Json &j) { j["normalizer"]["normalizers"][1].erase("strip_left"); }),
            "tokenizer.json: normalizer Strip.strip_left must be a boolean");
}

// The message when a character without a piece of its own is on the best path and there is
// no unk_id (which strings fail is in unigram-cases.json, kind unigram-no-unk).
TEST(TokenizerErrors, UnigramWithoutUnkId) {
  std::unique_ptr<dsrt::Tokenizer> tokenizer;
  ASSERT_TRUE(dsrt::Tokenizer::fromJson(fixture("unigram-no-unk.json").dump(), tokenizer).isOk());
  std::vector<int64_t> ids{9};
  dsrt::Status status = tokenizer->encode("bc", false, ids);
  EXPECT_EQ(status.message(), "the text has a character that is not in the Unigram vocabulary, "
                              "and model.unk_id is null");
  EXPECT_TRUE(ids.empty());
}

std::string fromBase64(const std::string &text) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=')
      break;
    bits = (bits << 6) | static_cast<uint32_t>(alphabet.find(c));
    if ((count += 6) >= 8)
      out += static_cast<char>((bits >> (count -= 8)) & 0xFF);
  }
  return out;
}

std::string toBase64(const std::string &bytes) {
  static const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t chunk = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size())
      chunk |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size())
      chunk |= static_cast<unsigned char>(bytes[i + 2]);
    for (size_t k = 0; k < 4; ++k)
      out += i + k <= bytes.size() ? alphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// SentencePiece's charsmap of the T5 fixture: header, trie units, replacement strings.
struct CharsMap {
  std::string blob;
  uint32_t trieBytes() const {
    uint32_t size = 0;
    for (int k = 3; k >= 0; --k)
      size = (size << 8) | static_cast<unsigned char>(blob[k]);
    return size;
  }
  void setUnit(size_t index, uint32_t value) {
    for (int k = 0; k < 4; ++k)
      blob[4 + 4 * index + k] = static_cast<char>(value >> (8 * k));
  }
};

CharsMap t5CharsMap() {
  Json json = fixture("t5-unigram.json");
  return {fromBase64(json["normalizer"]["normalizers"][0]["precompiled_charsmap"])};
}

std::string charsMapError(const std::string &base64) {
  return loadError("t5-unigram.json", [&](Json &j) {
    j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = base64;
  });
}

TEST(TokenizerErrors, CorruptPrecompiledCharsMap) {
  CharsMap map = t5CharsMap();
  ASSERT_GT(map.blob.size(), 4 + map.trieBytes());
  EXPECT_EQ(charsMapError(toBase64(map.blob)), "");  // the helpers round-trip
  const std::string prefix = "tokenizer.json: normalizer Precompiled precompiled_charsmap ";
  for (const char *bad : {"not base64!", "QQ", "QR==", "QUJD=A==", "Q===", ""})
    EXPECT_EQ(charsMapError(bad), prefix + (*bad ? "is not valid base64"
                                                 : "has 0 bytes, fewer than its 4-byte header"))
        << bad;
  EXPECT_EQ(charsMapError(toBase64("abc")), prefix + "has 3 bytes, fewer than its 4-byte header");

  CharsMap longer = map;
  longer.blob[3] = '\x7F';
  EXPECT_NE(charsMapError(toBase64(longer.blob)).find(" follow the header"), std::string::npos);
  EXPECT_EQ(charsMapError(toBase64(std::string(4, '\0') + "abc")), prefix + "has an empty trie");
  CharsMap notUtf8 = map;
  notUtf8.blob += "\xFF";
  EXPECT_EQ(charsMapError(toBase64(notUtf8.blob)),
            prefix + "has replacement text that is not UTF-8");

  CharsMap outside = map;
  outside.setUnit(0, 0xFFFFFC00u);  // the root's children far past the end
  EXPECT_NE(charsMapError(toBase64(outside.blob)).find("children lie outside its"),
            std::string::npos);
  // Replacement offsets past the end of the (cut) replacements, or inside a character.
  CharsMap cut = map;
  cut.blob.resize(4 + map.trieBytes() + 2);
  EXPECT_NE(charsMapError(toBase64(cut.blob)).find("that is not a character of its 2 bytes"),
            std::string::npos);
  CharsMap shifted = map;
  shifted.blob.insert(4 + map.trieBytes(), "\xC3\xA9");
  EXPECT_NE(charsMapError(toBase64(shifted.blob)).find("that is not a character"),
            std::string::npos);
}

// Whatever one trie unit is changed to, the charsmap is refused or encodes: never a read
// outside the trie or the replacements (ASan builds check this).
TEST(TokenizerErrors, EveryTrieUnitCorrupted) {
  CharsMap map = t5CharsMap();
  const std::string text =
      "Ｆｕｌｌ ﬁne ① ½ ｶﾞ \x01 e\xCC\x81 Ａ\xCC\x81 \xE2\x80\x8B x\xC2\xA0y";
  size_t refused = 0, loaded = 0;
  for (size_t unit = 0; unit < map.trieBytes() / 4; unit += 3) {
    for (uint32_t value : {0xFFFFFFFFu, 0x7FFFFFFFu, 0x00000100u, 0x80000041u, 0x0003FD41u}) {
      CharsMap corrupt = map;
      corrupt.setUnit(unit, value);
      Json json = fixture("t5-unigram.json");
      json["normalizer"]["normalizers"][0]["precompiled_charsmap"] = toBase64(corrupt.blob);
      std::unique_ptr<dsrt::Tokenizer> tokenizer;
      dsrt::Status status = dsrt::Tokenizer::fromJson(json.dump(), tokenizer);
      if (!status.isOk()) {
        EXPECT_NE(status.message().find("precompiled_charsmap"), std::string::npos);
        ++refused;
        continue;
      }
      std::vector<int64_t> ids;
      EXPECT_TRUE(tokenizer->encode(text, true, ids).isOk());
      EXPECT_FALSE(ids.empty());
      ++loaded;
    }
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(loaded, 0u);
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
