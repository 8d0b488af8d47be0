// The post-processors: TemplateProcessing and RobertaProcessing add special tokens; ByteLevel
// only adjusts offsets, which the runtime does not report.
#include "tokenizer/TokenizerImpl.h"

namespace dsrt {

using namespace tok;

Status Tokenizer::Impl::loadPostProcessor(const Json &node, const std::string &where) {
  if (node.is_null())
    return Status::ok();
  std::string type;
  DSRT_RETURN_IF_ERROR(readType(node, where, type));
  if (type == "Sequence")
    return loadSequence(node, "processors", where,
                        [&](const Json &child) { return loadPostProcessor(child, where); });
  if (type == "ByteLevel")
    return Status::ok();  // it only adjusts offsets
  if (hasTemplate)
    return invalid(where + " has more than one template");
  hasTemplate = true;
  if (type == "RobertaProcessing") {
    int64_t ids[2];
    const char *keys[2] = {"cls", "sep"};
    for (int i = 0; i < 2; ++i) {
      auto it = node.find(keys[i]);
      if (it == node.end() || !it->is_array() || it->size() != 2 ||
          !(*it)[1].is_number_integer())
        return invalid(where + "." + keys[i] + " must be [token, id]");
      ids[i] = (*it)[1].get<int64_t>();
    }
    singleTemplate = {{false, {ids[0]}}, {true, {}}, {false, {ids[1]}}};
    return Status::ok();
  }
  if (type != "TemplateProcessing")
    return unsupportedType(where, type);
  auto single = node.find("single");
  auto specials = node.find("special_tokens");
  if (single == node.end() || !single->is_array() || specials == node.end() ||
      !specials->is_object())
    return invalid(where + " TemplateProcessing needs single and special_tokens");
  for (const Json &piece : *single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      const Json &sequence = piece["Sequence"];
      if (!sequence.is_object() || sequence.value("id", "") != "A")
        return invalid(where + " template piece " + piece.dump() + " is not supported");
      singleTemplate.push_back({true, {}});
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const Json &special = piece["SpecialToken"];
      std::string name = special.is_object() ? special.value("id", "") : "";
      auto it = specials->find(name);
      if (it == specials->end() || !it->is_object() || !it->contains("ids") ||
          !(*it)["ids"].is_array())
        return invalid(where + " template token '" + name + "' is not in special_tokens");
      TemplatePiece out;
      for (const Json &id : (*it)["ids"]) {
        if (!id.is_number_integer())
          return invalid(where + " special token '" + name + "' has a non-integer id");
        out.ids.push_back(id.get<int64_t>());
      }
      singleTemplate.push_back(std::move(out));
    } else {
      return invalid(where + " template piece " + piece.dump() + " is not supported");
    }
  }
  return Status::ok();
}

} // namespace dsrt
