// Verifiers, builders and custom directives of the plan ops.
#include "dialects/plan/IR/PlanDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"

#include <cctype>

using namespace mlir;

namespace dsc::plan {

static bool isDyn(int64_t value) { return ShapedType::isDynamic(value); }

// Checks a mixed static/dynamic list: `size` entries, as many dynamic ones as operands,
// static ones positive.
static LogicalResult verifyMixedList(Operation *op, ArrayRef<int64_t> statics,
                                     ValueRange dynamic, size_t size, StringRef what) {
  if (statics.size() != size)
    return op->emitOpError() << what << " must have " << size << " entries, not "
                             << statics.size();
  if (static_cast<size_t>(llvm::count_if(statics, isDyn)) != dynamic.size())
    return op->emitOpError() << what << " has " << llvm::count_if(statics, isDyn)
                             << " dynamic entries for " << dynamic.size() << " operands";
  for (int64_t value : statics)
    if (!isDyn(value) && value <= 0)
      return op->emitOpError() << what << " entries must be positive, not " << value;
  return success();
}

// Checks that `buffer` holds at least elements * bytes when both are known.
static LogicalResult verifyHolds(Operation *op, Value buffer, StringRef what,
                                 std::optional<int64_t> elements, int64_t elementBytes) {
  std::optional<int64_t> have = getByteSize(buffer);
  if (!have || !elements)
    return success();
  int64_t need;
  if (llvm::MulOverflow(*elements, elementBytes, need) || need > *have)
    return op->emitOpError() << what << " holds " << *have << " bytes but needs "
                             << (llvm::MulOverflow(*elements, elementBytes, need)
                                     ? std::string("more than 2^63")
                                     : std::to_string(need));
  return success();
}

static std::optional<int64_t> product(std::optional<int64_t> a, std::optional<int64_t> b) {
  int64_t result;
  if (!a || !b || llvm::MulOverflow(*a, *b, result))
    return std::nullopt;
  return result;
}

//===----------------------------------------------------------------------===//
// Builders
//===----------------------------------------------------------------------===//

void ProgramOp::build(OpBuilder &builder, OperationState &state, StringRef name) {
  state.addAttribute(getSymNameAttrName(state.name), builder.getStringAttr(name));
  state.addRegion()->emplaceBlock();
}

void LaunchOp::build(OpBuilder &builder, OperationState &state, StringRef kernel,
                     ArrayRef<OpFoldResult> grid, ArrayRef<int64_t> block, ValueRange args,
                     int64_t sharedMem) {
  SmallVector<Value> dynamic;
  SmallVector<int64_t> statics;
  dispatchMixed(grid, dynamic, statics);
  build(builder, state, SymbolRefAttr::get(builder.getContext(), kernel), dynamic,
        builder.getDenseI64ArrayAttr(statics), builder.getDenseI64ArrayAttr(block),
        builder.getI64IntegerAttr(sharedMem), args);
}

SmallVector<OpFoldResult> LaunchOp::getMixedGrid() {
  return getMixed(getContext(), getStaticGrid(), getGrid());
}

void GemmOp::build(OpBuilder &builder, OperationState &state, Type dtype, Value a, Value b,
                   Value c, ArrayRef<OpFoldResult> dims) {
  SmallVector<Value> dynamic;
  SmallVector<int64_t> statics;
  dispatchMixed(dims, dynamic, statics);
  build(builder, state, TypeAttr::get(dtype), a, b, c, dynamic,
        builder.getDenseI64ArrayAttr(statics), /*trans_a=*/nullptr, /*trans_b=*/nullptr,
        builder.getF32FloatAttr(1.0f), builder.getF32FloatAttr(0.0f),
        EpilogueAttr::get(builder.getContext(), Epilogue::none), /*bias=*/Value(),
        /*residual=*/Value());
}

SmallVector<OpFoldResult> GemmOp::getMixedDims() {
  return getMixed(getContext(), getStaticDims(), getDims());
}

void AllReduceOp::build(OpBuilder &builder, OperationState &state, Type dtype, Value buffer,
                        OpFoldResult count) {
  SmallVector<Value> dynamic;
  SmallVector<int64_t> statics;
  dispatchMixed(count, dynamic, statics);
  build(builder, state, TypeAttr::get(dtype), buffer,
        dynamic.empty() ? Value() : dynamic.front(), builder.getI64IntegerAttr(statics.front()));
}

void AllGatherOp::build(OpBuilder &builder, OperationState &state, Type dtype, Value src,
                        Value dst, OpFoldResult count, int64_t ranks) {
  SmallVector<Value> dynamic;
  SmallVector<int64_t> statics;
  dispatchMixed(count, dynamic, statics);
  build(builder, state, TypeAttr::get(dtype), src, dst,
        dynamic.empty() ? Value() : dynamic.front(), builder.getI64IntegerAttr(statics.front()),
        builder.getI64IntegerAttr(ranks));
}

//===----------------------------------------------------------------------===//
// Custom directives: [%a, 16, 1] and %a | 16
//===----------------------------------------------------------------------===//

static ParseResult parseIndexEntry(OpAsmParser &parser,
                                   std::optional<OpAsmParser::UnresolvedOperand> &dynamic,
                                   int64_t &value) {
  OpAsmParser::UnresolvedOperand operand;
  OptionalParseResult result = parser.parseOptionalOperand(operand);
  if (result.has_value()) {
    if (failed(*result))
      return failure();
    dynamic = operand;
    value = ShapedType::kDynamic;
    return success();
  }
  return parser.parseInteger(value);
}

static ParseResult parseIndexList(OpAsmParser &parser,
                                  SmallVectorImpl<OpAsmParser::UnresolvedOperand> &dynamic,
                                  DenseI64ArrayAttr &statics) {
  SmallVector<int64_t> values;
  auto parseOne = [&]() -> ParseResult {
    std::optional<OpAsmParser::UnresolvedOperand> operand;
    int64_t value;
    if (parseIndexEntry(parser, operand, value))
      return failure();
    if (operand)
      dynamic.push_back(*operand);
    values.push_back(value);
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseOne))
    return failure();
  statics = parser.getBuilder().getDenseI64ArrayAttr(values);
  return success();
}

static void printIndexList(OpAsmPrinter &printer, Operation *, OperandRange dynamic,
                           DenseI64ArrayAttr statics) {
  unsigned next = 0;
  printer << '[';
  llvm::interleaveComma(statics.asArrayRef(), printer, [&](int64_t value) {
    if (!isDyn(value))
      printer << value;
    else if (next < dynamic.size())
      printer << dynamic[next++];
    else
      printer << "<<missing operand>>";
  });
  printer << ']';
}

static ParseResult parseIndexValue(OpAsmParser &parser,
                                   std::optional<OpAsmParser::UnresolvedOperand> &dynamic,
                                   IntegerAttr &statics) {
  int64_t value;
  if (parseIndexEntry(parser, dynamic, value))
    return failure();
  statics = parser.getBuilder().getI64IntegerAttr(value);
  return success();
}

static void printIndexValue(OpAsmPrinter &printer, Operation *, Value dynamic,
                            IntegerAttr statics) {
  if (dynamic)
    printer << dynamic;
  else
    printer << statics.getInt();
}

//===----------------------------------------------------------------------===//
// Module-level ops
//===----------------------------------------------------------------------===//

LogicalResult ProgramOp::verify() {
  // prefill_greedy/decode_greedy: tensor parallelism's greedy programs (tp-shard); encode:
  // an encoder-decoder's encoder.
  if (!llvm::is_contained(
          {"prefill", "decode", "forward", "prefill_greedy", "decode_greedy", "encode"},
          getSymName()))
    return emitOpError() << "@" << getSymName()
                         << " is not a program the runtime runs (@prefill, @decode, @forward, "
                            "an encoder-decoder's @encode); with tensor parallelism also "
                            "@prefill_greedy, @decode_greedy";
  Block &body = getRegion().front();
  if (body.getNumArguments() != 0)
    return emitOpError("body takes no arguments");
  if (body.empty() || !isa<ReturnOp>(body.back()))
    return emitOpError("body must end with plan.return");
  return success();
}

LogicalResult ArenaOp::verify() {
  if (getSize() % getAlignment() != 0)
    return emitOpError() << "size " << getSize() << " is not a multiple of the alignment "
                         << getAlignment();
  return success();
}

static bool isCIdentifier(StringRef name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front())))
    return false;
  return llvm::all_of(name, [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

LogicalResult KernelOp::verify() {
  if (!isCIdentifier(getEntry()))
    return emitOpError() << "entry \"" << getEntry() << "\" is not a C identifier";
  if (getTemplateName().empty())
    return emitOpError("needs the name of its kernel template");
  FunctionType type = getFunctionType();
  if (type.getNumResults() != 0)
    return emitOpError("a kernel returns nothing");
  for (Type input : type.getInputs())
    if (!isa<BufferType, IndexType>(input))
      return emitOpError() << "kernel parameters are !plan.buffer or index, not " << input;
  if (auto constants = getConstantsAttr())
    for (NamedAttribute constant : constants)
      if (!isa<IntegerAttr, FloatAttr, TypeAttr, StringAttr>(constant.getValue()))
        return emitOpError() << "constant '" << constant.getName().getValue()
                             << "' must be an integer, float, type or string, not "
                             << constant.getValue();
  return success();
}

//===----------------------------------------------------------------------===//
// Values of a program
//===----------------------------------------------------------------------===//

LogicalResult ApplyOp::verify() {
  AffineMap map = getMap();
  if (map.getNumDims() != 0)
    return emitOpError("map must take symbols only, no dimensions");
  if (map.getNumResults() != 1)
    return emitOpError() << "map must have one result, not " << map.getNumResults();
  if (map.getNumSymbols() != getOperands().size())
    return emitOpError() << "map takes " << map.getNumSymbols() << " symbols but "
                         << getOperands().size() << " operands are given";
  return success();
}

LogicalResult BufferOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto arena = symbolTable.lookupNearestSymbolFrom<ArenaOp>(*this, getArenaAttr());
  if (!arena)
    return emitOpError() << getArenaAttr() << " does not name a plan.arena";
  if (std::optional<uint64_t> offset = getOffset()) {
    int64_t begin = *offset, size = getSize();
    if (begin % static_cast<int64_t>(arena.getAlignment()) != 0)
      return emitOpError() << "offset " << begin << " is not aligned to "
                           << arena.getAlignment() << " bytes";
    if (begin + size > static_cast<int64_t>(arena.getSize()))
      return emitOpError() << "range [" << begin << ", " << begin + size
                           << ") exceeds the arena's " << arena.getSize() << " bytes";
  } else if (getSize() > arena.getSize()) {
    return emitOpError() << "size " << getSize() << " exceeds the arena's " << arena.getSize()
                         << " bytes";
  }
  return success();
}

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError("needs the name of a weight tensor");
  Type element = cast<RankedTensorType>(getTensorType()).getElementType();
  if (getElementByteSize(element) == 0)
    return emitOpError() << "element type " << element << " is not a whole number of bytes";
  return success();
}

//===----------------------------------------------------------------------===//
// Work
//===----------------------------------------------------------------------===//

// CUDA's limits.
static constexpr int64_t kMaxThreadsPerBlock = 1024;
static constexpr int64_t kMaxBlockDim[3] = {1024, 1024, 64};
static constexpr int64_t kMaxGridDim[3] = {2147483647, 65535, 65535};
static constexpr int64_t kMaxSharedMem = 232448; // 227 KiB, sm_90 with opt-in

LogicalResult LaunchOp::verify() {
  if (failed(verifyMixedList(*this, getStaticGrid(), getGrid(), 3, "grid")))
    return failure();
  for (int i = 0; i < 3; ++i)
    if (std::optional<int64_t> dim = getMixedUpperBound(getStaticGrid(), getGrid(), i);
        dim && *dim > kMaxGridDim[i])
      return emitOpError() << "grid dimension " << i << " may be " << *dim
                           << ", more than CUDA's " << kMaxGridDim[i];
  ArrayRef<int64_t> block = getBlock();
  if (block.size() != 3)
    return emitOpError() << "block must have 3 entries, not " << block.size();
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (block[i] <= 0 || block[i] > kMaxBlockDim[i])
      return emitOpError() << "block dimension " << i << " is " << block[i]
                           << ", not in [1, " << kMaxBlockDim[i] << "]";
    threads *= block[i];
  }
  if (threads > kMaxThreadsPerBlock)
    return emitOpError() << "block has " << threads << " threads, more than "
                         << kMaxThreadsPerBlock;
  if (static_cast<int64_t>(getSharedMem()) > kMaxSharedMem)
    return emitOpError() << "shared_mem " << getSharedMem() << " exceeds " << kMaxSharedMem
                         << " bytes";
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  Operation *symbol = symbolTable.lookupNearestSymbolFrom(*this, getKernelAttr());
  auto kernel = dyn_cast_or_null<KernelOp>(symbol);
  if (!kernel)
    return emitOpError() << getKernelAttr() << " does not name a plan.kernel";
  ArrayRef<Type> params = kernel.getFunctionType().getInputs();
  if (params.size() != getArgs().size())
    return emitOpError() << "kernel @" << kernel.getSymName() << " takes " << params.size()
                         << " arguments, " << getArgs().size() << " given";
  for (auto [i, param, arg] : llvm::enumerate(params, getArgs().getTypes()))
    if (param != arg)
      return emitOpError() << "argument " << i << " is " << arg << " but kernel @"
                           << kernel.getSymName() << " takes " << param;
  return success();
}

LogicalResult GemmOp::verify() {
  if (failed(verifyMixedList(*this, getStaticDims(), getDims(), 3, "dims")))
    return failure();
  Epilogue epilogue = getEpilogue();
  Epilogue activations = Epilogue::gelu_erf | Epilogue::gelu_tanh | Epilogue::silu |
                         Epilogue::relu;
  if (llvm::popcount(static_cast<uint32_t>(epilogue & activations)) > 1)
    return emitOpError("the epilogue applies at most one activation");
  if (bitEnumContainsAll(epilogue, Epilogue::bias) != static_cast<bool>(getBias()))
    return emitOpError("a bias operand goes with a bias epilogue, and only with one");
  if (bitEnumContainsAll(epilogue, Epilogue::residual) != static_cast<bool>(getResidual()))
    return emitOpError("a residual operand goes with a residual epilogue, and only with one");

  int64_t bytes = getElementByteSize(getDtype());
  auto bound = [&](unsigned i) { return getMixedUpperBound(getStaticDims(), getDims(), i); };
  std::optional<int64_t> m = bound(0), n = bound(1), k = bound(2);
  if (failed(verifyHolds(*this, getA(), "A", product(m, k), bytes)) ||
      failed(verifyHolds(*this, getB(), "B", product(k, n), bytes)) ||
      failed(verifyHolds(*this, getC(), "C", product(m, n), bytes)))
    return failure();
  if (getBias() && failed(verifyHolds(*this, getBias(), "bias", n, bytes)))
    return failure();
  if (getResidual() && failed(verifyHolds(*this, getResidual(), "residual", product(m, n), bytes)))
    return failure();
  return success();
}

// A collective's element count: positive when static, its bound when dynamic.
static FailureOr<std::optional<int64_t>> collectiveCount(Operation *op, Value dynamic,
                                                         int64_t statics) {
  if (dynamic) {
    if (!isDyn(statics))
      return op->emitOpError("a dynamic count has static_count = kDynamic");
    return getUpperBound(dynamic);
  }
  if (statics <= 0)
    return op->emitOpError() << "count must be positive, not " << statics;
  return std::optional<int64_t>(statics);
}

LogicalResult AllReduceOp::verify() {
  FailureOr<std::optional<int64_t>> count =
      collectiveCount(*this, getCount(), getStaticCount());
  if (failed(count))
    return failure();
  return verifyHolds(*this, getBuffer(), "buffer", *count, getElementByteSize(getDtype()));
}

LogicalResult AllGatherOp::verify() {
  FailureOr<std::optional<int64_t>> count =
      collectiveCount(*this, getCount(), getStaticCount());
  if (failed(count))
    return failure();
  int64_t bytes = getElementByteSize(getDtype());
  if (failed(verifyHolds(*this, getSrc(), "src", *count, bytes)))
    return failure();
  return verifyHolds(*this, getDst(), "dst",
                     product(*count, static_cast<int64_t>(getRanks())), bytes);
}

} // namespace dsc::plan

#define GET_OP_CLASSES
#include "dialects/plan/IR/PlanOps.cpp.inc"
