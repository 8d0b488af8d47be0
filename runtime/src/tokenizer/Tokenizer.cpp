// Loading a tokenizer.json and the encode / decode pipeline: added tokens, normalizer,
// pre-tokenizer, model, post-processor; decoder. Each component kind lives in its own file.
#include "tokenizer/Tokenizer.h"

#include "tokenizer/TokenizerImpl.h"
#include "tokenizer/Unicode.h"
#include "tokenizer/Unigram.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace dsrt {

using namespace tok;

Tokenizer::Impl::Impl() = default;
Tokenizer::Impl::~Impl() = default;

Status Tokenizer::Impl::loadModel(const Json &model) {
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(model, "model", type));
  if (type == "BPE")
    return loadBpe(model);
  if (type == "Unigram")
    return UnigramModel::load(model, unigram, vocab);
  return unsupportedType("model", type);
}

Status Tokenizer::Impl::tokenize(const std::string &piece, std::vector<int64_t> &ids) const {
  if (unigram)
    return unigram->encode(piece, ids);
  bpe(piece, ids);
  return Status::ok();
}

Status Tokenizer::Impl::finish() {
  int64_t size = 0;
  for (const auto &[token, id] : vocab)
    size = std::max(size, id + 1);
  for (const AddedToken &token : added)
    size = std::max(size, token.id + 1);
  idToToken.assign(size, std::string());
  idKnown.assign(size, 0);
  for (const auto &[token, id] : vocab) {
    idToToken[id] = token;
    idKnown[id] = 1;
  }
  if (unigram) {
    // Equal pieces have an id each, though the vocabulary maps the spelling to the last.
    for (size_t id = 0; id < unigram->pieces().size(); ++id) {
      idToToken[id] = unigram->pieces()[id];
      idKnown[id] = 1;
    }
  }
  for (const AddedToken &token : added) {
    idToToken[token.id] = token.content;
    idKnown[token.id] = 1;
  }
  for (const TemplatePiece &piece : singleTemplate)
    for (int64_t id : piece.ids)
      if (id < 0 || id >= size || !idKnown[id])
        return invalid("post_processor adds id " + std::to_string(id) +
                       ", which is not in the vocabulary");
  for (size_t i = 0; i < added.size(); ++i) {
    if (added[i].normalized) {
      Piece content = Piece::original(added[i].content, 0);
      normalize(content);
      normalizedMatchers.emplace_back(content.text, i);
    }
    else
      rawMatchers.emplace_back(added[i].content, i);
  }

  if (!singleTemplate.empty() && !singleTemplate.front().isSequence &&
      !singleTemplate.front().ids.empty())
    bos = singleTemplate.front().ids.front();
  auto idOf = [&](const std::string &content) -> int64_t {
    if (auto it = addedByContent.find(content); it != addedByContent.end())
      return added[it->second].id;
    auto it = vocab.find(content);
    return it == vocab.end() ? -1 : it->second;
  };
  for (const char *name : {"<s>", "<|begin_of_text|>", "<|endoftext|>"})
    if (bos < 0)
      bos = idOf(name);
  for (const char *name : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
    if (eos < 0)
      eos = idOf(name);
  return Status::ok();
}

// ---- Tokenizer -----------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Status Tokenizer::fromJson(std::string_view text, std::unique_ptr<Tokenizer> &out) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception &error) {
    return invalid(std::string("not valid JSON: ") + error.what());
  }
  if (!root.is_object())
    return invalid("the top level must be an object");
  auto impl = std::make_unique<Impl>();
  try {
    for (const char *key : {"truncation", "padding"}) {
      auto it = root.find(key);
      if (it != root.end() && !it->is_null())
        return invalid(std::string(key) + " is not supported (it must be null)");
    }
    auto model = root.find("model");
    if (model == root.end())
      return invalid("there is no model");
    DSRT_RETURN_IF_ERROR(impl->loadModel(*model));
    static const Json null;
    auto member = [&](const char *key) -> const Json & {
      auto it = root.find(key);
      return it == root.end() ? null : *it;
    };
    DSRT_RETURN_IF_ERROR(impl->loadAddedTokens(member("added_tokens")));
    DSRT_RETURN_IF_ERROR(impl->loadNormalizer(member("normalizer"), "normalizer"));
    DSRT_RETURN_IF_ERROR(impl->loadPreTokenizer(member("pre_tokenizer"), "pre_tokenizer"));
    DSRT_RETURN_IF_ERROR(impl->loadPostProcessor(member("post_processor"), "post_processor"));
    DSRT_RETURN_IF_ERROR(impl->loadDecoder(member("decoder"), "decoder"));
    DSRT_RETURN_IF_ERROR(impl->finish());
  } catch (const Json::exception &error) {
    return invalid(error.what());
  }
  out.reset(new Tokenizer(std::move(impl)));
  return Status::ok();
}

Status Tokenizer::fromFile(const std::string &path, std::unique_ptr<Tokenizer> &out) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return Status::error(path + ": cannot open");
  std::ostringstream contents;
  contents << file.rdbuf();
  if (!file && !file.eof())
    return Status::error(path + ": cannot read");
  Status status = fromJson(contents.str(), out);
  if (status.isOk())
    return status;
  // The path says which file; the messages' own "tokenizer.json: " would repeat it.
  std::string message = status.message();
  const std::string generic = "tokenizer.json: ";
  if (startsWith(message, generic))
    message.erase(0, generic.size());
  return Status::error(path + ": " + message);
}

Status Tokenizer::encode(std::string_view utf8, bool addSpecial,
                         std::vector<int64_t> &ids) const {
  ids.clear();
  if (!unicode::isValid(utf8))
    return Status::error("the text to encode is not valid UTF-8");
  const Impl &impl = *impl_;
  std::vector<int64_t> encoded;
  std::vector<Segment> raw, parts;
  std::vector<Piece> pieces;
  impl.splitAdded(utf8, impl.rawMatchers, raw);
  for (const Segment &segment : raw) {
    if (segment.id >= 0) {
      encoded.push_back(segment.id);
      continue;
    }
    Piece normalized =
        Piece::original(utf8.substr(segment.begin, segment.end - segment.begin), segment.begin);
    impl.normalize(normalized);
    impl.splitAdded(normalized.text, impl.normalizedMatchers, parts);
    for (const Segment &part : parts) {
      if (part.id >= 0) {
        encoded.push_back(part.id);
        continue;
      }
      impl.preTokenize(normalized.slice(part.begin, part.end), pieces);
      for (const Piece &piece : pieces)
        DSRT_RETURN_IF_ERROR(impl.tokenize(piece.text, encoded));
    }
  }
  if (!addSpecial || !impl.hasTemplate) {
    ids = std::move(encoded);
    return Status::ok();
  }
  for (const TemplatePiece &piece : impl.singleTemplate) {
    const std::vector<int64_t> &source = piece.isSequence ? encoded : piece.ids;
    ids.insert(ids.end(), source.begin(), source.end());
  }
  return Status::ok();
}

Status Tokenizer::decode(const int64_t *ids, size_t count, bool skipSpecial,
                         std::string &text) const {
  text.clear();
  const Impl &impl = *impl_;
  std::vector<std::string> tokens;
  for (size_t i = 0; i < count; ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= vocabSize() || !impl.idKnown[id])
      return Status::error("token id " + std::to_string(id) + " at position " +
                           std::to_string(i) + " is not in the vocabulary (" +
                           std::to_string(vocabSize()) + " ids)");
    const std::string &token = impl.idToToken[id];
    if (skipSpecial && impl.specialContents.count(token))
      continue;
    tokens.push_back(token);
  }
  if (!impl.hasDecoder) {
    for (size_t i = 0; i < tokens.size(); ++i)
      text += (i ? " " : "") + tokens[i];
    return Status::ok();
  }
  impl.decodeTokens(tokens);
  for (const std::string &token : tokens)
    text += token;
  return Status::ok();
}

int64_t Tokenizer::vocabSize() const { return static_cast<int64_t>(impl_->idToToken.size()); }

std::string Tokenizer::tokenText(int64_t id) const {
  return id >= 0 && id < vocabSize() ? impl_->idToToken[id] : std::string();
}

int64_t Tokenizer::tokenId(std::string_view content) const {
  std::string key(content);
  if (auto it = impl_->addedByContent.find(key); it != impl_->addedByContent.end())
    return impl_->added[it->second].id;
  if (auto it = impl_->vocab.find(key); it != impl_->vocab.end())
    return it->second;
  return -1;
}

bool Tokenizer::isSpecial(int64_t id) const {
  return id >= 0 && id < vocabSize() && impl_->idKnown[id] &&
         impl_->specialContents.count(impl_->idToToken[id]);
}

int64_t Tokenizer::bosId() const { return impl_->bos; }
int64_t Tokenizer::eosId() const { return impl_->eos; }

} // namespace dsrt
