// The ONNX operators the importer accepts, and what it needs to know to build each one in
// the onnx dialect's normalised form.
#ifndef DSC_FRONTENDS_ONNX_OPTABLE_H
#define DSC_FRONTENDS_ONNX_OPTABLE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace dsc::onnx_frontend {

constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 23;
constexpr int kVariadic = -1;

struct OpSpec {
  llvm::StringRef domain;   // "" is the default domain (ai.onnx)
  llvm::StringRef opType;   // as in the model
  llvm::StringRef dialectOp;  // the onnx dialect op it becomes, without "onnx."; empty
                              // for a function op written out in primitive ops
  int64_t sinceVersion;     // the first opset of `domain` in which we accept it
  int numOperands;          // after padding absent optional inputs; kVariadic: as given
  int numResults;           // kVariadic: as many as the node has outputs
};

// The spec for (domain, opType) at `opsetVersion` of that domain, or null when unsupported.
const OpSpec *lookupOp(llvm::StringRef domain, llvm::StringRef opType, int64_t opsetVersion);

// Every op type of the default domain that the importer accepts at some opset.
llvm::ArrayRef<OpSpec> supportedOps();

} // namespace dsc::onnx_frontend

#endif
