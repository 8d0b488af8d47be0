// The JSON readers, error messages and string helpers that every component's loader and
// runner share.
#include "tokenizer/TokenizerImpl.h"

#include "tokenizer/Unicode.h"

namespace dsrt::tok {

const char *const kReplacementChar = "\xEF\xBF\xBD";

Status invalid(const std::string &message) {
  return Status::error("tokenizer.json: " + message);
}
Status unsupportedType(const std::string &component, const std::string &type) {
  return invalid(component + " type '" + type + "' is not supported");
}
Status unsupportedOption(const std::string &component, const std::string &option,
                         const Json &value) {
  return invalid(component + " option " + option + " = " + value.dump() + " is not supported");
}

Status readBool(const Json &object, const char *key, bool fallback, const std::string &where,
                bool &out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    out = fallback;
    return Status::ok();
  }
  if (!it->is_boolean())
    return invalid(where + "." + key + " must be a boolean");
  out = it->get<bool>();
  return Status::ok();
}

Status readString(const Json &object, const char *key, const std::string &where,
                  std::string &out) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string())
    return invalid(where + "." + key + " must be a string");
  out = it->get<std::string>();
  return Status::ok();
}

Status readType(const Json &object, const std::string &where, std::string &type) {
  if (!object.is_object())
    return invalid(where + " must be an object or null");
  return readString(object, "type", where, type);
}

Status loadSequence(const Json &node, const char *key, const std::string &where,
                    const std::function<Status(const Json &)> &load) {
  auto it = node.find(key);
  if (it == node.end() || !it->is_array())
    return invalid(where + "." + key + " must be an array");
  for (const Json &child : *it)
    DSRT_RETURN_IF_ERROR(load(child));
  return Status::ok();
}

Status readStringPattern(const Json &object, const std::string &where, std::string &out) {
  auto it = object.find("pattern");
  if (it == object.end() || !it->is_object())
    return invalid(where + ".pattern must be an object");
  auto string = it->find("String");
  if (string == it->end() || !string->is_string())
    return invalid(where + ".pattern " + it->dump() + " is not supported (only String)");
  out = string->get<std::string>();
  return Status::ok();
}

bool startsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

void replaceAll(std::string &text, const std::string &pattern, const std::string &content) {
  if (pattern.empty())
    return;
  std::string out;
  size_t from = 0;
  for (size_t at; (at = text.find(pattern, from)) != std::string::npos; from = at + pattern.size())
    out.append(text, from, at - from).append(content);
  out.append(text, from, std::string::npos);
  text = std::move(out);
}

char32_t firstCodePoint(std::string_view text) {
  std::vector<char32_t> codePoints;
  size_t length = 1;
  while (length < text.size() && (static_cast<unsigned char>(text[length]) & 0xC0) == 0x80)
    ++length;
  unicode::decode(text.substr(0, length), codePoints);
  return codePoints.empty() ? 0 : codePoints.front();
}
char32_t lastCodePoint(std::string_view text) {
  size_t start = text.size();
  while (start > 0 && (static_cast<unsigned char>(text[--start]) & 0xC0) == 0x80) {
  }
  return firstCodePoint(text.substr(start));
}

} // namespace dsrt::tok
