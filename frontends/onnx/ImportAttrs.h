// Attributes the importer leaves on the IR for later passes.
#ifndef DSC_FRONTENDS_ONNX_IMPORTATTRS_H
#define DSC_FRONTENDS_ONNX_IMPORTATTRS_H

namespace dsc::onnx_frontend {

// On an encoder-decoder decoder's argument: the encoder output it reads
// (importEncoderDecoder decides which input that is; compiler/lowering/SymbolicDims sizes
// the dimensions it shares as the encoder's tokens).
inline constexpr const char *kCrossStatesAttr = "dsc.cross_states";

} // namespace dsc::onnx_frontend

#endif
