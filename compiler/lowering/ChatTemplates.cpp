#include "compiler/lowering/ChatTemplates.h"

#include "mlir/IR/Diagnostics.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace mlir;

namespace dsc {
namespace {

std::string pathIn(const std::string &directory, llvm::StringRef name) {
  llvm::SmallString<256> path(directory);
  llvm::sys::path::append(path, name);
  return path.str().str();
}

void addTemplate(dsp::PlanT &plan, llvm::StringRef name, llvm::StringRef source) {
  for (auto &existing : plan.chat_templates)
    if (existing->name == name) {
      existing->source = source.str();
      return;
    }
  auto entry = std::make_unique<dsp::ChatTemplateT>();
  entry->name = name.str();
  entry->source = source.str();
  plan.chat_templates.push_back(std::move(entry));
}

// transformers keeps one template as a string, several as [{"name", "template"}].
LogicalResult readTemplates(dsp::PlanT &plan, const llvm::json::Value &value,
                            const std::string &path, Location loc) {
  if (std::optional<llvm::StringRef> source = value.getAsString()) {
    addTemplate(plan, "default", *source);
    return success();
  }
  if (value.kind() == llvm::json::Value::Null)
    return success();
  const llvm::json::Array *entries = value.getAsArray();
  if (!entries)
    return emitError(loc) << path << ": chat_template must be a string or a list of "
                          << "{\"name\", \"template\"}";
  for (const llvm::json::Value &entry : *entries) {
    const llvm::json::Object *object = entry.getAsObject();
    std::optional<llvm::StringRef> name = object ? object->getString("name") : std::nullopt;
    std::optional<llvm::StringRef> source =
        object ? object->getString("template") : std::nullopt;
    if (!name || !source)
      return emitError(loc) << path << ": each chat_template entry needs a string \"name\" "
                            << "and a string \"template\"";
    addTemplate(plan, *name, *source);
  }
  return success();
}

// A special token is its text, or an AddedToken object whose "content" is the text.
LogicalResult readSpecialTokens(dsp::PlanT &plan, const llvm::json::Object &config,
                                const std::string &path, Location loc) {
  for (const char *name : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                           "cls_token", "mask_token"}) {
    const llvm::json::Value *value = config.get(name);
    if (!value || value->kind() == llvm::json::Value::Null)
      continue;
    std::optional<llvm::StringRef> content = value->getAsString();
    if (!content)
      if (const llvm::json::Object *added = value->getAsObject())
        content = added->getString("content");
    if (!content)
      return emitError(loc) << path << ": " << name
                            << " must be a string or an object with a string \"content\"";
    auto token = std::make_unique<dsp::SpecialTokenT>();
    token->name = name;
    token->content = content->str();
    plan.special_tokens.push_back(std::move(token));
  }
  return success();
}

} // namespace

LogicalResult readChatTemplates(dsp::PlanT &plan, const std::string &modelDirectory,
                                Location loc) {
  const std::string configPath = pathIn(modelDirectory, "tokenizer_config.json");
  if (auto buffer = llvm::MemoryBuffer::getFile(configPath, /*IsText=*/true)) {
    llvm::Expected<llvm::json::Value> json = llvm::json::parse((*buffer)->getBuffer());
    if (!json)
      return emitError(loc) << configPath
                            << ": not valid JSON: " << llvm::toString(json.takeError());
    const llvm::json::Object *config = json->getAsObject();
    if (!config)
      return emitError(loc) << configPath << ": expected a JSON object";
    if (const llvm::json::Value *templates = config->get("chat_template"))
      if (failed(readTemplates(plan, *templates, configPath, loc)))
        return failure();
    if (failed(readSpecialTokens(plan, *config, configPath, loc)))
      return failure();
  }
  const std::string jinjaPath = pathIn(modelDirectory, "chat_template.jinja");
  if (auto buffer = llvm::MemoryBuffer::getFile(jinjaPath, /*IsText=*/true))
    addTemplate(plan, "default", (*buffer)->getBuffer());
  return success();
}

} // namespace dsc
