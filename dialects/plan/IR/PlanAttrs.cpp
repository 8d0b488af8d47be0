// #plan.kernel: its verifier and its assembly, `<"kind", NAME = value, ...>` (the constants
// keep their order, which is the kernel's identity).
#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h" // for the generated attribute parser and printer

using namespace mlir;

namespace dsc::plan {

LogicalResult KernelAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef kind,
                                 ArrayRef<StringAttr> names, ArrayRef<int64_t> values) {
  if (kind.empty())
    return emitError() << "a kernel needs a template kind";
  if (names.size() != values.size())
    return emitError() << "a kernel has " << names.size() << " constant names and "
                       << values.size() << " values";
  llvm::SmallSet<StringRef, 8> seen;
  for (StringAttr name : names) {
    // Each becomes a #define: an identifier, given once.
    bool identifier = name && !name.getValue().empty() &&
                      !llvm::isDigit(name.getValue().front()) &&
                      llvm::all_of(name.getValue(),
                                   [](char c) { return llvm::isAlnum(c) || c == '_'; });
    if (!identifier)
      return emitError() << "kernel constant '" << (name ? name.getValue() : "")
                         << "' is not an identifier";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "kernel constant " << name.getValue() << " is given twice";
  }
  return success();
}

Attribute KernelAttr::parse(AsmParser &parser, Type) {
  std::string kind;
  SmallVector<StringAttr> names;
  SmallVector<int64_t> values;
  if (parser.parseLess() || parser.parseString(&kind))
    return {};
  while (succeeded(parser.parseOptionalComma())) {
    StringRef name;
    int64_t value;
    if (parser.parseKeyword(&name) || parser.parseEqual() || parser.parseInteger(value))
      return {};
    names.push_back(parser.getBuilder().getStringAttr(name));
    values.push_back(value);
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                    parser.getContext(), kind, names, values);
}

void KernelAttr::print(AsmPrinter &printer) const {
  printer << "<\"" << getKind() << "\"";
  for (auto [name, value] : llvm::zip(getNames(), getValues()))
    printer << ", " << name.getValue() << " = " << value;
  printer << ">";
}

} // namespace dsc::plan

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/IR/PlanAttrs.cpp.inc"

void dsc::plan::PlanDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/plan/IR/PlanAttrs.cpp.inc"
      >();
}
