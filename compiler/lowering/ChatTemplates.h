// The chat templates and special tokens of the tokenizer beside a model, carried in the
// plan for the Python face to render (python/dsrt/chat.py, docs/server.md).
#ifndef DSC_COMPILER_LOWERING_CHATTEMPLATES_H
#define DSC_COMPILER_LOWERING_CHATTEMPLATES_H

#include "plan_generated.h"

#include "mlir/IR/Location.h"
#include "mlir/Support/LogicalResult.h"

#include <string>

namespace dsc {

// Fills plan.chat_templates and plan.special_tokens from `modelDirectory`'s
// tokenizer_config.json and chat_template.jinja (which transformers writes beside it and
// which wins over the config's, as transformers loads them). Missing files leave both
// empty; a present file that is malformed is an error at `loc` that names it.
mlir::LogicalResult readChatTemplates(dsp::PlanT &plan, const std::string &modelDirectory,
                                      mlir::Location loc);

} // namespace dsc

#endif
