// The decoders: ByteLevel, Replace, ByteFallback, Fuse, Strip and Metaspace, each a pass over
// the list of token strings, as `tokenizers` chains them.
#include "tokenizer/TokenizerImpl.h"

#include "tokenizer/Unicode.h"

#include <algorithm>

namespace dsrt {

using namespace tok;

Status Tokenizer::Impl::loadDecoder(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  hasDecoder = true;
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence")
    return loadSequence(node, "decoders", where,
                        [&](const Json &child) { return loadDecoder(child, where); });
  DecoderStep step;
  if (type == "ByteLevel") {
    step.kind = DecoderStep::ByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Fuse;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Replace;
    DSRT_RETURN_IF_ERROR(readStringPattern(node, where, step.pattern));
    DSRT_RETURN_IF_ERROR(readString(node, "content", where, step.content));
  } else if (type == "Strip") {
    step.kind = DecoderStep::Strip;
    DSRT_RETURN_IF_ERROR(readString(node, "content", where, step.content));
    std::vector<char32_t> codePoints;
    if (!unicode::decode(step.content, codePoints) || codePoints.size() != 1)
      return invalid(where + " Strip content must be one character");
    for (auto [key, value] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      auto it = node.find(key);
      if (it == node.end() || !it->is_number_unsigned())
        return invalid(where + " Strip." + key + " must be a count");
      *value = it->get<size_t>();
    }
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Metaspace;
    DSRT_RETURN_IF_ERROR(readString(node, "replacement", where, step.content));
    DSRT_RETURN_IF_ERROR(readPrependScheme(node, where, step.prependScheme));
  } else {
    return unsupportedType(where, type);
  }
  decoder.push_back(std::move(step));
  return Status::ok();
}

void Tokenizer::Impl::decodeTokens(std::vector<std::string> &tokens) const {
  for (const DecoderStep &step : decoder) {
    switch (step.kind) {
    case DecoderStep::ByteLevel: {
      std::string bytes;
      for (const std::string &token : tokens) {
        std::vector<char32_t> codePoints;
        unicode::decode(token, codePoints);
        std::string mapped;
        bool allMapped = true;
        for (char32_t c : codePoints) {
          auto it = byteMap().charToByte.find(c);
          if (it == byteMap().charToByte.end()) {
            allMapped = false;
            break;
          }
          mapped += static_cast<char>(it->second);
        }
        bytes += allMapped ? mapped : token;
      }
      std::string decoded;
      unicode::appendLossy(bytes, decoded);
      tokens.assign(1, std::move(decoded));
      break;
    }
    case DecoderStep::Replace:
      for (std::string &token : tokens)
        replaceAll(token, step.pattern, step.content);
      break;
    case DecoderStep::ByteFallback: {
      // Runs of <0xXX> tokens become their UTF-8 text, or one U+FFFD per byte if invalid.
      std::vector<std::string> out;
      std::string bytes;
      size_t byteCount = 0;
      auto flush = [&] {
        if (!byteCount)
          return;
        if (unicode::isValid(bytes)) {
          out.push_back(bytes);
        } else {
          for (size_t k = 0; k < byteCount; ++k)
            out.push_back(kReplacementChar);
        }
        bytes.clear();
        byteCount = 0;
      };
      for (std::string &token : tokens) {
        auto hexValue = [](char c) {
          return c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : -1;
        };
        if (token.size() == 6 && startsWith(token, "<0x") && token[5] == '>' &&
            hexValue(token[3]) >= 0 && hexValue(token[4]) >= 0) {
          bytes += static_cast<char>(hexValue(token[3]) * 16 + hexValue(token[4]));
          ++byteCount;
          continue;
        }
        flush();
        out.push_back(std::move(token));
      }
      flush();
      tokens = std::move(out);
      break;
    }
    case DecoderStep::Fuse: {
      std::string fused;
      for (const std::string &token : tokens)
        fused += token;
      tokens.assign(1, std::move(fused));
      break;
    }
    case DecoderStep::Strip: {
      char32_t content = firstCodePoint(step.content);
      for (std::string &token : tokens) {
        std::vector<char32_t> codePoints;
        unicode::decode(token, codePoints);
        size_t begin = 0, end = codePoints.size();
        while (begin < step.start && begin < codePoints.size() && codePoints[begin] == content)
          ++begin;
        for (size_t k = 0; k < step.stop && end > 0 && codePoints[end - 1] == content; ++k)
          --end;
        std::string stripped;
        for (size_t k = begin; k < std::max(begin, end); ++k)
          unicode::append(codePoints[k], stripped);
        token = std::move(stripped);
      }
      break;
    }
    case DecoderStep::Metaspace: {
      // Every replacement becomes a space, except in the first token, where `tokenizers`
      // drops them all when it prepends one while encoding.
      for (size_t i = 0; i < tokens.size(); ++i) {
        bool drop = i == 0 && step.prependScheme != PrependScheme::Never;
        replaceAll(tokens[i], step.content, drop ? "" : " ");
      }
      break;
    }
    }
  }
}

} // namespace dsrt
