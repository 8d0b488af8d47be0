// The parts of dsc-derive-cache-programs (DeriveCachePrograms.cpp) that a session program
// is made of: the roles of a decoder's inputs and attentions (SessionRoles.cpp), the inputs
// a session program takes where the export took others (SessionInputs.cpp), and a bias
// computed for the export's tokens, computed again for a cached step's (SessionBias.cpp).
#ifndef DSC_COMPILER_RECOGNIZE_SESSIONPROGRAMS_H
#define DSC_COMPILER_RECOGNIZE_SESSIONPROGRAMS_H

#include "dialects/tfm/IR/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>
#include <string>

namespace dsc::session {

// ---- SessionRoles.cpp ----------------------------------------------------------------

llvm::StringRef argName(mlir::func::FuncOp func, unsigned index);
mlir::BlockArgument namedArgument(mlir::func::FuncOp func, llvm::StringRef name);
// An encoder-decoder's decoder reads the encoder's output: the argument the importer marks
// `dsc.cross_states`; null otherwise.
mlir::BlockArgument crossStatesArgument(mlir::func::FuncOp func);
// Whether `attention` attends to the keys of another sequence (the encoder's).
bool isCrossAttention(dsc::tfm::AttentionOp attention);
// The padding mask of the tokens the session caches: the argument the self-attentions read.
mlir::BlockArgument paddingMaskArgument(mlir::func::FuncOp func);

// ---- SessionInputs.cpp ---------------------------------------------------------------

// The embedding lookups computed from the padding mask outside the attention (OPT's
// positions); none when only attention reads it; nullopt when anything else does.
std::optional<llvm::SmallVector<mlir::OpOperand *>> maskPositionEmbeddings(mlir::func::FuncOp func);
mlir::LogicalResult keepNewTokenPositions(mlir::func::FuncOp func, std::string &why);
void takePositionsAsInput(mlir::func::FuncOp func);
mlir::LogicalResult readNewTokensOffIds(mlir::func::FuncOp func, std::string &why);
mlir::LogicalResult replacePastShapes(mlir::func::FuncOp func,
                                      const llvm::DenseSet<mlir::Value> &pastInputs,
                                      std::string &why);
void addPaddingMask(mlir::func::FuncOp func);
void emptyCrossKeys(mlir::func::FuncOp decode);
void lastPositionLogits(mlir::func::FuncOp prefill);

// ---- SessionBias.cpp -----------------------------------------------------------------

std::string biasLengthReads(mlir::func::FuncOp func, mlir::Value bias,
                            llvm::SmallVectorImpl<mlir::Operation *> &idsReads);
mlir::LogicalResult biasAtSessionPositions(mlir::func::FuncOp func, std::string &why);

} // namespace dsc::session

#endif
