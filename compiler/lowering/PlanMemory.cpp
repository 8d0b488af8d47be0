// dsc-plan-memory: see Passes.td.
#include "compiler/lowering/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/TypeUtilities.h"

#include "llvm/ADT/STLExtras.h"

namespace dsc {
#define GEN_PASS_DEF_PLANMEMORY
#include "compiler/lowering/Passes.h.inc"
} // namespace dsc

using namespace mlir;

namespace dsc {
namespace {

constexpr int64_t kAlignment = 64;

int64_t alignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

struct Slot {
  Operation *owner;
  unsigned result;
  int64_t bytes;
  int64_t firstUse;  // the defining op's position
  int64_t lastUse;   // the last reader's position
  int64_t offset = -1;
};

// The byte size of a slot holding `type` at its upper-bound shape `bound`.
FailureOr<int64_t> slotBytes(Operation *op, Type type, ArrayRef<int64_t> bound) {
  int64_t elements = 1;
  for (int64_t dim : bound) {
    if (dim != 0 && elements > (int64_t(1) << 46) / dim)
      return op->emitOpError("has an upper-bound shape too large for the arena");
    elements *= dim;
  }
  unsigned bits = getElementTypeOrSelf(type).getIntOrFloatBitWidth();
  return alignUp(std::max<int64_t>(elements * ((bits + 7) / 8), 1));
}

// A step whose result 0 holds its input 0's bytes unchanged. The result then shares the
// input's slot: the runtime skips the copy when the two are one buffer (ops/Shape.cpp's
// copyInput, Cast, Identity; the CUDA backend's runContiguousCopy launches nothing), so a
// view costs no copy and, on the GPU, no launch (issue 14).
bool isView(plan::ExecOp exec) {
  llvm::StringRef op = exec.getOp();
  if (exec->getNumOperands() == 0 || exec->getNumResults() == 0)
    return false;
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Identity")
    return true;
  return op == "Cast" && getElementTypeOrSelf(exec->getOperand(0).getType()) ==
                             getElementTypeOrSelf(exec->getResult(0).getType());
}

// The representative of `index`'s alias group, with path halving.
size_t findGroup(std::vector<size_t> &parent, size_t index) {
  while (parent[index] != index)
    index = parent[index] = parent[parent[index]];
  return index;
}

struct PlanMemoryPass : impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t arenaBytes = 0;
    for (auto program : module.getOps<plan::ProgramOp>()) {
      FailureOr<int64_t> size = planProgram(program);
      if (failed(size))
        return signalPassFailure();
      arenaBytes = std::max(arenaBytes, *size);
    }
    // Programs run one at a time, so they share one arena.
    for (auto arena : llvm::make_early_inc_range(module.getOps<plan::ArenaOp>()))
      if (arena.getSymName() == "arena")
        arena.erase();
    OpBuilder builder(module.getBodyRegion());
    plan::ArenaOp::create(builder, module.getLoc(), "arena",
                          std::max<int64_t>(arenaBytes, kAlignment), kAlignment);
  }

  FailureOr<int64_t> planProgram(plan::ProgramOp program) {
    DenseMap<Operation *, int64_t> position;
    int64_t next = 0;
    program.walk<WalkOrder::PreOrder>([&](Operation *op) { position[op] = next++; });

    std::vector<Slot> slots;
    bool failedToSize = false;
    program.walk([&](Operation *op) {
      std::optional<ArrayAttr> bounds;
      if (auto exec = dyn_cast<plan::ExecOp>(op))
        bounds = exec.getMaxShapes();
      else if (auto branch = dyn_cast<plan::IfOp>(op))
        bounds = branch.getMaxShapes();
      else
        return;
      if (!bounds) {
        op->emitOpError("has no max_shapes; run dsc-lower-onnx-to-plan first");
        failedToSize = true;
        return;
      }
      for (auto [index, result] : llvm::enumerate(op->getResults())) {
        if (!isa<RankedTensorType>(result.getType()))
          continue;  // dynamic: allocated when its step runs
        auto bound = cast<DenseI64ArrayAttr>((*bounds)[index]).asArrayRef();
        FailureOr<int64_t> bytes = slotBytes(op, result.getType(), bound);
        if (failed(bytes)) {
          failedToSize = true;
          return;
        }
        int64_t last = position[op];
        for (Operation *user : result.getUsers())
          last = std::max(last, position[user]);
        slots.push_back({op, static_cast<unsigned>(index), *bytes, position[op], last});
      }
    });
    if (failedToSize)
      return failure();

    // A view and its input (and a chain of views) become one slot, live from the first
    // definition to the last reader of any of them and as large as the largest bound. Only
    // within one block: a branch's values live by the branch's own rules.
    DenseMap<std::pair<Operation *, unsigned>, size_t> slotOf;
    for (auto [index, slot] : llvm::enumerate(slots))
      slotOf[{slot.owner, slot.result}] = index;
    std::vector<size_t> parent(slots.size());
    for (size_t i = 0; i < parent.size(); ++i)
      parent[i] = i;
    program.walk([&](plan::ExecOp view) {
      if (!isView(view))
        return;
      auto source = dyn_cast<OpResult>(view->getOperand(0));
      if (!source || !isa<plan::ExecOp>(source.getOwner()) ||
          source.getOwner()->getBlock() != view->getBlock())
        return;
      auto input = slotOf.find({source.getOwner(), source.getResultNumber()});
      auto output = slotOf.find({view.getOperation(), 0u});
      if (input == slotOf.end() || output == slotOf.end())
        return;
      parent[findGroup(parent, output->second)] = findGroup(parent, input->second);
    });
    std::vector<Slot> groups;
    std::vector<size_t> groupOf(slots.size());
    DenseMap<size_t, size_t> groupIndex;
    for (size_t i = 0; i < slots.size(); ++i) {
      size_t root = findGroup(parent, i);
      auto [it, inserted] = groupIndex.try_emplace(root, groups.size());
      if (inserted)
        groups.push_back(slots[i]);
      Slot &group = groups[it->second];
      group.bytes = std::max(group.bytes, slots[i].bytes);
      group.firstUse = std::min(group.firstUse, slots[i].firstUse);
      group.lastUse = std::max(group.lastUse, slots[i].lastUse);
      groupOf[i] = it->second;
    }

    // First fit in order of definition: each slot takes the lowest offset that no slot
    // live at the same time uses.
    std::vector<Slot *> order;
    for (Slot &group : groups)
      order.push_back(&group);
    llvm::stable_sort(order, [](const Slot *a, const Slot *b) { return a->firstUse < b->firstUse; });
    int64_t arenaBytes = 0;
    std::vector<const Slot *> placed;
    for (Slot *slotPointer : order) {
      Slot &slot = *slotPointer;
      std::vector<std::pair<int64_t, int64_t>> busy;
      for (const Slot *other : placed)
        if (other->firstUse <= slot.lastUse && slot.firstUse <= other->lastUse)
          busy.emplace_back(other->offset, other->offset + other->bytes);
      llvm::sort(busy);
      int64_t offset = 0;
      for (auto [begin, end] : busy) {
        if (offset + slot.bytes <= begin)
          break;
        offset = std::max(offset, end);
      }
      slot.offset = offset;
      arenaBytes = std::max(arenaBytes, offset + slot.bytes);
      placed.push_back(&slot);
    }

    DenseMap<Operation *, SmallVector<int64_t>> offsets;
    program.walk([&](Operation *op) {
      if (isa<plan::ExecOp, plan::IfOp>(op))
        offsets[op].assign(op->getNumResults(), -1);
    });
    for (size_t i = 0; i < slots.size(); ++i)
      offsets[slots[i].owner][slots[i].result] = groups[groupOf[i]].offset;
    for (auto &[op, list] : offsets)
      op->setAttr("arena_offsets", DenseI64ArrayAttr::get(op->getContext(), list));
    return arenaBytes;
  }
};

} // namespace
} // namespace dsc
