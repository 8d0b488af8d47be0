// Branches an export chooses by the sequence's length (LengthBranches in AttentionMatch.h).
#include "compiler/recognize/AttentionMatch.h"
#include "compiler/recognize/ImpliedPositions.h"

#include "mlir/IR/Matchers.h"

#include "llvm/ADT/DenseSet.h"

#include <variant>

namespace dsc::attention {

namespace {

// The comparison's constant side, read as one integer.
std::optional<int64_t> constantInteger(Value value) {
  DenseElementsAttr attr;
  if (!matchPattern(value, m_Constant(&attr)) || attr.getNumElements() != 1 ||
      !attr.getElementType().isInteger())
    return std::nullopt;
  return (*attr.getValues<APInt>().begin()).getSExtValue();
}

// `length OP limit` holds or not on the probe (`taken`): the most tokens in all for which it
// keeps that value, when those are the lengths up to some bound; else why not.
std::variant<int64_t, std::string> longestTaking(llvm::StringRef op, int64_t limit,
                                                 bool taken) {
  // The lengths that take the probe's branch are `length <= bound` or `length >= bound`.
  const bool greater = op == "Greater" || op == "GreaterOrEqual";
  const bool inclusive = op == "GreaterOrEqual" || op == "LessOrEqual";
  if (greater != taken) {
    // Greater false: length <= limit (GreaterOrEqual: < limit); Less true: length < limit
    // (LessOrEqual: <= limit).
    if (greater)
      return inclusive ? limit - 1 : limit;
    return inclusive ? limit : limit - 1;
  }
  return "the probe's lengths take its branch for lengths above " + std::to_string(limit) +
         ", which no plan's lengths start at";
}

} // namespace

SmallVector<LengthBranch> lengthBranches(func::FuncOp func, const ProbeEvaluator &probe,
                                         int64_t tokens) {
  SmallVector<LengthBranch> branches;
  func.walk([&](onnx::IfOp op) {
    Value condition = op.getCond();
    if (isa<BlockArgument>(condition) || !computedFromLengthsAlone(condition))
      return;
    LengthBranch branch{op, 0, {}};
    branches.push_back(branch);
    LengthBranch &found = branches.back();
    Operation *compare = condition.getDefiningOp();
    const Info *taken = probe.lookup(condition);
    if (!compare || compare->getNumOperands() != 2 ||
        !isa<onnx::GreaterOp, onnx::GreaterOrEqualOp, onnx::LessOp, onnx::LessOrEqualOp>(
            compare) ||
        !taken || !taken->value) {
      found.unread = "its condition is not a length compared with a constant";
      return;
    }
    llvm::StringRef name = compare->getName().stripDialect();
    Value length = compare->getOperand(0);
    std::optional<int64_t> limit = constantInteger(compare->getOperand(1));
    if (!limit) {
      // `limit OP length` is `length OP' limit` with the comparison turned around.
      limit = constantInteger(compare->getOperand(0));
      length = compare->getOperand(1);
      name = name == "Greater"          ? "Less"
             : name == "GreaterOrEqual" ? "LessOrEqual"
             : name == "Less"           ? "Greater"
                                        : "GreaterOrEqual";
    }
    const Info *measured = probe.lookup(length);
    std::vector<int64_t> lengths =
        measured && measured->value ? integers(*measured->value) : std::vector<int64_t>{};
    std::vector<int64_t> outcome = integers(*taken->value);
    if (!limit || lengths.size() != 1 || outcome.size() != 1) {
      found.unread = "its condition is not a length compared with a constant";
      return;
    }
    // Only the sequence's whole length (cached and new tokens) bounds what a plan holds.
    if (lengths.front() != tokens) {
      found.unread = "it compares " + std::to_string(lengths.front()) +
                     " with a constant where the probe holds " + std::to_string(tokens) +
                     " tokens";
      return;
    }
    std::variant<int64_t, std::string> longest = longestTaking(name, *limit, outcome.front());
    if (auto *bound = std::get_if<int64_t>(&longest))
      found.longest = *bound;
    else
      found.unread = std::get<std::string>(longest);
  });
  return branches;
}

SmallVector<Candidate *> candidatesReading(const LengthBranch &branch,
                                          MutableArrayRef<std::pair<Candidate, int64_t>> matched) {
  llvm::DenseMap<Operation *, Candidate *> owner;
  for (auto &[candidate, layer] : matched)
    for (Operation *op : candidate.region)
      owner.try_emplace(op, &candidate);
  // Forward from the branch's results to the regions that read them (the rotary tables'
  // lookups), through whatever lies between; a region's own ops go no further.
  llvm::SetVector<Candidate *> readers;
  llvm::DenseSet<Operation *> seen;
  SmallVector<Operation *> worklist(branch.op->getUsers().begin(), branch.op->getUsers().end());
  constexpr size_t kMostOpsWalked = 1 << 16;
  while (!worklist.empty() && seen.size() < kMostOpsWalked) {
    Operation *op = worklist.pop_back_val();
    if (!seen.insert(op).second)
      continue;
    if (auto it = owner.find(op); it != owner.end()) {
      readers.insert(it->second);
      continue;
    }
    for (Operation *user : op->getUsers())
      worklist.push_back(user);
  }
  return SmallVector<Candidate *>(readers.begin(), readers.end());
}

} // namespace dsc::attention
