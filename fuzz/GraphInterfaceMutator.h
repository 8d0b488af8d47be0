// A mutation of a model's interface (issue 46): the declared element type, a dimension or
// the name of one graph input or output. The generic mutator (ProtoMutator.h) reaches
// these fields as rarely as any other among thousands; these are the ones a model file
// uses to tell the runtime what to write into a program, so the whole-path harness
// (fuzz-onnx-generate) draws them for half of its mutations.
#ifndef DSC_FUZZ_GRAPHINTERFACEMUTATOR_H
#define DSC_FUZZ_GRAPHINTERFACEMUTATOR_H

#include <onnx/onnx_pb.h>

#include <random>

namespace dsc::fuzz {

// Changes one graph input's or output's elem_type, one of its dimensions (a value, a
// symbol, none) or its name; false when the graph has neither inputs nor outputs.
bool mutateGraphInterface(::onnx::ModelProto &model, std::mt19937_64 &random);

} // namespace dsc::fuzz

#endif
