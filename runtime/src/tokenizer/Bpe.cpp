// The BPE model: byte-level (GPT-2) and SentencePiece-style with byte fallback (Llama-2).
#include "tokenizer/TokenizerImpl.h"

#include <queue>

namespace dsrt {

using namespace tok;

namespace {
uint64_t pairKey(int64_t left, int64_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
}
} // namespace

Status Tokenizer::Impl::loadBpe(const Json &model) {
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null())
    return unsupportedOption("model", "dropout", *it);
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      return unsupportedOption("model", key, *it);
  }
  DSRT_RETURN_IF_ERROR(readBool(model, "fuse_unk", false, "model", fuseUnk));
  DSRT_RETURN_IF_ERROR(readBool(model, "byte_fallback", false, "model", byteFallback));
  DSRT_RETURN_IF_ERROR(readBool(model, "ignore_merges", false, "model", ignoreMerges));

  auto vocabIt = model.find("vocab");
  if (vocabIt == model.end() || !vocabIt->is_object())
    return invalid("model.vocab must be an object");
  for (auto it = vocabIt->begin(); it != vocabIt->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX)
      return invalid("model.vocab['" + it.key() + "'] must be an id in [0, 2^31)");
    vocab[it.key()] = it.value().get<int64_t>();
  }

  auto mergesIt = model.find("merges");
  if (mergesIt == model.end() || !mergesIt->is_array())
    return invalid("model.merges must be an array");
  uint32_t rank = 0;
  for (const Json &merge : *mergesIt) {
    std::string left, right;
    if (merge.is_string()) {
      // "a b": exactly one space, as `tokenizers` splits it.
      const std::string &text = merge.get_ref<const std::string &>();
      size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        return invalid("model.merges entry '" + text + "' is not two tokens");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return invalid("model.merges entry " + merge.dump() + " is not two tokens");
    }
    auto leftId = vocab.find(left), rightId = vocab.find(right), result = vocab.find(left + right);
    if (leftId == vocab.end() || rightId == vocab.end() || result == vocab.end())
      return invalid("model.merges entry '" + left + " " + right + "' uses a token that is not in model.vocab");
    merges.emplace(pairKey(leftId->second, rightId->second), Merge{rank++, result->second});
  }

  auto unk = model.find("unk_token");
  if (unk != model.end() && !unk->is_null()) {
    if (!unk->is_string())
      return invalid("model.unk_token must be a string or null");
    auto it = vocab.find(unk->get<std::string>());
    if (it == vocab.end())
      return invalid("model.unk_token '" + unk->get<std::string>() + "' is not in model.vocab");
    unkId = it->second;
  }
  return Status::ok();
}

// BPE::merge_word and Word::merge_all of `tokenizers`: symbols from characters (byte tokens
// or unk for characters outside the vocabulary), then merges by rank, leftmost first.
void Tokenizer::Impl::bpe(const std::string &piece, std::vector<int64_t> &ids) const {
  if (ignoreMerges) {
    auto it = vocab.find(piece);
    if (it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int64_t id;
    long prev, next;
    size_t length;
  };
  std::vector<Symbol> symbols;
  auto add = [&](int64_t id, size_t length) {
    long index = static_cast<long>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, length});
  };
  bool pendingUnk = false;
  size_t unkLength = 0;
  for (size_t i = 0; i < piece.size();) {
    size_t end = i + 1;
    while (end < piece.size() && (static_cast<unsigned char>(piece[end]) & 0xC0) == 0x80)
      ++end;
    std::string character = piece.substr(i, end - i);
    size_t length = end - i;
    i = end;
    auto it = vocab.find(character);
    if (it != vocab.end()) {
      if (pendingUnk) {
        add(unkId, unkLength);
        pendingUnk = false;
      }
      add(it->second, length);
      continue;
    }
    if (byteFallback) {
      std::vector<int64_t> bytes;
      for (unsigned char byte : character) {
        static const char *const hex = "0123456789ABCDEF";
        std::string name = std::string("<0x") + hex[byte >> 4] + hex[byte & 15] + ">";
        auto found = vocab.find(name);
        if (found == vocab.end())
          break;
        bytes.push_back(found->second);
      }
      if (bytes.size() == character.size()) {
        // `tokenizers` leaves a pending unk behind the byte tokens; so does this.
        for (int64_t id : bytes)
          add(id, 1);
        continue;
      }
    }
    if (unkId >= 0) {
      if (pendingUnk && fuseUnk) {
        unkLength += length;
      } else {
        if (pendingUnk)
          add(unkId, unkLength);
        pendingUnk = true;
        unkLength = length;
      }
    }
  }
  if (pendingUnk)
    add(unkId, unkLength);
  if (!symbols.empty())
    symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    long pos;
    int64_t result;
    bool operator>(const Candidate &other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](long left) {
    long right = symbols[left].next;
    if (right < 0)
      return;
    auto it = merges.find(pairKey(symbols[left].id, symbols[right].id));
    if (it != merges.end())
      queue.push({it->second.rank, left, it->second.result});
  };
  for (long i = 0; i + 1 < static_cast<long>(symbols.size()); ++i)
    consider(i);
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol &left = symbols[top.pos];
    if (left.length == 0 || left.next < 0)
      continue;
    Symbol &right = symbols[left.next];
    auto it = merges.find(pairKey(left.id, right.id));
    if (it == merges.end() || it->second.result != top.result)
      continue;
    left.id = top.result;
    left.length += right.length;
    left.next = right.next;
    right.length = 0;
    if (left.next >= 0)
      symbols[left.next].prev = top.pos;
    if (left.prev >= 0)
      consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol &symbol : symbols)
    if (symbol.length)
      ids.push_back(symbol.id);
}

} // namespace dsrt
